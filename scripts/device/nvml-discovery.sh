#!/usr/bin/env bash
# Builds tools/nvml_probe.cpp against our NVML loader (no NVIDIA headers or libraries needed
# at build time) and runs it: lists every GPU with UUID, memory, PCI bus id and health, and
# one utilisation sample each. Run on a GPU machine; on one without the driver it prints
# "NVML not available: ..." and exits 1.
#
#   scripts/device/nvml-discovery.sh [path-to-libnvidia-ml.so.1]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
${CXX:-g++} -std=c++20 -O2 -Wall -Wextra -I"$root/src" \
  "$root/tools/nvml_probe.cpp" "$root/src/agent/gpu/nvml_library.cpp" "$root/src/core/result.cpp" \
  -ldl -o "$out/nvml_probe"
command -v nvidia-smi >/dev/null && nvidia-smi -L || true
set +e
"$out/nvml_probe" "$@" | tee "$out/nvml-discovery.txt"
rc=${PIPESTATUS[0]}
echo "nvml_probe exit status: $rc"
exit "$rc"

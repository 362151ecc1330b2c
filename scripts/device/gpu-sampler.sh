#!/usr/bin/env bash
# The monitoring sampler on a real GPU: GpuSamplingTest.NVIDIA_GPU_* (src/agent/sampling/
# gpu_load_test.cpp) loads the GPU through the CUDA driver API and checks the utilisation and
# memory the sampler saw, then nvml_probe lists the devices.
#
#   scripts/device/gpu-sampler.sh build   # here (Debian 12): build-gpu/gpu_sampler_test, with
#                                         # libstdc++ and GoogleTest linked in (the GPU machine's
#                                         # image has neither Boost nor GoogleTest)
#   scripts/device/gpu-sampler.sh run     # on the GPU machine (carry build-gpu): runs it and
#                                         # writes its output to $OUT/gpu-sampler.txt
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
case "${1:-}" in
  build)
    mkdir -p "$root/build-gpu"
    ${CXX:-g++} -std=c++20 -O1 -g -Wall -Wextra -I"$root/src" \
      "$root/src/agent/sampling/gpu_load_test.cpp" "$root/src/agent/sampling/instance_sampler.cpp" \
      "$root/src/agent/sampling/cgroup_reader.cpp" "$root/src/agent/sampling/cgroup_files.cpp" \
      "$root/src/agent/gpu/nvml_library.cpp" "$root/src/core/result.cpp" \
      -Wl,-Bstatic -lgtest_main -lgtest -Wl,-Bdynamic -static-libstdc++ -static-libgcc -ldl -pthread \
      -o "$root/build-gpu/gpu_sampler_test"
    ${CXX:-g++} -std=c++20 -O2 -I"$root/src" "$root/tools/nvml_probe.cpp" "$root/src/agent/gpu/nvml_library.cpp" \
      "$root/src/core/result.cpp" -static-libstdc++ -static-libgcc -ldl -o "$root/build-gpu/nvml_probe"
    ls -la "$root/build-gpu"
    ;;
  run)
    out="${OUT:-$(mktemp -d)}"
    mkdir -p "$out"
    {
      nvidia-smi -L || true
      "$root/build-gpu/nvml_probe" || true
      "$root/build-gpu/gpu_sampler_test" --gtest_filter='GpuSamplingTest.*'
    } 2>&1 | tee "$out/gpu-sampler.txt"
    exit "${PIPESTATUS[0]}"
    ;;
  *)
    sed -n '2,10p' "$0"
    exit 2
    ;;
esac

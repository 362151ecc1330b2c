#!/usr/bin/env bash
# Data-disk timings (see docs/benchmarks.md, "Data disks"): runs the disk_snapshot_bench
# binary (bench/disk_snapshot_bench.cpp, built with GPUCLOUD_BENCH=ON) as root.
#   bench/disk_snapshot.sh [--runs N] [--data-gib N] [--size-gib N]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${GPUCLOUD_BUILD_DIR:-$ROOT/build}
bin=$BUILD_DIR/bin/disk_snapshot_bench
[[ -x $bin ]] || { echo "disk_snapshot.sh: $bin not built (configure with -DGPUCLOUD_BENCH=ON)" >&2; exit 1; }
echo "disk_snapshot.sh — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$bin" "$@"

#!/usr/bin/env bash
# Runs every benchmark (see docs/benchmarks.md):
#   1. the Google Benchmark binaries build/bin/*_bench (built when GPUCLOUD_BENCH is ON),
#      each pinned to one core with taskset when available;
#   2. bench/http_load.sh: the bare Beast server vs GET /healthz vs GET /api/v1/me with wrk, then
#      bench/idle_connections.py (1,000 idle keep-alive connections).
#
# Environment:
#   GPUCLOUD_BUILD_DIR   build tree (default: build under the repository root)
#   GPUCLOUD_BIN         daemon for the HTTP benchmarks (default: $GPUCLOUD_BUILD_DIR/bin/gpucloudd)
#   BENCH_ARGS           extra arguments for every Google Benchmark binary (e.g. --benchmark_filter=BestFit)
#   BENCH_SKIP_HTTP=1    only the Google Benchmark binaries
# plus the BENCH_* variables of bench/http_load.sh.
# Exit status: 0 when every benchmark ran (whatever its verdicts), 1 when one could not run.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${GPUCLOUD_BUILD_DIR:-$ROOT/build}
export GPUCLOUD_BIN=${GPUCLOUD_BIN:-$BUILD_DIR/bin/gpucloudd}
status=0

echo "gpucloud benchmarks — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
shopt -s nullglob
benches=("$BUILD_DIR"/bin/*_bench)
if ((${#benches[@]} == 0)); then
  echo
  echo "(no Google Benchmark binaries in $BUILD_DIR/bin: configure with -DGPUCLOUD_BENCH=ON and build)"
fi
for bench in "${benches[@]}"; do
  [[ -x $bench ]] || continue
  echo
  echo "== $(basename "$bench") ${pin[*]:+(${pin[*]})} =="
  # shellcheck disable=SC2086  # BENCH_ARGS is a word list
  if ! "${pin[@]}" "$bench" ${BENCH_ARGS:-}; then
    echo "run.sh: $(basename "$bench") failed" >&2
    status=1
  fi
done

if [[ ${BENCH_SKIP_HTTP:-0} != 1 ]]; then
  echo
  if ! "$ROOT/bench/http_load.sh"; then
    echo "run.sh: http_load.sh could not measure" >&2
    status=1
  fi
fi
[[ ${BENCH_SKIP_INSTANCES:-0} == 1 ]] || { echo; python3 "$ROOT/bench/instance_latency.py" || { echo "run.sh: instance_latency.py could not measure" >&2; status=1; }; }
[[ ${BENCH_SKIP_STREAMS:-0} == 1 ]] || { echo; python3 "$ROOT/bench/event_streams.py" || { echo "run.sh: event_streams.py could not measure" >&2; status=1; }; }
[[ ${BENCH_SKIP_TERMINAL:-0} == 1 ]] || { echo; python3 "$ROOT/bench/terminal_throughput.py" || { echo "run.sh: terminal_throughput.py could not measure" >&2; status=1; }; }
exit $status

#!/bin/sh
# Save-image cost side by side (issue 23): a container of the base image whose system disk
# changed by MIB MiB (incompressible) is saved, alternately, RUNS times each,
#   (a) by `docker commit --pause=true` (the base's layers + one layer), and
#   (b) by ImageSaver (agent/image_saver.cpp, through bench/image_save_bench.cpp: the agent's
#       own code over the engine's API: pause, GET /changes, the layer written from the host's
#       copy of the container's files with the secrets cleaned, POST /images/load).
# Prints each run's seconds, the medians, and what each added to the engine (its image size
# minus the base's: both share the base's layers).
#   sh bench/image_save.sh [MIB] [RUNS]      (default 1024 and 3; needs root, docker, the base
#   image and image_save_bench: a build with -DGPUCLOUD_BENCH=ON, or GPUCLOUD_IMAGE_SAVE_BENCH=PATH;
#   another engine: DOCKER_HOST=unix:///path/to.sock)
set -eu
case "${DOCKER_HOST:-}" in unix://*) export GPUCLOUD_DOCKER_SOCK="${DOCKER_HOST#unix://}" ;; esac
MIB=${1:-1024}
RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${GPUCLOUD_IMAGE_SAVE_BENCH:-${GPUCLOUD_BUILD_DIR:-$ROOT/build}/bin/image_save_bench}
BASE=${GPUCLOUD_BENCH_IMAGE:-gpucloud/base:bookworm-2}
TAG=gpucloud-bench-save-$$
[ -x "$BENCH" ] || { echo "image_save.sh: $BENCH not built (configure with -DGPUCLOUD_BENCH=ON)" >&2; exit 1; }
now() { date +%s.%N; }
size_of() { docker image inspect --format '{{.Size}}' "$1"; }
cleanup() {
  docker rm -f "$TAG" >/dev/null 2>&1 || true
  for i in $(seq 1 "$RUNS"); do
    docker rmi -f "$TAG:commit-$i" "gpucloud-image/$TAG:saver-$i" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "image_save.sh — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
  "storage driver $(docker info --format '{{.Driver}}')"
docker run -d --name "$TAG" --network none "$BASE" sleep 3600 >/dev/null
docker exec "$TAG" sh -c "mkdir -p /opt/blob && head -c $((MIB * 1024 * 1024)) /dev/urandom > /opt/blob/data && sync"
base=$(size_of "$BASE")
commit_times=""
saver_times=""
for i in $(seq 1 "$RUNS"); do
  sync
  t0=$(now)
  docker commit --pause=true "$TAG" "$TAG:commit-$i" >/dev/null
  t1=$(now)
  c=$(echo "$t1 - $t0" | bc)
  sync
  t0=$(now)
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} "$BENCH" "$TAG" "gpucloud-image/$TAG:saver-$i" >/dev/null 2>"/tmp/$TAG.log" ||
    { cat "/tmp/$TAG.log" >&2; exit 1; }
  t1=$(now)
  s=$(echo "$t1 - $t0" | bc)
  printf 'run %d: docker commit %6.2f s, ImageSaver %6.2f s\n' "$i" "$c" "$s"
  commit_times="$commit_times $c"
  saver_times="$saver_times $s"
  [ "$i" -lt "$RUNS" ] && docker rmi "$TAG:commit-$i" "gpucloud-image/$TAG:saver-$i" >/dev/null
done
rm -f "/tmp/$TAG.log"
commit_s=$(echo "$commit_times" | tr ' ' '\n' | grep . | median)
saver_s=$(echo "$saver_times" | tr ' ' '\n' | grep . | median)
commit_added=$(( $(size_of "$TAG:commit-$RUNS") - base ))
saver_added=$(( $(size_of "gpucloud-image/$TAG:saver-$RUNS") - base ))
echo "changed: ${MIB} MiB over ${BASE} ($((base / 1048576)) MiB); medians of $RUNS"
printf 'docker commit:  %6.2f s, adds %5d MiB to the engine\n' "$commit_s" $((commit_added / 1048576))
printf 'ImageSaver:     %6.2f s, adds %5d MiB to the engine (%.2fx the commit'"'"'s time)\n' \
  "$saver_s" $((saver_added / 1048576)) "$(echo "$saver_s / $commit_s" | bc -l)"

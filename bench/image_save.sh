#!/bin/sh
# Save-image cost side by side (issue 23): a container of the base image whose system disk
# changed by MIB MiB (incompressible), saved
#   (a) as `docker commit` does it (the base's layers + one layer), and
#   (b) as ImageSaver does it today (agent/image_saver.cpp): commit REF-raw, a cleaning
#       container from it, its filesystem exported and imported as one flattened layer,
#       REF-raw removed.
# Prints the seconds each took and what each added to the engine (its image size minus what
# it shares with the base: (a) shares the base's layers, (b) shares nothing).
#   sh bench/image_save.sh [MIB]      (default 1024; needs docker and gpucloud/base:bookworm-1)
set -eu
MIB=${1:-1024}
BASE=${GPUCLOUD_BENCH_IMAGE:-gpucloud/base:bookworm-1}
TAG=gpucloud-bench-save-$$
now() { date +%s.%N; }
size_of() { docker image inspect --format '{{.Size}}' "$1"; }
cleanup() {
  docker rm -f "$TAG" "$TAG-clean" >/dev/null 2>&1 || true
  docker rmi -f "$TAG:commit" "$TAG:raw" "$TAG:flat" >/dev/null 2>&1 || true
}
trap cleanup EXIT

docker run -d --name "$TAG" --network none "$BASE" sleep 3600 >/dev/null
docker exec "$TAG" sh -c "mkdir -p /opt/blob && head -c $((MIB * 1024 * 1024)) /dev/urandom > /opt/blob/data && sync"
base=$(size_of "$BASE")

t0=$(now)
docker commit --pause=true "$TAG" "$TAG:commit" >/dev/null
t1=$(now)
commit_s=$(echo "$t1 - $t0" | bc)
commit_added=$(( $(size_of "$TAG:commit") - base ))

t0=$(now)
docker commit --pause=true "$TAG" "$TAG:raw" >/dev/null
docker create --name "$TAG-clean" --network none "$TAG:raw" sh -c 'rm -f /etc/ssh/ssh_host_*; true' >/dev/null
docker start -a "$TAG-clean" >/dev/null
docker export "$TAG-clean" | docker import - "$TAG:flat" >/dev/null
docker rm "$TAG-clean" >/dev/null
docker rmi "$TAG:raw" >/dev/null
t1=$(now)
saver_s=$(echo "$t1 - $t0" | bc)
saver_added=$(size_of "$TAG:flat")

echo "changed: ${MIB} MiB over ${BASE} ($((base / 1048576)) MiB)"
printf 'docker commit:         %6.1f s, adds %5d MiB to the engine\n' "$commit_s" $((commit_added / 1048576))
printf 'ImageSaver (flatten):  %6.1f s, adds %5d MiB to the engine (%.2fx the commit'"'"'s time)\n' \
  "$saver_s" $((saver_added / 1048576)) "$(echo "$saver_s / $commit_s" | bc -l)"

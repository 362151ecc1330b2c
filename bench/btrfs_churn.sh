#!/bin/bash
# btrfs churn (issue 23): what a create+release of an instance's container costs the kernel on
# the engine's storage, and what it leaves behind, for each way of holding a system disk's size.
#
# For each mode a private dockerd (own socket, data root, exec root and bridge, started by
# scripts/start-dockerd.sh exactly as a set-up would; the machine's engine is never touched)
# gets the base image, then CYCLES times: `docker run` a container with a size limit
# (btrfs modes: --storage-opt size=10G) that writes 4 MiB into its root filesystem and exits,
# then `docker rm -f` it. Measured:
#   - kernel CPU per cycle: the system time of the private dockerd and of the btrfs kernel
#     threads (btrfs-cleaner, btrfs-transaction: every btrfs filesystem's, so run it on a
#     machine where no other btrfs is busy) over the cycles and a settle period, divided by
#     CYCLES. The CLI and the containers' own work are left out: they are the same in every mode.
#   - the cleaner's backlog: deleted subvolumes not yet cleaned (`btrfs subvolume list -d`)
#     right after the last cycle, and after a commit and `btrfs subvolume sync` (given at most
#     SETTLE s, default 300: the drain time says how long the cleaner needed), and qgroups
#     beside live subvolumes.
# Modes: overlay2 (no size limit: the baseline), full (btrfs, full qgroups: what dockerd's
# own `quota enable` gives), simple (btrfs simple quotas, GPUCLOUD_ENGINE_QUOTA=simple).
#
# Usage: sudo bench/btrfs_churn.sh [CYCLES] [MODES...]   (defaults: 200 overlay2 full simple)
# Needs root, dockerd, btrfs-progs, python3, and gpucloud/base:bookworm-2 on the machine's engine.
set -euo pipefail

CYCLES=${1:-200}
shift || true
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(overlay2 full simple)
SETTLE=${SETTLE:-300}
SRC=$(cd "$(dirname "$0")/.." && pwd)
IMAGE_REF=gpucloud/base:bookworm-2

clk=$(getconf CLK_TCK)
# Kernel time (jiffies) of a process and of the btrfs kernel threads.
stime_of() { awk '{print $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
btrfs_threads_stime() {
  local total=0 pid comm
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
    case "$comm" in btrfs-cleaner|btrfs-transacti*) total=$((total + $(stime_of "$pid"))) ;; esac
  done
  echo "$total"
}

run_mode() {
  local mode=$1 tag="gc-churn-$1" sub
  local sock=/run/$tag.sock run_dir=/run/$tag lib_dir=/var/lib/$tag bridge=gcch${mode:0:4}
  case "$mode" in overlay2) sub=10.254.71 ;; full) sub=10.254.72 ;; simple) sub=10.254.73 ;; *) echo "mode?" >&2; return 1 ;; esac
  local env=(DOCKER_SOCK=$sock GPUCLOUD_RUN_DIR=$run_dir GPUCLOUD_LOG_DIR=$run_dir GPUCLOUD_ENGINE_DATA_ROOT=$lib_dir/engine
             GPUCLOUD_ENGINE_IMAGE=$lib_dir/engine.img GPUCLOUD_ENGINE_SIZE_GIB=20)
  local extra="--exec-root $run_dir/exec --pidfile $run_dir/engine.pid --bridge $bridge --iptables=false --ip6tables=false"
  case "$mode" in
    overlay2) env+=(GPUCLOUD_ENGINE_STORAGE=default); extra="$extra --data-root $lib_dir/engine --storage-driver overlay2" ;;
    full) env+=(GPUCLOUD_ENGINE_STORAGE=btrfs GPUCLOUD_ENGINE_QUOTA=full) ;;
    simple) env+=(GPUCLOUD_ENGINE_STORAGE=btrfs GPUCLOUD_ENGINE_QUOTA=simple) ;;
  esac
  env+=("DOCKERD_EXTRA_ARGS=$extra")
  cleanup() {
    env "${env[@]}" sh "$SRC/scripts/stop-dockerd.sh" >/dev/null 2>&1 || true
    umount "$lib_dir/engine" 2>/dev/null || umount -l "$lib_dir/engine" 2>/dev/null || true
    rm -rf "$lib_dir" "$run_dir" "$sock"
    ip link del "$bridge" 2>/dev/null || true
  }
  cleanup
  ip link add "$bridge" type bridge && ip addr add "$sub.1/24" dev "$bridge" && ip link set "$bridge" up
  mkdir -p "$lib_dir/engine"
  env "${env[@]}" sh "$SRC/scripts/start-dockerd.sh" >"/tmp/$tag.start" 2>&1 || { cat "/tmp/$tag.start"; cleanup; return 1; }
  local quota="-"
  [ "$mode" = overlay2 ] || quota=$(grep -o 'quotas: [a-z]*' "/tmp/$tag.start" | cut -d' ' -f2 || true)
  docker save "$IMAGE_REF" | docker -H "unix://$sock" load >/dev/null
  local dpid opt=()
  dpid=$(cat "$run_dir/engine.pid")
  [ "$mode" = overlay2 ] || opt=(--storage-opt size=10G)
  # One cycle first, so the engine's own first-use work (quota enable) is not counted.
  docker -H "unix://$sock" rm -f "$(docker -H "unix://$sock" run -d "${opt[@]}" --network none "$IMAGE_REF" true)" >/dev/null
  local d0 k0 t0 d1 k1 t1 backlog_now backlog_later live qgroups
  d0=$(stime_of "$dpid"); k0=$(btrfs_threads_stime); t0=$(date +%s.%N)
  for ((n = 0; n < CYCLES; n++)); do
    docker -H "unix://$sock" run --name "churn-$n" "${opt[@]}" --network none "$IMAGE_REF" \
      sh -c 'head -c 4194304 /dev/urandom > /var/tmp/churn'
    docker -H "unix://$sock" rm -f "churn-$n" >/dev/null
  done
  t1=$(date +%s.%N)
  backlog_now=0; backlog_later=0; live=0; qgroups=0
  local drain="-"
  if [ "$mode" != overlay2 ]; then
    backlog_now=$(btrfs subvolume list -d "$lib_dir/engine" | wc -l)
    # Commit (which wakes the cleaner), then wait up to SETTLE s for every deleted subvolume
    # to be cleaned: how long the cleaner needs for what the cycles left it.
    local s0 s1
    s0=$(date +%s.%N)
    btrfs filesystem sync "$lib_dir/engine" >/dev/null
    timeout "$SETTLE" btrfs subvolume sync "$lib_dir/engine" >/dev/null 2>&1 || true
    s1=$(date +%s.%N)
    drain=$(awk -v a="$s0" -v b="$s1" 'BEGIN{printf "%.1fs", b - a}')
  else
    sleep 2
  fi
  d1=$(stime_of "$dpid"); k1=$(btrfs_threads_stime)
  if [ "$mode" != overlay2 ]; then
    backlog_later=$(btrfs subvolume list -d "$lib_dir/engine" | wc -l)
    live=$(btrfs subvolume list "$lib_dir/engine" | wc -l)
    qgroups=$(btrfs qgroup show "$lib_dir/engine" 2>/dev/null | tail -n +3 | grep -c '^0/' || true)
  fi
  local kernel_ms per_cycle_ms wall
  kernel_ms=$(( ((d1 - d0) + (k1 - k0)) * 1000 / clk ))
  per_cycle_ms=$(awk -v k="$kernel_ms" -v c="$CYCLES" 'BEGIN{printf "%.1f", k / c}')
  wall=$(awk -v a="$t0" -v b="$t1" -v c="$CYCLES" 'BEGIN{printf "%.2f", (b - a) / c}')
  printf '%-8s quotas=%-7s cycles=%d wall/cycle=%ss kernel/cycle=%sms (dockerd %dms, btrfs threads %dms) deleted-not-cleaned: %d at the end, %d after the drain (%s, at most %ss); live subvolumes %d, qgroups %d\n' \
    "$mode" "$quota" "$CYCLES" "$wall" "$per_cycle_ms" $(( (d1 - d0) * 1000 / clk )) $(( (k1 - k0) * 1000 / clk )) \
    "$backlog_now" "$backlog_later" "$drain" "$SETTLE" "$live" "$qgroups"
  cleanup
}

for m in "${MODES[@]}"; do run_mode "$m"; done

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
#   - machine-wide kernel CPU per cycle (/proc/stat system+irq+softirq of every CPU over the
#     cycles): what the per-process count cannot see (loop devices' and ext4's kernel
#     workers); run it on an otherwise idle machine and compare modes against overlay2's.
# Modes: overlay2 (no size limit: the baseline), full (btrfs, full qgroups: what dockerd's
# own `quota enable` gives), simple (btrfs simple quotas, GPUCLOUD_ENGINE_QUOTA=simple),
# layerfs (overlay2 with the agent's system disk filesystem, agent/runtime/layer_filesystems.cpp:
# after `docker create`, the same steps with the same tools and options as the agent — a
# sparse 10 GiB image, mkfs.ext4, mounted on a staging dir, the layer dir copied in, unmounted,
# mounted over the layer dir — then start; after `docker rm`, the image deleted; the tools'
# kernel time is counted with dockerd's).
#
# Usage: sudo bench/btrfs_churn.sh [CYCLES] [MODES...]   (defaults: 200 overlay2 full simple layerfs)
# Needs root, dockerd, btrfs-progs, python3, and gpucloud/base:bookworm-2 on the machine's engine.
set -euo pipefail

CYCLES=${1:-200}
shift || true
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(overlay2 full simple layerfs)
SETTLE=${SETTLE:-300}
SRC=$(cd "$(dirname "$0")/.." && pwd)
IMAGE_REF=gpucloud/base:bookworm-2

clk=$(getconf CLK_TCK)
# Kernel time (jiffies) of a process and of the btrfs kernel threads.
stime_of() { awk '{print $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Machine-wide kernel jiffies (system + irq + softirq of every CPU).
machine_kernel() { awk '/^cpu /{print $4 + $7 + $8}' /proc/stat; }
# Kernel jiffies of this shell's finished children (the layer filesystem's tools).
children_stime() { awk '{print $17}' /proc/$$/stat; }
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
  case "$mode" in overlay2) sub=10.254.71 ;; full) sub=10.254.72 ;; simple) sub=10.254.73 ;; layerfs) sub=10.254.74 ;;
    *) echo "mode?" >&2; return 1 ;; esac
  local env=(DOCKER_SOCK=$sock GPUCLOUD_RUN_DIR=$run_dir GPUCLOUD_LOG_DIR=$run_dir GPUCLOUD_ENGINE_DATA_ROOT=$lib_dir/engine
             GPUCLOUD_ENGINE_IMAGE=$lib_dir/engine.img GPUCLOUD_ENGINE_SIZE_GIB=20)
  local extra="--exec-root $run_dir/exec --pidfile $run_dir/engine.pid --bridge $bridge --iptables=false --ip6tables=false"
  case "$mode" in
    overlay2|layerfs) env+=(GPUCLOUD_ENGINE_STORAGE=default); extra="$extra --data-root $lib_dir/engine --storage-driver overlay2" ;;
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
  case "$mode" in overlay2|layerfs) ;; *) quota=$(grep -o 'quotas: [a-z]*' "/tmp/$tag.start" | cut -d' ' -f2 || true) ;; esac
  docker save "$IMAGE_REF" | docker -H "unix://$sock" load >/dev/null
  local dpid opt=()
  dpid=$(cat "$run_dir/engine.pid")
  case "$mode" in full|simple) opt=(--storage-opt size=10G) ;; esac
  # One cycle first, so the engine's own first-use work (quota enable) is not counted.
  docker -H "unix://$sock" rm -f "$(docker -H "unix://$sock" run -d "${opt[@]}" --network none "$IMAGE_REF" true)" >/dev/null
  local d0 k0 t0 d1 k1 t1 m0 m1 c0 c1 backlog_now backlog_later live qgroups
  d0=$(stime_of "$dpid"); k0=$(btrfs_threads_stime); t0=$(date +%s.%N); m0=$(machine_kernel); c0=$(children_stime)
  for ((n = 0; n < CYCLES; n++)); do
    if [ "$mode" = layerfs ]; then
      local cid upper layer img
      cid=$(docker -H "unix://$sock" create --name "churn-$n" --network none "$IMAGE_REF" \
        sh -c 'head -c 4194304 /dev/urandom > /var/tmp/churn')
      upper=$(docker -H "unix://$sock" inspect -f '{{.GraphDriver.Data.UpperDir}}' "$cid")
      layer=${upper%/diff}
      img=$lib_dir/system-disks/$cid.img
      mkdir -p "$lib_dir/system-disks" "$img.staging"
      truncate -s 10G "$img.tmp"
      mkfs.ext4 -q -F -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$img.tmp"
      mount -t ext4 -o loop,noinit_itable -- "$img.tmp" "$img.staging"
      cp -a -- "$layer/." "$img.staging/"
      umount -- "$img.staging"
      rmdir "$img.staging"
      mv "$img.tmp" "$img"
      mount -t ext4 -o loop,noinit_itable -- "$img" "$layer"
      docker -H "unix://$sock" start -a "$cid" >/dev/null
      docker -H "unix://$sock" rm -f "churn-$n" >/dev/null
      rm -f "$img"
    else
      docker -H "unix://$sock" run --name "churn-$n" "${opt[@]}" --network none "$IMAGE_REF" \
        sh -c 'head -c 4194304 /dev/urandom > /var/tmp/churn'
      docker -H "unix://$sock" rm -f "churn-$n" >/dev/null
    fi
  done
  t1=$(date +%s.%N); m1=$(machine_kernel); c1=$(children_stime)
  backlog_now=0; backlog_later=0; live=0; qgroups=0
  local drain="-"
  if [ "$mode" = full ] || [ "$mode" = simple ]; then
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
  if [ "$mode" = full ] || [ "$mode" = simple ]; then
    backlog_later=$(btrfs subvolume list -d "$lib_dir/engine" | wc -l)
    live=$(btrfs subvolume list "$lib_dir/engine" | wc -l)
    qgroups=$(btrfs qgroup show "$lib_dir/engine" 2>/dev/null | tail -n +3 | grep -c '^0/' || true)
  fi
  local kernel_ms per_cycle_ms wall tools_ms machine_ms
  # The layer filesystem's tools (layerfs) count with dockerd; the docker CLI's own kernel time
  # (the same in every mode) is in the children's count too, so only layerfs adds it.
  # (conservative: layerfs is charged the CLI's share too). Printed for every mode.
  tools_ms=$(( (c1 - c0) * 1000 / clk ))
  machine_ms=$(awk -v a="$m0" -v b="$m1" -v c="$CYCLES" -v k="$clk" 'BEGIN{printf "%.1f", (b - a) * 1000 / k / c}')
  kernel_ms=$(( ((d1 - d0) + (k1 - k0)) * 1000 / clk ))
  [ "$mode" = layerfs ] && kernel_ms=$((kernel_ms + tools_ms))
  per_cycle_ms=$(awk -v k="$kernel_ms" -v c="$CYCLES" 'BEGIN{printf "%.1f", k / c}')
  wall=$(awk -v a="$t0" -v b="$t1" -v c="$CYCLES" 'BEGIN{printf "%.2f", (b - a) / c}')
  printf '%-8s quotas=%-7s cycles=%d wall/cycle=%ss kernel/cycle=%sms (dockerd %dms, btrfs threads %dms, tools+cli %dms) machine-kernel/cycle=%sms deleted-not-cleaned: %d at the end, %d after the drain (%s, at most %ss); live subvolumes %d, qgroups %d\n' \
    "$mode" "$quota" "$CYCLES" "$wall" "$per_cycle_ms" $(( (d1 - d0) * 1000 / clk )) $(( (k1 - k0) * 1000 / clk )) "$tools_ms" "$machine_ms" \
    "$backlog_now" "$backlog_later" "$drain" "$SETTLE" "$live" "$qgroups"
  cleanup
}

for m in "${MODES[@]}"; do run_mode "$m"; done

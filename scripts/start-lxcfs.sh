#!/bin/sh
# Start lxcfs (Debian's lxcfs 5) on RUN_DIR/lxcfs as its own process, so instances' /proc
# (meminfo, cpuinfo, stat, uptime, ...) and /sys/devices/system/cpu/online show their own
# limits ([agent] lxcfs_dir; agent/lxcfs.h). Idempotent: an lxcfs we started that still serves
# the mount is kept. Its PID goes to RUN_DIR/lxcfs.pid; scripts/stop-lxcfs.sh stops that one.
#   GPUCLOUD_RUN_DIR   default /var/run/gpucloud
set -eu

RUN_DIR=${GPUCLOUD_RUN_DIR:-/var/run/gpucloud}
MNT=$RUN_DIR/lxcfs
PIDFILE=$RUN_DIR/lxcfs.pid
LOG=$RUN_DIR/lxcfs.log

if ! command -v lxcfs >/dev/null; then
  echo "start-lxcfs: lxcfs is not installed (apt-get install lxcfs): instances show the host's /proc" >&2
  exit 1
fi
mounted() { [ "$(stat -fc %T "$MNT" 2>/dev/null || true)" = fuseblk ] || [ "$(stat -fc %t "$MNT" 2>/dev/null || true)" = 65735546 ]; }

pid=$(cat "$PIDFILE" 2>/dev/null || true)
case "$pid" in ''|*[!0-9]*) pid= ;; esac
if [ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null || true)" = lxcfs ] && mounted && [ -r "$MNT/proc/meminfo" ]; then
  echo "start-lxcfs: lxcfs pid $pid serves $MNT"
  exit 0
fi
# A dead lxcfs leaves its FUSE mount behind ("Transport endpoint is not connected": even
# mkdir and stat of the mount point fail, and /proc/mounts names it under /run, not
# /var/run): unmount whatever is there before making the directory.
umount -l "$MNT" 2>/dev/null || true
mkdir -p "$MNT"

# -l: loadavg per container; --enable-cfs: cpuinfo, stat and cpu/online follow the CPU quota
# (nproc inside an instance with 2 CPUs says 2). -f: stays our child, so $! is its PID.
nohup lxcfs -f -l --enable-cfs -p "$RUN_DIR/lxcfs.own.pid" "$MNT" >"$LOG" 2>&1 &
pid=$!
echo "$pid" >"$PIDFILE"
i=0
while ! [ -r "$MNT/proc/meminfo" ]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start-lxcfs: lxcfs exited; last lines of $LOG:" >&2
    tail -20 "$LOG" >&2
    rm -f "$PIDFILE"
    exit 1
  fi
  if [ "$i" -ge 100 ]; then echo "start-lxcfs: $MNT not served after 10s" >&2; exit 1; fi
  sleep 0.1
  i=$((i + 1))
done
echo "start-lxcfs: lxcfs pid $pid serves $MNT"

#!/bin/sh
# Stop the lxcfs that start-lxcfs.sh started (by its PID), and unmount its directory.
# Idempotent; an lxcfs someone else runs is left alone. Instances still running keep a dead
# mount over their /proc files (reads fail) until they are restarted.
set -eu

RUN_DIR=${GPUCLOUD_RUN_DIR:-/var/run/gpucloud}
MNT=$RUN_DIR/lxcfs
PIDFILE=$RUN_DIR/lxcfs.pid

if [ ! -f "$PIDFILE" ]; then
  echo "stop-lxcfs: no $PIDFILE: we did not start lxcfs, nothing to stop"
  exit 0
fi
pid=$(cat "$PIDFILE" 2>/dev/null || true)
case "$pid" in ''|*[!0-9]*) rm -f "$PIDFILE"; exit 0 ;; esac
if [ "$(cat /proc/"$pid"/comm 2>/dev/null || true)" = lxcfs ]; then
  kill -TERM "$pid"
  i=0
  while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
fi
grep -q " $MNT fuse" /proc/mounts 2>/dev/null && { umount "$MNT" 2>/dev/null || umount -l "$MNT" || true; }
rm -f "$PIDFILE"
echo "stop-lxcfs: stopped lxcfs pid $pid"

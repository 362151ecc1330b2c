#!/bin/sh
# Stop the dockerd that start-dockerd.sh started (by its PID), and only that one: an engine run
# by the system or by someone else is left alone. Idempotent. With --live-restore the
# containers keep running while the engine is down.
set -eu

RUN_DIR=${GPUCLOUD_RUN_DIR:-/var/run/gpucloud}
PIDFILE=$RUN_DIR/dockerd.pid
WAIT=${DOCKERD_WAIT_SECONDS:-30}

if [ ! -f "$PIDFILE" ]; then
  echo "stop-dockerd: no $PIDFILE: we did not start an engine, nothing to stop"
  exit 0
fi
pid=$(cat "$PIDFILE" 2>/dev/null || true)
case "$pid" in ''|*[!0-9]*) echo "stop-dockerd: bad pidfile, removing"; rm -f "$PIDFILE"; exit 0 ;; esac
if [ "$(cat /proc/"$pid"/comm 2>/dev/null || true)" != dockerd ]; then
  echo "stop-dockerd: pid $pid is not running dockerd any more; removing stale pidfile"
  rm -f "$PIDFILE"
  exit 0
fi

kill -TERM "$pid"
i=0
while kill -0 "$pid" 2>/dev/null; do
  if [ "$i" -ge $((WAIT * 10)) ]; then
    echo "stop-dockerd: dockerd pid $pid still running after ${WAIT}s" >&2
    exit 1
  fi
  sleep 0.1
  i=$((i + 1))
done
rm -f "$PIDFILE"
echo "stop-dockerd: stopped dockerd pid $pid"

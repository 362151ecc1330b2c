#!/bin/sh
# Stop the PostgreSQL that start-postgres.sh started (by its PID; fast shutdown). Idempotent; a
# server someone else runs is left alone.
set -eu

RUN_DIR=${GPUCLOUD_RUN_DIR:-/var/run/gpucloud}
PIDFILE=$RUN_DIR/postgres.pid

if [ ! -f "$PIDFILE" ]; then
  echo "stop-postgres: no $PIDFILE: we did not start PostgreSQL, nothing to stop"
  exit 0
fi
pid=$(cat "$PIDFILE" 2>/dev/null || true)
case "$pid" in ''|*[!0-9]*) rm -f "$PIDFILE"; exit 0 ;; esac
if [ "$(cat /proc/"$pid"/comm 2>/dev/null || true)" = postgres ]; then
  kill -INT "$pid"
  i=0
  while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
fi
rm -f "$PIDFILE" "$RUN_DIR/postgres.env"
echo "stop-postgres: stopped postgres pid $pid"

#!/bin/sh
# Start the Docker Engine for gpucloud on a machine without systemd, unless an engine already
# answers on the socket. Idempotent: a second run finds the engine up and does nothing.
# The engine runs with --live-restore, so stopping or restarting it never stops instances.
#
# Environment (all optional):
#   DOCKER_SOCK            engine socket            (default /var/run/docker.sock)
#   GPUCLOUD_RUN_DIR       our pidfile lives here   (default /var/run/gpucloud)
#   GPUCLOUD_LOG_DIR       dockerd.log goes here    (default /var/log/gpucloud)
#   DOCKERD_EXTRA_ARGS     more dockerd arguments, space-separated
#   DOCKERD_WAIT_SECONDS   how long to wait for the engine (default 30)
set -eu

SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
RUN_DIR=${GPUCLOUD_RUN_DIR:-/var/run/gpucloud}
LOG_DIR=${GPUCLOUD_LOG_DIR:-/var/log/gpucloud}
PIDFILE=$RUN_DIR/dockerd.pid
LOG=$LOG_DIR/dockerd.log
WAIT=${DOCKERD_WAIT_SECONDS:-30}

engine_ping() {
  [ -S "$SOCK" ] && curl -fsS --max-time 2 --unix-socket "$SOCK" http://docker/_ping >/dev/null 2>&1
}

# Our own dockerd, still alive? (PID from our pidfile and the process really is dockerd.)
our_pid() {
  [ -f "$PIDFILE" ] || return 1
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  [ "$(cat /proc/"$pid"/comm 2>/dev/null || true)" = dockerd ] || return 1
  echo "$pid"
}

wait_ready() {
  pid=$1
  i=0
  while [ "$i" -lt $((WAIT * 10)) ]; do
    if engine_ping; then return 0; fi
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "start-dockerd: dockerd (pid $pid) exited; last lines of $LOG:" >&2
      tail -n 20 "$LOG" >&2 || true
      return 1
    fi
    sleep 0.1
    i=$((i + 1))
  done
  echo "start-dockerd: engine not ready on $SOCK after ${WAIT}s; see $LOG" >&2
  return 1
}

if engine_ping; then
  echo "start-dockerd: engine already answering on $SOCK"
  exit 0
fi

mkdir -p "$RUN_DIR" "$LOG_DIR"

if pid=$(our_pid); then
  # Started by an earlier run and still coming up: wait for it instead of starting another.
  echo "start-dockerd: waiting for dockerd pid $pid started earlier"
  wait_ready "$pid"
  exit $?
fi
rm -f "$PIDFILE"

command -v dockerd >/dev/null 2>&1 || { echo "start-dockerd: dockerd not installed (apt-get install docker.io)" >&2; exit 1; }

# A stale socket file left by a killed engine makes dockerd refuse to listen.
if [ -S "$SOCK" ]; then rm -f "$SOCK"; fi

# setsid: the engine must outlive the shell (and its process group) that started it.
# shellcheck disable=SC2086
setsid dockerd --live-restore -H "unix://$SOCK" ${DOCKERD_EXTRA_ARGS:-} \
  </dev/null >>"$LOG" 2>&1 &
pid=$!
echo "$pid" >"$PIDFILE"
echo "start-dockerd: started dockerd pid $pid (log $LOG)"
wait_ready "$pid"
echo "start-dockerd: engine ready on $SOCK"

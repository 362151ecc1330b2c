#!/bin/sh
# Start PostgreSQL (Debian's postgresql, 15 on bookworm) for the tests, on loopback, as its
# own process: a cluster of its own under DATA (made on first use), listening on
# 127.0.0.1:PORT, with a role `gpucloud` (LOGIN CREATEDB, password authentication over TCP)
# whose password is made here and kept in RUN_DIR/postgres.password (mode 600). Its PID goes to
# RUN_DIR/postgres.pid; scripts/stop-postgres.sh stops that one. RUN_DIR/postgres.env says where
# it is (GPUCLOUD_TEST_POSTGRES_URL, GPUCLOUD_TEST_POSTGRES_PASSWORD_FILE); the POSTGRES_ tests
# read it. Idempotent: a server we started that still answers is kept.
#   GPUCLOUD_RUN_DIR   default /var/run/gpucloud
#   GPUCLOUD_PG_DATA   default /var/lib/gpucloud/postgres-test
#   GPUCLOUD_PG_PORT   default 15432: below the ephemeral range (32768-60999), so no client
#                      connecting while the server is down can take the port by connecting to
#                      itself (a loopback TCP self-connect), which then stops the next start
set -eu

RUN_DIR=${GPUCLOUD_RUN_DIR:-/var/run/gpucloud}
DATA=${GPUCLOUD_PG_DATA:-/var/lib/gpucloud/postgres-test}
PORT=${GPUCLOUD_PG_PORT:-15432}
PIDFILE=$RUN_DIR/postgres.pid
ENVFILE=$RUN_DIR/postgres.env
PASSFILE=$RUN_DIR/postgres.password
SOCKDIR=$RUN_DIR/postgres
LOG=$RUN_DIR/postgres.log

BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$BIN" ] || [ ! -x "$BIN/pg_ctl" ]; then
  echo "start-postgres: PostgreSQL is not installed (apt-get install postgresql)" >&2
  exit 1
fi
# The server refuses to run as root: the cluster belongs to Debian's `postgres` user.
as_pg() { runuser -u postgres -- "$@"; }

mkdir -p "$RUN_DIR" "$SOCKDIR"
chown postgres:postgres "$SOCKDIR"
touch "$LOG" && chown postgres:postgres "$LOG"

pid=$(cat "$PIDFILE" 2>/dev/null || true)
case "$pid" in ''|*[!0-9]*) pid= ;; esac
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  echo "start-postgres: postgres pid $pid serves 127.0.0.1:$PORT"
  exit 0
fi

if [ ! -f "$DATA/PG_VERSION" ]; then
  mkdir -p "$DATA"
  chown postgres:postgres "$DATA"
  chmod 700 "$DATA"
  as_pg "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --no-locale --auth-local=peer --auth-host=scram-sha-256 >/dev/null
fi
# A stale postmaster.pid (a killed server) would stop pg_ctl: it checks the PID itself.
# fsync and full-page writes are off: a test cluster's data is thrown away after the run.
as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 -o "-c listen_addresses=127.0.0.1 -p $PORT -k $SOCKDIR -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_connections=400" start >/dev/null
pid=$(head -1 "$DATA/postmaster.pid")
echo "$pid" >"$PIDFILE"

if [ ! -s "$PASSFILE" ]; then
  (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$PASSFILE")
fi
password=$(cat "$PASSFILE")
as_pg "$BIN/psql" -q -h "$SOCKDIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 >/dev/null <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'gpucloud') THEN
    CREATE ROLE gpucloud LOGIN CREATEDB;
  END IF;
END \$\$;
ALTER ROLE gpucloud PASSWORD '$password';
SQL
cat >"$ENVFILE" <<ENV
GPUCLOUD_TEST_POSTGRES_URL=postgresql://gpucloud@127.0.0.1:$PORT/postgres
GPUCLOUD_TEST_POSTGRES_PASSWORD_FILE=$PASSFILE
ENV
echo "start-postgres: postgres pid $pid serves 127.0.0.1:$PORT ($("$BIN/postgres" --version))"

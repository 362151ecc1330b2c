#!/usr/bin/env bash
# The store's backends side by side (issue 27, docs/benchmarks.md): the same gpucloudd on
# SQLite, on PostgreSQL, and as two replicas on one PostgreSQL database, in one run, measured
# with wrk on a read through the store (GET /api/v1/billing/ledger: a page of the user's
# ledger) and a write (POST /api/v1/tokens then DELETE it: a write transaction each). Prints requests/s and p99 per case and the ratio to SQLite.
# It is a measurement: it exits 0 whatever the numbers.
#
# Environment:
#   GPUCLOUD_BIN          daemon (default build/bin/gpucloudd)
#   BENCH_PG_URL          postgresql://USER@HOST:PORT/DB of a role that may create databases
#                         (default: the tests' server, /var/run/gpucloud/postgres.env)
#   BENCH_PG_PASSWORD_FILE  its password (default: from the same file)
#   BENCH_SECONDS (5)  BENCH_CONNECTIONS (32)  BENCH_THREADS (1 per wrk)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${GPUCLOUD_BIN:-$ROOT/build/bin/gpucloudd}
SECONDS_PER=${BENCH_SECONDS:-5}
CONNS=${BENCH_CONNECTIONS:-32}
THREADS=${BENCH_THREADS:-1}
if [[ -z ${BENCH_PG_URL:-} && -r /var/run/gpucloud/postgres.env ]]; then
  # shellcheck disable=SC1091
  . /var/run/gpucloud/postgres.env
  BENCH_PG_URL=$GPUCLOUD_TEST_POSTGRES_URL
  BENCH_PG_PASSWORD_FILE=${BENCH_PG_PASSWORD_FILE:-$GPUCLOUD_TEST_POSTGRES_PASSWORD_FILE}
fi
[[ -n ${BENCH_PG_URL:-} ]] || { echo "store_backends: no PostgreSQL (BENCH_PG_URL)"; exit 1; }
command -v wrk >/dev/null || { echo "store_backends: wrk is not installed"; exit 1; }
WORK=$(mktemp -d /tmp/gpucloud-store-bench.XXXXXX)
DB=store_bench_$$
cleanup() {
  for p in $(cat "$WORK/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  PGPASSWORD=$(cat "${BENCH_PG_PASSWORD_FILE:-/dev/null}" 2>/dev/null) psql -q "$BENCH_PG_URL" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PGPASSWORD=$(cat "${BENCH_PG_PASSWORD_FILE:-/dev/null}" 2>/dev/null) psql -q "$BENCH_PG_URL" -c "CREATE DATABASE $DB" >/dev/null
PG_DB_URL="${BENCH_PG_URL%/*}/$DB"

# start NAME STORE_TOML: a daemon with no hosts of its own (the store is what is measured)
start() {
  local name=$1 store=$2
  mkdir -p "$WORK/$name"
  printf '[server]\nlogin_failures_allowed = 1000\n%s\n[billing]\nsignup_credit = 100000\n' "$store" >"$WORK/$name/gpucloud.toml"
  GPUCLOUD_ADMIN_PASSWORD=admin-password-1 GPUCLOUD_AGENT_TRANSPORT=loopback-json "$BIN" --config "$WORK/$name/gpucloud.toml" \
    --listen 127.0.0.1:0 --data-dir "$WORK/$name/data" >"$WORK/$name/log" 2>&1 &
  echo $! >>"$WORK/pids"  # start runs in $(...): its own shell, so the PID goes through a file
  for _ in $(seq 100); do
    port=$(sed -n 's/^gpucloudd listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$WORK/$name/log" | head -n1)
    [[ -n $port ]] && { echo "$port"; return; }
    sleep 0.1
  done
  echo "store_backends: $name did not start" >&2; tail "$WORK/$name/log" >&2; exit 1
}

token_for() {  # PORT USER -> an API token
  python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
port, user = sys.argv[1], sys.argv[2]
def call(method, path, body, token=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if token: req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req) as r: return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        if e.code == 409: return {}
        raise
creds = {"username": user, "password": "password-123"}
call("POST", "/api/v1/auth/register", creds)
session = call("POST", "/api/v1/auth/login", creds)["token"]
print(call("POST", "/api/v1/tokens", {"name": "bench"}, session)["token"])
PY
}

cat >"$WORK/write.lua" <<'LUA'
-- POST an API token, then DELETE it: two write transactions.
local n = 0
local pending = nil
request = function()
  if pending then
    local id = pending
    pending = nil
    return wrk.format("DELETE", "/api/v1/tokens/" .. id)
  end
  n = n + 1
  local name = string.format("k%d%d", math.random(1, 1000000000), n)
  local headers = {}  -- a table given to wrk.format replaces wrk.headers (Authorization)
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["Content-Type"] = "application/json"
  return wrk.format("POST", "/api/v1/tokens", headers, '{"name":"' .. name .. '"}')
end
response = function(status, headers, body)
  local id = body:match('"id":"([^"]+)"')
  if status == 201 and id then pending = id end
end
LUA

# run LABEL PATH_OR_WRITE TOKEN PORT... : wrk on every port at once; summed req/s, worst p99
run() {
  local label=$1 what=$2 token=$3; shift 3
  local outs=() wrks=()
  for port in "$@"; do
    local out="$WORK/wrk-${label//[^a-z0-9]/_}-$port"
    if [[ $what == write ]]; then
      wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER}s" --latency -s "$WORK/write.lua" -H "Authorization: Bearer $token" \
        "http://127.0.0.1:$port" >"$out" 2>&1 &
      wrks+=($!)
    else
      wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER}s" --latency -H "Authorization: Bearer $token" \
        "http://127.0.0.1:$port$what" >"$out" 2>&1 &
      wrks+=($!)
    fi
    outs+=("$out")
  done
  wait "${wrks[@]}" 2>/dev/null || true
  python3 - "$label" "${outs[@]}" <<'PY'
import re, sys
label, files = sys.argv[1], sys.argv[2:]
rps, p99, errors = 0.0, 0.0, 0
for f in files:
    t = open(f).read()
    m = re.search(r"Requests/sec:\s+([\d.]+)", t); rps += float(m.group(1)) if m else 0
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)", t)
    if m: p99 = max(p99, float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)])
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", t); errors += int(m.group(1)) if m else 0
print(f"{label:44s} {rps:10.0f} req/s   p99 {p99:8.2f} ms   non-2xx {errors}")
PY
}

echo "store backends — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, ${SECONDS_PER}s x ${CONNS} connections per gpucloudd"
SQLITE_PORT=$(start sqlite '[store]
url = "sqlite://DATA_DIR/gpucloud.db"')
PG_STORE="[store]
url = \"$PG_DB_URL\"
password_file = \"${BENCH_PG_PASSWORD_FILE}\""
PG1_PORT=$(start pg1 "$PG_STORE")
PG2_PORT=$(start pg2 "$PG_STORE")
T_SQLITE=$(token_for "$SQLITE_PORT" bench-sqlite)
T_PG=$(token_for "$PG1_PORT" bench-pg)
for what in /api/v1/billing/ledger write; do
  run "sqlite $what" "$what" "$T_SQLITE" "$SQLITE_PORT"
  run "postgresql, one gpucloudd $what" "$what" "$T_PG" "$PG1_PORT"
  run "postgresql, two gpucloudd $what" "$what" "$T_PG" "$PG1_PORT" "$PG2_PORT"
done

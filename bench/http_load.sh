#!/usr/bin/env bash
# HTTP load benchmark for gpucloudd (see docs/benchmarks.md).
#
# Starts gpucloudd on a throw-away data dir, creates a user and an API token, starts the bare
# Beast server (bench/bare_http_server.cpp: the same stack with none of gpucloudd's request
# path), then measures with wrk, in the same run and alternating, GET / on the bare server,
# GET /healthz (no auth, no store: gpucloudd's request path alone) and GET /api/v1/me
# (authenticated by an API token, served from the token cache). Prints requests/s,
# p50/p90/p99 latency, the ratios to the bare server and PASS/FAIL against the targets, then
# runs bench/idle_connections.py (1,000 idle keep-alive connections).
# It is a measurement: it exits 0 whatever the verdicts (non-zero only if it cannot measure).
#
# Environment:
#   GPUCLOUD_BIN         daemon to test (default: build/bin/gpucloudd under the repository root)
#   BENCH_BARE_BIN       the bare server (default: bare_http_server beside GPUCLOUD_BIN)
#   BENCH_CONNECTIONS    wrk connections (64)      BENCH_THREADS  wrk threads (2)
#   BENCH_ROUNDS         rounds per endpoint (2)   BENCH_SECONDS  seconds per round (5)
#   BENCH_WARMUP         warm-up seconds per endpoint before the rounds (2)
#   BENCH_NICE=N         run the daemon and wrk under `nice -n N` (e.g. -20 as root: on a machine
#                        shared with builds, approximates a dedicated one; default: not set). With
#                        autogroup scheduling (kernel.sched_autogroup_enabled=1) nice only ranks
#                        processes of one session, so the script then re-runs itself in a session
#                        of its own (setsid) and gives that session's autogroup the same nice.
#   BENCH_CONFIG=FILE    pass --config FILE to the daemon (e.g. [server] worker_threads = 1)
#   BENCH_SKIP_IDLE=1    skip the idle-connections benchmark
#   BENCH_KEEP=1         keep the temp dir (daemon log, wrk output) for inspection
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${GPUCLOUD_BIN:-$ROOT/build/bin/gpucloudd}
BARE_BIN=${BENCH_BARE_BIN:-$(dirname "$BIN")/bare_http_server}
CONNECTIONS=${BENCH_CONNECTIONS:-64}
THREADS=${BENCH_THREADS:-2}
ROUNDS=${BENCH_ROUNDS:-2}
SECONDS_PER_ROUND=${BENCH_SECONDS:-5}
WARMUP=${BENCH_WARMUP:-2}
CONFIG_ARGS=()
[[ -n ${BENCH_CONFIG:-} ]] && CONFIG_ARGS=(--config "$BENCH_CONFIG")
NICE=()
AUTOGROUP=""
if [[ -n ${BENCH_NICE:-} ]]; then
  NICE=(nice -n "$BENCH_NICE")
  if [[ $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null) == 1 ]]; then
    if [[ -z ${HTTP_LOAD_OWN_SESSION:-} ]] && command -v setsid >/dev/null; then
      HTTP_LOAD_OWN_SESSION=1 exec setsid --wait "$0" "$@"
    fi
    if [[ -n ${HTTP_LOAD_OWN_SESSION:-} ]] && echo "$BENCH_NICE" 2>/dev/null >/proc/self/autogroup; then
      AUTOGROUP="; own autogroup at nice $BENCH_NICE"
    fi
  fi
fi

# Targets. Against the bare server (same machine, same run): gpucloudd's request path may
# cost /healthz 15 % and /me 30 % of the bare throughput, and at most double its p99.
ME_MIN_RPS=30000
ME_MIN_RATIO=0.40
ME_MAX_P99_MS=5
HEALTHZ_MIN_BARE_RATIO=0.85
ME_MIN_BARE_RATIO=0.70
MAX_P99_BARE_FACTOR=2

for tool in wrk python3; do
  command -v "$tool" >/dev/null || { echo "http_load: $tool is required" >&2; exit 2; }
done
[[ -x $BIN ]] || { echo "http_load: no daemon at $BIN (build it, or set GPUCLOUD_BIN)" >&2; exit 2; }
[[ -x $BARE_BIN ]] || { echo "http_load: no bare server at $BARE_BIN (build with -DGPUCLOUD_BENCH=ON, or set BENCH_BARE_BIN)" >&2; exit 2; }

# wrk's 64 connections plus the idle benchmark's 1,000 need file descriptors (inherited by the daemon).
if [[ $(ulimit -n) != unlimited && $(ulimit -n) -lt 4096 ]]; then ulimit -n 4096; fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpucloud-http-load.XXXXXX")
DAEMON_PID=""
BARE_PID=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ -n $BARE_PID ]]; then kill -TERM "$BARE_PID" 2>/dev/null || true; wait "$BARE_PID" 2>/dev/null || true; fi
  if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$DAEMON_PID" 2>/dev/null && kill -KILL "$DAEMON_PID" 2>/dev/null
    wait "$DAEMON_PID" 2>/dev/null || true
  fi
  if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "http_load: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

echo "== HTTP load: bare Beast server vs GET /healthz vs GET /api/v1/me =="
echo "daemon:   $BIN${BENCH_CONFIG:+ --config $BENCH_CONFIG}"
echo "bare:     $BARE_BIN"
echo "machine:  $(nproc) CPUs, $(uname -sr), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrk:      $THREADS threads, $CONNECTIONS keep-alive connections, warm-up ${WARMUP} s per endpoint," \
     "then $ROUNDS × ${SECONDS_PER_ROUND} s per endpoint, alternating${BENCH_NICE:+; daemon and wrk at nice $BENCH_NICE$AUTOGROUP}"

# The daemon logs one line per request to stdout: keep it in a file, as a deployment would.
GPUCLOUD_ADMIN_PASSWORD=${GPUCLOUD_ADMIN_PASSWORD:-bench-admin-password-0} \
  "${NICE[@]}" "$BIN" "${CONFIG_ARGS[@]}" --listen 127.0.0.1:0 --data-dir "$WORK/data" >"$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
PORT=""
for _ in $(seq 100); do
  PORT=$(sed -n 's/^gpucloudd listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$WORK/daemon.log" | head -n1)
  [[ -n $PORT ]] && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { echo "http_load: daemon exited:" >&2; cat "$WORK/daemon.log" >&2; exit 2; }
  sleep 0.1
done
[[ -n $PORT ]] || { echo "http_load: daemon did not report its port" >&2; exit 2; }
BASE="http://127.0.0.1:$PORT"
echo "listening: $BASE (pid $DAEMON_PID)"

"${NICE[@]}" "$BARE_BIN" 127.0.0.1:0 >"$WORK/bare.log" 2>&1 &
BARE_PID=$!
BARE_PORT=""
for _ in $(seq 100); do
  BARE_PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$WORK/bare.log" | head -n1)
  [[ -n $BARE_PORT ]] && break
  kill -0 "$BARE_PID" 2>/dev/null || { echo "http_load: bare server exited:" >&2; cat "$WORK/bare.log" >&2; exit 2; }
  sleep 0.1
done
[[ -n $BARE_PORT ]] || { echo "http_load: bare server did not report its port" >&2; exit 2; }
echo "bare:     http://127.0.0.1:$BARE_PORT (pid $BARE_PID)"

# A user, a session, an API token (python3 stdlib: no curl or jq needed).
TOKEN=$(python3 - "$BASE" <<'PY'
import json, sys, urllib.request
base = sys.argv[1]
def call(method, path, body, token=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)
creds = {"username": "bench", "password": "bench-password-0123"}
call("POST", "/api/v1/auth/register", creds)
session = call("POST", "/api/v1/auth/login", creds)["token"]
print(call("POST", "/api/v1/tokens", {"name": "http-load"}, session)["token"])
PY
)
python3 - "$BASE" "$TOKEN" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/api/v1/me", headers={"Authorization": "Bearer " + sys.argv[2]})
with urllib.request.urlopen(req, timeout=10) as r:
    assert r.status == 200, r.status
PY

# wrk's done() writes one result file per run: counts, then the latency quantiles (µs) at
# fine steps so that rounds can be merged into one distribution.
cat >"$WORK/report.lua" <<'LUA'
done = function(summary, latency, requests)
  local f = assert(io.open(os.getenv("WRK_RESULT"), "w"))
  local e = summary.errors
  f:write(string.format("requests %d\nduration_us %d\nbytes %d\n", summary.requests, summary.duration, summary.bytes))
  f:write(string.format("errors %d %d %d %d %d\n", e.connect, e.read, e.write, e.status, e.timeout))
  f:write(string.format("max_us %d\n", latency.max))
  local p = 0.1
  while p < 99.0 + 1e-9 do f:write(string.format("q %.3f %d\n", p, latency:percentile(p))); p = p + 0.1 end
  p = 99.01
  while p < 100.0 - 1e-9 do f:write(string.format("q %.3f %d\n", p, latency:percentile(p))); p = p + 0.01 end
  f:close()
end
LUA

# CPU seconds (user + system) of the daemon, of its event-loop thread (the main thread), and
# of wrk: per request they say what each request costs, which a busy machine does not blur
# as much as requests/s.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "$1"; }
run_wrk() {  # endpoint-name path seconds result-file
  local name=$1 path=$2 secs=$3 out=$4
  local auth=() base=$BASE pid=$DAEMON_PID
  [[ $name == me ]] && auth=(-H "Authorization: Bearer $TOKEN")
  [[ $name == bare ]] && base="http://127.0.0.1:$BARE_PORT" pid=$BARE_PID
  local cpu0 loop0 cpu1 loop1 wrk_cpu
  cpu0=$(cpu_of "/proc/$pid/stat") loop0=$(cpu_of "/proc/$pid/task/$pid/stat")
  local TIMEFORMAT='%3U %3S'
  { time WRK_RESULT=$out "${NICE[@]}" wrk -t"$THREADS" -c"$CONNECTIONS" -d"${secs}s" --timeout 5s "${auth[@]}" \
      -s "$WORK/report.lua" "$base$path" >"$out.txt" 2>&1; } 2>"$out.time" || {
    cat "$out.txt" >&2
    kill -0 "$DAEMON_PID" 2>/dev/null || echo "http_load: the daemon is gone (killed by someone else?)" >&2
    return 1
  }
  cpu1=$(cpu_of "/proc/$pid/stat") loop1=$(cpu_of "/proc/$pid/task/$pid/stat")
  wrk_cpu=$(awk '{print $1 + $2}' "$out.time")
  printf 'cpu_daemon_s %s\ncpu_loop_s %s\ncpu_wrk_s %s\n' "$(awk "BEGIN{print $cpu1 - $cpu0}")" \
    "$(awk "BEGIN{print $loop1 - $loop0}")" "$wrk_cpu" >>"$out"
}

declare -A PATHS=([bare]=/healthz [me]=/api/v1/me [healthz]=/healthz)
for name in bare healthz me; do run_wrk "$name" "${PATHS[$name]}" "$WARMUP" "$WORK/warmup-$name"; done
for round in $(seq "$ROUNDS"); do
  order=(bare healthz me)
  ((round % 2 == 0)) && order=(me healthz bare)
  for name in "${order[@]}"; do
    run_wrk "$name" "${PATHS[$name]}" "$SECONDS_PER_ROUND" "$WORK/round$round-$name"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "daemon after load: $(grep -E '^(VmRSS|Threads):' /proc/$DAEMON_PID/status | tr -s '\t ' ' ' | paste -sd' ')"
echo

python3 - "$WORK" "$ROUNDS" "$ME_MIN_RPS" "$ME_MIN_RATIO" "$ME_MAX_P99_MS" \
  "$HEALTHZ_MIN_BARE_RATIO" "$ME_MIN_BARE_RATIO" "$MAX_P99_BARE_FACTOR" <<'PY'
import sys, pathlib
work, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
min_rps, min_ratio, max_p99 = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
hz_min_bare, me_min_bare, p99_factor = float(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])
ENDPOINTS = (("bare", "bare server"), ("healthz", "GET /healthz"), ("me", "GET /api/v1/me"))

def load(path):
    r = {"q": []}
    for line in path.read_text().split("\n"):
        f = line.split()
        if not f:
            continue
        if f[0] == "q":
            r["q"].append((float(f[1]), int(f[2])))
        elif f[0] == "errors":
            r["errors"] = sum(map(int, f[1:]))
        elif f[0].startswith("cpu_"):
            r[f[0]] = float(f[1])
        else:
            r[f[0]] = int(f[1])
    return r

def merged_percentile(runs, p):
    # Each run's quantile table stands for its requests: the mass between consecutive
    # quantiles sits at the upper one. Weighted by request count, pooled, read at p.
    points = []
    for r in runs:
        prev = 0.0
        for q, v in r["q"]:
            points.append((v, (q - prev) / 100.0 * r["requests"]))
            prev = q
        points.append((r["max_us"], (100.0 - prev) / 100.0 * r["requests"]))
    points.sort()
    total = sum(w for _, w in points)
    acc = 0.0
    for v, w in points:
        acc += w
        if acc >= p / 100.0 * total - 1e-9:
            return v
    return points[-1][0]

def pct(r, p):
    return min((v for q, v in r["q"] if q >= p - 1e-9), default=r["max_us"])

summary = {}
print(f"{'run':<16}{'req/s':>10}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}")
for name, _ in ENDPOINTS:
    runs = [load(work / f"round{i}-{name}") for i in range(1, rounds + 1)]
    for i, r in enumerate(runs, 1):
        rps = r["requests"] / (r["duration_us"] / 1e6)
        print(f"{name + ' #' + str(i):<16}{rps:>10.0f}{pct(r, 50) / 1000:>9.2f}{pct(r, 90) / 1000:>9.2f}"
              f"{pct(r, 99) / 1000:>9.2f}{r['max_us'] / 1000:>9.2f}{r['errors']:>8}")
    requests = sum(r["requests"] for r in runs)
    seconds = sum(r["duration_us"] for r in runs) / 1e6
    s = {
        "rps": requests / seconds,
        "p50": merged_percentile(runs, 50) / 1000,
        "p90": merged_percentile(runs, 90) / 1000,
        "p99": merged_percentile(runs, 99) / 1000,
        "max": max(r["max_us"] for r in runs) / 1000,
        "errors": sum(r["errors"] for r in runs),
        "requests": requests,
        "seconds": seconds,
        "cpu_daemon": sum(r["cpu_daemon_s"] for r in runs) / requests * 1e6,
        "cpu_loop": sum(r["cpu_loop_s"] for r in runs) / requests * 1e6,
        "cpu_wrk": sum(r["cpu_wrk_s"] for r in runs) / requests * 1e6,
        "daemon_cores": sum(r["cpu_daemon_s"] for r in runs) / seconds,
    }
    summary[name] = s
print()
print(f"{'endpoint':<16}{'req/s':>10}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}  (all rounds)")
for name, label in ENDPOINTS:
    s = summary[name]
    print(f"{label:<16}{s['rps']:>10.0f}{s['p50']:>9.2f}{s['p90']:>9.2f}{s['p99']:>9.2f}{s['max']:>9.2f}{s['errors']:>8}"
          f"  ({s['requests']} requests in {s['seconds']:.1f} s)")
print()
print("CPU per request, µs (user + system; 'pool' = threads other than the event loop):")
print(f"{'endpoint':<16}{'server':>8}{'loop':>8}{'pool':>8}{'wrk':>8}   server used on average")
for name, label in ENDPOINTS:
    s = summary[name]
    print(f"{label:<16}{s['cpu_daemon']:>8.1f}{s['cpu_loop']:>8.1f}{s['cpu_daemon'] - s['cpu_loop']:>8.1f}"
          f"{s['cpu_wrk']:>8.1f}   {s['daemon_cores']:.2f} cores")
bare, me, hz = summary["bare"], summary["me"], summary["healthz"]
ratio = me["rps"] / hz["rps"]
hz_bare, me_bare = hz["rps"] / bare["rps"], me["rps"] / bare["rps"]
print(f"ratio /healthz : bare = {hz_bare:.2f}   /me : bare = {me_bare:.2f}   /me : /healthz = {ratio:.2f}")
print(f"p99 /healthz : bare = {hz['p99'] / bare['p99']:.2f}   /me : bare = {me['p99'] / bare['p99']:.2f}")
print()
verdict = lambda ok: "PASS" if ok else "FAIL"
print(f"{verdict(hz_bare >= hz_min_bare)}  /healthz at {hz_bare:.2f}x the bare server's req/s (target >= {hz_min_bare:.2f}x)")
print(f"{verdict(me_bare >= me_min_bare)}  /me at {me_bare:.2f}x the bare server's req/s (target >= {me_min_bare:.2f}x)")
for name, label in (("healthz", "/healthz"), ("me", "/me")):
    p = summary[name]["p99"]
    print(f"{verdict(p <= p99_factor * bare['p99'])}  {label} p99 {p:.2f} ms, {p / bare['p99']:.2f}x bare's {bare['p99']:.2f} ms "
          f"(target <= {p99_factor:g}x)")
print(f"{verdict(me['rps'] >= min_rps)}  /me throughput {me['rps']:.0f} req/s (target >= {min_rps:.0f})")
print(f"{verdict(ratio >= min_ratio)}  /me at {ratio * 100:.0f} % of /healthz (target >= {min_ratio * 100:.0f} %)")
print(f"{verdict(me['p99'] <= max_p99)}  /me p99 {me['p99']:.2f} ms (target <= {max_p99:g} ms)")
if me["errors"] or hz["errors"] or bare["errors"]:
    print(f"note: wrk counted errors (connect/read/write/non-2xx/timeout): bare {bare['errors']}, "
          f"/healthz {hz['errors']}, /me {me['errors']}")
PY

if [[ ${BENCH_SKIP_IDLE:-0} != 1 ]]; then
  echo
  GPUCLOUD_BIN=$BIN python3 "$ROOT/bench/idle_connections.py" || echo "http_load: idle_connections.py failed (exit $?)"
fi
exit 0

#!/usr/bin/env bash
# Remote agents at scale (issue 26, "Measure"); builds nothing. Two phases, each against a
# release gpucloudd of its own (temporary data dir, API on 127.0.0.1:0, agents' listener on
# 127.0.0.1):
#
#   1. Heartbeat load: bench/agent_link_load (build-bench/bin) joins N (1000) simulated hosts
#      through the API and the listener (a key + CSR each, real TLS, the CA pinned), opens N
#      WebSockets over mutual TLS, says hello and heartbeats every 10 s per agent, spread evenly;
#      after 10 s of warm-up it measures DURATION (60) s: heartbeat -> heartbeat_ack latency
#      p50/p99/max and gpucloudd's CPU (/proc/PID/stat, all threads) as % of one core.
#      Targets: CPU <= 10 % of one core, p99 <= 50 ms.
#   2. Create latency, remote vs in-process, same run: one real gpucloud-agent (release build)
#      joined over loopback TLS serving host remote-1 (simulated RTX 4090) beside the in-process
#      host node-1 (simulated RTX 3090, same prices): a model names the host, so placement is
#      forced. COUNT (20) creates + releases of a one-GPU instance per host, the two hosts taking
#      turns going first, after one untimed warm-up each; create -> running is timed from just
#      before POST /api/v1/instances until GET says "running" (polled every 10 ms).
#      Target: remote p50 <= in-process p50 + 10 ms.
#
# Environment: GPUCLOUD_BENCH_BUILD_DIR (default build-bench), AGENT_LINK_AGENTS (1000),
# AGENT_LINK_DURATION (60), AGENT_LINK_COUNT (20), AGENT_LINK_PHASES ("load creates"),
# AGENT_LINK_PORT (18600: the listener of phase 1; phase 2 takes the next one),
# AGENT_LINK_LOAD_ARGS (more options for agent_link_load, e.g. --nagle), AGENT_LINK_KEEP=1 keeps the temporary directory (the daemons' and the agent's logs).
# Needs root, dockerd (/var/run/docker.sock or DOCKER_HOST) with gpucloud/base:bookworm-2.
# It stops every process it started by PID and removes what they made (instances, containers
# and networks of both installations, their nftables tables, the temporary directory).
# Exit status: 0 when it measured (whatever the verdicts), 2 when it could not.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export AGENT_LINK_BUILD_DIR=${GPUCLOUD_BENCH_BUILD_DIR:-$ROOT/build-bench}
for bin in gpucloudd gpucloud-agent agent_link_load; do
  if [[ ! -x $AGENT_LINK_BUILD_DIR/bin/$bin ]]; then
    echo "agent_link.sh: no $AGENT_LINK_BUILD_DIR/bin/$bin (build it: see docs/benchmarks.md, Remote agents)" >&2
    exit 2
  fi
done
# A socket per link on both sides: 1,000 links need more than the usual 1,024 descriptors.
# (AGENT_LINK_NOFILE sets another soft limit, to see what a small one does.)
ulimit -S -n "${AGENT_LINK_NOFILE:-65536}" 2>/dev/null || ulimit -S -n "$(ulimit -Hn)"
export AGENT_LINK_ROOT=$ROOT
exec python3 -u - "$@" <<'PY'
import json, os, pathlib, re, shutil, signal, subprocess, sys, tempfile, time
root = pathlib.Path(os.environ["AGENT_LINK_ROOT"])
sys.path.insert(0, str(root / "bench"))
import instance_latency as il  # its HTTP clients, daemon start/stop and leftovers' cleanup

BIN = pathlib.Path(os.environ["AGENT_LINK_BUILD_DIR"]) / "bin"
AGENTS = int(os.environ.get("AGENT_LINK_AGENTS", "1000"))
DURATION = float(os.environ.get("AGENT_LINK_DURATION", "60"))
COUNT = int(os.environ.get("AGENT_LINK_COUNT", "20"))
PHASES = os.environ.get("AGENT_LINK_PHASES", "load creates").split()
PORT = int(os.environ.get("AGENT_LINK_PORT", "18600"))
KEEP = os.environ.get("AGENT_LINK_KEEP") == "1"
ADMIN_PASSWORD = "bench-admin-password-0"
os.environ["GPUCLOUD_ADMIN_PASSWORD"] = ADMIN_PASSWORD
now = time.monotonic

CONFIG = """\
# Written by bench/agent_link.sh
registration = "open"
public_host  = "127.0.0.1"

[[zones]]
name   = "zone-a"
region = "local"

[agents]
listen = "127.0.0.1:{agents_port}"
server_names = ["127.0.0.1"]

[[hosts]]
name       = "node-1"
zone       = "zone-a"
engine     = "unix://{socket}"
cpu        = 16
memory_gib = 32
port_range = "34000-34499"
simulated_gpus = [ {gpus} ]

[[offers]]
gpu_model           = "RTX 4090"
cpu_per_gpu         = 1
memory_gib_per_gpu  = 1
price_per_gpu_hour  = 198

[[offers]]
gpu_model           = "RTX 3090"
cpu_per_gpu         = 1
memory_gib_per_gpu  = 1
price_per_gpu_hour  = 198

[billing]
signup_credit = 100000000

[policy]
recycle_days = 0
"""

AGENT_TOML = """\
# Written by bench/agent_link.sh
data_dir = "{data_dir}"
[host]
name = "remote-1"
zone = "zone-a"
engine = "unix://{socket}"
cpu = 16
memory_gib = 32
port_range = "34500-34999"
simulated_gpus = [ {{ model = "RTX 4090", memory_gib = 24, count = 4 }} ]
"""


def machine_note():
    load = pathlib.Path("/proc/loadavg").read_text().split()[:3]
    compilers = 0
    for p in pathlib.Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if (p / "comm").read_text().strip() in ("cc1plus", "cc1", "ld", "ninja"):
                    compilers += 1
            except OSError:
                pass
    return f"load average {' '.join(load)}, compiler/ninja processes {compilers}"


def socket_path():
    host = os.environ.get("DOCKER_HOST", "")
    return host[len("unix://"):] if host.startswith("unix://") else "/var/run/docker.sock"


def phase_load(workdir, engine):
    print(f"== Phase 1: {AGENTS} simulated agents, heartbeat every 10 s each, {DURATION:.0f} s measured ==")
    (workdir / "load").mkdir()
    cfg = workdir / "load" / "gpucloud.toml"
    cfg.write_text(CONFIG.format(agents_port=PORT, socket=socket_path(), gpus=""))
    proc = installation = None
    try:
        proc, port, installation = il.start_daemon(str(BIN / "gpucloudd"), workdir / "load", cfg)
        limits = pathlib.Path(f"/proc/{proc.pid}/limits").read_text()
        nofile = re.search(r"^Max open files\s+(\d+)", limits, re.M)
        print(f"gpucloudd pid {proc.pid} (API 127.0.0.1:{port}, agents 127.0.0.1:{PORT}, open files "
              f"{nofile.group(1) if nofile else '?'}); {machine_note()}")
        cmd = [str(BIN / "agent_link_load"), "--api", f"http://127.0.0.1:{port}",
               "--agents-url", f"https://127.0.0.1:{PORT}", "--admin-password", ADMIN_PASSWORD,
               "--agents", str(AGENTS), "--duration", str(DURATION), "--pid", str(proc.pid)]
        cmd += os.environ.get("AGENT_LINK_LOAD_ARGS", "").split()
        print(f"load tool: agent_link_load --agents {AGENTS} --duration {DURATION:g} "
              + os.environ.get("AGENT_LINK_LOAD_ARGS", ""))
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL)
        rss = re.search(r"VmRSS:\s+(\d+)", pathlib.Path(f"/proc/{proc.pid}/status").read_text())
        print(f"after: {machine_note()}; gpucloudd RSS {rss.group(1) if rss else '?'} kB")
        return r.returncode == 0
    finally:
        if proc is not None:
            il.stop_daemon(proc)
        il.remove_installation_leftovers(engine, installation, None)


def wait_for(what, check, timeout, every=0.1):
    deadline = now() + timeout
    while now() < deadline:
        if check():
            return
        time.sleep(every)
    raise il.BenchError(f"{what}: not within {timeout:.0f} s")


def released(api, name):
    status, raw = api.request("GET", f"/api/v1/instances/{name}")
    return status == 404 or (status == 200 and json.loads(raw).get("state") == "released")


def time_create(api, name, model, alive):
    t0 = now()
    made = api.json("POST", "/api/v1/instances",
                    {"name": name, "gpu_model": model, "gpu_count": 1, "ssh_keys": ["bench"]}, expect=(201, 202))
    alive.add(name)
    t_post = now() - t0
    host = made.get("host")
    while True:
        inst = api.json("GET", f"/api/v1/instances/{name}")
        if inst.get("state") == "running":
            t_run = now() - t0
            host = inst.get("host", host)
            break
        if inst.get("state") in ("failed", "error", "released", "stopped"):
            raise il.BenchError(f"{name} went {inst.get('state')}: {inst.get('state_reason')}")
        if now() - t0 > 90:
            raise il.BenchError(f"{name} not running after 90 s")
        time.sleep(0.01)
    t1 = now()
    api.json("DELETE", f"/api/v1/instances/{name}", expect=(200, 202, 204))
    while True:
        if released(api, name):
            alive.discard(name)
            break
        if now() - t1 > 90:
            raise il.BenchError(f"{name} not released after 90 s")
        time.sleep(0.01)
    return t_post, t_run, now() - t1, host


def phase_creates(workdir, engine):
    print(f"== Phase 2: create -> running, remote agent (loopback TLS) vs in-process, {COUNT} each ==")
    wd = workdir / "creates"
    wd.mkdir()
    cfg = wd / "gpucloud.toml"
    cfg.write_text(CONFIG.format(agents_port=PORT + 1, socket=socket_path(),
                                 gpus='{ model = "RTX 3090", memory_gib = 24, count = 4 }'))
    proc = agent = installation = agent_installation = None
    alive = set()
    api = None
    try:
        proc, port, installation = il.start_daemon(str(BIN / "gpucloudd"), wd, cfg)
        admin = il.api_client(port)
        admin_token = admin.json("POST", "/api/v1/auth/login", {"username": "admin", "password": ADMIN_PASSWORD})["token"]
        admin.close()
        admin = il.api_client(port, admin_token)
        token = admin.json("POST", "/api/v1/admin/hosts/join-token", {"host": "remote-1"}, expect=(201,))["token"]
        agent_dir = wd / "agent"
        agent_dir.mkdir()
        (agent_dir / "agent.toml").write_text(AGENT_TOML.format(data_dir=agent_dir / "data", socket=socket_path()))
        with open(agent_dir / "agent.log", "wb") as log:
            agent = subprocess.Popen([str(BIN / "gpucloud-agent"), "--config", str(agent_dir / "agent.toml"),
                                      "--join", f"https://127.0.0.1:{PORT + 1}", "--token", token],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

        def remote_ready():
            if agent.poll() is not None:
                raise il.BenchError("gpucloud-agent exited: " + (agent_dir / "agent.log").read_text(errors="replace")[-2000:])
            for h in admin.json("GET", "/api/v1/admin/hosts")["items"]:
                if h["name"] == "remote-1" and h["state"] == "ready":
                    return True
            return False
        wait_for("remote-1 ready", remote_ready, 60)
        agent_installation = (agent_dir / "data" / "installation-id").read_text().strip()
        admin.close()
        key = wd / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True,
                       stdin=subprocess.DEVNULL)
        api = il.api_client(port)
        creds = {"username": "link-bench", "password": "link-bench-password-1"}
        api.json("POST", "/api/v1/auth/register", creds, expect=(201,))
        user_token = api.json("POST", "/api/v1/auth/login", creds)["token"]
        api.close()
        api = il.api_client(port, user_token)
        api.json("POST", "/api/v1/ssh-keys", {"name": "bench", "public_key": (wd / "id_ed25519.pub").read_text().strip()},
                 expect=(201,))
        print(f"gpucloudd pid {proc.pid} (installation {installation}), gpucloud-agent pid {agent.pid} "
              f"(installation {agent_installation}); {machine_note()}")
        sides = [("in-process", "RTX 3090", "node-1"), ("remote", "RTX 4090", "remote-1")]
        results = {"in-process": [], "remote": []}
        print(f"{'run':>4} {'first':>10} | {'in-process: POST':>16} {'running':>7} {'release':>7} | "
              f"{'remote: POST':>12} {'running':>7} {'release':>7}   (ms)")
        for i in range(COUNT + 1):
            order = sides[i % 2:] + sides[:i % 2]
            row = {}
            for label, model, want_host in order:
                t_post, t_run, t_rel, host = time_create(api, f"link-{label[0]}-{i}", model, alive)
                if host and host != want_host:
                    raise il.BenchError(f"a {model} instance landed on {host}, not {want_host}")
                row[label] = (t_post, t_run, t_rel)
            if i > 0:
                for label in row:
                    results[label].append(row[label])
            a, b = row["in-process"], row["remote"]
            print(f"{'warm' if i == 0 else i:>4} {order[0][0]:>10} | {a[0]*1000:16.0f} {a[1]*1000:7.0f} {a[2]*1000:7.0f} | "
                  f"{b[0]*1000:12.0f} {b[1]*1000:7.0f} {b[2]*1000:7.0f}", flush=True)
        print()
        print(f"{'':24} {'p50':>7} {'p90':>7} {'min':>7} {'max':>7}   (ms, n={COUNT})")
        q = {}
        for label in ("in-process", "remote"):
            for k, metric in enumerate(("POST answer", "create->running", "DELETE->released")):
                vals = [r[k] for r in results[label]]
                q[(label, metric)] = il.percentile(vals, 50)
                print(f"{label + ' ' + metric:24} {il.percentile(vals, 50)*1000:7.0f} {il.percentile(vals, 90)*1000:7.0f} "
                      f"{min(vals)*1000:7.0f} {max(vals)*1000:7.0f}")
        d = (q[("remote", "create->running")] - q[("in-process", "create->running")]) * 1000
        print(f"remote - in-process create->running at p50: {d:+.0f} ms  (target <= +10 ms: {'PASS' if d <= 10 else 'FAIL'})")
        print(f"after: {machine_note()}")
        return True
    finally:
        if api is not None:
            for name in list(alive):
                try:
                    api.json("DELETE", f"/api/v1/instances/{name}", expect=(200, 202, 204, 404))
                    wait_for(f"{name} released", lambda: released(api, name), 60)
                except (il.BenchError, OSError) as e:
                    print(f"agent_link: could not release {name}: {e}", file=sys.stderr)
            api.close()
        if agent is not None and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)  # by PID
            try:
                agent.wait(timeout=20)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        if proc is not None:
            il.stop_daemon(proc)
        il.remove_installation_leftovers(engine, agent_installation, None)
        il.remove_installation_leftovers(engine, installation, None)


def main():
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="gpucloud-agent-link-"))
    engine = il.engine_client(socket_path())
    print(f"agent_link.sh — {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"binaries {BIN}")
    ok = True
    try:
        if "load" in PHASES:
            ok = phase_load(workdir, engine) and ok
            print()
        if "creates" in PHASES:
            ok = phase_creates(workdir, engine) and ok
    except (il.BenchError, OSError, subprocess.CalledProcessError, KeyError, ValueError) as e:
        print(f"agent_link: cannot measure: {e}", file=sys.stderr)
        ok = False
    except KeyboardInterrupt:
        print("agent_link: interrupted; cleaned up", file=sys.stderr)
        ok = False
    finally:
        engine.close()
        if KEEP:
            print(f"kept {workdir}")
        else:
            if not ok:
                for log in sorted(workdir.rglob("*.log")):
                    print(f"--- {log.relative_to(workdir)} (tail) ---\n" + log.read_text(errors="replace")[-2500:],
                          file=sys.stderr)
            shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 2


sys.exit(main())
PY

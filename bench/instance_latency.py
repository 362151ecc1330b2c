#!/usr/bin/env python3
"""Instance create latency benchmark for gpucloudd vs the bare Docker Engine (python3 stdlib only).

Measures, over N (20) instances created one after another:
  (a) create -> running: from just before `POST /api/v1/instances` until `GET
      /api/v1/instances/NAME` (polled every 20 ms) says "running";
  (b) create -> SSH: from the same moment until the first successful
      `ssh ... root@127.0.0.1 -p PORT true`. The host key is pinned: ssh runs with
      StrictHostKeyChecking=yes against a known_hosts file holding only the key the API
      reported (ssh.host_key), so ssh is tried (every 50 ms) once the API knows the key.
Side by side, the physical floor: the same image created and started directly through the
Engine API (unix socket, /v1.41), with the same init, the same limits (1 CPU, 1 GiB) and the
same read-only mounts as gpucloud's driver (src/agent/runtime/docker_engine_driver.cpp), on
Docker's default bridge:
  (a) create -> running: POST /containers/create, POST .../start, then GET .../json (every
      20 ms) until State.Running;
  (b) create -> SSH: the host key from the container log ("GPUCLOUD-HOST-KEY", polled every
      20 ms, as the agent reads it), then ssh (every 50 ms) to the container's bridge IP,
      port 22, pinned the same way.
Bare and gpucloud runs alternate (bare first on even runs, gpucloud first on odd ones), each
released before the next one starts (at most one instance or container alive), after one
untimed warm-up run of each.

Targets: gpucloud create->running p50 <= 1.3 x bare p50 + 150 ms; gpucloud create->SSH
p50 <= 1 s. It prints PASS/FAIL per target and exits 0 whatever the verdicts (2 when it cannot
measure).

It starts its own daemon (GPUCLOUD_BIN, default build/bin/gpucloudd under the repository root)
on a temporary data dir and config (one host, 24 simulated RTX 4090, host ports 34000-34999),
stops it by PID (SIGTERM), and removes everything it made: instances, bare containers, the
daemon's Docker network, its nftables table and DOCKER-USER rule, and the temporary dir.
Needs root (the daemon publishes SSH ports with nftables), dockerd, the image
gpucloud/base:bookworm-2, ssh and ssh-keygen.
"""
import argparse
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_IMAGE = "gpucloud/base:bookworm-2"
ENGINE_API = "/v1.41"
BENCH_LABEL = "gpucloud-bench.instance-latency"
GIB = 1024 ** 3
ROUTE_LOCALNET = "/proc/sys/net/ipv4/conf/all/route_localnet"

CONFIG_TOML = """\
# Written by bench/instance_latency.py
registration = "open"
public_host  = "127.0.0.1"

[[zones]]
name   = "zone-a"
region = "local"

[[hosts]]
name       = "node-1"
zone       = "zone-a"
engine     = "unix://{socket}"
cpu        = 48
memory_gib = 200
port_range = "34000-34999"
simulated_gpus = [ {{ model = "RTX 4090", memory_gib = 24, count = 24 }} ]

[[offers]]
gpu_model           = "RTX 4090"
cpu_per_gpu         = 1
memory_gib_per_gpu  = 1
price_per_gpu_hour  = 198
price_per_gpu_week  = 26600
price_per_gpu_month = 99800

[billing]
signup_credit = 100000000   # ¥1,000,000: billing refuses creates (402) below an hour of the price

[policy]
recycle_days = 0    # a released bench instance's disk (delete_on_release) is destroyed at once
"""

now = time.monotonic


class BenchError(Exception):
    pass


# ---- HTTP clients ---------------------------------------------------------------------------

class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Client:
    """One keep-alive connection; reconnects once when the peer closed it."""

    def __init__(self, factory, headers=None):
        self.factory = factory
        self.headers = dict(headers or {})
        self.conn = None

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = self.factory()
            try:
                self.conn.request(method, path, body=data, headers=headers)
                res = self.conn.getresponse()
                raw = res.read()
                if res.getheader("Connection", "").lower() == "close":
                    self.close()
                return res.status, raw
            except (http.client.HTTPException, ConnectionError, BrokenPipeError) as e:
                self.close()
                if attempt:
                    raise BenchError(f"{method} {path}: {e}") from e
        raise AssertionError("unreachable")

    def json(self, method, path, body=None, expect=(200,)):
        status, raw = self.request(method, path, body)
        if status not in expect:
            raise BenchError(f"{method} {path}: HTTP {status}: {raw[:300].decode(errors='replace')}")
        return json.loads(raw) if raw else None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def engine_client(socket_path):
    return Client(lambda: UnixHTTPConnection(socket_path))


def api_client(port, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=60), headers)


# ---- helpers --------------------------------------------------------------------------------

def percentile(values, p):
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def demux_docker_log(raw):
    """A non-TTY container's log: 8-byte frame headers (stream, 0, 0, 0, size BE32)."""
    out, i = [], 0
    while i + 8 <= len(raw):
        size = int.from_bytes(raw[i + 4:i + 8], "big")
        if raw[i] not in (0, 1, 2) or i + 8 + size > len(raw):
            return raw  # not framed (TTY) or cut short: take it as it is
        out.append(raw[i + 8:i + 8 + size])
        i += 8 + size
    return b"".join(out)


HOST_KEY_LINE = re.compile(rb"^GPUCLOUD-HOST-KEY (\S+) (\S+)\s*$", re.M)


class Ssh:
    def __init__(self, workdir, key):
        self.workdir = workdir
        self.key = key
        self.attempts = 0

    def try_once(self, host, port, alias, known_hosts):
        self.attempts += 1
        cmd = ["ssh", "-F", "/dev/null", "-p", str(port), "-i", str(self.key),
               "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
               "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
               "-o", f"HostKeyAlias={alias}", "-o", "IdentitiesOnly=yes",
               "-o", "ConnectTimeout=3", "-o", "LogLevel=ERROR",
               f"root@{host}", "true"]
        try:
            return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=15).returncode == 0
        except subprocess.TimeoutExpired:
            return False


def wait_ready(t0, poll, ssh_try, poll_s, ssh_s, timeout_s):
    """Polls `poll()` -> (running, host_key) every poll_s until running and the host key is
    known; from when the key is known, tries `ssh_try(host_key)` every ssh_s until it works.
    Returns (seconds to running, seconds to SSH), both from t0."""
    t_run = t_ssh = None
    host_key = None
    next_poll = now()
    next_ssh = None
    deadline = t0 + timeout_s
    while t_run is None or t_ssh is None:
        t = now()
        if t > deadline:
            raise BenchError(f"not ready after {timeout_s:.0f} s (running: {t_run is not None}, "
                             f"host key: {host_key is not None}, ssh: {t_ssh is not None})")
        if (t_run is None or host_key is None) and t >= next_poll:
            next_poll = t + poll_s
            running, key = poll()
            t = now()
            if running and t_run is None:
                t_run = t - t0
            if key and host_key is None:
                host_key = key
                next_ssh = t
        if host_key is not None and t_ssh is None and t >= next_ssh:
            next_ssh = t + ssh_s
            if ssh_try(host_key):
                t_ssh = now() - t0
        waits = []
        if t_run is None or host_key is None:
            waits.append(next_poll)
        if host_key is not None and t_ssh is None:
            waits.append(next_ssh)
        if waits:
            delay = min(waits) - now()
            if delay > 0:
                time.sleep(delay)
    return t_run, t_ssh


def write_known_hosts(path, alias, host_key):
    parts = host_key.split()
    if len(parts) < 2:
        raise BenchError(f"unexpected host key {host_key!r}")
    path.write_text(f"{alias} {parts[0]} {parts[1]}\n")


# ---- the two sides --------------------------------------------------------------------------

class Gpucloud:
    def __init__(self, api, ssh, workdir, opts, data_disk_gib=0):
        self.api, self.ssh, self.workdir, self.opts = api, ssh, workdir, opts
        self.data_disk_gib = data_disk_gib
        self.alive = set()

    def run(self, name):
        known_hosts = self.workdir / f"known_hosts-{name}"
        alias = f"gpucloud-bench-{name}"
        t0 = now()
        body = {"name": name, "gpu_model": "RTX 4090", "gpu_count": 1, "ssh_keys": ["bench"]}
        if self.data_disk_gib:
            # A new data disk made with the instance, destroyed with it (recycle_days = 0).
            body["data_disks"] = [{"size_gib": self.data_disk_gib, "delete_on_release": True}]
        made = self.api.json("POST", "/api/v1/instances", body, expect=(201, 202))
        t_post = now() - t0
        self.alive.add(name)
        ssh_info = made.get("ssh") or {}
        port = ssh_info.get("port")
        if not port:
            raise BenchError(f"instance {name} has no SSH port: {made}")
        host = "127.0.0.1"

        def poll():
            inst = self.api.json("GET", f"/api/v1/instances/{name}")
            if inst.get("state") in ("failed", "error", "released", "stopped"):
                raise BenchError(f"instance {name} went {inst.get('state')}: {inst.get('state_reason')}")
            return inst.get("state") == "running", (inst.get("ssh") or {}).get("host_key")

        def ssh_try(host_key):
            if not known_hosts.exists():
                write_known_hosts(known_hosts, alias, host_key)
            return self.ssh.try_once(host, port, alias, known_hosts)

        t_run, t_ssh = wait_ready(t0, poll, ssh_try, self.opts.poll_ms / 1000, self.opts.ssh_retry_ms / 1000,
                                  self.opts.timeout)
        t_release = self.release(name)
        known_hosts.unlink(missing_ok=True)
        return {"running": t_run, "ssh": t_ssh, "post": t_post, "release": t_release}

    def release(self, name):
        t0 = now()
        self.api.json("DELETE", f"/api/v1/instances/{name}", expect=(200, 202, 204, 404))
        deadline = t0 + self.opts.timeout
        while now() < deadline:
            status, raw = self.api.request("GET", f"/api/v1/instances/{name}")
            # A released instance answers with state "released" (older daemons: 404).
            if status == 404 or (status == 200 and json.loads(raw).get("state") == "released"):
                self.alive.discard(name)
                return now() - t0
            time.sleep(self.opts.poll_ms / 1000)
        raise BenchError(f"instance {name} still there {self.opts.timeout:.0f} s after DELETE")

    def release_all(self):
        for name in list(self.alive):
            try:
                self.release(name)
            except (BenchError, OSError) as e:
                print(f"instance_latency: could not release {name}: {e}", file=sys.stderr)


class Bare:
    def __init__(self, engine, ssh, workdir, opts, init_path, config_dir, run_id, network=None):
        self.engine, self.ssh, self.workdir, self.opts = engine, ssh, workdir, opts
        self.init_path, self.config_dir, self.run_id = init_path, config_dir, run_id
        self.alive = set()
        # --bare-network gpucloud: the daemon's own network, a fixed address near the top of
        # its subnet (the daemon hands out addresses from the bottom), and the capabilities
        # and sysctl the driver sets, so the two sides differ only in what gpucloud adds.
        self.network, self.fixed_ip = None, None
        if network:
            info = engine.json("GET", f"{ENGINE_API}/networks/{network}")
            subnet = info["IPAM"]["Config"][0]["Subnet"]
            base = subnet.split("/")[0].rsplit(".", 1)[0]
            self.network, self.fixed_ip = network, base + ".250"

    def body(self, name):
        mem = self.opts.memory_gib * GIB
        body = {
            "Image": self.opts.image,
            "Hostname": name,
            "Labels": {BENCH_LABEL: self.run_id},
            "Env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "Entrypoint": [],
            # As the driver does: the init is a shell script run by /bin/sh (no exec bit needed).
            "Cmd": ["/bin/sh", "/.gpucloud/init"],
            "Tty": False,
            "OpenStdin": False,
            "HostConfig": {
                "NanoCpus": int(self.opts.cpus * 1e9),
                "Memory": mem,
                "MemorySwap": mem,
                "PidsLimit": 4096,
                "ShmSize": mem // 2,
                "Init": True,
                "RestartPolicy": {"Name": "no"},
                "Privileged": False,
                "ReadonlyRootfs": False,
                "IpcMode": "private",
                "NetworkMode": "default",
                "Mounts": [
                    {"Type": "bind", "Source": str(self.init_path), "Target": "/.gpucloud/init", "ReadOnly": True},
                    {"Type": "bind", "Source": str(self.config_dir), "Target": "/.gpucloud/config", "ReadOnly": True},
                ],
                "LogConfig": {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "2"}},
            },
        }
        if self.network:
            body["HostConfig"]["NetworkMode"] = self.network
            body["HostConfig"]["CapDrop"] = ["NET_RAW", "MKNOD", "SETPCAP"]
            body["HostConfig"]["Sysctls"] = {"net.ipv4.ping_group_range": "0 2147483647"}
            body["NetworkingConfig"] = {"EndpointsConfig": {self.network: {"IPAMConfig": {"IPv4Address": self.fixed_ip}}}}
        return body

    def run(self, name):
        known_hosts = self.workdir / f"known_hosts-{name}"
        alias = f"bare-bench-{name}"
        body = self.body(name)
        t0 = now()
        made = self.engine.json("POST", f"{ENGINE_API}/containers/create?name={name}", body, expect=(201,))
        cid = made["Id"]
        self.alive.add(cid)
        self.engine.json("POST", f"{ENGINE_API}/containers/{cid}/start", expect=(204, 304))
        t_post = now() - t0
        state = {"ip": None, "running": False}

        def poll():
            if not state["running"]:
                info = self.engine.json("GET", f"{ENGINE_API}/containers/{cid}/json")
                st = info.get("State") or {}
                if not st.get("Running") and st.get("Status") in ("exited", "dead"):
                    raise BenchError(f"container {name} exited ({st.get('ExitCode')})")
                if st.get("Running"):
                    state["running"] = True
                    nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
                    for net in nets.values():
                        if net.get("IPAddress"):
                            state["ip"] = net["IPAddress"]
                            break
                    if not state["ip"]:
                        raise BenchError(f"container {name} has no IP address on the bridge")
                    # The same round: the key may already be in the log.
            key = None
            if state["running"]:
                status, raw = self.engine.request("GET", f"{ENGINE_API}/containers/{cid}/logs?stdout=1&stderr=1&tail=50")
                if status == 200:
                    m = HOST_KEY_LINE.search(demux_docker_log(raw))
                    if m:
                        key = (m.group(1) + b" " + m.group(2)).decode()
            return state["running"], key

        def ssh_try(host_key):
            if not known_hosts.exists():
                write_known_hosts(known_hosts, alias, host_key)
            return self.ssh.try_once(state["ip"], 22, alias, known_hosts)

        t_run, t_ssh = wait_ready(t0, poll, ssh_try, self.opts.poll_ms / 1000, self.opts.ssh_retry_ms / 1000,
                                  self.opts.timeout)
        t_release = self.remove(cid)
        known_hosts.unlink(missing_ok=True)
        return {"running": t_run, "ssh": t_ssh, "post": t_post, "release": t_release}

    def remove(self, cid):
        t0 = now()
        status, raw = self.engine.request("DELETE", f"{ENGINE_API}/containers/{cid}?force=1&v=1")
        if status == 409 and b"in progress" in raw:
            # An interrupted earlier removal is still running: wait for it.
            deadline = t0 + 60
            while now() < deadline:
                status, _ = self.engine.request("GET", f"{ENGINE_API}/containers/{cid}/json")
                if status == 404:
                    break
                time.sleep(0.1)
        elif status not in (204, 404):
            raise BenchError(f"DELETE container {cid[:12]}: HTTP {status}: {raw[:300].decode(errors='replace')}")
        self.alive.discard(cid)
        return now() - t0

    def remove_all(self):
        # Everything labelled by this run, even what a crash left untracked.
        flt = json.dumps({"label": [f"{BENCH_LABEL}={self.run_id}"]})
        try:
            from urllib.parse import quote
            listed = self.engine.json("GET", f"{ENGINE_API}/containers/json?all=1&filters={quote(flt)}")
            ids = set(self.alive) | {c["Id"] for c in listed or []}
        except (BenchError, OSError) as e:
            ids = set(self.alive)
            print(f"instance_latency: could not list the bare containers: {e}", file=sys.stderr)
        for cid in ids:
            try:
                self.remove(cid)
            except (BenchError, OSError) as e:
                print(f"instance_latency: could not remove container {cid[:12]}: {e}", file=sys.stderr)


# ---- daemon ---------------------------------------------------------------------------------

def start_daemon(binary, workdir, config_path):
    log_path = workdir / "daemon.log"
    log = open(log_path, "wb")
    env = dict(os.environ)
    env.setdefault("GPUCLOUD_ADMIN_PASSWORD", "bench-admin-password-0")
    proc = subprocess.Popen([binary, "--config", str(config_path), "--listen", "127.0.0.1:0",
                             "--data-dir", str(workdir / "data")],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    deadline = now() + 30
    while now() < deadline:
        text = log_path.read_bytes()
        m = re.search(rb"^gpucloudd listening on 127\.0\.0\.1:(\d+)$", text, re.M)
        if m:
            inst = re.search(rb'"event":"instance_runtime_loaded","installation":"([a-z0-9]+)"', text)
            return proc, int(m.group(1)), inst.group(1).decode() if inst else None
        if proc.poll() is not None:
            raise BenchError("daemon exited: " + log_path.read_text(errors="replace")[-2000:])
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise BenchError("daemon did not report its port")


def stop_daemon(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # by PID: Popen signals exactly this process
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def remove_installation_leftovers(engine, installation, route_localnet_before):
    """What gpucloudd leaves on the host after its last instance is released: its
    containers (none, normally), its Docker network, its nftables table and DOCKER-USER rule."""
    if not installation:
        return
    from urllib.parse import quote
    name = f"gpucloud-{installation}"
    try:
        flt = json.dumps({"label": [f"gpucloud.installation={installation}"]})
        for c in engine.json("GET", f"{ENGINE_API}/containers/json?all=1&filters={quote(flt)}") or []:
            engine.json("DELETE", f"{ENGINE_API}/containers/{c['Id']}?force=1&v=1", expect=(204, 404))
        engine.json("DELETE", f"{ENGINE_API}/networks/{name}", expect=(204, 200, 404))
    except (BenchError, OSError) as e:
        print(f"instance_latency: could not remove network {name}: {e}", file=sys.stderr)
    nft = shutil.which("nft") or ("/usr/sbin/nft" if os.path.exists("/usr/sbin/nft") else None)
    if nft:
        subprocess.run([nft, "-f", "-"], input=f"table ip {name} {{}}\ndelete table ip {name}\n".encode(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ipt = shutil.which("iptables") or ("/usr/sbin/iptables" if os.path.exists("/usr/sbin/iptables") else None)
    if ipt:
        rule = ["-m", "connmark", "--mark", "0x10000000/0x10000000", "-m", "comment",
                "--comment", f"gpucloud:{name}", "-j", "ACCEPT"]
        for _ in range(64):
            r = subprocess.run([ipt, "-w", "5", "-D", "DOCKER-USER", *rule],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if r.returncode != 0:
                break
    # The daemon turned route_localnet on; turn it back off only if it was off before and no
    # other gpucloud table still needs it.
    if route_localnet_before == "0" and nft:
        listed = subprocess.run([nft, "list", "tables", "ip"], capture_output=True, text=True).stdout
        if not re.search(r"^table ip gpucloud-", listed, re.M):
            try:
                pathlib.Path(ROUTE_LOCALNET).write_text("0\n")
            except OSError:
                pass


# ---- main -----------------------------------------------------------------------------------

def fmt_ms(s):
    return f"{s * 1000:7.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=int(os.environ.get("BENCH_INSTANCES", "20")),
                    help="instances per side (default 20, or BENCH_INSTANCES)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs per side first (default 1)")
    ap.add_argument("--image", default=DEFAULT_IMAGE)
    ap.add_argument("--engine-socket", default=None,
                    help="Docker Engine socket (default: DOCKER_HOST unix://..., else /var/run/docker.sock)")
    ap.add_argument("--cpus", type=float, default=1.0, help="bare container CPUs (the offer gives 1 per GPU)")
    ap.add_argument("--memory-gib", type=int, default=1, help="bare container memory (the offer gives 1 GiB)")
    ap.add_argument("--poll-ms", type=float, default=20.0, help="state polling period (default 20 ms)")
    ap.add_argument("--ssh-retry-ms", type=float, default=50.0, help="ssh retry period (default 50 ms)")
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds per instance before giving up")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (daemon log)")
    ap.add_argument("--bare-network", choices=("default", "gpucloud"), default="default",
                    help="bare containers on Docker's default bridge (default) or on the daemon's own "
                         "network with a fixed address, CapDrop and Sysctls as the driver sends them")
    ap.add_argument("--data-disk-gib", type=int, default=0,
                    help="also time gpucloud creates with a new data disk of this size (a third side, "
                         "compared with gpucloud creates without one)")
    ap.add_argument("--network-holders", choices=("on", "off"), default="on",
                    help="[agent] network_holders for the daemon: on (the default: instances join pre-started "
                         "network holders) or off (each instance on the bridge itself, as before session 15)")
    args = ap.parse_args()
    if args.count < 1:
        ap.error("--count must be at least 1")

    socket_path = args.engine_socket
    if not socket_path:
        dh = os.environ.get("DOCKER_HOST", "")
        socket_path = dh[len("unix://"):] if dh.startswith("unix://") else "/var/run/docker.sock"
    binary = os.environ.get("GPUCLOUD_BIN") or str(ROOT / "build" / "bin" / "gpucloudd")
    for tool in ("ssh", "ssh-keygen"):
        if not shutil.which(tool):
            print(f"instance_latency: {tool} not found (apt-get install openssh-client)", file=sys.stderr)
            return 2
    if not os.access(binary, os.X_OK):
        print(f"instance_latency: no daemon at {binary} (build it, or set GPUCLOUD_BIN)", file=sys.stderr)
        return 2

    engine = engine_client(socket_path)
    try:
        status, _ = engine.request("GET", f"{ENGINE_API}/images/{args.image}/json")
    except (OSError, BenchError) as e:
        print(f"instance_latency: Docker Engine at {socket_path}: {e}", file=sys.stderr)
        return 2
    if status != 200:
        print(f"instance_latency: image {args.image} not present (HTTP {status}); build it first", file=sys.stderr)
        return 2

    # SIGTERM/SIGHUP clean up like Ctrl-C does.
    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="gpucloud-instance-latency-"))
    run_id = os.urandom(3).hex()
    proc = installation = None
    gc = gcd = bare = None
    try:
        route_localnet_before = pathlib.Path(ROUTE_LOCALNET).read_text().strip()
    except OSError:
        route_localnet_before = None
    results = {"bare": [], "gpucloud": [], "disk": []}
    order_log = []
    load_before = pathlib.Path("/proc/loadavg").read_text().split()[:3]
    rc = 0
    try:
        key = workdir / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "instance-latency", "-f", str(key)],
                       check=True, stdin=subprocess.DEVNULL)
        pub = (workdir / "id_ed25519.pub").read_text().strip()
        config_dir = workdir / "bare-config"
        config_dir.mkdir()
        (config_dir / "authorized_keys").write_text(pub + "\n")
        config_path = workdir / "gpucloud.toml"
        config_path.write_text(CONFIG_TOML.format(socket=socket_path) +
                               f"\n[agent]\nnetwork_holders = {'true' if args.network_holders == 'on' else 'false'}\n")

        proc, port, installation = start_daemon(binary, workdir, config_path)
        init_path = workdir / "data" / "agent" / "gpucloud-init.sh"
        if not init_path.exists():
            raise BenchError(f"the daemon wrote no init at {init_path}")
        api = api_client(port)
        creds = {"username": "latency-bench", "password": "latency-bench-password-1"}
        api.json("POST", "/api/v1/auth/register", creds, expect=(201,))
        token = api.json("POST", "/api/v1/auth/login", creds)["token"]
        api.close()
        api = api_client(port, token)
        api.json("POST", "/api/v1/ssh-keys", {"name": "bench", "public_key": pub}, expect=(201,))

        ssh = Ssh(workdir, key)
        gc = Gpucloud(api, ssh, workdir, args)
        gcd = Gpucloud(api, ssh, workdir, args, args.data_disk_gib) if args.data_disk_gib else None
        bare = Bare(engine, ssh, workdir, args, init_path, config_dir, run_id,
                    f"gpucloud-{installation}" if args.bare_network == "gpucloud" else None)

        print(f"== Instance create latency: {args.count} instances per side, {args.warmup} warm-up ==")
        print(f"daemon:  {binary} (127.0.0.1:{port}, installation {installation})")
        print(f"bare:    on {'the daemon network ' + bare.network + ' at ' + bare.fixed_ip if bare.network else 'the default bridge'}")
        print(f"image:   {args.image}; 1 GPU = {args.cpus:g} CPU, {args.memory_gib} GiB; "
              f"poll {args.poll_ms:g} ms, ssh retry {args.ssh_retry_ms:g} ms")
        print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(load_before)}; "
              f"network holders {args.network_holders}")
        print()
        print(f"{'run':>4} {'first':>8} | {'bare: API':>9} {'running':>7} {'ssh':>7} | "
              f"{'gpucloud: POST':>14} {'running':>7} {'ssh':>7} {'release':>7}"
              + (f" | {'+disk: running':>14} {'ssh':>7} {'release':>7}" if gcd else "") + "   (ms)")

        total = args.warmup + args.count
        sides = [(bare, "bare"), (gc, "gpucloud")]
        if gcd is not None:
            sides.append((gcd, "disk"))
        for i in range(total):
            warm = i < args.warmup
            # The sides take turns going first, so neither always meets a warmer engine.
            order = sides[i % len(sides):] + sides[:i % len(sides)]
            first = order[0][1]
            row = {}
            for obj, label in order:
                name = {"gpucloud": f"lat-{run_id}-{i}", "disk": f"latd-{run_id}-{i}"}.get(
                    label, f"gcl-lat-bare-{run_id}-{i}")
                row[label] = obj.run(name)
            if not warm:
                for label in row:
                    results[label].append(row[label])
                order_log.append(first)
            b, g = row["bare"], row["gpucloud"]
            tag = "warm" if warm else str(i - args.warmup + 1)
            line = (f"{tag:>4} {first:>8} | {fmt_ms(b['post']):>9} {fmt_ms(b['running'])} {fmt_ms(b['ssh'])} | "
                    f"{fmt_ms(g['post']):>14} {fmt_ms(g['running'])} {fmt_ms(g['ssh'])} {fmt_ms(g['release'])}")
            if "disk" in row:
                d = row["disk"]
                line += f" | {fmt_ms(d['running'])} {fmt_ms(d['ssh'])} {fmt_ms(d['release'])}"
            print(line, flush=True)

        load_after = pathlib.Path("/proc/loadavg").read_text().split()[:3]
        q = {}
        for label in ("bare", "gpucloud", "disk"):
            if not results[label]:
                continue
            for metric in ("running", "ssh", "post", "release"):
                vals = [r[metric] for r in results[label]]
                q[(label, metric)] = (percentile(vals, 50), percentile(vals, 95), min(vals), max(vals))
        print()
        print(f"{'':24} {'p50':>7} {'p95':>7} {'min':>7} {'max':>7}   (ms, n={args.count})")
        for label, metric, title in (("bare", "running", "bare create->running"),
                                     ("gpucloud", "running", "gpucloud create->running"),
                                     ("bare", "ssh", "bare create->SSH"),
                                     ("gpucloud", "ssh", "gpucloud create->SSH"),
                                     ("bare", "post", "bare create+start calls"),
                                     ("gpucloud", "post", "gpucloud POST answer"),
                                     ("gpucloud", "release", "gpucloud DELETE->gone")):
            p50, p95, lo, hi = q[(label, metric)]
            print(f"{title:24} {fmt_ms(p50)} {fmt_ms(p95)} {fmt_ms(lo)} {fmt_ms(hi)}")
        b50, b95 = q[("bare", "running")][:2]
        g50, g95 = q[("gpucloud", "running")][:2]
        s50 = q[("gpucloud", "ssh")][0]
        print()
        print(f"ratio gpucloud/bare create->running: p50 {g50 / b50:.2f}x, p95 {g95 / b95:.2f}x; "
              f"overhead p50 {(g50 - b50) * 1000:+.0f} ms")
        limit50 = 1.3 * b50 + 0.150
        limit95 = 1.3 * b95 + 0.150
        v1 = "PASS" if g50 <= limit50 else "FAIL"
        v2 = "PASS" if s50 <= 1.0 else "FAIL"
        print(f"target create->running p50 <= 1.3 x bare + 150 ms: {g50 * 1000:.0f} <= {limit50 * 1000:.0f} ms  {v1}")
        print(f"       (p95, for information: {g95 * 1000:.0f} vs {limit95 * 1000:.0f} ms  "
              f"{'within' if g95 <= limit95 else 'over'})")
        print(f"target create->SSH p50 <= 1 s: {s50 * 1000:.0f} ms  {v2}")
        if gcd is not None:
            d50, d95 = q[("disk", "running")][:2]
            extra = (d50 - g50) * 1000
            print(f"with a new {args.data_disk_gib} GiB data disk: create->running p50 {d50 * 1000:.0f} ms "
                  f"(p95 {d95 * 1000:.0f}), {extra:+.0f} ms over a create without one; "
                  f"create->SSH p50 {q[('disk', 'ssh')][0] * 1000:.0f} ms")
            print(f"target data disk create <= +100 ms at p50: {extra:+.0f} ms  {'PASS' if extra <= 100 else 'FAIL'}")
        print(f"ssh attempts: {ssh.attempts}; load average {' '.join(load_before)} -> {' '.join(load_after)}")
    except (BenchError, OSError, subprocess.CalledProcessError, KeyError, ValueError) as e:
        print(f"instance_latency: cannot measure: {e}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:
        print("instance_latency: interrupted; cleaning up", file=sys.stderr)
        rc = 2
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # An interrupted request may have left a connection half-read: start afresh.
        engine.close()
        if gc is not None:
            gc.api.close()
        if gc is not None and proc is not None and proc.poll() is None:
            gc.release_all()
            if gcd is not None:
                gcd.release_all()
        if bare is not None:
            bare.remove_all()
        if proc is not None:
            stop_daemon(proc)
        remove_installation_leftovers(engine, installation, route_localnet_before)
        engine.close()
        if args.keep or rc:
            if args.keep:
                print(f"kept {workdir}")
            else:
                log = workdir / "daemon.log"
                if log.exists():
                    print("--- daemon log (tail) ---\n" + log.read_text(errors="replace")[-3000:], file=sys.stderr)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

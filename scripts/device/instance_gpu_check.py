#!/usr/bin/env python3
"""The run half of scripts/device/instance-gpu.sh, after the engine was started: waits for
the engine, imports the slim image, starts gpucloudd (NVML discovery, built-in injection),
and checks the GPU instance path through the API and the engine. One line per check, then
"N passed, N failed"; exit 0 only when nothing failed.

Only the standard library: the GPU machine has Python 3.12 and nothing else of ours."""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

WORK = os.environ["GPUCLOUD_DEVICE_WORK"]
LIB = os.environ["GPUCLOUD_DEVICE_LIB"]
GPU_NAME = os.environ.get("GPUCLOUD_DEVICE_GPU_NAME", "").strip() or "NVIDIA H200"
ENGINE_SOCK = os.path.join(WORK, "docker.sock")
PORT = 18480
API = f"127.0.0.1:{PORT}"

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"check {'ok    ' if ok else 'FAILED'} {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def deadline_wait(what, fn, seconds, interval=0.5):
    """fn() until it returns something truthy, or None after `seconds`."""
    end = time.monotonic() + seconds
    last = None
    while time.monotonic() < end:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - a daemon still starting answers with errors
            last = e
        time.sleep(interval)
    print(f"  (waited {seconds} s for {what}; last: {str(last)[:300]})", flush=True)
    return None


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def engine(method, path, body=None, raw=False, timeout=60, headers=None):
    conn = UnixHTTPConnection(ENGINE_SOCK, timeout=timeout)
    hdrs = dict(headers or {})
    data = body
    if body is not None and not isinstance(body, (bytes, bytearray)) and not hasattr(body, "read"):
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    conn.request(method, "/v1.41" + path, body=data, headers=hdrs)
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    if resp.status >= 300:
        raise RuntimeError(f"engine {method} {path}: {resp.status} {payload[:300]!r}")
    if raw:
        return payload
    return json.loads(payload) if payload else None


def demux(stream):
    """The engine's multiplexed exec output (no TTY): 8-byte headers, stdout and stderr."""
    out, i = b"", 0
    while i + 8 <= len(stream):
        size = int.from_bytes(stream[i + 4:i + 8], "big")
        out += stream[i + 8:i + 8 + size]
        i += 8 + size
    return out.decode(errors="replace")


def exec_in(container, cmd, timeout=120):
    made = engine("POST", f"/containers/{container}/exec",
                  {"Cmd": cmd, "AttachStdout": True, "AttachStderr": True, "Tty": False})
    out = demux(engine("POST", f"/exec/{made['Id']}/start", {"Detach": False, "Tty": False}, raw=True,
                       timeout=timeout))
    code = engine("GET", f"/exec/{made['Id']}/json")["ExitCode"]
    return code, out


class Api:
    def __init__(self, token=None):
        self.token = token

    def call(self, method, path, body=None, idempotency=False, expect=(200, 201, 202, 204)):
        conn = http.client.HTTPConnection(API, timeout=60)
        hdrs = {}
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        if idempotency:
            hdrs["Idempotency-Key"] = str(uuid.uuid4())
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        if resp.status not in expect:
            raise RuntimeError(f"{method} {path}: {resp.status} {payload[:400]!r}")
        ctype = resp.getheader("Content-Type", "")
        if "json" in ctype and payload:
            return json.loads(payload)
        return payload.decode(errors="replace")


def wait_state(api, iid, states, seconds):
    def poll():
        i = api.call("GET", f"/api/v1/instances/{iid}")
        return i if i["state"] in states else None
    return deadline_wait(" or ".join(states), poll, seconds)


def container_of(iid):
    found = engine("GET", "/containers/json?" + urllib.parse.urlencode(
        {"filters": json.dumps({"label": [f"gpucloud.instance={iid}"]})}))
    return found[0]["Id"]


def write_config(path, driver_root):
    offer_names = json.dumps([GPU_NAME])
    text = f"""
listen = "{API}"
data_dir = "{WORK}/data"
public_host = "127.0.0.1"
registration = "open"

[[zones]]
name = "zone-a"
region = "device"

[[hosts]]
name = "gpu-1"
zone = "zone-a"
engine = "unix://{ENGINE_SOCK}"
cpu = 8
memory_gib = 32
port_range = "30000-30099"

[[images]]
name = "device-slim"
engine_image = "gpucloud/device-slim:1"
description = "busybox, glibc and cuda_check (scripts/device/instance-gpu.sh)"
os = "busybox"

[[offers]]
gpu_model = "H200"
nvml_names = {offer_names}
cpu_per_gpu = 4
memory_gib_per_gpu = 16
price_per_gpu_hour = 1000
price_per_gpu_week = 140000
price_per_gpu_month = 500000

[no_gpu_offer]
cpu = 1
memory_gib = 2
price_per_hour = 10

[monitoring]
sample_interval = "2s"

[agent]
gpu_injection = "builtin"
"""
    if driver_root:
        text += f'nvidia_driver_root = "{driver_root}"\n'
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-pid", type=int, required=True)
    ap.add_argument("--pid-file", required=True)
    args = ap.parse_args()

    # 1. The engine.
    info = deadline_wait("the engine", lambda: engine("GET", "/info"), 60)
    if not check("engine started", info, info and f"{info.get('ServerVersion')} storage {info.get('Driver')} "
                                              f"cgroup v{info.get('CgroupVersion')}"):
        os.system(f"tail -30 {WORK}/dockerd.log")
        return
    with open(os.path.join(WORK, "pack/image/device-slim.tar"), "rb") as f:
        q = urllib.parse.urlencode({"fromSrc": "-", "repo": "gpucloud/device-slim", "tag": "1"})
        engine("POST", "/images/create?" + q, body=f, headers={"Content-Type": "application/x-tar"}, timeout=300)
    check("slim image imported", engine("GET", "/images/gpucloud/device-slim:1/json"))

    # 2. gpucloudd: NVML from the machine's driver, built-in injection.
    driver_root = "/usr/local/nvidia" if os.path.isdir("/usr/local/nvidia/lib64") else ""
    config = os.path.join(WORK, "gpucloud.toml")
    write_config(config, driver_root)
    log = open(os.path.join(WORK, "gpucloudd.log"), "w")
    env = dict(os.environ, LD_LIBRARY_PATH=LIB)
    daemon = subprocess.Popen([os.path.join(WORK, "pack/bin/gpucloudd"), "--config", config], stdout=log,
                              stderr=subprocess.STDOUT, env=env)
    with open(args.pid_file, "w") as f:
        f.write(str(daemon.pid))
    try:
        run_checks(daemon)
    finally:
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()


def run_checks(daemon):
    up = deadline_wait("gpucloudd", lambda: daemon.poll() is None and Api().call("GET", "/healthz"), 60)
    if not check("gpucloudd started", up):
        os.system(f"tail -40 {WORK}/gpucloudd.log")
        return
    admin = Api(Api().call("POST", "/api/v1/auth/login", {
        "username": "admin", "password": open(os.path.join(WORK, "data/admin-password")).read().strip()})["token"])
    hosts = admin.call("GET", "/api/v1/admin/hosts")
    host = (hosts.get("items") or [{}])[0]
    inj = host.get("gpu_injection") or {}
    check("host gpu_injection is builtin", (inj.get("mode") if isinstance(inj, dict) else inj) == "builtin",
          json.dumps(inj))
    print(f"  host: {json.dumps({k: host.get(k) for k in ('name', 'state', 'gpus', 'lxcfs')})[:600]}")

    Api().call("POST", "/api/v1/auth/register", {"username": "gpuuser", "password": "gpu-check-pass-1"})
    user = Api(Api().call("POST", "/api/v1/auth/login", {"username": "gpuuser", "password": "gpu-check-pass-1"})["token"])
    admin.call("POST", "/api/v1/admin/users/gpuuser/credit", {"amount": 1000000, "note": "device check"},
               idempotency=True)
    images = user.call("GET", "/api/v1/images")["items"]
    slim = [i for i in images if i.get("name") == "device-slim"]
    if not check("slim image in the image market", slim, json.dumps([i.get("name") for i in images])):
        return

    # A no-GPU instance first: the engine, the network and the firewall work here at all, and
    # it gets no NVIDIA node.
    plain = user.call("POST", "/api/v1/instances", {"name": "no-gpu", "zone": "zone-a", "gpu_count": 0,
                                                    "image": slim[0]["id"]}, idempotency=True)
    up = wait_state(user, plain["id"], ("running", "error"), 120)
    if check("no-GPU instance running", up and up["state"] == "running", up and f"{up['state']} {up.get('state_reason')}"):
        cid = container_of(plain["id"])
        code, out = exec_in(cid, ["sh", "-c", "ls /dev | grep -ci nvidia; nproc; free -m | sed -n 2p"])
        lines = out.split()
        check("no NVIDIA node in a no-GPU instance", code == 0 and lines[:1] == ["0"], out.strip().replace("\n", " | "))
    else:
        os.system(f"tail -30 {WORK}/gpucloudd.log")
    user.call("POST", f"/api/v1/instances/{plain['id']}/stop", expect=(202, 409))
    wait_state(user, plain["id"], ("stopped", "error"), 60)
    user.call("DELETE", f"/api/v1/instances/{plain['id']}", expect=(202, 409))

    market = user.call("GET", "/api/v1/market")
    h200 = [m for m in market.get("items", []) if m.get("gpu_model") == "H200"]
    check("market lists the GPU from NVML", h200 and h200[0].get("gpus_total", 0) >= 1 and not h200[0].get("simulated"),
          json.dumps(h200[:1]))
    if not h200 or h200[0].get("gpus_total", 0) < 1:
        return
    total = h200[0]["gpus_total"]

    t0 = time.monotonic()
    inst = user.call("POST", "/api/v1/instances", {"name": "gpu-check", "zone": "zone-a", "gpu_model": "H200",
                                                   "gpu_count": 1, "image": slim[0]["id"]}, idempotency=True)
    iid = inst["id"]
    running = wait_state(user, iid, ("running", "error"), 120)
    if not check("instance with one GPU running", running and running["state"] == "running",
                 running and f"{running['state']} {running.get('state_reason')} in {time.monotonic() - t0:.1f} s"):
        os.system(f"tail -40 {WORK}/gpucloudd.log")
        return
    uuids = [g["uuid"] for g in running.get("gpus", [])]
    cid = container_of(iid)
    spec = engine("GET", f"/containers/{cid}/json")
    devices = [d["PathInContainer"] for d in (spec["HostConfig"].get("Devices") or [])]
    print(f"  devices: {devices}")
    print(f"  mounts: {[m['Destination'] for m in spec.get('Mounts', []) if 'nvidia' in m['Source'] or 'cuda' in m['Source']]}")
    env = [e for e in spec["Config"]["Env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
    check("NVIDIA_VISIBLE_DEVICES names its GPU", env == ["NVIDIA_VISIBLE_DEVICES=" + ",".join(uuids)], str(env))

    code, out = exec_in(cid, ["nvidia-smi", "-L"])
    listed = re.findall(r"UUID: (GPU-[0-9a-fA-F-]+)", out)
    check("nvidia-smi -L inside lists exactly its GPUs", code == 0 and sorted(listed) == sorted(uuids),
          out.strip().replace("\n", " | ")[:400])
    code, out = exec_in(cid, ["sh", "-c", "ls /dev | grep -i nvidia | tr '\\n' ' '"])
    print(f"  /dev inside: {out.strip()}")

    # The CUDA program: a vector add checked on the host, then 1 GiB held and the GPU kept busy
    # while the platform's metrics must see it.
    cuda = {}

    def run_cuda():
        cuda["code"], cuda["out"] = exec_in(cid, ["/usr/local/bin/cuda_check", "30", "1024"], timeout=180)

    worker = threading.Thread(target=run_cuda)
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 5))
    worker.start()

    def loaded():
        m = user.call("GET", f"/api/v1/instances/{iid}/metrics?" + urllib.parse.urlencode({"since": since}))
        util = max((p[1] for s in m["series"] if s["name"] == "gpu_util_percent" for p in s["points"]), default=0)
        mem = max((p[1] for s in m["series"] if s["name"] == "gpu_memory_used_bytes" for p in s["points"]), default=0)
        return (util, mem, [s["name"] for s in m["series"]]) if util > 0 and mem >= (1 << 30) else None

    seen = deadline_wait("GPU load in the metrics", loaded, 45, interval=2)
    check("instance GPU metrics see the load (util > 0, memory ≥ 1 GiB)", seen,
          seen and f"util {seen[0]}%, memory {seen[1] / 2**30:.2f} GiB, series {seen[2]}")
    prom = admin.call("GET", "/metrics")
    lines = [l for l in prom.splitlines() if iid in l and "gpu" in l]
    check("/metrics has the instance's GPU series", lines, "; ".join(lines[:4])[:400])
    worker.join(180)
    check("CUDA program inside (vector add, JIT PTX)", cuda.get("code") == 0,
          (cuda.get("out") or "").strip().replace("\n", " | ")[:500])

    user.call("POST", f"/api/v1/instances/{iid}/stop")
    stopped = wait_state(user, iid, ("stopped",), 90)
    check("instance stopped", stopped)
    free = deadline_wait("GPU free in the market", lambda: [m for m in user.call("GET", "/api/v1/market")["items"]
                                                           if m.get("gpu_model") == "H200" and m["gpus_free"] == total],
                         30)
    check("market shows the GPU free again", free)
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True,
                         text=True)
    check("no process left on the GPU", smi.returncode == 0 and not smi.stdout.strip(), smi.stdout.strip()[:200])
    user.call("DELETE", f"/api/v1/instances/{iid}")
    def released():
        i = user.call("GET", f"/api/v1/instances/{iid}", expect=(200, 404))
        return "404" if not isinstance(i, dict) or i.get("state") == "released" else None

    gone = deadline_wait("released", released, 60)
    check("instance released", gone is not None)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - a crash is a failed check, with its reason
        check("no unexpected error", False, f"{type(e).__name__}: {e}")
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed", flush=True)
    sys.exit(0 if results and all(results) else 1)

#!/usr/bin/env python3
"""Create -> running with one GPU: built-in GPU injection vs none, in the same run (issue 25).

Two daemons on the same engine, each with one host of 8 simulated RTX 4090:
  builtin: [agent] gpu_injection = "builtin" with a fake driver tree (libcuda.so.<ver> and
           friends, bin/nvidia-smi) and a fake /dev (nvidia0..7, nvidiactl, nvidia-uvm,
           nvidia-uvm-tools, nvidia-caps/nvidia-cap1: character devices 1:3) in a temp dir,
           so each 1-GPU instance gets its node, the control nodes and ~12 read-only binds;
  none:    no driver tree: simulated GPUs are bookkeeping only (today's path).
Creates alternate between the two (one alive at a time), N (20) each after one untimed
warm-up each; create -> running is from just before POST /api/v1/instances until GET
/api/v1/instances/NAME (polled every 20 ms) says "running". Target: builtin p50 - none p50
<= +20 ms. Prints PASS/FAIL; exits 0 whatever the verdict (2 when it cannot measure).

Needs root (mknod, nftables), dockerd and gpucloud/base:bookworm-2; GPUCLOUD_BIN (default
build/bin/gpucloudd). Stops its daemons by PID and removes what they made.
"""
import argparse
import os
import pathlib
import shutil
import signal
import stat
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import instance_latency as il  # noqa: E402  (its HTTP clients and daemon helpers)

VERSION = "580.159.04"

CONFIG = """\
# Written by bench/gpu_injection.py
registration = "open"
public_host  = "127.0.0.1"

[[zones]]
name   = "zone-a"
region = "local"

[[hosts]]
name       = "{host}"
zone       = "zone-a"
engine     = "unix://{socket}"
cpu        = 16
memory_gib = 32
port_range = "{ports}"
simulated_gpus = [ {{ model = "RTX 4090", memory_gib = 24, count = 8 }} ]

[[offers]]
gpu_model           = "RTX 4090"
cpu_per_gpu         = 1
memory_gib_per_gpu  = 1
price_per_gpu_hour  = 198
price_per_gpu_week  = 26600
price_per_gpu_month = 99800

[billing]
signup_credit = 100000000

[policy]
recycle_days = 0

[agent]
{agent}
"""


def fake_driver_tree(root):
    lib, binary = root / "lib64", root / "bin"
    lib.mkdir(parents=True)
    binary.mkdir()
    for stem, link in (("libcuda", "libcuda.so.1"), ("libnvidia-ml", "libnvidia-ml.so.1"),
                       ("libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1"),
                       ("libnvidia-nvvm", "libnvidia-nvvm.so.4"), ("libcudadebugger", "libcudadebugger.so.1"),
                       ("libnvidia-gpucomp", None)):
        f = f"{stem}.so.{VERSION}"
        (lib / f).write_text(f"fake {f}\n")
        if link:
            os.symlink(f, lib / link)
    smi = binary / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho fake nvidia-smi\n")
    smi.chmod(0o755)


def fake_dev(root, gpus=8):
    (root / "nvidia-caps").mkdir(parents=True)
    names = [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                                    "nvidia-caps/nvidia-cap1"]
    for n in names:
        os.mknod(root / n, 0o666 | stat.S_IFCHR, os.makedev(1, 3))


class Side:
    def __init__(self, label, binary, workdir, socket_path, host, ports, agent):
        self.label = label
        self.dir = workdir / label
        self.dir.mkdir()
        cfg = self.dir / "gpucloud.toml"
        cfg.write_text(CONFIG.format(host=host, socket=socket_path, ports=ports, agent=agent))
        self.proc, self.port, self.installation = il.start_daemon(binary, self.dir, cfg)
        api = il.api_client(self.port)
        creds = {"username": "gpu-bench", "password": "gpu-bench-password-1"}
        api.json("POST", "/api/v1/auth/register", creds, expect=(201,))
        token = api.json("POST", "/api/v1/auth/login", creds)["token"]
        api.close()
        self.api = il.api_client(self.port, token)
        self.alive = set()

    def run(self, name, poll_s, timeout_s):
        t0 = il.now()
        self.api.json("POST", "/api/v1/instances", {"name": name, "gpu_model": "RTX 4090", "gpu_count": 1},
                      expect=(201, 202))
        self.alive.add(name)
        deadline = t0 + timeout_s
        while True:
            inst = self.api.json("GET", f"/api/v1/instances/{name}")
            if inst.get("state") == "running":
                t = il.now() - t0
                break
            if inst.get("state") in ("failed", "error", "released", "stopped"):
                raise il.BenchError(f"{self.label} {name} went {inst.get('state')}: {inst.get('state_reason')}")
            if il.now() > deadline:
                raise il.BenchError(f"{self.label} {name} not running after {timeout_s:.0f} s")
            time.sleep(poll_s)
        self.release(name, timeout_s)
        return t

    def release(self, name, timeout_s):
        self.api.json("DELETE", f"/api/v1/instances/{name}", expect=(200, 202, 204, 404))
        deadline = il.now() + timeout_s
        while il.now() < deadline:
            status, raw = self.api.request("GET", f"/api/v1/instances/{name}")
            if status == 404 or (status == 200 and il.json.loads(raw).get("state") == "released"):
                self.alive.discard(name)
                return
            time.sleep(0.05)

    def close(self, engine):
        for name in list(self.alive):
            try:
                self.release(name, 60)
            except (il.BenchError, OSError):
                pass
        il.stop_daemon(self.proc)
        il.remove_installation_leftovers(engine, self.installation, None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=int(os.environ.get("BENCH_INSTANCES", "20")))
    ap.add_argument("--poll-ms", type=float, default=20.0)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    socket_path = "/var/run/docker.sock"
    binary = os.environ.get("GPUCLOUD_BIN") or str(il.ROOT / "build" / "bin" / "gpucloudd")
    if not os.access(binary, os.X_OK):
        print(f"gpu_injection: no daemon at {binary} (build it, or set GPUCLOUD_BIN)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("gpu_injection: needs root (mknod, nftables)", file=sys.stderr)
        return 2

    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)

    engine = il.engine_client(socket_path)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="gpucloud-gpu-injection-"))
    sides = []
    rc = 0
    try:
        fake_driver_tree(workdir / "driver")
        fake_dev(workdir / "dev")
        builtin = Side("builtin", binary, workdir, socket_path, "bench-builtin", "35000-35099",
                       f'gpu_injection = "builtin"\nnvidia_driver_root = "{workdir / "driver"}"\n'
                       f'dev_root = "{workdir / "dev"}"')
        sides.append(builtin)
        none = Side("none", binary, workdir, socket_path, "bench-none", "35100-35199", 'gpu_injection = "auto"')
        sides.append(none)
        for side, want in ((builtin, "builtin"), (none, "none")):
            admin = il.api_client(side.port)
            tok = admin.json("POST", "/api/v1/auth/login",
                             {"username": "admin", "password": os.environ.get("GPUCLOUD_ADMIN_PASSWORD",
                                                                              "bench-admin-password-0")})["token"]
            admin.close()
            hosts = il.api_client(side.port, tok).json("GET", "/api/v1/admin/hosts")
            items = hosts.get("items", hosts) if isinstance(hosts, dict) else hosts
            mode = (items[0].get("gpu_injection") or {}).get("mode")
            print(f"{side.label}: daemon 127.0.0.1:{side.port}, gpu_injection {items[0].get('gpu_injection')}")
            if mode != want:
                raise il.BenchError(f"{side.label}: gpu_injection is {mode}, not {want}")
        times = {"builtin": [], "none": []}
        for i in range(args.count + 1):
            order = (builtin, none) if i % 2 == 0 else (none, builtin)
            for side in order:
                t = side.run(f"g{side.label[0]}{i}", args.poll_ms / 1000, args.timeout)
                if i > 0:  # the first of each is the warm-up
                    times[side.label].append(t)
        p50 = {k: il.percentile(v, 50) for k, v in times.items()}
        p90 = {k: il.percentile(v, 90) for k, v in times.items()}
        print(f"\ncreate -> running, 1 GPU, {args.count} each (ms):")
        for k in ("none", "builtin"):
            print(f"  {k:8s} p50 {p50[k] * 1000:6.0f}  p90 {p90[k] * 1000:6.0f}  "
                  f"min {min(times[k]) * 1000:6.0f}  max {max(times[k]) * 1000:6.0f}")
        diff = (p50["builtin"] - p50["none"]) * 1000
        print(f"  builtin - none at p50: {diff:+.0f} ms (target <= +20 ms): {'PASS' if diff <= 20 else 'FAIL'}")
    except (il.BenchError, OSError) as e:
        print(f"gpu_injection: {e}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:
        rc = 2
    finally:
        for side in sides:
            side.close(engine)
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

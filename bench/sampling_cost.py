#!/usr/bin/env python3
"""Monitoring's sampling cost with N (100) running instances (python3 stdlib only).

Method: one gpucloudd (GPUCLOUD_BIN, default build/bin/gpucloudd) on a temporary data dir runs
N no-GPU instances (real containers on the Docker Engine). Then, from /proc:
  (a) with [monitoring] sample_interval = 5s (the default), over --window seconds (60): the CPU
      time of the agent's sampling thread ("gpucloud-sample": the cgroup and NVML reads of one
      round per host), and of the whole daemon (which adds asking the runtime for the
      targets, the report's trip to the control plane, and writing the rows: ingest);
  (b) the peer, in the same run: the same daemon restarted on the same store with
      sample_interval = 300s (the largest allowed; no round falls in the window), over the same
      window: the daemon's CPU without sampling.
The sampling cost is (a)'s thread alone (the agent's part, the issue's target: < 2 % of one
core), and (a) − (b) for the whole daemon (agent + control plane). CPU % is of one core:
(utime + stime) / window. Everything is removed at the end: instances, the daemon's network
and nftables table (as bench/instance_latency.py does), the temporary directory.
Needs root, dockerd and the image gpucloud/base:bookworm-2.
"""
import argparse
import os
import pathlib
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import instance_latency as il  # noqa: E402  (the daemon and engine helpers)

CONFIG_TOML = """\
# Written by bench/sampling_cost.py
registration = "open"
public_host  = "127.0.0.1"

[[zones]]
name   = "zone-a"
region = "local"

[[hosts]]
name       = "node-1"
zone       = "zone-a"
engine     = "unix://{socket}"
cpu        = {cpu}
memory_gib = {memory}
port_range = "35000-35999"
simulated_gpus = [ {{ model = "RTX 4090", memory_gib = 24, count = 1 }} ]

[[offers]]
gpu_model           = "RTX 4090"
cpu_per_gpu         = 1
memory_gib_per_gpu  = 1
price_per_gpu_hour  = 198

[no_gpu_offer]
cpu            = 1
memory_gib     = 1
price_per_hour = 10

[quotas]
instances = {count}

[billing]
signup_credit = 100000000

[monitoring]
sample_interval = "{interval}"
"""

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(stat_path):
    """utime + stime of a /proc stat file (fields 14 and 15, after the parenthesised comm)."""
    text = pathlib.Path(stat_path).read_text()
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def sampling_threads(pid):
    out = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == "gpucloud-sample":
                out.append(task / "stat")
        except OSError:
            pass
    return out


def measure(pid, window):
    """CPU % of one core over `window` s: (whole process, sampling thread or None)."""
    threads = sampling_threads(pid)
    p0 = cpu_ticks(f"/proc/{pid}/stat")
    t0 = sum(cpu_ticks(t) for t in threads)
    start = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - start
    # A thread named after the first read (the pool names it at its first round) counts too.
    threads_after = sampling_threads(pid)
    p1 = cpu_ticks(f"/proc/{pid}/stat")
    t1 = sum(cpu_ticks(t) for t in threads_after)
    to_pct = lambda ticks: 100.0 * ticks / CLK_TCK / elapsed  # noqa: E731
    return to_pct(p1 - p0), (to_pct(t1 - t0) if threads_after else None)


def wait_all_running(api, names, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = api.json("GET", "/api/v1/instances?limit=1000")
        states = {i["name"]: i["state"] for i in listed.get("items", [])}
        bad = [n for n in names if states.get(n) in ("error", "released")]
        if bad:
            raise il.BenchError(f"instances went bad: {bad[:5]}")
        if all(states.get(n) == "running" for n in names):
            return
        time.sleep(0.5)
    raise il.BenchError(f"not all {len(names)} instances running after {timeout:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100, help="running instances (default 100)")
    ap.add_argument("--window", type=float, default=60.0, help="seconds measured per side (default 60)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (daemon logs)")
    args = ap.parse_args()
    dh = os.environ.get("DOCKER_HOST", "")
    socket_path = dh[len("unix://"):] if dh.startswith("unix://") else "/var/run/docker.sock"
    binary = os.environ.get("GPUCLOUD_BIN") or str(il.ROOT / "build" / "bin" / "gpucloudd")
    if not os.access(binary, os.X_OK):
        print(f"sampling_cost: no daemon at {binary} (build it, or set GPUCLOUD_BIN)", file=sys.stderr)
        return 2

    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)

    engine = il.engine_client(socket_path)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="gpucloud-sampling-cost-"))
    config_path = workdir / "gpucloud.toml"
    fill = dict(socket=socket_path, cpu=max(args.count + 8, 16), memory=args.count + 16, count=args.count)
    proc = installation = None
    names = [f"s{i:03d}" for i in range(args.count)]
    try:
        route_localnet_before = pathlib.Path(il.ROUTE_LOCALNET).read_text().strip()
    except OSError:
        route_localnet_before = None
    rc = 0
    try:
        config_path.write_text(CONFIG_TOML.format(interval="5s", **fill))
        proc, port, installation = il.start_daemon(binary, workdir, config_path)
        api = il.api_client(port)
        creds = {"username": "sampling-bench", "password": "sampling-bench-password-1"}
        api.json("POST", "/api/v1/auth/register", creds, expect=(201,))
        token = api.json("POST", "/api/v1/auth/login", creds)["token"]
        api.close()
        api = il.api_client(port, token)
        t0 = time.monotonic()
        for name in names:
            api.json("POST", "/api/v1/instances", {"name": name, "gpu_count": 0}, expect=(202,))
        wait_all_running(api, names, timeout=60 + 5 * args.count)
        made_s = time.monotonic() - t0
        time.sleep(12)  # two rounds, so every container's cgroup is resolved before the window
        load = pathlib.Path("/proc/loadavg").read_text().split()[:3]
        sampled_proc, sampled_thread = measure(proc.pid, args.window)
        # What the rounds covered: the instances /metrics has a reading for.
        _, metrics = api.request("GET", "/metrics")
        sampled = len(re.findall(rb"^gpucloud_instance_memory_used_bytes\{", metrics, re.M))

        # The peer: the same daemon and store, sampling every 300 s (none in the window).
        il.stop_daemon(proc)
        config_path.write_text(CONFIG_TOML.format(interval="300s", **fill))
        proc, port, _ = il.start_daemon(binary, workdir, config_path)
        api = il.api_client(port, token)
        wait_all_running(api, names, timeout=120)
        time.sleep(12)
        peer_proc, _ = measure(proc.pid, args.window)

        print(f"== Sampling cost: {args.count} running instances, {args.window:.0f} s per side ==")
        print(f"daemon:  {binary}")
        print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(load)} (made {args.count} in {made_s:.0f} s)")
        print(f"sampled: {sampled} instances had a reading in /metrics after the window")
        print(f"{'':34} {'CPU % of one core':>18}")
        thread = f"{sampled_thread:18.2f}" if sampled_thread is not None else f"{'(no thread named)':>18}"
        print(f"{'sampling thread (5 s rounds)':34} {thread}")
        print(f"{'whole daemon, sampling every 5 s':34} {sampled_proc:18.2f}")
        print(f"{'whole daemon, sampling every 300 s':34} {peer_proc:18.2f}")
        print(f"{'sampling, whole daemon (diff)':34} {sampled_proc - peer_proc:18.2f}")
        target = sampled_thread if sampled_thread is not None else sampled_proc - peer_proc
        print(f"target: agent sampling < 2 % of one core: {'PASS' if target < 2.0 else 'FAIL'} ({target:.2f} %)")
    except il.BenchError as e:
        print(f"sampling_cost: {e}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:
        print("sampling_cost: interrupted; cleaning up", file=sys.stderr)
        rc = 130
    finally:
        if proc is not None:
            try:
                api = il.api_client(port, token)
                for name in names:
                    api.request("DELETE", f"/api/v1/instances/{name}")
                deadline = time.monotonic() + 60 + args.count
                while time.monotonic() < deadline:
                    listed = api.json("GET", "/api/v1/instances?limit=1000")
                    if all(i["state"] == "released" for i in listed.get("items", [])):
                        break
                    time.sleep(1)
            except Exception as e:  # noqa: BLE001 - cleanup goes on whatever failed
                print(f"sampling_cost: release: {e}", file=sys.stderr)
            il.stop_daemon(proc)
        il.remove_installation_leftovers(engine, installation, route_localnet_before)
        if args.keep:
            print(f"sampling_cost: kept {workdir}", file=sys.stderr)
        else:
            import shutil
            shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

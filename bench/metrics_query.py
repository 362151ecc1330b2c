#!/usr/bin/env python3
"""Metrics query latency: 7 days of one instance at 1-minute steps (python3 stdlib only).

Method: one gpucloudd (GPUCLOUD_BIN, default build/bin/gpucloudd) on a temporary data dir; one
no-GPU instance is created (a real container), then the daemon is stopped and 7 days of
1-minute rows (its own row and one GPU row: 2 x 10,080, what a week of sampling leaves after
downsampling) are written straight into its store, ending at the current minute. The daemon
is started again and `GET /api/v1/instances/{id}/metrics?since=<7 days ago>&step=60` (one
keep-alive connection, owner's token) is timed --count (50) times after 3 untimed ones: p50,
p99, max. The peer, in the same run: the same rows read with Python's sqlite3 straight from the
store file (`SELECT t, gpu, util, memory_bytes ... ORDER BY gpu, t`), the floor of any answer.
Needs root, dockerd and the image gpucloud/base:bookworm-2 (the instance is a container).
"""
import argparse
import json
import os
import pathlib
import sqlite3
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import instance_latency as il  # noqa: E402
import sampling_cost as sc  # noqa: E402  (its config)


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=50, help="timed queries per side (default 50)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    dh = os.environ.get("DOCKER_HOST", "")
    socket_path = dh[len("unix://"):] if dh.startswith("unix://") else "/var/run/docker.sock"
    binary = os.environ.get("GPUCLOUD_BIN") or str(il.ROOT / "build" / "bin" / "gpucloudd")
    engine = il.engine_client(socket_path)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="gpucloud-metrics-query-"))
    config_path = workdir / "gpucloud.toml"
    config_path.write_text(sc.CONFIG_TOML.format(socket=socket_path, cpu=16, memory=32, count=10, interval="300s"))
    proc = installation = None
    rc = 0
    try:
        route_localnet_before = pathlib.Path(il.ROUTE_LOCALNET).read_text().strip()
    except OSError:
        route_localnet_before = None
    try:
        proc, port, installation = il.start_daemon(binary, workdir, config_path)
        api = il.api_client(port)
        creds = {"username": "metrics-bench", "password": "metrics-bench-password-1"}
        api.json("POST", "/api/v1/auth/register", creds, expect=(201,))
        token = api.json("POST", "/api/v1/auth/login", creds)["token"]
        api = il.api_client(port, token)
        iid = api.json("POST", "/api/v1/instances", {"name": "week", "gpu_count": 0}, expect=(202,))["id"]
        sc.wait_all_running(api, ["week"], timeout=120)
        il.stop_daemon(proc)
        proc = None

        db_path = workdir / "data" / "gpucloud.db"
        end = int(time.time()) // 60 * 60
        start = end - 7 * 86400 + 60
        db = sqlite3.connect(db_path)
        rows = [(iid, 60, t, gpu, float((t // 60) % 100), (t // 60) * 1000)
                for t in range(start, end + 1, 60) for gpu in (-1, 0)]
        db.executemany("INSERT OR REPLACE INTO instance_samples (instance_id, resolution, t, gpu, util, memory_bytes) "
                       "VALUES (?, ?, ?, ?, ?, ?)", rows)
        db.commit()
        db.close()

        proc, port, _ = il.start_daemon(binary, workdir, config_path)
        api = il.api_client(port, token)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))
        path = f"/api/v1/instances/{iid}/metrics?since={urllib.parse.quote(since)}&step=60"
        points = 0
        api_ms = []
        for i in range(3 + args.count):
            t = time.perf_counter()
            doc = api.json("GET", path)
            if i >= 3:
                api_ms.append((time.perf_counter() - t) * 1000)
            points = sum(len(s.get("points", [])) for s in doc.get("series", []))
        peer_ms = []
        peer = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        for i in range(3 + args.count):
            t = time.perf_counter()
            got = peer.execute("SELECT t, gpu, util, memory_bytes FROM instance_samples WHERE instance_id = ? "
                               "AND resolution = 60 AND t >= ? AND t < ? ORDER BY gpu, t",
                               (iid, start, end + 60)).fetchall()
            if i >= 3:
                peer_ms.append((time.perf_counter() - t) * 1000)
        peer.close()
        load = pathlib.Path("/proc/loadavg").read_text().split()[:3]
        print(f"== Metrics query: 7 days at 1-minute steps, {len(rows)} rows, {args.count} timed queries ==")
        print(f"daemon:  {binary}; machine: {os.cpu_count()} CPUs, load average {' '.join(load)}")
        print(f"answer:  {points} points in {len(doc.get('series', []))} series, resolution {doc.get('resolution')}")
        print(f"{'':28} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for name, v in (("GET .../metrics (HTTP)", api_ms), ("sqlite3 rows only (peer)", peer_ms)):
            print(f"{name:28} {percentile(v, 50):8.1f} {percentile(v, 99):8.1f} {max(v):8.1f}")
        print(f"ratio p50: {percentile(api_ms, 50) / percentile(peer_ms, 50):.1f}x the peer; rows read by the peer: {len(got)}")
    except il.BenchError as e:
        print(f"metrics_query: {e}", file=sys.stderr)
        rc = 2
    finally:
        if proc is not None:
            try:
                il.api_client(port, token).request("DELETE", "/api/v1/instances/week")
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    _, raw = il.api_client(port, token).request("GET", "/api/v1/instances/week")
                    if json.loads(raw).get("state") == "released":
                        break
                    time.sleep(0.5)
            except Exception as e:  # noqa: BLE001 - cleanup goes on whatever failed
                print(f"metrics_query: release: {e}", file=sys.stderr)
            il.stop_daemon(proc)
        il.remove_installation_leftovers(engine, installation, route_localnet_before)
        if not args.keep:
            import shutil
            shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

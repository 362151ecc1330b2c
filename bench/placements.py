#!/usr/bin/env python3
"""Placements per second through the API on each store (issue 27), python3 stdlib only.

A placement is what `POST /api/v1/instances` does before it answers 202: the price and
affordability check, the scheduler's choice of a host and GPUs, and one transaction that
reserves them, writes the instance, its meters and its event and journals the host's create
command. The container is made afterwards by whichever replica serves the host, so the answer's
rate is the control plane's placement rate, not the engine's.

Cases, in one run, on one host of 56 simulated RTX 4090 (in-process, the machine's dockerd):
  sqlite           one gpucloudd on SQLite;
  postgresql x1    one gpucloudd on a PostgreSQL database;
  postgresql x2    two gpucloudd on one database (same config and data directory; the leader
                   serves the host), the creates alternating between them.
Each case: one warm-up create, then N (48) one-GPU creates from W (8) client threads, each on
its own keep-alive connection; placements/s = N / the wall time from the first request to the
last answer; p50/p99 of the answers' latency. Then every instance is released and the case's
daemons stop (SIGTERM) before the next case starts. It prints one line per case and the
ratios to SQLite; it is a measurement and exits 0 whatever the numbers (2 when it cannot run).

Environment: GPUCLOUD_BIN (default build/bin/gpucloudd), BENCH_PG_URL / BENCH_PG_PASSWORD_FILE
(default: the tests' server, /var/run/gpucloud/postgres.env), BENCH_CREATES (48, at most 63),
BENCH_WORKERS (8). Needs root (published ports), dockerd and gpucloud/base:bookworm-2, psql.
"""
import http.client
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = os.environ.get("GPUCLOUD_BIN", str(ROOT / "build/bin/gpucloudd"))
CREATES = int(os.environ.get("BENCH_CREATES", "48"))  # a host holds at most 64 simulated GPUs
WORKERS = int(os.environ.get("BENCH_WORKERS", "8"))

CONFIG = """\
registration = "open"
public_host  = "127.0.0.1"
[server]
login_failures_allowed = 1000
[[zones]]
name = "zone-a"
[[hosts]]
name       = "node-1"
zone       = "zone-a"
cpu        = 512
memory_gib = 4096
port_range = "35000-35499"
simulated_gpus = [ {{ model = "RTX 4090", memory_gib = 24, count = {gpus} }} ]
[[offers]]
gpu_model           = "RTX 4090"
cpu_per_gpu         = 1
memory_gib_per_gpu  = 1
price_per_gpu_hour  = 198
[billing]
signup_credit = 100000000
[policy]
recycle_days = 0
[quotas]
gpus = 1000
instances = 1000
[agent]
# Placements only: 49 instances' 30 GiB system disks would not fit this VM's disk pool.
system_disk_filesystems = false
{store}
"""


def pg_target():
    url, password_file = os.environ.get("BENCH_PG_URL"), os.environ.get("BENCH_PG_PASSWORD_FILE")
    env_file = pathlib.Path("/var/run/gpucloud/postgres.env")
    if not url and env_file.is_file():
        values = dict(line.split("=", 1) for line in env_file.read_text().split() if "=" in line)
        url = values.get("GPUCLOUD_TEST_POSTGRES_URL")
        password_file = password_file or values.get("GPUCLOUD_TEST_POSTGRES_PASSWORD_FILE")
    return url, password_file


def psql(url, password_file, sql):
    env = dict(os.environ, PGPASSWORD=pathlib.Path(password_file).read_text().strip())
    subprocess.run(["psql", "-q", url, "-c", sql], env=env, check=True, stdout=subprocess.DEVNULL)


class Api:
    def __init__(self, port, token=None):
        self.port, self.token, self.conn = port, token, None

    def call(self, method, path, body=None):
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        data = None if body is None else json.dumps(body).encode()
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                res = self.conn.getresponse()
                raw = res.read()
                return res.status, (json.loads(raw) if raw else {})
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


class Case:
    def __init__(self, name, store, replicas, work):
        self.name, self.replicas = name, replicas
        self.dir = work / name.replace(" ", "-")
        self.dir.mkdir()
        (self.dir / "gpucloud.toml").write_text(CONFIG.format(gpus=min(64, CREATES + 8), store=store))
        self.procs, self.ports = [], []

    def start(self):
        for i in range(self.replicas):
            log = open(self.dir / f"log-{i}", "w")
            env = dict(os.environ, GPUCLOUD_ADMIN_PASSWORD="admin-password-1")
            proc = subprocess.Popen([BIN, "--config", str(self.dir / "gpucloud.toml"), "--listen", "127.0.0.1:0",
                                     "--data-dir", str(self.dir / "data")], stdout=log, stderr=subprocess.STDOUT, env=env)
            self.procs.append(proc)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                m = re.search(r"gpucloudd listening on 127\.0\.0\.1:(\d+)", (self.dir / f"log-{i}").read_text())
                if m:
                    self.ports.append(int(m.group(1)))
                    break
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
            else:
                pass
            if len(self.ports) != i + 1:
                raise RuntimeError(f"{self.name}: gpucloudd {i} did not start:\n" + (self.dir / f"log-{i}").read_text()[-2000:])

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def login(port, user):
    api = Api(port)
    creds = {"username": user, "password": "password-123"}
    api.call("POST", "/api/v1/auth/register", creds)
    status, body = api.call("POST", "/api/v1/auth/login", creds)
    if status != 200:
        raise RuntimeError(f"login: {status} {body}")
    return body["token"]


def wait_released(api, names, limit=300):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        _, body = api.call("GET", "/api/v1/instances?limit=500")
        live = [i for i in body.get("items", []) if i["name"] in names and i["state"] != "released"]
        if not live:
            return True
        time.sleep(0.5)
    return False


def run_case(case):
    case.start()
    try:
        token = login(case.ports[0], "placer")
        apis = [Api(p, token) for p in case.ports]
        deadline = time.monotonic() + 60  # the host registers its GPUs as its agent starts
        while True:
            status, body = apis[0].call("POST", "/api/v1/instances", {"name": "warm-up", "gpu_model": "RTX 4090", "gpu_count": 1})
            if status != 409 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if status != 202:
            raise RuntimeError(f"{case.name}: warm-up create answered {status} {body}")
        latencies, failures, lock = [], [], threading.Lock()
        names = [f"p-{i}" for i in range(CREATES)]

        def worker(w):
            clients = [Api(p, token) for p in case.ports]
            for i in range(w, CREATES, WORKERS):
                api = clients[i % len(clients)]  # alternating between replicas
                t0 = time.monotonic()
                status, body = api.call("POST", "/api/v1/instances", {"name": names[i], "gpu_model": "RTX 4090", "gpu_count": 1})
                dt = time.monotonic() - t0
                with lock:
                    (latencies if status == 202 else failures).append(dt if status == 202 else (status, body))

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(WORKERS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        latencies.sort()
        p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)] if latencies else 0
        result = {"case": case.name, "placed": len(latencies), "failed": len(failures), "wall": wall,
                  "rate": len(latencies) / wall if wall else 0,
                  "p50": statistics.median(latencies) * 1000 if latencies else 0, "p99": p99 * 1000}
        if failures:
            result["first_failure"] = failures[0]
        for n in names + ["warm-up"]:
            apis[0].call("DELETE", f"/api/v1/instances/{n}")
        result["released"] = wait_released(apis[0], set(names + ["warm-up"]))
        return result
    finally:
        case.stop()


def main():
    if not pathlib.Path(BIN).is_file():
        print(f"placements: no gpucloudd at {BIN}")
        return 2
    url, password_file = pg_target()
    if not url or not password_file:
        print("placements: no PostgreSQL (BENCH_PG_URL, BENCH_PG_PASSWORD_FILE)")
        return 2
    work = pathlib.Path(tempfile.mkdtemp(prefix="gpucloud-placements."))
    databases = []
    try:
        cases = [Case("sqlite", "", 1, work)]
        for name, replicas in (("postgresql x1", 1), ("postgresql x2", 2)):
            db = f"placements_{os.getpid()}_{replicas}"
            psql(url, password_file, f"CREATE DATABASE {db}")
            databases.append(db)
            store = f'[store]\nurl = "{url.rsplit("/", 1)[0]}/{db}"\npassword_file = "{password_file}"\n'
            cases.append(Case(name, store, replicas, work))
        print(f"placements — {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} CPUs, "
              f"{CREATES} one-GPU creates from {WORKERS} clients per case, {BIN}")
        results = [run_case(c) for c in cases]
        base = results[0]["rate"] or 1
        for r in results:
            extra = f"   first failure {r['first_failure']}" if r["failed"] else ""
            print(f"{r['case']:16s} {r['rate']:8.1f} placements/s ({r['rate'] / base:4.2f}x sqlite)   "
                  f"p50 {r['p50']:7.1f} ms   p99 {r['p99']:7.1f} ms   placed {r['placed']}   failed {r['failed']}   "
                  f"released {'all' if r['released'] else 'NOT ALL'}{extra}")
        return 0
    finally:
        for db in databases:
            try:
                psql(url, password_file, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

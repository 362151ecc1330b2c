#!/usr/bin/env python3
"""Open event streams benchmark for gpucloudd (python3 stdlib only).

Opens N (1,000) Server-Sent Events streams, `GET /api/v1/events/stream`, on raw sockets, all
for one user: each sends the request with the user's bearer token, reads the response head
(200, text/event-stream, chunked) and the ": connected" comment, and then stays open.
Measures the daemon's VmRSS and thread count (/proc/PID/status) before and after, and its
CPU use while the streams sit idle (/proc/PID/stat, over --idle-seconds). Then one event:
the user creates a no-GPU instance and releases it, and a sample of the streams (50, evenly
spread) is read as it happens; the script times each instance.* event from its own `time`
(when the server recorded it) and from the moment the POST was sent, to when each sampled
stream received it. Finally it checks that every stream, sampled or not, got the last
event (instance.released).

Targets: threads do not grow (flat); <= 64 KiB per stream (as for idle connections);
the event reaches every sampled stream. It prints PASS/FAIL and exits 0 whatever the
verdicts (2 when it cannot measure).

It starts its own daemon (GPUCLOUD_BIN, default build/bin/gpucloudd under the repository
root) on a temporary data dir and a config with one Docker host (8 CPU, 32 GiB, host ports
35000-35999) and a no-GPU offer (1 CPU, 1 GiB), stops it by PID (SIGTERM) and removes what it
made: the instance, the daemon's Docker network, nftables table and DOCKER-USER rule, and
the temporary dir. Needs root (the daemon publishes ports with nftables), dockerd and the
image gpucloud/base:bookworm-2. Raises its file-descriptor limit to 4,096 (the daemon
inherits it).
"""
import argparse
import datetime
import json
import os
import pathlib
import resource
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from instance_latency import (  # noqa: E402  (bench/ is not a package)
    ENGINE_API, ROOT, ROUTE_LOCALNET, BenchError, api_client, engine_client, percentile,
    remove_installation_leftovers, start_daemon, stop_daemon)

DEFAULT_IMAGE = "gpucloud/base:bookworm-2"
MAX_KIB_PER_STREAM = 64
now = time.monotonic

NO_GPU_CONFIG = """\
# Written by bench/{script}
registration = "open"
public_host  = "127.0.0.1"

[[zones]]
name   = "zone-a"
region = "local"

[[hosts]]
name       = "node-1"
zone       = "zone-a"
engine     = "unix://{socket}"
cpu        = 8
memory_gib = 32
port_range = "35000-35999"

[no_gpu_offer]
cpu            = 1
memory_gib     = 1
price_per_hour = 10

[billing]
signup_credit = 100000000   # billing refuses creates (402) below an hour of the price
"""


# ---- shared with bench/terminal_throughput.py -----------------------------------------------

def raise_fd_limit(wanted):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def proc_status(pid):
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["Threads"])  # KiB, count


def cpu_seconds(pid):
    """User + system CPU seconds of a process (all its threads)."""
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def engine_socket_path(arg):
    if arg:
        return arg
    dh = os.environ.get("DOCKER_HOST", "")
    return dh[len("unix://"):] if dh.startswith("unix://") else "/var/run/docker.sock"


class NoGpuDaemon:
    """A fresh gpucloudd on a temporary data dir with one Docker host and a no-GPU offer, one
    registered user (session token from /auth/login), and the clean-up of all of it."""

    def __init__(self, script, engine_socket, image=DEFAULT_IMAGE, keep=False):
        self.script, self.engine_socket, self.image, self.keep = script, engine_socket, image, keep
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"gpucloud-{script.split('.')[0]}-"))
        self.engine = engine_client(engine_socket)
        self.proc = self.port = self.installation = self.token = self.api = None
        self.alive = set()
        try:
            self.route_localnet_before = pathlib.Path(ROUTE_LOCALNET).read_text().strip()
        except OSError:
            self.route_localnet_before = None

    def start(self, binary):
        status, _ = self.engine.request("GET", f"{ENGINE_API}/images/{self.image}/json")
        if status != 200:
            raise BenchError(f"image {self.image} not present (HTTP {status}); build it first")
        config = self.workdir / "gpucloud.toml"
        config.write_text(NO_GPU_CONFIG.format(script=self.script, socket=self.engine_socket))
        self.proc, self.port, self.installation = start_daemon(binary, self.workdir, config)
        if not self.installation:  # older log format: ask the database
            import sqlite3
            db = sqlite3.connect(f"file:{self.workdir / 'data' / 'gpucloud.db'}?mode=ro", uri=True)
            try:
                row = db.execute("SELECT value FROM meta WHERE key='installation_id'").fetchone()
                self.installation = row[0] if row else None
            finally:
                db.close()
        api = api_client(self.port)
        creds = {"username": "bench-user", "password": "bench-user-password-1"}
        api.json("POST", "/api/v1/auth/register", creds, expect=(201,))
        self.token = api.json("POST", "/api/v1/auth/login", creds)["token"]
        api.close()
        self.api = api_client(self.port, self.token)
        return self

    def create_instance(self, name):
        """POST a no-GPU instance; returns (the POST's answer, the moment just before it)."""
        t0 = now()
        made = self.api.json("POST", "/api/v1/instances", {"name": name, "gpu_count": 0}, expect=(201, 202))
        self.alive.add(name)
        return made, t0

    def wait_running(self, name, timeout=90.0):
        deadline = now() + timeout
        while now() < deadline:
            inst = self.api.json("GET", f"/api/v1/instances/{name}")
            if inst.get("state") == "running":
                return inst
            if inst.get("state") in ("failed", "error", "released", "stopped"):
                raise BenchError(f"instance {name} went {inst.get('state')}: {inst.get('state_reason')}")
            time.sleep(0.05)
        raise BenchError(f"instance {name} not running after {timeout:.0f} s")

    def release(self, name, wait=True, timeout=90.0):
        self.api.json("DELETE", f"/api/v1/instances/{name}", expect=(200, 202, 204, 404))
        deadline = now() + timeout
        while wait and now() < deadline:
            status, raw = self.api.request("GET", f"/api/v1/instances/{name}")
            # A released instance answers with state "released" (older daemons: 404).
            if status == 404 or (status == 200 and json.loads(raw).get("state") == "released"):
                self.alive.discard(name)
                return
            time.sleep(0.05)
        if wait:
            raise BenchError(f"instance {name} still there {timeout:.0f} s after DELETE")

    def container_name(self, instance_id):
        return f"gpucloud-{self.installation}-{instance_id}"

    def close(self, failed=False):
        """Releases what is left, stops the daemon by PID, removes its host leftovers."""
        self.engine.close()
        if self.api is not None:
            self.api.close()
            if self.proc is not None and self.proc.poll() is None:
                for name in list(self.alive):
                    try:
                        self.release(name)
                    except (BenchError, OSError) as e:
                        print(f"{self.script}: could not release {name}: {e}", file=sys.stderr)
                self.api.close()
        if self.proc is not None:
            stop_daemon(self.proc)
        remove_installation_leftovers(self.engine, self.installation, self.route_localnet_before)
        self.engine.close()
        log = self.workdir / "daemon.log"
        if failed and log.exists():
            print("--- daemon log (tail) ---\n" + log.read_text(errors="replace")[-3000:], file=sys.stderr)
        if self.keep:
            print(f"kept {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def binary_path():
    return os.environ.get("GPUCLOUD_BIN") or str(ROOT / "build" / "bin" / "gpucloudd")


# ---- one SSE stream on a raw socket ---------------------------------------------------------

class SseStream:
    """GET /api/v1/events/stream on a raw socket: decodes the chunked body and splits it into
    SSE blocks (comments and events)."""

    def __init__(self, port, token, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall((f"GET /api/v1/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n").encode())
        self.raw = b""      # received, not yet de-chunked
        self.text = b""     # de-chunked SSE text, not yet split into blocks
        self.ended = False  # the last chunk (or EOF) came
        self.head = None
        self.events = []    # (arrival monotonic, arrival wall clock, fields dict)
        self.comments = []

    def fileno(self):
        return self.sock.fileno()

    def _read_head(self):
        while b"\r\n\r\n" not in self.raw:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed before the response headers")
            self.raw += chunk
        head, _, self.raw = self.raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip().lower() for k, _, v in (l.partition(":") for l in lines[1:])}
        if status != 200:
            raise BenchError(f"events/stream: HTTP {status}")
        if not headers.get("content-type", "").startswith("text/event-stream"):
            raise BenchError(f"events/stream: content-type {headers.get('content-type')!r}")
        if headers.get("transfer-encoding") != "chunked":
            raise BenchError(f"events/stream: transfer-encoding {headers.get('transfer-encoding')!r}")
        self.head = headers

    def open(self):
        """Reads the head and the ': connected' comment (blocking)."""
        self._read_head()
        self._dechunk()
        self._split(now(), time.time())
        while not self.comments and not self.events:
            self.receive(blocking=True)
        if self.comments[:1] != ["connected"]:
            raise BenchError(f"events/stream: first block {self.comments[:1] or self.events[:1]!r}, not ': connected'")

    def _dechunk(self):
        while not self.ended:
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                return
            size = int(self.raw[:line_end].split(b";")[0], 16)
            if size == 0:
                self.ended = True
                return
            if len(self.raw) < line_end + 2 + size + 2:
                return
            self.text += self.raw[line_end + 2:line_end + 2 + size]
            self.raw = self.raw[line_end + 2 + size + 2:]

    def _split(self, t_mono, t_wall):
        while b"\n\n" in self.text:
            block, _, self.text = self.text.partition(b"\n\n")
            fields = {}
            for line in block.decode("utf-8", "replace").split("\n"):
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    continue
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                fields[key] = fields[key] + "\n" + value if key in fields else value
            if fields:
                self.events.append((t_mono, t_wall, fields))

    def receive(self, blocking=False):
        """Reads what is there; returns False at EOF."""
        self.sock.setblocking(blocking)
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return True
        t_mono, t_wall = now(), time.time()
        if not data:
            self.ended = True
            return False
        self.raw += data
        self._dechunk()
        self._split(t_mono, t_wall)
        return not self.ended

    def still_open(self):
        self.sock.setblocking(False)
        try:
            return self.sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def close(self):
        self.sock.close()


def event_time(fields):
    """The server's `time` of an SSE event (wall clock, seconds)."""
    import json
    stamp = json.loads(fields["data"])["time"]
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def wait_for_event(streams, event_type, deadline):
    """Reads `streams` (selectors) until each has an event of `event_type` or the deadline."""
    def has(s):
        return any(f.get("event") == event_type for _, _, f in s.events)
    pending = {s for s in streams if not has(s)}
    sel = selectors.DefaultSelector()
    for s in pending:
        sel.register(s, selectors.EVENT_READ)
    while pending and now() < deadline:
        for key, _ in sel.select(timeout=max(0.0, min(1.0, deadline - now()))):
            s = key.fileobj
            alive = s.receive()
            if has(s) or not alive:
                sel.unregister(s)
                pending.discard(s)
    sel.close()
    return [s for s in streams if has(s)]


# ---- the benchmark --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=int(os.environ.get("BENCH_STREAMS", "1000")))
    ap.add_argument("--sample", type=int, default=50, help="streams read live during the event (default 50)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to wait before each memory reading")
    ap.add_argument("--idle-seconds", type=float, default=5.0, help="window for the idle CPU reading (default 5)")
    ap.add_argument("--engine-socket", default=None)
    ap.add_argument("--image", default=DEFAULT_IMAGE)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (daemon log)")
    args = ap.parse_args()
    if args.streams < 1 or not 1 <= args.sample <= args.streams:
        ap.error("need 1 <= --sample <= --streams")

    limit = raise_fd_limit(4096)  # like `ulimit -n 4096`; the daemon started here inherits it
    if limit < args.streams + 64:
        print(f"event_streams: fd limit {limit} is too low for {args.streams} streams", file=sys.stderr)
        return 2
    binary = binary_path()
    if not os.access(binary, os.X_OK):
        print(f"event_streams: no daemon at {binary} (build it, or set GPUCLOUD_BIN)", file=sys.stderr)
        return 2

    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    d = NoGpuDaemon("event_streams.py", engine_socket_path(args.engine_socket), args.image, args.keep)
    streams = []
    rc = 0
    try:
        d.start(binary)
        pid = d.proc.pid
        print(f"== Event streams: {args.streams} open SSE streams, one event sampled on {args.sample} ==")
        print(f"daemon:  {binary} (fresh, pid {pid}, 127.0.0.1:{d.port}); fd limit {limit}")
        print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
        # One stream opened and closed first: the daemon's lazy set-up is not counted.
        warm = SseStream(d.port, d.token)
        warm.open()
        warm.close()
        time.sleep(args.settle)
        rss0, threads0 = proc_status(pid)
        fds0 = fd_count(pid)
        c0, w0 = cpu_seconds(pid), now()
        time.sleep(args.idle_seconds)
        idle_cpu0 = (cpu_seconds(pid) - c0) / (now() - w0)

        t_open = now()
        failures = 0
        for _ in range(args.streams):
            try:
                s = SseStream(d.port, d.token)
                s.open()
                streams.append(s)
            except (OSError, BenchError) as e:
                failures += 1
                if failures == 1:
                    print(f"event_streams: a stream failed: {e}", file=sys.stderr)
        open_s = now() - t_open
        time.sleep(args.settle)
        rss1, threads1 = proc_status(pid)
        fds1 = fd_count(pid)
        c0, w0 = cpu_seconds(pid), now()
        time.sleep(args.idle_seconds)
        idle_cpu1 = (cpu_seconds(pid) - c0) / (now() - w0)
        rss1b, threads1b = proc_status(pid)
        alive = sum(1 for s in streams if s.still_open())

        # One event: create and release a no-GPU instance; a sample of the streams is read live.
        step = max(1, len(streams) // args.sample)
        sample = streams[::step][:args.sample]
        for s in sample:
            s.receive()  # drain (heartbeats)
            s.events.clear()
        name = f"sse-{os.urandom(3).hex()}"
        c_ev0 = cpu_seconds(pid)
        made, t_post = d.create_instance(name)
        got_created = wait_for_event(sample, "instance.created", now() + 30)
        d.wait_running(name)
        got_running = wait_for_event(sample, "instance.running", now() + 30)
        t_delete = now()
        d.release(name, wait=False)
        got_released = wait_for_event(sample, "instance.released", now() + 60)
        c_ev1 = cpu_seconds(pid)
        # Every stream, sampled or not, got the release?
        got_all = wait_for_event(streams, "instance.released", now() + 30)
        d.release(name)  # waits until it is gone
        rss2, threads2 = proc_status(pid)

        def delivery(kind, start_mono=None):
            by_server, by_client = [], []
            for s in sample:
                for t_mono, t_wall, f in s.events:
                    if f.get("event") == kind:
                        by_server.append(t_wall - event_time(f))
                        if start_mono is not None:
                            by_client.append(t_mono - start_mono)
                        break
            return by_server, by_client

        n = max(len(streams), 1)
        per_stream = (rss1 - rss0) / n
        print()
        print(f"streams: {len(streams)} opened in {open_s:.2f} s ({open_s / n * 1000:.2f} ms each, sequential), "
              f"{failures} failed, {alive} still open after the idle window")
        print(f"VmRSS:   {rss0} KiB -> {rss1} KiB (+{rss1 - rss0} KiB); {rss1b} KiB after {args.idle_seconds:g} s idle;"
              f" {rss2} KiB after the event")
        print(f"threads: {threads0} -> {threads1} (-> {threads1b} idle, {threads2} after the event)")
        print(f"fds:     {fds0} -> {fds1}")
        print(f"memory per open stream: {per_stream:.1f} KiB (user space, daemon RSS)")
        print(f"daemon CPU while idle: {idle_cpu0 * 100:.1f} % of a core with no stream, "
              f"{idle_cpu1 * 100:.1f} % with {len(streams)} (each stream ticks every second; events wake it at once)")
        print(f"daemon CPU from create to release delivered: {c_ev1 - c_ev0:.2f} s")
        print()
        print(f"event delivery to the {len(sample)} sampled streams (ms):")
        print(f"{'event':<20}{'got':>6}{'p50':>8}{'p95':>8}{'max':>8}   from")
        rows = (("instance.created", got_created, t_post, "the POST"),
                ("instance.running", got_running, None, None),
                ("instance.released", got_released, t_delete, "the DELETE"))
        for kind, got, start, label in rows:
            by_server, by_client = delivery(kind, start)
            if by_server:
                print(f"{kind:<20}{len(got):>6}{percentile(by_server, 50) * 1000:>8.0f}"
                      f"{percentile(by_server, 95) * 1000:>8.0f}{max(by_server) * 1000:>8.0f}   the event's time")
            if by_client:
                print(f"{'':<20}{'':>6}{percentile(by_client, 50) * 1000:>8.0f}"
                      f"{percentile(by_client, 95) * 1000:>8.0f}{max(by_client) * 1000:>8.0f}   {label}")
        print(f"instance.released reached {len(got_all)}/{len(streams)} streams in all")
        print()
        ok_threads = threads1 <= threads0 and threads1b <= threads0
        ok_mem = per_stream <= MAX_KIB_PER_STREAM
        ok_open = alive == args.streams and failures == 0
        ok_events = all(len(g) == len(sample) for g in (got_created, got_running, got_released))
        ok_all = len(got_all) == len(streams)
        verdict = lambda ok: "PASS" if ok else "FAIL"
        print(f"{verdict(ok_threads)}  threads {threads0} -> {threads1} -> {threads1b} (target: flat)")
        print(f"{verdict(ok_mem)}  {per_stream:.1f} KiB per stream (target <= {MAX_KIB_PER_STREAM} KiB)")
        print(f"{verdict(ok_open)}  {alive}/{args.streams} streams opened and kept open")
        print(f"{verdict(ok_events and ok_all)}  the instance's events reached {len(got_released)}/{len(sample)} "
              f"sampled streams, the release {len(got_all)}/{len(streams)} in all")
    except (BenchError, OSError, KeyError, ValueError) as e:
        print(f"event_streams: cannot measure: {e}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:
        print("event_streams: interrupted; cleaning up", file=sys.stderr)
        rc = 2
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for s in streams:
            s.close()
        d.close(failed=rc != 0)
    return rc


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Idle keep-alive connections benchmark for gpucloudd (python3 stdlib only).

Opens N (1,000) keep-alive connections to the daemon; each sends one `GET /healthz`,
reads the answer and then stays open, idle. Measures the daemon's VmRSS and thread count
(/proc/PID/status) before and after, and prints the memory per connection and the
threads before/after against the targets: threads do not grow, <= 64 KiB per connection.

By default it starts its own daemon (GPUCLOUD_BIN, default build/bin/gpucloudd under the
repository root) on a temporary data dir and stops it by PID. `--port P --pid PID` measures
an already running daemon instead. It is a measurement: it exits 0 whatever the verdicts
(2 when it cannot measure). Everything is measured well inside the daemon's idle timeout
(120 s by default), after which the server would close the idle connections itself.
"""
import argparse
import errno
import os
import pathlib
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MAX_KIB_PER_CONNECTION = 64
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"


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


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def tcp_kernel_pages():
    # Kernel memory of all TCP sockets (pages), not part of the daemon's RSS.
    try:
        m = re.search(r"^TCP:.* mem (\d+)", pathlib.Path("/proc/net/sockstat").read_text(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


def read_response(sock):
    """Reads one HTTP/1.1 response (Content-Length framed); returns (status, keep_alive)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the response headers")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed inside the response body")
        body += chunk
    return status, headers.get("connection", "").lower() != "close"


def still_open(sock):
    sock.setblocking(False)  # with a timeout set, Python would wait for data first
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True  # nothing to read and not closed: idle and open
    except OSError:
        return False


def http_get(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.decode("latin-1")


def open_metric(port):
    try:
        m = re.search(r"^gpucloud_http_open_connections (\d+)", http_get(port, "/metrics"), re.M)
        return int(m.group(1)) - 1 if m else None  # minus the connection asking
    except OSError:
        return None


def start_daemon(binary, workdir):
    log = open(workdir / "daemon.log", "wb")
    env = dict(os.environ)
    env.setdefault("GPUCLOUD_ADMIN_PASSWORD", "bench-admin-password-0")
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--data-dir", str(workdir / "data")],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        m = re.search(rb"^gpucloudd listening on 127\.0\.0\.1:(\d+)$", (workdir / "daemon.log").read_bytes(), re.M)
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            raise RuntimeError("daemon exited: " + (workdir / "daemon.log").read_text(errors="replace"))
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("daemon did not report its port")


def stop_daemon(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # by PID: Popen signals exactly this process
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure(port, pid, count, settle):
    started = time.monotonic()
    time.sleep(settle)
    rss_before, threads_before = proc_status(pid)
    fds_before = fd_count(pid)
    tcp_before = tcp_kernel_pages()

    socks, failures = [], 0
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(REQUEST)
            status, keep_alive = read_response(s)
            if status != 200 or not keep_alive:
                failures += 1
            socks.append(s)
        except OSError as e:
            failures += 1
            if e.errno == errno.EMFILE:
                print(f"idle_connections: out of file descriptors after {len(socks)} connections", file=sys.stderr)
                break
    opened = time.monotonic()
    time.sleep(settle)  # let the daemon settle: every connection is now parked in its read
    rss_after, threads_after = proc_status(pid)
    fds_after = fd_count(pid)
    tcp_after = tcp_kernel_pages()
    server_open = open_metric(port)
    alive = sum(1 for s in socks if still_open(s))
    measured = time.monotonic()
    for s in socks:
        s.close()
    return {
        "opened": len(socks), "failures": failures, "alive": alive, "server_open": server_open,
        "rss_before": rss_before, "rss_after": rss_after,
        "threads_before": threads_before, "threads_after": threads_after,
        "fds_before": fds_before, "fds_after": fds_after,
        "tcp_before": tcp_before, "tcp_after": tcp_after,
        "open_seconds": opened - started - settle, "total_seconds": measured - started,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--port", type=int, help="measure a running daemon on 127.0.0.1:PORT (needs --pid)")
    ap.add_argument("--pid", type=int, help="PID of that daemon")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to wait before each reading")
    args = ap.parse_args()
    if (args.port is None) != (args.pid is None):
        ap.error("--port and --pid go together")

    limit = raise_fd_limit(4096)  # like `ulimit -n 4096`; a daemon started here inherits it
    if limit < args.connections + 64:
        print(f"idle_connections: fd limit {limit} is too low for {args.connections} connections", file=sys.stderr)
        return 2

    print(f"== Idle keep-alive connections: {args.connections} ==")
    workdir, proc = None, None
    try:
        if args.port is None:
            root = pathlib.Path(__file__).resolve().parent.parent
            binary = os.environ.get("GPUCLOUD_BIN", str(root / "build" / "bin" / "gpucloudd"))
            if not os.access(binary, os.X_OK):
                print(f"idle_connections: no daemon at {binary} (build it, or set GPUCLOUD_BIN)", file=sys.stderr)
                return 2
            workdir = pathlib.Path(tempfile.mkdtemp(prefix="gpucloud-idle-"))
            proc, port = start_daemon(binary, workdir)
            pid = proc.pid
            print(f"daemon: {binary} (fresh, pid {pid}, port {port}); fd limit {limit}")
            http_get(port, "/healthz")  # one request first: the daemon's lazy set-up is not counted
        else:
            port, pid = args.port, args.pid
            print(f"daemon: pid {pid}, port {port}; fd limit {limit}")
        r = measure(port, pid, args.connections, args.settle)
    finally:
        if proc is not None:
            stop_daemon(proc)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    n = max(r["opened"], 1)
    per_conn = (r["rss_after"] - r["rss_before"]) / n
    print(f"connections: {r['opened']} opened in {r['open_seconds']:.2f} s, {r['failures']} failed, "
          f"{r['alive']} still open at the reading"
          + (f", server counts {r['server_open']} open" if r["server_open"] is not None else ""))
    print(f"VmRSS:   {r['rss_before']} KiB -> {r['rss_after']} KiB (+{r['rss_after'] - r['rss_before']} KiB)")
    print(f"threads: {r['threads_before']} -> {r['threads_after']}")
    if r["fds_before"] is not None:
        print(f"fds:     {r['fds_before']} -> {r['fds_after']}")
    if r["tcp_before"] is not None:
        pages = r["tcp_after"] - r["tcp_before"]
        print(f"kernel TCP buffer memory (/proc/net/sockstat, all sockets, not in RSS): {r['tcp_before']} -> "
              f"{r['tcp_after']} pages ({pages * resource.getpagesize() / 1024 / n:+.1f} KiB per connection)")
    print(f"memory per idle connection: {per_conn:.1f} KiB (user space, daemon RSS)")
    print(f"measured within {r['total_seconds']:.1f} s of the first connection (idle timeout 120 s)")
    print()
    ok_threads = r["threads_after"] <= r["threads_before"]
    ok_mem = per_conn <= MAX_KIB_PER_CONNECTION
    ok_all = r["alive"] == args.connections and r["failures"] == 0
    print(f"{'PASS' if ok_threads else 'FAIL'}  threads {r['threads_before']} -> {r['threads_after']} (target: no growth)")
    print(f"{'PASS' if ok_mem else 'FAIL'}  {per_conn:.1f} KiB per connection (target <= {MAX_KIB_PER_CONNECTION} KiB)")
    print(f"{'PASS' if ok_all else 'FAIL'}  {r['alive']}/{args.connections} connections served and kept open")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Web terminal throughput benchmark for gpucloudd vs a bare Docker exec (python3 stdlib only).

One no-GPU instance (1 CPU, 1 GiB). N (20) terminals at once, each typing
    head -c 10000000 /dev/zero | base64 -w 0; echo; echo __DONE__
(13,333,336 bytes of output each) and reading until the output line __DONE__:
  gpucloud: `GET /api/v1/instances/NAME/terminal`, a WebSocket (the client here is written
            from RFC 6455: handshake with the bearer token, masked client frames, server
            frames of any length, fragmented or not, ping/close answered); binary frames carry
            the terminal bytes, a text frame {"type":"resize"} sets the size;
  bare:     the same through the Docker Engine API directly, on its unix socket:
            POST /containers/{c}/exec (Tty, stdin attached) + POST /exec/{id}/start hijacked,
            the instance's own container, the same shell as gpucloud's terminal
            (`/bin/sh -c 'exec /bin/bash -l'`, TERM=xterm-256color), the same size.
Both sides open all N terminals first, wait for the shell's prompt, and set 250x50; the
clock starts when the N commands are sent and stops when the last __DONE__ arrives (EOF
counts as done, and is reported). Throughput = output bytes / seconds, in MB/s (10^6 bytes);
also the CPU seconds that gpucloudd, dockerd, this client and the container (its cgroup;
the shells run under the instance's 1-CPU limit) used per side. Rounds
alternate (bare first in odd rounds), after one untimed warm-up round per side; the ratio
is gpucloud : bare over all rounds. One event loop (selectors) reads every connection on
both sides, so the client costs the two sides alike.

It is a measurement: it prints the numbers and exits 0 (2 when it cannot measure). It
starts its own daemon (GPUCLOUD_BIN, default build/bin/gpucloudd) on a temporary data dir,
as bench/event_streams.py does (one Docker host, host ports 35000-35999, a no-GPU offer),
releases the instance, stops the daemon by PID and removes what it made. Needs root,
dockerd and the image gpucloud/base:bookworm-2.
"""
import argparse
import base64
import hashlib
import json
import os
import pathlib
import selectors
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from event_streams import (  # noqa: E402  (bench/ is not a package)
    DEFAULT_IMAGE, NoGpuDaemon, binary_path, cpu_seconds, engine_socket_path, raise_fd_limit)
from instance_latency import ENGINE_API, BenchError, percentile  # noqa: E402

now = time.monotonic
MARKER = b"\n__DONE__"
COMMAND = "head -c {bytes} /dev/zero | base64 -w 0; echo; echo __DONE__"
SHELL = ["/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi"]
COLS, ROWS = 250, 50
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_http_head(sock):
    """Reads a response head; returns (status, headers, bytes after the head)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise BenchError("closed before the response head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    return int(lines[0].split()[1]), headers, rest


def mask(payload, key):
    n = len(payload)
    if n == 0:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


def ws_frame(opcode, payload, fin=True):
    """A masked client frame (RFC 6455 5.2)."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack("!H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack("!Q", n)
    key = os.urandom(4)
    return bytes(head) + key + mask(payload, key)


class Conn:
    """A terminal byte stream: counts output bytes, spots the marker."""

    def __init__(self, sock):
        self.sock = sock
        self.out_bytes = 0
        self.tail = b""
        self.done_at = None
        self.eof = False
        self.first_output = None

    def fileno(self):
        return self.sock.fileno()

    def on_output(self, data, t):
        if not data:
            return
        if self.first_output is None:
            self.first_output = t
        self.out_bytes += len(data)
        window = self.tail + data
        if self.done_at is None and MARKER in window:
            self.done_at = t
        self.tail = window[-len(MARKER):]

    def reset(self):
        self.out_bytes, self.tail, self.done_at = 0, b"", None


class WebSocketTerminal(Conn):
    def __init__(self, port, token, name, timeout=30.0):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16))
        sock.sendall(b"GET /api/v1/instances/" + name.encode() + b"/terminal HTTP/1.1\r\n"
                     b"Host: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n"
                     b"Authorization: Bearer " + token.encode() + b"\r\n\r\n")
        status, headers, rest = read_http_head(sock)
        if status != 101:
            raise BenchError(f"terminal: HTTP {status} instead of 101")
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            raise BenchError("terminal: wrong Sec-WebSocket-Accept")
        super().__init__(sock)
        self.buf = bytearray(rest)
        self.fragments = None  # the opcode of a fragmented message under way
        self.frames = 0
        self.closed = False

    def send_text(self, text):
        self.sock.sendall(ws_frame(0x1, text.encode()))

    def send_input(self, data):
        self.sock.sendall(ws_frame(0x2, data))

    def resize(self, cols, rows):
        self.send_text(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    def feed(self, data, t):
        self.buf += data
        buf, pos = self.buf, 0
        while True:
            if len(buf) - pos < 2:
                break
            b0, b1 = buf[pos], buf[pos + 1]
            if b1 & 0x80:
                raise BenchError("terminal: the server masked a frame")
            n, hl = b1 & 0x7F, 2
            if n == 126:
                if len(buf) - pos < 4:
                    break
                n, hl = struct.unpack_from("!H", buf, pos + 2)[0], 4
            elif n == 127:
                if len(buf) - pos < 10:
                    break
                n, hl = struct.unpack_from("!Q", buf, pos + 2)[0], 10
            if len(buf) - pos < hl + n:
                break
            payload = bytes(buf[pos + hl:pos + hl + n])
            pos += hl + n
            self.frames += 1
            fin, opcode = b0 & 0x80, b0 & 0x0F
            if opcode == 0x9:  # ping
                self.sock.sendall(ws_frame(0xA, payload))
            elif opcode == 0x8:  # close: answer it
                if not self.closed:
                    try:
                        self.sock.sendall(ws_frame(0x8, payload[:2]))
                    except OSError:
                        pass
                self.closed = True
            elif opcode == 0xA:
                pass
            elif opcode == 0x0:  # continuation of a fragmented message
                if self.fragments is None:
                    raise BenchError("terminal: continuation without a first frame")
                if self.fragments == 0x2:
                    self.on_output(payload, t)  # terminal bytes count as they arrive
                if fin:
                    self.fragments = None
            elif opcode in (0x1, 0x2):
                if self.fragments is not None:
                    raise BenchError("terminal: a new message inside a fragmented one")
                if opcode == 0x2:
                    self.on_output(payload, t)
                if not fin:
                    self.fragments = opcode
            else:
                raise BenchError(f"terminal: unknown opcode {opcode}")
        del buf[:pos]


class DockerExecTerminal(Conn):
    def __init__(self, socket_path, container, timeout=30.0):
        self.socket_path = socket_path
        cfg = {"AttachStdin": True, "AttachStdout": True, "AttachStderr": True, "Tty": True,
               "Cmd": SHELL, "Env": ["TERM=xterm-256color", "HOME=/root"]}
        status, body = self._request("POST", f"{ENGINE_API}/containers/{container}/exec", cfg)
        if status != 201:
            raise BenchError(f"exec create: HTTP {status}: {body[:200]!r}")
        self.exec_id = json.loads(body)["Id"]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(socket_path)
        payload = json.dumps({"Detach": False, "Tty": True}).encode()
        sock.sendall(f"POST {ENGINE_API}/exec/{self.exec_id}/start HTTP/1.1\r\nHost: docker\r\n"
                     f"Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
                     f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        status, _, rest = read_http_head(sock)
        if status not in (101, 200):
            raise BenchError(f"exec start: HTTP {status}")
        super().__init__(sock)
        self.pending = rest
        for _ in range(50):  # the process may need a moment to exist
            status, _ = self._request("POST", f"{ENGINE_API}/exec/{self.exec_id}/resize?h={ROWS}&w={COLS}")
            if status in (200, 201):
                break
            time.sleep(0.01)

    def _request(self, method, path, body=None):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self.socket_path)
        data = b"" if body is None else json.dumps(body).encode()
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
                  f"Connection: close\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        raw = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
        s.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if b"transfer-encoding: chunked" in head.lower():
            out, rest = b"", body
            while rest:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0] or b"0", 16)
                if size == 0:
                    break
                out, rest = out + rest[:size], rest[size + 2:]
            body = out
        return status, body

    def send_input(self, data):
        self.sock.sendall(data)

    def feed(self, data, t):
        self.on_output(data, t)


def pump(conns, until, deadline):
    """Reads every connection until `until(conn)` holds for all of them, EOF, or the deadline."""
    sel = selectors.DefaultSelector()
    pending = set()
    for c in conns:
        c.sock.setblocking(False)
        leftover = getattr(c, "pending", b"")
        if leftover:
            c.pending = b""
            c.feed(leftover, now())
        if not until(c) and not c.eof:
            sel.register(c, selectors.EVENT_READ)
            pending.add(c)
    while pending and now() < deadline:
        for key, _ in sel.select(timeout=max(0.0, min(1.0, deadline - now()))):
            c = key.fileobj
            try:
                data = c.sock.recv(262144)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            t = now()
            if not data:
                c.eof = True
                if c.done_at is None:
                    c.done_at = t
            else:
                c.feed(data, t)
            if until(c) or c.eof:
                sel.unregister(c)
                pending.discard(c)
    sel.close()
    for c in conns:
        c.sock.setblocking(True)
    return not pending


def dockerd_pid():
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if pathlib.Path(f"/proc/{entry}/comm").read_text().strip() == "dockerd":
                    return int(entry)
            except OSError:
                continue
    return None


def container_cpu_reader(container_id):
    """A function returning the container's CPU seconds (its cgroup: v1 cpuacct or v2), or None."""
    v1 = [f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage",
          f"/sys/fs/cgroup/cpu,cpuacct/docker/{container_id}/cpuacct.usage",
          f"/sys/fs/cgroup/cpuacct/system.slice/docker-{container_id}.scope/cpuacct.usage"]
    v2 = [f"/sys/fs/cgroup/docker/{container_id}/cpu.stat",
          f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat"]
    for path in v1:
        if os.path.exists(path):
            return lambda: int(pathlib.Path(path).read_text()) / 1e9
    for path in v2:
        if os.path.exists(path):
            def read(path=path):
                for line in pathlib.Path(path).read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return 0.0
            return read
    return None


def run_round(side, conns, command, timeout, pids, container_cpu=None):
    """Sends the command to every terminal at once; reads until every __DONE__."""
    for c in conns:
        c.reset()
    frames0 = sum(getattr(c, "frames", 0) for c in conns)
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items() if p}
    client0 = time.process_time()
    box0 = container_cpu() if container_cpu else None
    t0 = now()
    for c in conns:
        c.send_input((command + "\n").encode())
    ok = pump(conns, lambda c: c.done_at is not None, t0 + timeout)
    t1 = now()
    cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items() if p}
    cpu["client"] = time.process_time() - client0
    if box0 is not None:
        cpu["container"] = container_cpu() - box0
    if not ok:
        raise BenchError(f"{side}: {sum(1 for c in conns if c.done_at is None)} terminals not done "
                         f"after {timeout:.0f} s")
    last = max(c.done_at for c in conns)
    total = sum(c.out_bytes for c in conns)
    return {"side": side, "seconds": last - t0, "bytes": total, "wall": t1 - t0, "cpu": cpu,
            "per_terminal": [c.done_at - t0 for c in conns], "min_bytes": min(c.out_bytes for c in conns),
            "eof": sum(1 for c in conns if c.eof), "frames": sum(getattr(c, "frames", 0) for c in conns) - frames0}


def open_terminals(side, n, make, timeout=60.0):
    """Opens n terminals one after another, each up to its shell's first output (the
    prompt); returns them and the seconds from each request to its prompt."""
    conns, first = [], []
    for _ in range(n):
        t = now()
        c = make()
        conns.append(c)
        if side == "gpucloud":
            c.resize(COLS, ROWS)
        if not pump([c], lambda c: c.first_output is not None, now() + timeout):
            raise BenchError(f"{side}: a terminal showed no prompt within {timeout:.0f} s")
        first.append(c.first_output - t)
    time.sleep(0.3)  # let the prompts and the resizes settle
    pump(conns, lambda c: False, now() + 0.05)  # drain
    return conns, first


def close_terminals(conns):
    for c in conns:
        try:
            c.send_input(b"exit\n")
        except OSError:
            pass
    for c in conns:
        try:
            if isinstance(c, WebSocketTerminal) and not c.closed:
                c.sock.sendall(ws_frame(0x8, struct.pack("!H", 1000)))
        except OSError:
            pass
        c.sock.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--terminals", type=int, default=int(os.environ.get("BENCH_TERMINALS", "20")))
    ap.add_argument("--bytes", type=int, default=10_000_000, help="bytes of /dev/zero per terminal (base64: x4/3)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per side (default 3)")
    ap.add_argument("--warmup-bytes", type=int, default=1_000_000, help="untimed warm-up round size (0: none)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per round before giving up")
    ap.add_argument("--engine-socket", default=None)
    ap.add_argument("--image", default=DEFAULT_IMAGE)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (daemon log)")
    args = ap.parse_args()
    if args.terminals < 1 or args.rounds < 1:
        ap.error("--terminals and --rounds must be at least 1")

    raise_fd_limit(4096)
    binary = binary_path()
    if not os.access(binary, os.X_OK):
        print(f"terminal_throughput: no daemon at {binary} (build it, or set GPUCLOUD_BIN)", file=sys.stderr)
        return 2

    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    socket_path = engine_socket_path(args.engine_socket)
    d = NoGpuDaemon("terminal_throughput.py", socket_path, args.image, args.keep)
    sides = {}
    rc = 0
    try:
        d.start(binary)
        name = f"tput-{os.urandom(3).hex()}"
        d.create_instance(name)
        inst = d.wait_running(name)
        container = d.container_name(inst["id"])
        command = COMMAND.format(bytes=args.bytes)
        expected = -(-args.bytes // 3) * 4
        pids = {"gpucloudd": d.proc.pid, "dockerd": dockerd_pid()}
        status, raw = d.engine.request("GET", f"{ENGINE_API}/containers/{container}/json")
        container_cpu = container_cpu_reader(json.loads(raw)["Id"]) if status == 200 else None
        print(f"== Terminal throughput: {args.terminals} terminals at once, {args.rounds} rounds per side ==")
        print(f"daemon:   {binary} (127.0.0.1:{d.port}, pid {d.proc.pid}); instance {name} = {container}")
        print(f"command:  {command}  ({expected:,} bytes of output per terminal)")
        print(f"machine:  {os.cpu_count()} CPUs, load average {' '.join(open('/proc/loadavg').read().split()[:3])}")

        makers = {
            "gpucloud": lambda: WebSocketTerminal(d.port, d.token, name),
            "bare": lambda: DockerExecTerminal(socket_path, container),
        }
        opens = {}
        for side in ("bare", "gpucloud"):
            sides[side], opens[side] = open_terminals(side, args.terminals, makers[side])
        print(f"open:     request -> prompt, one terminal after another, p50 / max: "
              + ", ".join(f"{s} {percentile(opens[s], 50) * 1000:.0f} / {max(opens[s]) * 1000:.0f} ms"
                          for s in ("bare", "gpucloud")))
        if args.warmup_bytes:
            for side in ("bare", "gpucloud"):
                run_round(side, sides[side], COMMAND.format(bytes=args.warmup_bytes), args.timeout, {})
        print()
        print(f"{'round':<7}{'side':<10}{'MB':>9}{'s':>8}{'MB/s':>9}{'term p50 s':>12}{'max s':>8}"
              f"{'gpucloudd':>11}{'dockerd':>9}{'client':>8}{'container':>11}   (CPU s)")
        results = {"bare": [], "gpucloud": []}
        for r in range(args.rounds):
            order = ("bare", "gpucloud") if r % 2 == 0 else ("gpucloud", "bare")
            for side in order:
                res = run_round(side, sides[side], command, args.timeout, pids, container_cpu)
                results[side].append(res)
                if res["min_bytes"] < expected:
                    print(f"note: a {side} terminal returned {res['min_bytes']:,} bytes (< {expected:,})")
                if res["eof"]:
                    print(f"note: {res['eof']} {side} terminals ended (EOF) before __DONE__")
                cpu = res["cpu"]
                print(f"{r + 1:<7}{side:<10}{res['bytes'] / 1e6:>9.1f}{res['seconds']:>8.2f}"
                      f"{res['bytes'] / 1e6 / res['seconds']:>9.1f}{percentile(res['per_terminal'], 50):>12.2f}"
                      f"{max(res['per_terminal']):>8.2f}{cpu.get('gpucloudd', 0):>11.2f}"
                      f"{cpu.get('dockerd', float('nan')):>9.2f}{cpu['client']:>8.2f}"
                      f"{cpu.get('container', float('nan')):>11.2f}", flush=True)
        print()
        agg = {}
        for side in ("bare", "gpucloud"):
            rs = results[side]
            total_b = sum(x["bytes"] for x in rs)
            total_s = sum(x["seconds"] for x in rs)
            mb = total_b / 1e6
            agg[side] = mb / total_s
            cpu = {k: sum(x["cpu"].get(k, 0) for x in rs) for k in ("gpucloudd", "dockerd", "client", "container")}
            print(f"{side:<10} {mb / total_s:7.1f} MB/s over {args.rounds} rounds ({mb:.0f} MB in {total_s:.1f} s); "
                  f"CPU ms per MB: gpucloudd {cpu['gpucloudd'] / mb * 1000:.2f}, dockerd {cpu['dockerd'] / mb * 1000:.2f},"
                  f" client {cpu['client'] / mb * 1000:.2f}; the container (limit 1 CPU) used "
                  f"{cpu['container'] / total_s:.2f} CPUs")
        frames = sum(x["frames"] for x in results["gpucloud"])
        out_bytes = sum(x["bytes"] for x in results["gpucloud"])
        print(f"gpucloud WebSocket frames: {frames:,}, {out_bytes / max(frames, 1) / 1024:.1f} KiB of output each on average")
        print(f"ratio gpucloud : bare = {agg['gpucloud'] / agg['bare']:.2f} "
              f"({agg['gpucloud']:.1f} vs {agg['bare']:.1f} MB/s)")
    except (BenchError, OSError, KeyError, ValueError) as e:
        print(f"terminal_throughput: cannot measure: {e}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:
        print("terminal_throughput: interrupted; cleaning up", file=sys.stderr)
        rc = 2
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for conns in sides.values():
            close_terminals(conns)
        d.close(failed=rc != 0)
    return rc


if __name__ == "__main__":
    sys.exit(main())

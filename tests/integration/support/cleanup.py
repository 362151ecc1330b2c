#!/usr/bin/env python3
"""Removes what integration tests made outside their own process, as listed in their leases.

A lease (support/test_resources.h) is a file of `KIND VALUE` lines, locked with flock(2) by
the test process that wrote it for as long as that process lives.

  cleanup.py release LEASE   remove what LEASE lists (its owner calls this; no lock taken)
  cleanup.py sweep DIR       for every lease in DIR whose owner is gone: remove what it lists,
                             then the lease (./dev test runs this before the tests)

Kinds: container NAME, containers-label K=V, images-label K=V, network NAME, nft-table FAMILY NAME,
iptables-comment CHAIN COMMENT, netns NAME, disk-dir /tmp/DIR (its mounts, loop devices, files),
mounts-under /tmp/DIR (its mounts and loop devices; the files stay).
Only what a lease names is touched.
"""
import fcntl
import http.client
import json
import os
import socket
import subprocess
import sys
import urllib.parse

DOCKER_SOCKET = "/var/run/docker.sock"


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(self.path)


def docker(method, path):
    if not os.path.exists(DOCKER_SOCKET):
        return None
    try:
        conn = UnixHTTPConnection(DOCKER_SOCKET)
        conn.request(method, "/v1.41" + path)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return json.loads(body) if body and resp.status < 300 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None


def label_filter(label):
    return urllib.parse.quote(json.dumps({"label": [label]}))


def run(*args):
    subprocess.run(list(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def remove(kind, value):
    if kind == "containers-label":
        for c in docker("GET", "/containers/json?all=1&filters=" + label_filter(value)) or []:
            docker("DELETE", "/containers/" + c["Id"] + "?force=1&v=1")
    elif kind == "images-label":
        for i in docker("GET", "/images/json?filters=" + label_filter(value)) or []:
            docker("DELETE", "/images/" + i["Id"] + "?force=1")
    elif kind == "container":
        docker("DELETE", "/containers/" + urllib.parse.quote(value) + "?force=1&v=1")
    elif kind == "network":
        docker("DELETE", "/networks/" + urllib.parse.quote(value))
    elif kind == "nft-table":
        family, _, name = value.partition(" ")
        run("nft", "delete", "table", family, name)
    elif kind == "iptables-comment":
        chain, _, comment = value.partition(" ")
        try:
            rules = subprocess.run(["iptables", "-w", "5", "-S", chain], capture_output=True, text=True,
                                   check=False).stdout.splitlines()
        except OSError:
            return
        for rule in rules:
            # iptables -S quotes a comment: "gpucloud:gpucloud-ID"
            if rule.startswith("-A ") and comment in (t.strip('"') for t in rule.split()):
                run("sh", "-c", "iptables -w 5 " + "-D" + rule[2:])
    elif kind == "netns":
        run("ip", "netns", "delete", value)
    elif kind == "disk-dir":
        remove_disk_dir(value)
    elif kind == "mounts-under":
        unmount_under(value)


def remove_disk_dir(root):
    """A disk test's directory: its mounts (deepest first), the loop devices of its files, then it."""
    root = os.path.realpath(root)
    if root in ("/", "") or not root.startswith("/tmp/"):
        return
    unmount_under(root)
    run("rm", "-rf", "--one-file-system", root)


def unmount_under(root):
    """The mounts under a directory (deepest first) and the loop devices of its files; the
    files stay (a failed test's daemon directory is kept to be read)."""
    root = os.path.realpath(root)
    if root in ("/", "") or not root.startswith("/tmp/"):
        return
    try:
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4].replace("\\040", " ") for line in f]
    except OSError:
        points = []
    for point in sorted((p for p in points if p == root or p.startswith(root + "/")), key=len, reverse=True):
        run("fsfreeze", "--unfreeze", point)
        run("umount", point)
    try:
        loops = [n for n in os.listdir("/sys/block") if n.startswith("loop")]
    except OSError:
        loops = []
    for name in loops:
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(root + "/"):
            run("losetup", "--detach", "/dev/" + name)


def release(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return
    # Containers first: a network or an image in use cannot be removed.
    order = ["container", "containers-label", "images-label", "disk-dir", "mounts-under", "network", "nft-table", "iptables-comment",
             "netns"]
    entries = [line.split(" ", 1) for line in lines if " " in line]
    for kind in order:
        for k, v in entries:
            if k == kind:
                remove(k, v)


def sweep(directory):
    swept = 0
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # its owner is alive
            continue
        release(path)
        os.unlink(path)
        os.close(fd)
        swept += 1
    if swept:
        print(f"cleanup: swept what {swept} earlier test process(es) left behind")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("release", "sweep"):
        sys.exit(__doc__)
    (release if sys.argv[1] == "release" else sweep)(sys.argv[2])

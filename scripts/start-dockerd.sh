#!/bin/sh
# Start the Docker Engine for gpucloud on a machine without systemd, unless an engine already
# answers on the socket. Idempotent: a second run finds the engine up and does nothing.
# The engine runs with --live-restore, so stopping or restarting it never stops instances.
#
# Environment (all optional):
#   DOCKER_SOCK            engine socket            (default /var/run/docker.sock)
#   GPUCLOUD_RUN_DIR       our pidfile lives here   (default /var/run/gpucloud)
#   GPUCLOUD_LOG_DIR       dockerd.log goes here    (default /var/log/gpucloud)
#   DOCKERD_EXTRA_ARGS     more dockerd arguments, space-separated
#   DOCKERD_WAIT_SECONDS   how long to wait for the engine (default 30)
#   GPUCLOUD_ENGINE_STORAGE  auto (default) | btrfs | default
#       btrfs: the engine's data root is a btrfs filesystem (--storage-driver btrfs), so a
#       container's size limit (the instance's system_disk_gib, HostConfig.StorageOpt size)
#       is enforced. When GPUCLOUD_ENGINE_DATA_ROOT is not btrfs already, it is made: a sparse
#       file GPUCLOUD_ENGINE_IMAGE formatted btrfs and loop-mounted there (kept across runs;
#       re-mounted when needed). Falls back to the engine's default (with a warning) where
#       mkfs.btrfs or loop mounts are missing.
#       default: dockerd's own data root and storage driver (overlay2: gpucloudd holds each
#       system disk's size with a filesystem of the container's own, [agent]
#       system_disk_filesystems; a create and release costs the kernel a tenth of btrfs's).
#       auto: btrfs where a btrfs data root was set up before (GPUCLOUD_ENGINE_IMAGE exists or
#       the data root is btrfs), else default. btrfs stays available (GPUCLOUD_ENGINE_STORAGE=btrfs,
#       then rebuild the base image: scripts/build-base-image.sh).
#   GPUCLOUD_ENGINE_DATA_ROOT  (default /var/lib/gpucloud/engine)
#   GPUCLOUD_ENGINE_IMAGE      (default /var/lib/gpucloud/engine.img)
#   GPUCLOUD_ENGINE_SIZE_GIB   the sparse file's size (default 200; only blocks written use disk)
#   GPUCLOUD_ENGINE_QUOTA      simple (default) | full: the quotas that hold each container's
#       size on a btrfs data root whose quotas are not enabled yet. simple: btrfs simple quotas
#       (kernel 6.7+, enabled here with the BTRFS_IOC_QUOTA_CTL ioctl through python3, as
#       btrfs-progs 6.2 has no `quota enable --simple`): a released container costs the kernel
#       23x less and its qgroup goes with its subvolume. The engine then answers SizeRw -1 for a
#       container at its limit; the agent reads that subvolume's qgroup instead. Without kernel
#       support the engine enables full quotas itself at its first size limit.
#       full: the engine's own `quota enable`, whose backref accounting keeps btrfs-cleaner
#       busy seconds per release (docs/benchmarks.md "btrfs churn"). A data root whose quotas
#       are already on keeps its mode.
# A second engine beside the machine's own (tests) needs its own socket, pidfile, exec root
# and data root, e.g. DOCKER_SOCK=/var/run/gpucloud-btrfs.sock GPUCLOUD_RUN_DIR=/var/run/gpucloud-btrfs
# GPUCLOUD_ENGINE_DATA_ROOT=/var/lib/gpucloud-btrfs/engine GPUCLOUD_ENGINE_IMAGE=/var/lib/gpucloud-btrfs/engine.img
# DOCKERD_EXTRA_ARGS="--exec-root /var/run/gpucloud-btrfs/exec --pidfile /var/run/gpucloud-btrfs/engine.pid --bridge BR"
# with a bridge BR of its own (never --bridge none: that deletes the machine's docker0).
set -eu

SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
RUN_DIR=${GPUCLOUD_RUN_DIR:-/var/run/gpucloud}
LOG_DIR=${GPUCLOUD_LOG_DIR:-/var/log/gpucloud}
PIDFILE=$RUN_DIR/dockerd.pid
LOG=$LOG_DIR/dockerd.log
WAIT=${DOCKERD_WAIT_SECONDS:-30}
STORAGE=${GPUCLOUD_ENGINE_STORAGE:-auto}
DATA_ROOT=${GPUCLOUD_ENGINE_DATA_ROOT:-/var/lib/gpucloud/engine}
IMAGE=${GPUCLOUD_ENGINE_IMAGE:-/var/lib/gpucloud/engine.img}
SIZE_GIB=${GPUCLOUD_ENGINE_SIZE_GIB:-200}
QUOTA=${GPUCLOUD_ENGINE_QUOTA:-simple}

engine_ping() {
  [ -S "$SOCK" ] && curl -fsS --max-time 2 --unix-socket "$SOCK" http://docker/_ping >/dev/null 2>&1
}

# Our own dockerd, still alive? (PID from our pidfile and the process really is dockerd.)
our_pid() {
  [ -f "$PIDFILE" ] || return 1
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  [ "$(cat /proc/"$pid"/comm 2>/dev/null || true)" = dockerd ] || return 1
  echo "$pid"
}

wait_ready() {
  pid=$1
  i=0
  while [ "$i" -lt $((WAIT * 10)) ]; do
    if engine_ping; then return 0; fi
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "start-dockerd: dockerd (pid $pid) exited; last lines of $LOG:" >&2
      tail -n 20 "$LOG" >&2 || true
      return 1
    fi
    sleep 0.1
    i=$((i + 1))
  done
  echo "start-dockerd: engine not ready on $SOCK after ${WAIT}s; see $LOG" >&2
  return 1
}

if engine_ping; then
  echo "start-dockerd: engine already answering on $SOCK"
  exit 0
fi

mkdir -p "$RUN_DIR" "$LOG_DIR"

if pid=$(our_pid); then
  # Started by an earlier run and still coming up: wait for it instead of starting another.
  echo "start-dockerd: waiting for dockerd pid $pid started earlier"
  wait_ready "$pid"
  exit $?
fi
rm -f "$PIDFILE"

command -v dockerd >/dev/null 2>&1 || { echo "start-dockerd: dockerd not installed (apt-get install docker.io)" >&2; exit 1; }

fs_type() { stat -f -c %T "$1" 2>/dev/null || true; }

# Puts a btrfs filesystem at $DATA_ROOT (idempotent); prints nothing, fails when it cannot.
btrfs_data_root() {
  mkdir -p "$DATA_ROOT"
  [ "$(fs_type "$DATA_ROOT")" = btrfs ] && return 0
  command -v mkfs.btrfs >/dev/null 2>&1 || { echo "start-dockerd: mkfs.btrfs missing (apt-get install btrfs-progs)" >&2; return 1; }
  if [ ! -f "$IMAGE" ]; then
    mkdir -p "$(dirname "$IMAGE")"
    truncate -s "${SIZE_GIB}G" "$IMAGE.new"
    mkfs.btrfs -q "$IMAGE.new" >/dev/null || { rm -f "$IMAGE.new"; return 1; }
    mv "$IMAGE.new" "$IMAGE"
    echo "start-dockerd: made $IMAGE (btrfs, sparse, ${SIZE_GIB} GiB)"
  fi
  if [ -n "$(ls -A "$DATA_ROOT" 2>/dev/null)" ]; then
    echo "start-dockerd: $DATA_ROOT is not empty and not btrfs; not mounting over it" >&2
    return 1
  fi
  mount -o loop "$IMAGE" "$DATA_ROOT" || return 1
  [ "$(fs_type "$DATA_ROOT")" = btrfs ]
}

# Prints the btrfs filesystem's quota mode at $1 (none, qgroup or squota), first enabling simple
# quotas when none are on and $QUOTA is simple. Never fails: without python3 or kernel support
# the engine enables full quotas itself at its first size limit.
btrfs_quota() {
  command -v python3 >/dev/null 2>&1 || { echo "unknown (python3 missing)"; return 0; }
  python3 - "$1" "$QUOTA" <<'PY' || echo "unknown"
import fcntl, os, struct, sys, uuid
fd = os.open(sys.argv[1], os.O_RDONLY)
info = bytearray(1024)
fcntl.ioctl(fd, 0x8400941F, info)  # BTRFS_IOC_FS_INFO: the fsid names /sys/fs/btrfs/<fsid>
path = "/sys/fs/btrfs/%s/qgroups/mode" % uuid.UUID(bytes=bytes(info[16:32]))
def mode():
    try:
        return open(path).read().strip()
    except OSError:
        return "none"
if mode() == "none" and sys.argv[2] == "simple":
    try:
        fcntl.ioctl(fd, 0xC0109428, struct.pack("QQ", 4, 0))  # BTRFS_IOC_QUOTA_CTL: ENABLE_SIMPLE_QUOTA
    except OSError as e:
        sys.stderr.write("start-dockerd: simple quotas not available (%s)\n" % e.strerror)
print(mode())
PY
}

STORAGE_ARGS=
if [ "$STORAGE" = auto ]; then
  if [ -f "$IMAGE" ] || [ "$(fs_type "$DATA_ROOT")" = btrfs ]; then
    STORAGE=btrfs
  else
    STORAGE=default
  fi
fi
case "$STORAGE" in
  btrfs)
    if btrfs_data_root; then
      STORAGE_ARGS="--data-root $DATA_ROOT --storage-driver btrfs"
      echo "start-dockerd: data root $DATA_ROOT on btrfs (system disk sizes enforced; quotas: $(btrfs_quota "$DATA_ROOT"))"
      # The engine's scratch (an image load's whole tar lands there first: save-image) beside
      # the data root, not in the loop-mounted btrfs: a 1 GiB save took 14 s with it there, 11 s
      # beside (docs/benchmarks.md "Save-image against docker commit").
      if [ -z "${DOCKER_TMPDIR:-}" ]; then
        DOCKER_TMPDIR="$(dirname "$DATA_ROOT")/engine-tmp"
        mkdir -p "$DOCKER_TMPDIR" && export DOCKER_TMPDIR
      fi
    else
      echo "start-dockerd: no btrfs data root; the engine's default storage is used (system disk sizes not enforced)" >&2
    fi
    ;;
  default) ;;
  *) echo "start-dockerd: GPUCLOUD_ENGINE_STORAGE must be auto, btrfs or default, not $STORAGE" >&2; exit 2 ;;
esac

# A stale socket file left by a killed engine makes dockerd refuse to listen.
if [ -S "$SOCK" ]; then rm -f "$SOCK"; fi

# setsid: the engine must outlive the shell (and its process group) that started it.
# shellcheck disable=SC2086
setsid dockerd --live-restore -H "unix://$SOCK" $STORAGE_ARGS ${DOCKERD_EXTRA_ARGS:-} \
  </dev/null >>"$LOG" 2>&1 &
pid=$!
echo "$pid" >"$PIDFILE"
echo "start-dockerd: started dockerd pid $pid (log $LOG)"
wait_ready "$pid"
echo "start-dockerd: engine ready on $SOCK"

#!/usr/bin/env bash
# The whole path of a GPU instance on a GPU machine with nothing installed (issue 25): the
# engine, gpucloudd with NVML discovery and built-in GPU injection, an instance with one GPU
# created through the API, `nvidia-smi -L` and a CUDA program inside it, the instance's GPU
# metrics following the load, stop (GPU freed, the market shows it free), release.
#
#   scripts/device/instance-gpu.sh build   # here (Debian 12, root): builds gpucloudd (release),
#                                          # tools/cuda_check.c, a slim image (busybox + glibc),
#                                          # and packs them with Debian's engine binaries (dockerd,
#                                          # containerd, its runc shim, runc, docker-init) and nft,
#                                          # each with the shared libraries it needs, into
#                                          # build-device/instance-gpu.tar.xz; prints its size in MiB
#   scripts/device/instance-gpu.sh run     # there, as root (carry build-device/instance-gpu.tar.xz):
#                                          # one line per check, then "N passed, N failed"; the
#                                          # daemons' logs and the report go to $OUT
#
# The GPU machine (../shared/notes/machines.md) has no engine, nft, ip or package registry and
# reaches nothing: everything travels in the pack (at most 64 MiB with the checkout). The pack
# unpacks with Python's tarfile (xz), so no xz binary is needed there.
# On a machine without a GPU the run half gets as far as the market (no GPU listed) and fails
# there: that is how it is tried here.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$root/build-device"
pack="$build/instance-gpu.tar.xz"
limit_mib=${GPUCLOUD_DEVICE_PACK_LIMIT_MIB:-54}

# The shared libraries of $@ that a plain machine may lack: everything but glibc's own.
libs_of() {
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so' | sort -u
}

build_half() {
  [ "$(id -u)" = 0 ] || { echo "instance-gpu: build as root (apt-get)" >&2; exit 2; }
  local need=()
  command -v busybox >/dev/null 2>&1 && busybox --list 2>/dev/null | grep -qx nproc || need+=(busybox-static)
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v nft >/dev/null 2>&1 || need+=(nftables)
  if [ ${#need[@]} -gt 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; fi
  local busybox_bin
  busybox_bin=$(command -v busybox)
  file -L "$busybox_bin" 2>/dev/null | grep -q 'statically linked' || busybox_bin=/bin/busybox

  # gpucloudd without sanitizers, tests or benchmarks (the ASan tree's binary is 10× larger).
  cmake -S "$root" -B "$build/gpucloudd" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 -DGPUCLOUD_TESTS=OFF \
    -DGPUCLOUD_BENCH=OFF -DGPUCLOUD_SANITIZE=OFF >/dev/null
  ninja -C "$build/gpucloudd" gpucloudd
  local gpucloudd
  gpucloudd=$(find "$build/gpucloudd" -name gpucloudd -type f -perm -u+x | head -1)

  local stage="$build/stage"
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/image"
  install -m 0755 "$gpucloudd" "$stage/bin/gpucloudd" && strip "$stage/bin/gpucloudd"
  local engine=(dockerd containerd containerd-shim-runc-v2 runc docker-proxy nft)
  for b in "${engine[@]}"; do install -m 0755 "$(command -v "$b")" "$stage/bin/$b"; done
  install -m 0755 "$(readlink -f "$(command -v docker-init)")" "$stage/bin/docker-init"
  # Each binary's libraries (dockerd: libsystemd, libdevmapper, ...; runc: libseccomp; nft:
  # libnftables and friends; gpucloudd: Boost, spdlog, fmt, sodium, sqlite, ssl), used through
  # LD_LIBRARY_PATH there, so they never shadow the machine's own for anything else.
  for l in $(libs_of "$stage"/bin/*); do cp -L "$l" "$stage/lib/"; done

  # The slim image: busybox (sh, ls, free, nproc, df...), glibc, the CUDA check. No sshd: the
  # instance is reached through the engine's exec, as the web terminal does.
  local rootfs="$build/rootfs"
  rm -rf "$rootfs" && mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,lib64,lib/x86_64-linux-gnu,etc,root,tmp,proc,sys,dev,run,var/tmp}
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
  install -m 0755 "$busybox_bin" "$rootfs/bin/busybox"
  for app in $("$busybox_bin" --list); do [ -e "$rootfs/bin/$app" ] || ln -s busybox "$rootfs/bin/$app"; done
  cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/lib64/"
  for l in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2; do
    cp -L "/lib/x86_64-linux-gnu/$l" "$rootfs/lib/x86_64-linux-gnu/"
  done
  ${CC:-gcc} -O2 -Wall -Wextra -std=c11 "$root/tools/cuda_check.c" -ldl -o "$rootfs/usr/local/bin/cuda_check"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  printf 'root:*:20000:0:99999:7:::\n' >"$rootfs/etc/shadow" && chmod 0640 "$rootfs/etc/shadow"
  printf 'NAME="gpucloud device-slim"\nID=gpucloud-slim\n' >"$rootfs/etc/os-release"
  tar -C "$rootfs" --numeric-owner -cf "$stage/image/device-slim.tar" .

  tar -C "$stage" -cf - . | xz -9 -T2 >"$pack.new" && mv "$pack.new" "$pack"
  local bytes mib
  bytes=$(stat -c %s "$pack")
  mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
  echo "instance-gpu: packed $(du -sh "$stage" | cut -f1) into $pack: ${mib} MiB"
  if [ "$bytes" -gt $((limit_mib * 1048576)) ]; then
    echo "instance-gpu: the pack is over ${limit_mib} MiB (the device takes 64 MiB with the checkout)" >&2
    exit 1
  fi
}

run_half() {
  [ "$(id -u)" = 0 ] || { echo "instance-gpu: run as root" >&2; exit 2; }
  [ -f "$pack" ] || { echo "instance-gpu: $pack missing (build it here, carry build-device/instance-gpu.tar.xz)" >&2; exit 2; }
  out="${OUT:-$(mktemp -d)}"  # global, for the EXIT trap
  work=$(mktemp -d /tmp/gpucloud-device.XXXXXX)  # global, for the EXIT trap
  mkdir -p "$out"
  python3 - "$pack" "$work/pack" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    t.extractall(sys.argv[2])
EOF
  local bin="$work/pack/bin" lib="$work/pack/lib"
  export PATH="$bin:$PATH"
  engine_pid="" daemon_pid=""  # global: the EXIT trap reads them after this function returns
  stop_all() {
    # By PID, as everything here: the daemon first (it may still talk to the engine).
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null || true
    if [ -n "$engine_pid" ]; then
      kill "$engine_pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.1; done
    fi
    cp "$work"/*.log "$out/" 2>/dev/null || true
  }
  trap stop_all EXIT

  mkdir -p "$work/engine" "$work/exec" "$work/data"
  # This engine makes the default bridge (docker0) as its own: never beside another engine,
  # whose docker0 it would take over (and `--bridge none` would delete).
  # (Tried on a machine with an engine: in a network namespace of its own, `unshare -n sh -c
  # 'ip link set lo up && GPUCLOUD_DEVICE_OWN_NETNS=1 scripts/device/instance-gpu.sh run'`;
  # not `ip netns exec`, which remounts /sys and hides the cgroup mounts.)
  if [ -z "${GPUCLOUD_DEVICE_OWN_NETNS:-}" ] && pgrep -x dockerd >/dev/null 2>&1; then
    echo "instance-gpu: another dockerd runs here; the run half is for a machine without an engine" >&2
    exit 2
  fi
  # No iptables there: the engine leaves packet filtering alone, gpucloud publishes ports with
  # its own nft (carried). containerd, the shim, runc and docker-init are found on PATH.
  LD_LIBRARY_PATH="$lib" dockerd --data-root "$work/engine" --exec-root "$work/exec" \
    -H "unix://$work/docker.sock" --pidfile "$work/dockerd.pid" --iptables=false --ip6tables=false \
    --ip-masq=false --userland-proxy=false --live-restore >"$work/dockerd.log" 2>&1 &
  engine_pid=$!
  local cuda_uuid_line
  cuda_uuid_line=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
  GPUCLOUD_DEVICE_WORK="$work" GPUCLOUD_DEVICE_LIB="$lib" GPUCLOUD_DEVICE_GPU_NAME="$cuda_uuid_line" \
    python3 "$root/scripts/device/instance_gpu_check.py" --engine-pid "$engine_pid" --pid-file "$work/gpucloudd.pidnum" \
    | tee "$out/instance-gpu.txt"
  local rc=${PIPESTATUS[0]}
  daemon_pid=$(cat "$work/gpucloudd.pidnum" 2>/dev/null || true)
  exit "$rc"
}

case "${1:-}" in
  build) build_half ;;
  run) run_half ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac

#!/bin/sh
# Build gpucloud's base instance image (Debian 12 + openssh-server + python3 + tmux + Debian's
# Jupyter Notebook) with no registry: mmdebstrap from the host's own Debian sources, then an
# import through the Docker Engine API over its unix socket. Prints the image id.
#
# - Idempotent: if the tag already exists in the engine, nothing is done.
# - The rootfs tarball is cached, so a rebuild after the engine's data was wiped is an import
#   only (a few seconds); delete the cache file to force a fresh bootstrap.
# - The image contains no SSH host keys: every instance generates its own at first boot
#   (scripts/instance-init/gpucloud-init.sh). Saving an instance as an image must likewise
#   delete /etc/ssh/ssh_host_* from the saved filesystem.
# - Jupyter: jupyter-notebook and python3-notebook (Notebook 6.4; PyPI is not reachable), no
#   Recommends (they add nothing the base needs: the package set is the same with them for
#   the rest), label gpucloud.image.jupyter=true. The instance's init starts Notebook on the
#   instance's own address with a per-instance token, reached only through the API's proxy.
#   Until bookworm-2 this was a second image (bookworm-jupyter-1); docs/benchmarks.md,
#   "Base image", has the build time and size of both layouts.
#
# Environment (all optional):
#   DOCKER_SOCK         engine socket                (default /var/run/docker.sock)
#   GPUCLOUD_CACHE_DIR  where the tarball is cached  (default /var/cache/gpucloud/images)
#   GPUCLOUD_BASE_REPO  image repository             (default gpucloud/base)
#   GPUCLOUD_BASE_TAG   image tag                    (default bookworm-2; bump it whenever the
#                       contents change, with src/instances/images.h's kBaseEngineImage)
set -eu

SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
CACHE_DIR=${GPUCLOUD_CACHE_DIR:-/var/cache/gpucloud/images}
REPO=${GPUCLOUD_BASE_REPO:-gpucloud/base}
TAG=${GPUCLOUD_BASE_TAG:-bookworm-2}
SUITE=bookworm
PACKAGES=openssh-server,python3,iproute2,procps,ca-certificates,tmux,jupyter-notebook,python3-notebook
RECOMMENDS='APT::Install-Recommends "false"'
API=http://docker/v1.41

log() { echo "build-base-image: $*" >&2; }

engine() { curl -sS --max-time 600 --unix-socket "$SOCK" "$@"; }

# Prints the image id if REPO:TAG exists, else nothing.
image_id() {
  out=$(engine -w '\n%{http_code}' "$API/images/$REPO:$TAG/json") || return 1
  code=$(printf '%s\n' "$out" | tail -n 1)
  [ "$code" = 200 ] || return 0
  printf '%s\n' "$out" | sed '$d' | python3 -c 'import json,sys; print(json.load(sys.stdin)["Id"])'
}

engine -f "$API/_ping" >/dev/null 2>&1 || {
  log "no engine answers on $SOCK (run scripts/start-dockerd.sh)"; exit 1; }

id=$(image_id)
if [ -n "$id" ]; then
  log "$REPO:$TAG already present"
  echo "$id"
  exit 0
fi

mkdir -p "$CACHE_DIR"
TARBALL=$CACHE_DIR/$(echo "$REPO" | tr / _)-$TAG.tar
if [ ! -s "$TARBALL" ]; then
  command -v mmdebstrap >/dev/null 2>&1 || { log "mmdebstrap not installed (apt-get install mmdebstrap)"; exit 1; }
  # The host's own Debian sources (so an operator's mirror is used) when they are for this
  # suite; otherwise mmdebstrap's default. No archive address is written here.
  set --
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [ -s "$f" ] && grep -Eq "^[[:space:]]*(Suites:.*[[:space:]]|deb[[:space:]].*[[:space:]])$SUITE([[:space:]]|$)" "$f"; then
      set -- "$@" "$f"
    fi
  done
  if [ $# -gt 0 ]; then from="$*"; else from="mmdebstrap's default mirror"; fi
  log "bootstrapping $SUITE ($PACKAGES) from $from"
  tmp=$TARBALL.tmp.$$
  trap 'rm -f "$tmp"' EXIT
  # shellcheck disable=SC2016 # "$1" is expanded by mmdebstrap's hook, not here
  mmdebstrap --quiet --variant=minbase --include="$PACKAGES" --aptopt="$RECOMMENDS" \
    --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    --format=tar "$SUITE" "$tmp" "$@"
  rm -f "$TARBALL.meta"
  mv "$tmp" "$TARBALL"
  trap - EXIT
else
  log "using cached $TARBALL"
fi

# Labels describing the content (shown by the image market) and identifying the rootfs;
# computed once per tarball and kept beside it (a new bootstrap removes it).
META=$TARBALL.meta
if [ ! -s "$META" ]; then
  sha=$(sha256sum "$TARBALL" | cut -d' ' -f1)
  python=$(tar -tf "$TARBALL" | sed -n 's#^\./usr/bin/python\(3\.[0-9][0-9]*\)$#\1#p' | head -n 1)
  printf '%s %s\n' "$sha" "$python" >"$META"
fi
read -r sha python <"$META"
changes=$(python3 - "$sha" "$python" "$PACKAGES" <<'PY'
import json, sys, urllib.parse
sha, python, packages = sys.argv[1], sys.argv[2], sys.argv[3]
labels = {
    "gpucloud.image": "base",
    "gpucloud.image.os": "Debian 12 (bookworm)",
    "gpucloud.image.python": python,
    "gpucloud.image.packages": packages,
    "gpucloud.image.ssh": "true",
    "gpucloud.image.jupyter": "true",
    "gpucloud.image.rootfs-sha256": sha,
}
line = "LABEL " + " ".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
params = [("changes", line),
          ("changes", 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'),
          ("changes", 'CMD ["/bin/bash"]')]
print(urllib.parse.urlencode(params))
PY
)

log "importing $TARBALL as $REPO:$TAG"
out=$(engine -X POST -H 'Content-Type: application/x-tar' --data-binary "@$TARBALL" \
  -w '\n%{http_code}' "$API/images/create?fromSrc=-&repo=$REPO&tag=$TAG&$changes")
code=$(printf '%s\n' "$out" | tail -n 1)
body=$(printf '%s\n' "$out" | sed '$d')
# The engine answers 200 even when the import failed, with errorDetail in the stream.
if [ "$code" != 200 ] || printf '%s' "$body" | grep -q '"errorDetail"'; then
  log "import failed (HTTP $code): $body"
  exit 1
fi

id=$(image_id)
[ -n "$id" ] || { log "import answered $code but $REPO:$TAG is missing: $body"; exit 1; }
echo "$id"

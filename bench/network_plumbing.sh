#!/usr/bin/env bash
# Network plumbing study: what does Docker's user-defined bridge cost at container start, and
# could gpucloud plumb an instance's network itself (CNI-style) and be faster?
#
# Usage: bench/network_plumbing.sh [N]        (N timed runs per variant, default 20; root)
#
# Six variants, each one container from create to SSH-ready, at most one instance container
# alive at a time, the order rotated every run (run i starts with variant i mod 6), after one
# untimed warm-up run of each:
#   bare    Docker's default bridge. The body is bench/instance_latency.py's bare one (same
#           init, 1 CPU, 1 GiB, the same read-only mounts, Init=true): the floor of issue 8.
#   udn     a user-defined bridge with enable_icc=false and a fixed IP, plus the driver's
#           CapDrop and ping_group_range sysctl: what gpucloud does today.
#   ip      NetworkMode "none" (+ explicit Dns), then the network plumbed from here with one
#           `ip` command per step: veth add, host end to our own Linux bridge + up, peer into
#           the container's netns, rename to eth0 (+ a MAC derived from the IP, as Docker
#           does), addr, up, default route. The container's command is a tiny wrapper that
#           waits (bounded, 10 s) for the default route, then execs the same init.
#   batch   the same plumbing with two forks: `ip link add HOST master BR up type veth peer
#           name eth0 address MAC netns PID`, then `nsenter --net=... ip -batch -` (addr, up,
#           route).
#   late    batch plumbing, but the wait sits inside a copy of the init right before it execs
#           sshd (generated from scripts/instance-init/gpucloud-init.sh), so the init's own
#           setup overlaps the plumbing.
#   joined  a pre-started "network holder" (Kubernetes pause-container style): before each run,
#           UNTIMED, a holder container is created and started on udn's network (same fixed
#           IP, ICC off): same image, Cmd sleep infinity, Init, 16 MiB, 0.1 CPU, CapDrop ALL,
#           and the instance's Hostname (Docker refuses Hostname with container: network mode;
#           the joined container gets the holder's). The run waits until it is running and its
#           netns has a default route. The timed part is udn's body (same init, mounts,
#           CapDrop, sysctl) with NetworkMode "container:HOLDER_ID" and without Hostname or
#           NetworkingConfig, so Docker does no network setup on the critical path. The holder
#           is removed after the run, with the instance. Separately (N=10) the script times a
#           pool refill: holder create+start until running with its network up.
# Times, all from just before the create call:
#   running  bare/udn/joined: POST create, POST start and GET json in one curl (keep-alive, --next),
#            then GET json every 20 ms until State.Running (instance_latency.py's definition).
#            ip/batch/late: the same one curl (its inspect gives State.Pid), then the plumbing;
#            "running" = plumbing done (an agent would report running only then).
#   tcp      first successful TCP connect from the host to CONTAINER_IP:22 (tried every 5 ms,
#            bash /dev/tcp, no fork per try);
#   ssh      the SSH banner read on that connection (sshd accepted and forked): the SSH-ready
#            proxy. The host key is pre-provisioned in the init's config dir, as the agent does.
# Plumbing steps are timed one by one; after each self-plumbed run the fork+exec cost of a no-op
# `ip` and `nsenter ... ip` is timed too, and "netlink est." = batch plumbing minus those, an
# estimate of what an agent doing netlink in-process would pay.
#
# Then correctness of the self-plumbed network (two containers): host listener reachable from
# the container (gateway IP and host's primary IP), outbound TCP to OUTSIDE (default
# 1.1.1.1:80, skipped when the host cannot reach it) first WITHOUT, then WITH DOCKER-USER
# accept rules (Docker's FORWARD policy is DROP and an accept in another nftables table cannot
# override it), isolation of two containers on the bridge by an nftables bridge-family drop
# rule (and, for information, what happens without it), DNS with explicit Dns, MTU. Then the
# joined network (one holder + one instance): the instance has the holder's IP and reaches the
# host listener; after `docker restart` of the instance (holder untouched) it still does; after
# `docker restart` of the holder, what the instance is left with (info, no verdict), and whether
# restarting the instance then rejoins the holder's new netns.
#
# Everything it makes is named after its PID and removed on exit, even on failure or Ctrl-C:
# containers and network holders (label gpucloud-bench.network-plumbing=TAG), veths, the Docker network, the Linux
# bridge, its nftables tables, its DOCKER-USER rules (comment TAG), the host listener, the
# temporary dir. Env: IMAGE (gpucloud/base:bookworm-2), DOCKER_SOCK, OUTSIDE, RAW (a path to
# keep the raw TSV).
set -uo pipefail

N=${1:-20}
[[ $N =~ ^[0-9]+$ && $N -ge 1 ]] || { echo "usage: $0 [N>=1]" >&2; exit 2; }
IMAGE=${IMAGE:-gpucloud/base:bookworm-2}
SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
OUTSIDE=${OUTSIDE:-1.1.1.1:80}
API=http://docker/v1.41
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
INIT=$ROOT/scripts/instance-init/gpucloud-init.sh
TAG=gcnp$$
LABEL_KEY=gpucloud-bench.network-plumbing
BR=np$$br                 # our own Linux bridge (<= 15 chars)
VPFX=np$$v                # host-side veth names: ${VPFX}<n>
DNET=gcnp-$$              # the Docker user-defined network
NFT=gcnp-$$               # our nftables tables (ip and bridge family)
TMP=
LISTENER_PID=
SEQ=0

log() { echo "network_plumbing: $*" >&2; }
die() { log "$*"; exit 2; }

# ---- cleanup -------------------------------------------------------------------------------
cleanup() {
  local rc=$? ids id l spec
  trap - EXIT INT TERM
  [[ -n $LISTENER_PID ]] && kill "$LISTENER_PID" 2>/dev/null
  ids=$(curl -sS --unix-socket "$SOCK" -G "$API/containers/json" --data-urlencode all=1 \
        --data-urlencode "filters={\"label\":[\"$LABEL_KEY=$TAG\"]}" 2>/dev/null |
        grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4)
  for id in $ids; do
    curl -sS --unix-socket "$SOCK" -X DELETE "$API/containers/$id?force=1&v=1" >/dev/null 2>&1
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$VPFX"); do
    ip link del "$l" 2>/dev/null
  done
  curl -sS --unix-socket "$SOCK" -X DELETE "$API/networks/$DNET" >/dev/null 2>&1
  ip link del "$BR" 2>/dev/null
  nft delete table ip "$NFT" 2>/dev/null
  nft delete table bridge "$NFT" 2>/dev/null
  # (the whole listing first: grep -m1 would SIGPIPE iptables and pipefail end the loop)
  while spec=$(iptables -S DOCKER-USER 2>/dev/null) && spec=$(grep -- "--comment $TAG" <<<"$spec") &&
        [[ -n $spec ]]; do
    spec=${spec%%$'\n'*}
    eval "iptables ${spec/-A DOCKER-USER/-D DOCKER-USER}" 2>/dev/null || break
  done
  [[ -n $TMP ]] && rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

# ---- checks and setup ----------------------------------------------------------------------
[[ $EUID -eq 0 ]] || die "needs root"
for c in curl ip nsenter nft iptables ssh-keygen awk; do
  command -v "$c" >/dev/null || die "needs $c"
done
[[ -S $SOCK ]] || die "no Docker socket at $SOCK"
[[ -f $INIT ]] || die "no init script at $INIT"
TMP=$(mktemp -d /tmp/network-plumbing.XXXXXX)
mkfifo "$TMP/nap"
exec {NAPFD}<>"$TMP/nap"
nap() { read -r -t "$1" -u "$NAPFD" _ || true; }   # sleep without a fork
now() { local t=$EPOCHREALTIME; echo $((10#${t/./})); }  # microseconds
NOW=0
stamp() { local t=$EPOCHREALTIME; NOW=$((10#${t/./})); }

engine() { curl -sS --unix-socket "$SOCK" "$@"; }
engine "$API/images/$IMAGE/json" -o /dev/null -w '%{http_code}' | grep -q 200 || die "no image $IMAGE"

# Two free /24s: our bridge and the Docker network.
pick_subnet() {
  local i used
  used=$(ip -4 route show; ip -4 addr show)
  for i in $(seq "$1" 250); do
    grep -q "10\.233\.$i\." <<<"$used" || { echo "$i"; return; }
  done
  return 1
}
S3=$(pick_subnet 77) || die "no free 10.233.x.0/24"
S2=$(pick_subnet $((S3 + 1))) || die "no free 10.233.x.0/24"
GW3=10.233.$S3.1; IP3=10.233.$S3.10; SUB3=10.233.$S3.0/24
GW2=10.233.$S2.1; IP2=10.233.$S2.10; SUB2=10.233.$S2.0/24
mac_of() { local IFS=.; set -- $1; printf '02:42:%02x:%02x:%02x:%02x' "$1" "$2" "$3" "$4"; }
UPLINK=$(ip -4 route show default | awk '{for(i=1;i<=NF;i++) if ($i=="dev") {print $(i+1); exit}}')
HOST_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for(i=1;i<=NF;i++) if ($i=="src") {print $(i+1); exit}}')
MTU=$(cat "/sys/class/net/${UPLINK:-lo}/mtu" 2>/dev/null || echo 1500)
[[ ${UPLINK:-lo} == lo ]] && MTU=1500
DNS_JSON=$(awk '/^nameserver/ && $2 !~ /^127\./ && $2 !~ /:/ {printf "%s\"%s\"", n++ ? "," : "", $2}' /etc/resolv.conf)
[[ -n $DNS_JSON ]] || DNS_JSON='"1.1.1.1"'

# Our bridge (gpucloud would own it): address, up; NAT out; forward rules in our own table;
# bridge-local forwarding dropped in a bridge-family table (independent of br_netfilter).
ip link add "$BR" type bridge || die "cannot create bridge $BR"
ip addr add "$GW3/24" dev "$BR" && ip link set "$BR" up || die "cannot configure $BR"
nft -f - <<EOF || die "cannot load nftables tables"
table ip $NFT {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr $SUB3 oifname != "$BR" masquerade
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "$BR" oifname != "$BR" accept
    oifname "$BR" ct state established,related accept
  }
}
table bridge $NFT {
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "$VPFX*" oifname "$VPFX*" counter drop
  }
}
EOF

# The Docker network (what gpucloud does today).
engine -X POST -H 'Content-Type: application/json' "$API/networks/create" -o "$TMP/net.json" -d "{
  \"Name\":\"$DNET\",\"Driver\":\"bridge\",\"CheckDuplicate\":true,\"Internal\":false,\"EnableIPv6\":false,
  \"Options\":{\"com.docker.network.bridge.enable_icc\":\"false\"},
  \"Labels\":{\"$LABEL_KEY\":\"$TAG\"},
  \"IPAM\":{\"Driver\":\"default\",\"Config\":[{\"Subnet\":\"$SUB2\",\"Gateway\":\"$GW2\"}]}}" ||
  die "cannot create the Docker network"
grep -q '"Id"' "$TMP/net.json" || die "cannot create the Docker network: $(cat "$TMP/net.json")"

# The init's config: a pre-made host key (the agent makes one before the first boot).
mkdir -p "$TMP/config"
ssh-keygen -q -t ed25519 -N '' -C network-plumbing -f "$TMP/config/ssh_host_ed25519_key" </dev/null ||
  die "ssh-keygen failed"
# The network wait for the self-plumbed variants: bounded, no fork while the route is there.
cat >"$TMP/netwait" <<'EOF'
#!/bin/sh
# Waits (at most ~10 s) for the default route the agent plumbs, then runs the real init.
i=0
found=
while [ $i -lt 2000 ]; do
  while read -r ifc dst rest; do
    if [ "$dst" = 00000000 ]; then found=1; break; fi
  done </proc/net/route
  [ -n "$found" ] && break
  i=$((i + 1))
  sleep 0.005 2>/dev/null || sleep 1
done
[ -n "$found" ] || echo "gpucloud-init: no network after 10 s, starting anyway" >&2
exec /bin/sh /.gpucloud/init
EOF

# "late": the same wait, but inside a copy of the init, right before it execs sshd, so the
# init's own setup (keys, environment) overlaps the plumbing.
{ sed -n '2,/^exec /p' "$TMP/netwait" | sed '$d; s/^/  /' | sed '1i wait_net() {' ; echo '}'; } >"$TMP/waitfn"
awk -v fn="$TMP/waitfn" '
  /^  exec "\$SSHD" -D/ && !done { while ((getline l < fn) > 0) print l; print "  wait_net"; done = 1 }
  { print }' "$INIT" >"$TMP/init-late"
grep -q '^  wait_net$' "$TMP/init-late" || die "cannot find sshd's exec in $INIT for the late variant"

MOUNTS="{\"Type\":\"bind\",\"Source\":\"$INIT\",\"Target\":\"/.gpucloud/init\",\"ReadOnly\":true},
        {\"Type\":\"bind\",\"Source\":\"$TMP/config\",\"Target\":\"/.gpucloud/config\",\"ReadOnly\":true}"
body() {  # variant name -> JSON body
  local v=$1 name=$2 net cmd='["/bin/sh","/.gpucloud/init"]' mounts=$MOUNTS extra= netcfg=
  local host="\"Hostname\":\"$name\","
  case $v in
    bare) net=default ;;
    udn) net=$DNET
         extra=',"CapDrop":["NET_RAW","MKNOD","SETPCAP"],"Sysctls":{"net.ipv4.ping_group_range":"0 2147483647"}'
         netcfg=",\"NetworkingConfig\":{\"EndpointsConfig\":{\"$DNET\":{\"IPAMConfig\":{\"IPv4Address\":\"$IP2\"}}}}" ;;
    joined) net=container:$HOLDER_ID   # Hostname (and Dns, ExtraHosts, ports, MAC) refused here
         host=
         extra=',"CapDrop":["NET_RAW","MKNOD","SETPCAP"],"Sysctls":{"net.ipv4.ping_group_range":"0 2147483647"}' ;;
    ip|batch|late) net=none
         extra=",\"Dns\":[$DNS_JSON],\"CapDrop\":[\"NET_RAW\",\"MKNOD\",\"SETPCAP\"],\"Sysctls\":{\"net.ipv4.ping_group_range\":\"0 2147483647\"}"
         cmd='["/bin/sh","/.gpucloud/netwait"]'
         mounts="$mounts,{\"Type\":\"bind\",\"Source\":\"$TMP/netwait\",\"Target\":\"/.gpucloud/netwait\",\"ReadOnly\":true}"
         if [[ $v == late ]]; then
           cmd='["/bin/sh","/.gpucloud/init-late"]'
           mounts="$mounts,{\"Type\":\"bind\",\"Source\":\"$TMP/init-late\",\"Target\":\"/.gpucloud/init-late\",\"ReadOnly\":true}"
         fi ;;
  esac
  printf '%s' "{\"Image\":\"$IMAGE\",$host\"Labels\":{\"$LABEL_KEY\":\"$TAG\"},
    \"Env\":[\"NVIDIA_VISIBLE_DEVICES=void\"],\"Entrypoint\":[],\"Cmd\":$cmd,\"Tty\":false,\"OpenStdin\":false,
    \"HostConfig\":{\"NanoCpus\":1000000000,\"Memory\":1073741824,\"MemorySwap\":1073741824,\"PidsLimit\":4096,
      \"ShmSize\":536870912,\"Init\":true,\"RestartPolicy\":{\"Name\":\"no\"},\"Privileged\":false,
      \"ReadonlyRootfs\":false,\"IpcMode\":\"private\",\"NetworkMode\":\"$net\",\"Mounts\":[$mounts],
      \"LogConfig\":{\"Type\":\"json-file\",\"Config\":{\"max-size\":\"10m\",\"max-file\":\"2\"}}$extra}$netcfg}"
}

# create + start + inspect on one keep-alive connection; prints the inspect JSON (last).
create_start() {
  local v=$1 name=$2
  engine -X POST -H 'Content-Type: application/json' -d "$(body "$v" "$name")" \
    "$API/containers/create?name=$name" -o "$TMP/create.json" \
    --next --unix-socket "$SOCK" -sS -X POST "$API/containers/$name/start" -o "$TMP/start.out" \
    --next --unix-socket "$SOCK" -sS "$API/containers/$name/json"
}
json_field() {  # crude: first "key":value in $1
  local re="\"$2\":\"?([^\",}]*)"
  [[ $1 =~ $re ]] && echo "${BASH_REMATCH[1]}"
}
remove_container() {
  engine -X DELETE "$API/containers/$1?force=1&v=1" -o /dev/null
}

# The joined variant's network holder: on udn's network with a fixed IP, sleeping.
holder_body() {  # name ip -> JSON
  printf '%s' "{\"Image\":\"$IMAGE\",\"Hostname\":\"$1\",\"Labels\":{\"$LABEL_KEY\":\"$TAG\",\"$LABEL_KEY.role\":\"holder\"},
    \"Entrypoint\":[],\"Cmd\":[\"sleep\",\"infinity\"],\"Tty\":false,\"OpenStdin\":false,
    \"HostConfig\":{\"NanoCpus\":100000000,\"Memory\":16777216,\"MemorySwap\":16777216,\"PidsLimit\":16,
      \"Init\":true,\"RestartPolicy\":{\"Name\":\"no\"},\"Privileged\":false,\"CapDrop\":[\"ALL\"],
      \"IpcMode\":\"private\",\"NetworkMode\":\"$DNET\",
      \"LogConfig\":{\"Type\":\"json-file\",\"Config\":{\"max-size\":\"1m\",\"max-file\":\"1\"}}},
    \"NetworkingConfig\":{\"EndpointsConfig\":{\"$DNET\":{\"IPAMConfig\":{\"IPv4Address\":\"$2\"}}}}}"
}
has_default_route() {  # pid: its netns has a default route (read via /proc, no fork)
  local ifc dst rest
  while read -r ifc dst rest; do [[ $dst == 00000000 ]] && return 0; done <"/proc/$1/net/route"
  return 1
}
HOLDER_ID= HOLDER_PID=
holder_up() {  # name ip: create + start + inspect (one curl), then every 5 ms until running,
               # with the IP in inspect and a default route in its netns. Sets HOLDER_ID/PID.
  local name=$1 hip=$2 inspect deadline=$(( $(now) + 30000000 ))
  HOLDER_ID= HOLDER_PID=
  inspect=$(engine -X POST -H 'Content-Type: application/json' -d "$(holder_body "$name" "$hip")" \
    "$API/containers/create?name=$name" -o "$TMP/hcreate.json" \
    --next --unix-socket "$SOCK" -sS -X POST "$API/containers/$name/start" -o "$TMP/hstart.out" \
    --next --unix-socket "$SOCK" -sS "$API/containers/$name/json") || { log "holder $name: engine call failed"; return 1; }
  until [[ $inspect == *'"Running":true'* && $inspect == *"\"IPAddress\":\"$hip\""* ]] &&
        HOLDER_PID=$(json_field "$inspect" Pid) && has_default_route "$HOLDER_PID" 2>/dev/null; do
    if [[ $inspect == *'"Status":"exited"'* || $inspect == *'"Status":"dead"'* ||
          $inspect == *'"message":'* || $(now) -gt $deadline ]]; then
      log "holder $name not up: ${inspect:0:300} $(cat "$TMP/hcreate.json" "$TMP/hstart.out" 2>/dev/null)"
      return 1
    fi
    nap 0.005
    inspect=$(engine "$API/containers/$name/json")
  done
  HOLDER_ID=$(json_field "$inspect" Id)
  [[ -n $HOLDER_ID ]]
}

# TCP connect, then the SSH banner; sets TCP_US / SSH_US (from T0), empty until done.
tcp_wait() {
  local ip=$1 deadline=$(( $(now) + 30000000 )) fd line
  TCP_US= SSH_US=
  while :; do
    fd=
    { exec {fd}<>"/dev/tcp/$ip/22"; } 2>/dev/null
    if [[ -n $fd ]]; then
      stamp; TCP_US=$((NOW - T0))
      if read -r -t 3 -u "$fd" line && [[ $line == SSH-* ]]; then
        stamp; SSH_US=$((NOW - T0))
      fi
      exec {fd}>&-
      [[ -n $SSH_US ]] && return 0
      TCP_US=   # accepted but no banner yet (should not happen): try again
    fi
    (( $(now) > deadline )) && return 1
    nap 0.005
  done
}

plumb_ip() {  # one ip command per step
  local pid=$1 hv=$2 pv=$2p ns=/proc/$1/ns/net mac
  mac=$(mac_of "$IP3")
  STEP_PREFIX=veth_add step x ip link add "$hv" mtu "$MTU" type veth peer name "$pv" mtu "$MTU" || return 1
  STEP_PREFIX=host_master_up step x ip link set "$hv" master "$BR" up || return 1
  STEP_PREFIX=peer_to_netns step x ip link set "$pv" netns "$pid" || return 1
  STEP_PREFIX=rename_mac step x nsenter --net="$ns" ip link set "$pv" name eth0 address "$mac" || return 1
  STEP_PREFIX=addr step x nsenter --net="$ns" ip addr add "$IP3/24" dev eth0 || return 1
  STEP_PREFIX=up step x nsenter --net="$ns" ip link set eth0 up || return 1
  STEP_PREFIX=route step x nsenter --net="$ns" ip route add default via "$GW3" || return 1
}
plumb_batch() {  # two forks
  local pid=$1 hv=$2 ns=/proc/$1/ns/net mac
  mac=$(mac_of "$IP3")
  STEP_PREFIX=veth_add_master_up_netns step x ip link add "$hv" mtu "$MTU" master "$BR" up \
    type veth peer name eth0 mtu "$MTU" address "$mac" netns "$pid" || return 1
  STEP_PREFIX=nsenter_ip_batch step x nsenter --net="$ns" ip -batch - \
    <<<"addr add $IP3/24 dev eth0
link set eth0 up
route add default via $GW3" || return 1
}
step() {  # step x cmd...: runs cmd, appends "$STEP_PREFIX<TAB>us" to STEPS
  local t0=$EPOCHREALTIME t1
  "${@:2}" || { log "step $STEP_PREFIX failed: ${*:2}"; return 1; }
  t1=$EPOCHREALTIME
  STEPS+="$STEP_PREFIX	$((10#${t1/./} - 10#${t0/./}))
"
}
noop_cost() {  # fork+exec cost of a no-op ip / nsenter+ip
  local pid=$1
  STEP_PREFIX=noop_ip step x ip link show dev lo >/dev/null
  STEP_PREFIX=noop_nsenter_ip step x nsenter --net="/proc/$pid/ns/net" ip link show dev lo >/dev/null
}

# Polls GET json every 20 ms (as instance_latency.py) until State.Running; uses $inspect, $name, $v.
wait_running() {
  local deadline=$(( $(now) + 30000000 ))
  until [[ $inspect == *'"Running":true'* ]]; do
    if [[ $inspect == *'"Status":"exited"'* || $inspect == *'"Status":"dead"'* ||
          $inspect == *'"message":'* || $(now) -gt $deadline ]]; then
      log "$v: $name not running: ${inspect:0:300} $(cat "$TMP/create.json" 2>/dev/null)"
      return 1
    fi
    nap 0.02
    inspect=$(engine "$API/containers/$name/json")
  done
}

# One run of one variant; appends "variant run running_us tcp_us ssh_us" to RESULTS and the
# plumbing steps to STEPSFILE (timed runs only).
RESULTS=$TMP/results.tsv
STEPSFILE=$TMP/steps.tsv
: >"$RESULTS"; : >"$STEPSFILE"
run_one() {
  local v=$1 run=$2 name inspect pid ip running_us hv
  SEQ=$((SEQ + 1))
  name=$TAG-$v-$SEQ
  hv=$VPFX$SEQ
  STEPS=
  if [[ $v == joined ]]; then   # untimed: what the warm pool would hold ready
    holder_up "$name-holder" "$IP2" || return 1
  fi
  stamp; T0=$NOW
  inspect=$(create_start "$v" "$name") || { log "$v: engine call failed"; return 1; }
  case $v in
    bare|udn|joined)
      wait_running || return 1
      stamp; running_us=$((NOW - T0))
      if [[ $v == udn || $v == joined ]]; then ip=$IP2; else
        ip=$(grep -o '"IPAddress":"[0-9.]*"' <<<"$inspect" | grep -v '""' | head -1 | cut -d'"' -f4)
      fi
      ;;
    ip|batch|late)
      wait_running || return 1
      pid=$(json_field "$inspect" Pid)
      [[ -n $pid && $pid != 0 ]] || { log "$v: no pid"; return 1; }
      if [[ $v == ip ]]; then plumb_ip "$pid" "$hv" || return 1
      else plumb_batch "$pid" "$hv" || return 1; fi
      stamp; running_us=$((NOW - T0))
      ip=$IP3
      ;;
  esac
  [[ -n $ip ]] || { log "$v: no IP"; return 1; }
  tcp_wait "$ip" || { log "$v: no SSH banner from $ip within 30 s"; return 1; }
  [[ $v == ip || $v == batch || $v == late ]] && noop_cost "$pid"
  if [[ $run -ge 0 ]]; then
    printf '%s\t%d\t%d\t%d\t%d\n' "$v" "$run" "$running_us" "$TCP_US" "$SSH_US" >>"$RESULTS"
    [[ -n $STEPS ]] && printf '%s' "$STEPS" | sed "s/^/$v\t/" >>"$STEPSFILE"
  fi
  remove_container "$name"
  [[ $v == joined ]] && remove_container "$HOLDER_ID"
  ip link del "$hv" 2>/dev/null   # normally gone with the container's netns
  return 0
}

VARIANTS=(bare udn ip batch late joined)
log "docker $(engine "$API/version" | grep -o '"Version":"[^"]*"' | head -1 | cut -d'"' -f4), image $IMAGE, $N runs, bridge $BR $SUB3, network $DNET $SUB2, uplink ${UPLINK:-none} mtu $MTU"
log "warm-up"
for v in "${VARIANTS[@]}"; do run_one "$v" -1 || die "warm-up of $v failed"; done
for ((r = 0; r < N; r++)); do
  for ((k = 0; k < ${#VARIANTS[@]}; k++)); do
    v=${VARIANTS[$(((r + k) % ${#VARIANTS[@]}))]}
    run_one "$v" "$r" || die "run $r of $v failed"
  done
  printf '.' >&2
done
echo >&2
# A pool refill: one holder created and started until running with its network up (as in the
# joined runs, but timed), then removed (timed too). One untimed warm-up, then 10.
REFILL=$TMP/refill.tsv
: >"$REFILL"
for ((r = -1; r < 10; r++)); do
  SEQ=$((SEQ + 1))
  stamp; T0=$NOW
  holder_up "$TAG-refill-$SEQ" "$IP2" || die "holder refill $r failed"
  stamp; up_us=$((NOW - T0))
  remove_container "$HOLDER_ID"
  stamp
  [[ $r -ge 0 ]] && printf '%d\t%d\n' "$up_us" "$((NOW - T0 - up_us))" >>"$REFILL"
done
[[ -n ${RAW:-} ]] && { cp "$RESULTS" "$RAW"; cp "$STEPSFILE" "$RAW.steps"; cp "$REFILL" "$RAW.refill"; }

# ---- report --------------------------------------------------------------------------------
pct() {  # stdin: numbers (us); args: p... -> ms with 1 decimal, linear interpolation
  sort -n | awk -v ps="$*" 'BEGIN{n=split(ps,P," ")} {x[NR]=$1}
    END{for(i=1;i<=n;i++){k=(NR-1)*P[i]/100; lo=int(k)+1; hi=lo+(lo<NR); f=k-int(k);
        printf "%s%.1f", (i>1?" ":""), (x[lo]+(x[hi]-x[lo])*f)/1000} print ""}'
}
echo
echo "== start latency, ms ($N runs each; from just before POST create) =="
printf '%-7s %9s %9s | %9s %9s | %9s %9s\n' variant "run p50" "run p95" "tcp p50" "tcp p95" "ssh p50" "ssh p95"
declare -A P50
for v in "${VARIANTS[@]}"; do
  read -r r50 r95 < <(awk -v v="$v" '$1==v{print $3}' "$RESULTS" | pct 50 95)
  read -r t50 t95 < <(awk -v v="$v" '$1==v{print $4}' "$RESULTS" | pct 50 95)
  read -r s50 s95 < <(awk -v v="$v" '$1==v{print $5}' "$RESULTS" | pct 50 95)
  P50[$v.run]=$r50 P50[$v.ssh]=$s50
  printf '%-7s %9s %9s | %9s %9s | %9s %9s\n' "$v" "$r50" "$r95" "$t50" "$t95" "$s50" "$s95"
done
echo
echo "== plumbing steps, ms (p50 / p95) =="
for v in ip batch late; do
  for s in $(awk -v v="$v" '$1==v{print $2}' "$STEPSFILE" | awk '!seen[$0]++'); do
    printf '%-6s %-26s %s\n' "$v" "$s" "$(awk -v v="$v" -v s="$s" '$1==v && $2==s{print $3}' "$STEPSFILE" | pct 50 95 | sed 's/ / \/ /')"
  done
  printf '%-6s %-26s %s\n' "$v" "TOTAL (excl. no-ops)" "$(awk -v v="$v" -v k="$([[ $v == ip ]] && echo 7 || echo 2)" '$1==v && $2!~/^noop/{c++; sum+=$3; if(c%k==0){print sum; sum=0}}' "$STEPSFILE" | pct 50 95 | sed 's/ / \/ /')"
done
# netlink estimate: per batch run, plumbing total - (no-op ip + no-op nsenter ip).
est=$(awk '$1=="batch"{if($2=="veth_add_master_up_netns")a=$3; else if($2=="nsenter_ip_batch")b=$3;
           else if($2=="noop_ip")c=$3; else if($2=="noop_nsenter_ip"){d=$3; e=a+b-c-d; print (e<0?0:e)}}' "$STEPSFILE" | pct 50 95 | sed 's/ / \/ /')
printf '%-6s %-26s %s\n' "" "netlink in-process est." "$est"
echo
echo "== joined: holder pool refill, ms (10 runs, p50 / p95) =="
printf '%-36s %s\n' "holder create+start -> running, net up" "$(cut -f1 "$REFILL" | pct 50 95 | sed 's/ / \/ /')"
printf '%-36s %s\n' "holder remove (force)" "$(cut -f2 "$REFILL" | pct 50 95 | sed 's/ / \/ /')"
echo
for v in udn ip batch late joined; do
  awk -v v="$v" -v a="${P50[$v.run]}" -v b="${P50[$v.ssh]}" -v c="${P50[bare.run]}" -v d="${P50[bare.ssh]}" \
    'BEGIN{printf "%-6s vs bare (p50): running %+.1f ms, ssh %.2fx (engine only; gpucloud'"'"'s own overhead comes on top)\n", v, a-c, b/d}'
done

# ---- correctness of the self-plumbed network ------------------------------------------------
echo
echo "== correctness (self-plumbed, two containers on $BR) =="
FAILS=0
check() {  # check NAME expected(ok|fail) cmd...
  local name=$1 want=$2 got
  shift 2
  if "$@" >/dev/null 2>&1; then got=ok; else got=fail; fi
  if [[ $got == "$want" ]]; then printf '  PASS  %-58s (%s)\n' "$name" "$got"
  else printf '  FAIL  %-58s (got %s, want %s)\n' "$name" "$got" "$want"; FAILS=$((FAILS + 1)); fi
}
info() {  # info NAME cmd...: reports ok/fail without a verdict
  local name=$1; shift
  if "$@" >/dev/null 2>&1; then printf '  info  %-58s ok\n' "$name"
  else printf '  info  %-58s fail\n' "$name"; fi
}
start_plumbed() {  # name ip -> leaves it running and plumbed (batch way)
  local name=$1 cip=$2 inspect pid hv
  SEQ=$((SEQ + 1)); hv=$VPFX$SEQ
  inspect=$(create_start batch "$name") || return 1
  pid=$(json_field "$inspect" Pid); [[ -n $pid && $pid != 0 ]] || return 1
  ip link add "$hv" mtu "$MTU" master "$BR" up type veth peer name eth0 mtu "$MTU" \
    address "$(mac_of "$cip")" netns "$pid" &&
  nsenter --net="/proc/$pid/ns/net" ip -batch - <<<"addr add $cip/24 dev eth0
link set eth0 up
route add default via $GW3"
}
cx() { local c=$1; shift; docker exec "$c" "$@"; }
C1=$TAG-c1; C2=$TAG-c2; IPC1=10.233.$S3.21; IPC2=10.233.$S3.22
start_plumbed "$C1" "$IPC1" && start_plumbed "$C2" "$IPC2" || die "cannot start the correctness containers"
T0=$(now); tcp_wait "$IPC1" && T0=$(now) && tcp_wait "$IPC2" || die "correctness containers not SSH-ready"
LPORT=$((20000 + $$ % 20000))
/usr/bin/python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', $LPORT)); s.listen(16)
while True:
    c, _ = s.accept(); c.sendall(b'hello\n'); c.close()
" &
LISTENER_PID=$!
nap 0.3
tcp_from() {  # container host port [seconds]
  cx "$1" timeout "${4:-3}" bash -c "exec 3<>/dev/tcp/$2/$3"
}
http_from() {  # container host port: an HTTP status line comes back
  cx "$1" timeout 4 bash -c "exec 3<>/dev/tcp/$2/$3; printf 'HEAD / HTTP/1.0\r\nHost: $2\r\n\r\n' >&3; read -r l <&3; [[ \$l == HTTP/* ]]"
}
echo "  iptables FORWARD policy: $(iptables -S FORWARD | awk '$1=="-P"{print $3}'), br_netfilter bridge-nf-call-iptables=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo absent)"
check "host -> c1:22 (sshd in the container)" ok bash -c "exec 3<>/dev/tcp/$IPC1/22"
check "c1 -> gateway $GW3:$LPORT (host listener)" ok tcp_from "$C1" "$GW3" "$LPORT"
[[ -n $HOST_IP ]] && check "c1 -> host primary IP $HOST_IP:$LPORT" ok tcp_from "$C1" "$HOST_IP" "$LPORT"
check "c1 -> c2:22 (nft bridge-family drop on $VPFX*)" fail tcp_from "$C1" "$IPC2" 22 2
echo "  bridge drop counter: $(nft list table bridge "$NFT" | grep -o 'packets [0-9]* bytes [0-9]*')"
nft delete table bridge "$NFT"
info "c1 -> c2:22 WITHOUT the bridge rule (Docker's FORWARD policy only)" tcp_from "$C1" "$IPC2" 22 2
nft -f - <<EOF
table bridge $NFT {
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "$VPFX*" oifname "$VPFX*" counter drop
  }
}
EOF
check "c1 -> c2:22 with the bridge rule back" fail tcp_from "$C1" "$IPC2" 22 2
OUT_H=${OUTSIDE%:*}; OUT_P=${OUTSIDE##*:}
if timeout 4 bash -c "exec 3<>/dev/tcp/$OUT_H/$OUT_P" 2>/dev/null; then
  check "c1 -> $OUTSIDE, NAT + nft accept only (no DOCKER-USER rule)" fail tcp_from "$C1" "$OUT_H" "$OUT_P" 3
  iptables -I DOCKER-USER -i "$BR" ! -o "$BR" -m comment --comment "$TAG" -j ACCEPT
  iptables -I DOCKER-USER -o "$BR" -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "$TAG" -j ACCEPT
  check "c1 -> $OUTSIDE with DOCKER-USER accept (in/out of $BR)" ok http_from "$C1" "$OUT_H" "$OUT_P"
  check "c1 -> c2:22 still dropped with DOCKER-USER accept" fail tcp_from "$C1" "$IPC2" 22 2
else
  echo "  skip  outbound: the host itself cannot reach $OUTSIDE"
fi
NS1=$(awk '/^nameserver/{print $2; exit}' <(cx "$C1" cat /etc/resolv.conf))
check "c1 /etc/resolv.conf has the explicit Dns ($NS1)" ok grep -q "\"$NS1\"" <<<"$DNS_JSON"
check "c1 DNS query to $NS1 gets an answer (any rcode)" ok cx "$C1" timeout 4 python3 -c "
import socket, struct
q = struct.pack('>HHHHHH', 0x4242, 0x0100, 1, 0, 0, 0) + b'\x07example\x03com\x00' + struct.pack('>HH', 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(q, ('$NS1', 53))
r = s.recv(512); assert r[:2] == b'\x42\x42'
"
info "c1 getent hosts example.com (resolver may answer NXDOMAIN here)" cx "$C1" getent hosts example.com
check "c1 eth0 MTU = uplink MTU ($MTU)" ok bash -c "[[ \$(docker exec $C1 cat /sys/class/net/eth0/mtu) == $MTU ]]"
check "c1 has no IPv6 address on eth0 but link-local" ok bash -c "! docker exec $C1 ip -6 addr show dev eth0 scope global | grep -q inet6"

echo "  -- joined: holder h1 on $DNET, instance j1 with NetworkMode container:h1 --"
H1=$TAG-h1; J1=$TAG-j1; HIP=10.233.$S2.30
holder_up "$H1" "$HIP" || die "cannot start the correctness holder"
v=joined name=$J1
inspect=$(create_start joined "$J1") && wait_running || die "cannot start the joined correctness container"
T0=$(now); tcp_wait "$HIP" || die "joined correctness container not SSH-ready at $HIP"
netns_of() { readlink "/proc/$(docker inspect -f '{{.State.Pid}}' "$1")/ns/net"; }
has_ip() { docker exec "$1" ip -4 -o addr show dev eth0 | grep -q " $2/"; }
same_netns() { local a b; a=$(netns_of "$1") && b=$(netns_of "$2") && [[ -n $a && $a == "$b" ]]; }
ssh_banner() {  # ip: an SSH banner within 3 s
  timeout 3 bash -c "exec 3<>/dev/tcp/$1/22; read -r -t 2 l <&3; [[ \$l == SSH-* ]]"
}
check "j1 eth0 has the holder's IP $HIP" ok has_ip "$J1" "$HIP"
check "j1 and h1 share one netns" ok same_netns "$J1" "$H1"
check "j1 -> gateway $GW2:$LPORT (host listener)" ok tcp_from "$J1" "$GW2" "$LPORT"
[[ -n $HOST_IP ]] && check "j1 -> host primary IP $HOST_IP:$LPORT" ok tcp_from "$J1" "$HOST_IP" "$LPORT"
echo "  j1 hostname: $(docker exec "$J1" hostname) (h1's Hostname: $H1); j1 /etc/hosts last line: $(docker exec "$J1" tail -1 /etc/hosts)"
docker restart -t 2 "$J1" >/dev/null || die "docker restart of j1 failed"
T0=$(now)
check "after docker restart j1 (h1 untouched): SSH banner at $HIP" ok tcp_wait "$HIP"
check "after docker restart j1: eth0 has $HIP" ok has_ip "$J1" "$HIP"
check "after docker restart j1: j1 -> gateway $GW2:$LPORT" ok tcp_from "$J1" "$GW2" "$LPORT"
OLDNS=$(netns_of "$J1")
docker restart -t 2 "$H1" >/dev/null || die "docker restart of h1 failed"
nap 0.5
info "after docker restart h1: j1 still running" bash -c "[[ \$(docker inspect -f '{{.State.Running}}' $J1) == true ]]"
echo "  after docker restart h1: j1's links: $(docker exec "$J1" ip -o link show | awk -F': ' '{printf "%s ", $2}')"
info "after docker restart h1: j1 eth0 has $HIP" has_ip "$J1" "$HIP"
info "after docker restart h1: j1 still in its old netns (not h1's new one)" bash -c "[[ '$(netns_of "$J1")' == '$OLDNS' && '$(netns_of "$H1")' != '$OLDNS' ]]"
info "after docker restart h1: host -> $HIP:22 gives j1's SSH banner" ssh_banner "$HIP"
info "after docker restart h1: j1 -> gateway $GW2:$LPORT" tcp_from "$J1" "$GW2" "$LPORT" 2
docker restart -t 2 "$J1" >/dev/null 2>&1 || echo "  docker restart j1 after h1's restart failed"
T0=$(now)
info "then docker restart j1: SSH banner at $HIP again (rejoined h1's new netns)" tcp_wait "$HIP"
info "then docker restart j1: shares h1's new netns" same_netns "$J1" "$H1"
remove_container "$J1"; remove_container "$H1"
echo "  correctness failures: $FAILS"
exit 0

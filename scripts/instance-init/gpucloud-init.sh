#!/bin/sh
# gpucloud instance init. Bind-mounted read-only into every instance at /.gpucloud/init and run
# as the container's command under the engine's own init (Init=true), so it is PID 2 and
# whatever it execs is reaped properly.
#
# Inputs: the read-only directory /.gpucloud/config/ (written by the agent, never part of the
# container's environment, so a saved image carries no secret):
#   authorized_keys   OpenSSH public keys for root (optional)
#   ssh_host_ed25519_key, .pub   the instance's SSH host key (optional, see below)
#   password_hash     root's password as a crypt(3) hash, e.g. SHA-512 "$6$..." (optional;
#                     absent = password logins are off)
#   jupyter_token, jupyter_base_url   for an image with Jupyter Notebook (optional): its
#                     per-instance token and base URL (/api/v1/instances/ID/jupyter/)
#   hostname          the instance's name (only for an instance on a network holder, whose
#                     /etc/hostname and /etc/hosts the engine writes with the holder's name:
#                     both are rewritten in place here; the agent sets the kernel's hostname)
#
# What it does, in about 10 ms:
#   - installs the keys into /root/.ssh/authorized_keys inside a managed block (lines the user
#     added outside the block are kept);
#   - sets or leaves root's password hash, and turns sshd's password login on or off;
#   - uses the instance's ed25519 host key from $CONFIG/ssh_host_ed25519_key, made by the
#     agent before the first boot (so the agent knows it at once, and a saved image never
#     holds it). Without one (an instance made before that, a host without ssh-keygen) it
#     generates /etc/ssh/ssh_host_ed25519_key at first boot only; that one lives on the
#     system disk, so saving such an instance as an image MUST delete /etc/ssh/ssh_host_*
#     from the saved filesystem, or every instance made from the image would share one key;
#   - prints "GPUCLOUD-HOST-KEY <type> <base64>" on stdout (the container log) so the agent
#     can show the key without exec'ing (it may also `cat /etc/ssh/ssh_host_ed25519_key.pub`);
#   - makes the container's environment (NVIDIA_VISIBLE_DEVICES, CUDA's PATH, ...) visible to
#     SSH sessions: login shells through /etc/profile.d (Debian's /etc/profile resets PATH),
#     every session, `ssh host python train.py` too, through sshd's SetEnv;
#   - execs sshd in the foreground, or, in an image without sshd, waits forever so the
#     instance is still reachable through the web terminal (exec).
# No `ssh-keygen -A`: one ed25519 key is all sshd needs and it is the fast one.

CONFIG=/.gpucloud/config
KEY=/etc/ssh/ssh_host_ed25519_key
BEGIN_MARK='# --- gpucloud managed keys: edits between these lines are replaced at boot ---'
END_MARK='# --- end of gpucloud managed keys ---'

log() { echo "gpucloud-init: $*" >&2; }

umask 022

# --- authorized keys ---------------------------------------------------------------------
install_keys() {
  mkdir -p /root/.ssh || return 1
  chmod 700 /root/.ssh
  ak=/root/.ssh/authorized_keys
  tmp=/root/.ssh/.authorized_keys.gpucloud.$$
  (
    umask 077
    if [ -f "$ak" ]; then
      sed "/^$BEGIN_MARK\$/,/^$END_MARK\$/d" "$ak"
    fi
    if [ -s "$CONFIG/authorized_keys" ]; then
      echo "$BEGIN_MARK"
      # Non-blank lines only, each ending with a newline (even the last one).
      awk 'NF' "$CONFIG/authorized_keys"
      echo "$END_MARK"
    fi
  ) >"$tmp" && chmod 600 "$tmp" && mv -f "$tmp" "$ak"
  rm -f "$tmp"
}
# `init keys`: the agent, in a running instance whose keys changed (one deleted or added),
# installs them again and nothing else, so a deleted key stops logging in at once.
if [ "${1:-}" = keys ]; then
  install_keys || { log "could not install authorized_keys"; exit 1; }
  exit 0
fi
install_keys || log "could not install authorized_keys"

# --- hostname files (instances on a network holder) -----------------------------------------
# In place (the files are bind mounts of the holder's): the old name becomes the new one.
if [ -s "$CONFIG/hostname" ]; then
  name=$(head -n 1 "$CONFIG/hostname")
  old=$(head -n 1 /etc/hostname 2>/dev/null)
  if [ -n "$name" ] && [ "$name" != "$old" ]; then
    echo "$name" >/etc/hostname 2>/dev/null || log "could not write /etc/hostname"
    if [ -n "$old" ] && [ -w /etc/hosts ]; then
      hosts=$(awk -v old="$old" -v new="$name" '{ for (i = 2; i <= NF; i++) if ($i == old) $i = new; print }' /etc/hosts) &&
        printf '%s\n' "$hosts" >/etc/hosts || log "could not rewrite /etc/hosts"
    fi
  fi
fi

# --- password ------------------------------------------------------------------------------
set_root_hash() {
  if command -v usermod >/dev/null 2>&1; then
    usermod -p "$1" root
    return
  fi
  # No shadow tools in this image: edit /etc/shadow in place (keeps its owner and mode).
  tmp=/etc/.shadow.gpucloud.$$
  awk -F: -v OFS=: -v h="$1" '$1 == "root" { $2 = h } { print }' /etc/shadow >"$tmp" &&
    cat "$tmp" >/etc/shadow
  rc=$?
  rm -f "$tmp"
  return "$rc"
}

password_auth=no
root_login=prohibit-password
if [ -s "$CONFIG/password_hash" ]; then
  hash=$(head -n 1 "$CONFIG/password_hash" | tr -d '\r\n')
  case "$hash" in
    '$'*)
      if set_root_hash "$hash"; then
        password_auth=yes
        root_login=yes
      else
        log "could not set root's password"
      fi
      ;;
    *) log "password_hash is not a crypt(3) hash; password login stays off" ;;
  esac
fi

# --- environment for SSH sessions ----------------------------------------------------------
# sshd starts sessions with a clean environment; login shells read this back. The agent
# refuses secret-looking names in the container's environment, and an image's own are left
# out here too, so nothing secret is written down.
SKIP_ENV='^(HOME|HOSTNAME|PWD|OLDPWD|SHLVL|TERM|_|[A-Za-z0-9_]*(PASSWORD|PASSWD|SECRET|TOKEN|PRIVATE_KEY)[A-Za-z0-9_]*)$'
if [ -d /etc/profile.d ]; then
  export -p | grep -Ev '^export (HOME|HOSTNAME|PWD|OLDPWD|SHLVL|TERM|_)=' |
    grep -Eiv '^export [A-Za-z0-9_]*(PASSWORD|PASSWD|SECRET|TOKEN|PRIVATE_KEY)' \
    >/etc/profile.d/00-gpucloud-env.sh 2>/dev/null || true
fi
# The same environment for every session, login or not, as one sshd "SetEnv" line: each
# NAME=VALUE double-quoted, '\' and '"' escaped (sshd's own tokenizer). Values spanning lines
# cannot be written there and are left out. SetEnv needs OpenSSH 7.8 or newer.
session_env() {
  awk -v skip="$SKIP_ENV" 'BEGIN {
    line = ""
    for (name in ENVIRON) {
      value = ENVIRON[name]
      if (name !~ /^[A-Za-z_][A-Za-z0-9_]*$/ || toupper(name) ~ skip || name ~ skip) continue
      if (index(value, "\n") > 0) continue
      quoted = ""
      for (i = 1; i <= length(value); i++) {
        c = substr(value, i, 1)
        if (c == "\\" || c == "\"") quoted = quoted "\\"
        quoted = quoted c
      }
      line = line " \"" name "=" quoted "\""
    }
    print substr(line, 2)
  }'
}
sshd_has_setenv() {
  v=$("$1" -V 2>&1 | sed -n 's/.*OpenSSH_\([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p' | head -n 1)
  [ -n "$v" ] || return 1
  set -- $v
  [ "$1" -gt 7 ] || { [ "$1" -eq 7 ] && [ "$2" -ge 8 ]; }
}

# --- Jupyter Notebook ----------------------------------------------------------------------
# In an image that has it, and only with the token the agent wrote: bound to the instance's
# own address (reached by gpucloud's proxy, which adds the token; nothing is published), never
# on 0.0.0.0 or without a token. Root is the instance's user, hence --allow-root.
start_jupyter() {
  command -v jupyter-notebook >/dev/null 2>&1 || return 0
  [ -s "$CONFIG/jupyter_token" ] && [ -s "$CONFIG/jupyter_base_url" ] || return 0
  addr=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }')
  case "$addr" in
    '' | 0.0.0.0 | 127.*) log "no address of its own for Jupyter: not started"; return 0 ;;
  esac
  token=$(head -n 1 "$CONFIG/jupyter_token" | tr -d '\r\n')
  base=$(head -n 1 "$CONFIG/jupyter_base_url" | tr -d '\r\n')
  [ -n "$token" ] || return 0
  (
    cd /root 2>/dev/null || cd /
    JUPYTER_TOKEN=$token exec jupyter-notebook --no-browser --allow-root --ip="$addr" --port=8888 \
      --NotebookApp.base_url="$base" --NotebookApp.allow_remote_access=True --notebook-dir="$(pwd)"
  ) >/var/log/gpucloud-jupyter.log 2>&1 </dev/null &
  log "Jupyter Notebook on $addr:8888$base"
}
start_jupyter

# --- sshd --------------------------------------------------------------------------------------
SSHD=
for c in /usr/sbin/sshd /usr/bin/sshd /sbin/sshd; do
  if [ -x "$c" ]; then SSHD=$c; break; fi
done

if [ -n "$SSHD" ]; then
  if [ -s "$CONFIG/ssh_host_ed25519_key" ] && [ -s "$CONFIG/ssh_host_ed25519_key.pub" ]; then
    KEY=$CONFIG/ssh_host_ed25519_key
  elif [ ! -s "$KEY" ] || [ ! -s "$KEY.pub" ]; then
    rm -f "$KEY" "$KEY.pub"
    ssh-keygen -q -t ed25519 -N '' -C "root@$(hostname 2>/dev/null || echo gpucloud)" -f "$KEY" ||
      log "ssh-keygen failed"
  fi
  if [ -s "$KEY.pub" ]; then
    echo "GPUCLOUD-HOST-KEY $(cut -d' ' -f1,2 "$KEY.pub")"
  fi
  if [ -d /etc/ssh/sshd_config.d ]; then
    # Also on the command line below (wins over any config file); this copy documents it
    # for someone reading the instance's /etc/ssh.
    printf '# Written by gpucloud at every boot.\nPasswordAuthentication %s\nPermitRootLogin %s\n' \
      "$password_auth" "$root_login" >/etc/ssh/sshd_config.d/gpucloud.conf 2>/dev/null || true
  fi
  mkdir -p /run/sshd && chmod 755 /run/sshd
  setenv=
  if sshd_has_setenv "$SSHD"; then setenv=$(session_env); fi
  if [ -n "$setenv" ]; then set -- -o "SetEnv $setenv"; else set --; fi
  exec "$SSHD" -D -e "$@" \
    -o HostKey="$KEY" \
    -o PasswordAuthentication="$password_auth" \
    -o KbdInteractiveAuthentication=no \
    -o PermitRootLogin="$root_login"
fi

log "no sshd in this image: reachable through the web terminal only"
trap 'exit 0' TERM INT
while :; do
  sleep 86400 &
  wait $!
done

#!/bin/sh
# gpucloud instance init. Bind-mounted read-only into every instance at /.gpucloud/init and run
# as the container's command under the engine's own init (Init=true), so it is PID 2 and
# whatever it execs is reaped properly.
#
# Inputs: the read-only directory /.gpucloud/config/ (written by the agent, never part of the
# container's environment, so a saved image carries no secret):
#   authorized_keys   OpenSSH public keys for root (optional)
#   password_hash     root's password as a crypt(3) hash, e.g. SHA-512 "$6$..." (optional;
#                     absent = password logins are off)
#
# What it does, in about 10 ms:
#   - installs the keys into /root/.ssh/authorized_keys inside a managed block (lines the user
#     added outside the block are kept);
#   - sets or leaves root's password hash, and turns sshd's password login on or off;
#   - generates the instance's own ed25519 host key at first boot only. It lives on the
#     system disk, so it survives stop/start. Saving an instance as an image MUST delete
#     /etc/ssh/ssh_host_* from the saved filesystem, or every instance made from the image
#     would share one host key;
#   - prints "GPUCLOUD-HOST-KEY <type> <base64>" on stdout (the container log) so the agent
#     can show the key without exec'ing (it may also `cat /etc/ssh/ssh_host_ed25519_key.pub`);
#   - makes the container's environment (NVIDIA_VISIBLE_DEVICES, CUDA's PATH, ...) visible to
#     SSH login shells through /etc/profile.d;
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
install_keys || log "could not install authorized_keys"

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
# sshd starts sessions with a clean environment; login shells read this back. The container's
# environment never holds secrets (see above), so writing it down is safe.
if [ -d /etc/profile.d ]; then
  export -p | grep -Ev '^export (HOME|HOSTNAME|PWD|OLDPWD|SHLVL|TERM|_)=' \
    >/etc/profile.d/00-gpucloud-env.sh 2>/dev/null || true
fi

# --- sshd --------------------------------------------------------------------------------------
SSHD=
for c in /usr/sbin/sshd /usr/bin/sshd /sbin/sshd; do
  if [ -x "$c" ]; then SSHD=$c; break; fi
done

if [ -n "$SSHD" ]; then
  if [ ! -s "$KEY" ] || [ ! -s "$KEY.pub" ]; then
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
  exec "$SSHD" -D -e \
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

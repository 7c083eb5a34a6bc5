#!/usr/bin/env bash
# Step 7: leave a small, anonymous box.
# - apt's package cache and k4w's download cache go (everything from them is installed).
# - Logs are emptied and rotated logs removed, so a node's logs start at its first boot. The
#   persistent journal is removed while journald does not write to it: it holds what sudo logged
#   during the build, and compresses long fields, so a grep of its files proves nothing.
# - SSH host keys: every VM made from the box makes its own at first boot (k4w-ssh-host-keys.service,
#   installed here); the build VM's keys are removed when it powers off, so that sshd keeps
#   answering Packer (and a re-run of this step on a booted box) until then.
# - sshd takes keys only: pods are masqueraded to their node's addresses, so anything a node can
#   reach, a pod can, and the box user's password is the well-known "vagrant".
# - /etc/machine-id is emptied: systemd makes a new one at first boot, so every VM made from
#   the box has its own (journald, DHCP client ids); D-Bus reads the same file.
# - DHCP leases of the build VM are dropped.
# - Free space is trimmed (TRIM reaches the VHDX, which Packer then compacts) or, where the
#   disk does not support discard, zero-filled so the image still compresses.
#
# - No file may hold the build's proxy credentials: checked, the build fails with the paths.
#
# Env: K4W_FREE_SPACE = trim-or-zero (default in the profile) | zero | skip;
#      HTTP_PROXY / HTTPS_PROXY (the build's proxy, from Packer) for the credential scan.
K4W_STEP="07-cleanup"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

# Where templates/packer/ubuntu.pkr.hcl.j2 uploads the library; removed with the rest of the build's traces.
UPLOADED_LIB=/tmp/k4w-lib.sh
ZERO_FILE=/var/tmp/k4w-zero
# MiB left free while zero-filling, so services writing meanwhile do not hit a full disk.
ZERO_RESERVE_MIB=64
# journald and the sockets that would start it again at the next log line (systemd's own units).
JOURNALD_UNITS=(systemd-journald.socket systemd-journald-dev-log.socket systemd-journald.service)
HOST_KEY_UNIT_FILE=/etc/systemd/system/k4w-ssh-host-keys.service
FORGET_KEYS_UNIT_FILE=/run/systemd/system/k4w-forget-ssh-host-keys.service
SSHD_CONFIG=/etc/ssh/sshd_config
# Read first through sshd_config's Include on releases that have one (OpenSSH >= 8.2, Ubuntu 20.04+).
SSHD_DROP_IN=/etc/ssh/sshd_config.d/00-k4w-keys-only.conf
SSHD_MARK="# k4w: keys only (07-cleanup.sh)"

k4w_require K4W_FREE_SPACE
case "$K4W_FREE_SPACE" in
    trim-or-zero | zero | skip) ;;
    *) k4w_die "K4W_FREE_SPACE must be trim-or-zero, zero or skip, not '${K4W_FREE_SPACE}'" ;;
esac
k4w_distro >/dev/null

# --- caches -------------------------------------------------------------------------------
if k4w_live; then
    k4w_apt apt-get clean
fi
cache="$(k4w_path "$K4W_CACHE")"
if [[ -d $cache ]]; then
    rm -rf "$cache"
    k4w_log "removed ${K4W_CACHE}"
fi
shopt -s nullglob
for lease in "$(k4w_path /var/lib/dhcp)"/*.leases; do
    rm -f "$lease"
done

# --- logs ---------------------------------------------------------------------------------
logs="$(k4w_path /var/log)"
if [[ -d $logs ]]; then
    # Rotated copies go; current logs are emptied in place (daemons keep their open files).
    # The binary journal is left to journalctl below: truncating it would corrupt it.
    find "$logs" -path "${logs}/journal" -prune -o -type f \
        \( -name '*.gz' -o -name '*.[0-9]' -o -name '*.old' \) -print0 | xargs -0 -r rm -f
    find "$logs" -path "${logs}/journal" -prune -o -type f -size +0 -print0 | xargs -0 -r truncate -s 0
fi
journal="$(k4w_path /var/log/journal)"
if [[ -d $journal ]] && [[ -n $(find "$journal" -mindepth 1 -print -quit) ]]; then
    stopped=0
    if k4w_live; then
        # systemd >= 243 (Debian 12, Ubuntu 24.04): journald closes its files in /var and logs to
        # /run until the next boot flushes again (journalctl(1), --relinquish-var). Older systemd
        # (xenial's 229) has no such switch: journald and the sockets that would restart it stop.
        if ! journalctl --relinquish-var 2>/dev/null; then
            systemctl stop "${JOURNALD_UNITS[@]}"
            stopped=1
        fi
    fi
    # The folder stays: its existence keeps the journal persistent on the box (Storage=auto).
    find "$journal" -mindepth 1 -delete
    k4w_log "removed the persistent journal under /var/log/journal"
    if ((stopped)); then
        systemctl start "${JOURNALD_UNITS[@]}"
    fi
fi

# --- SSH host keys ------------------------------------------------------------------------
# Each VM made from the box makes its own keys before sshd starts (cloud-init, which would, is
# disabled on the installed system by subiquity, and 16.04's installer has none): a oneshot unit,
# skipped once the keys exist, so it costs nothing after the first boot. Wanted by ssh.service too,
# so a socket-activated sshd (ssh.socket, 24.04) starts it first; not ordered against ssh.socket,
# which sockets.target pulls in before basic.target, where this unit's default dependencies start.
k4w_write_file "$HOST_KEY_UNIT_FILE" 0644 "[Unit]
Description=k4w: SSH host keys of this machine (the box ships none)
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
Before=ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target ssh.service"
if ((K4W_CHANGED)); then
    k4w_systemctl daemon-reload
fi
k4w_enable "${HOST_KEY_UNIT_FILE##*/}"
if k4w_live; then
    # Removed at power-off by a unit in /run, which is gone at the next boot: a running sshd reads
    # the keys again for every new connection, so removing them now would lock Packer out.
    k4w_write_file "$FORGET_KEYS_UNIT_FILE" 0644 "[Unit]
Description=k4w: remove the build VM's SSH host keys when it powers off

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStop=/bin/sh -c 'rm -f /etc/ssh/ssh_host_*'"
    if ((K4W_CHANGED)); then
        systemctl daemon-reload
    fi
    if ! k4w_unit_active "${FORGET_KEYS_UNIT_FILE##*/}"; then
        systemctl start "${FORGET_KEYS_UNIT_FILE##*/}"
    fi
    k4w_log "SSH host keys: removed at power-off, made anew at each VM's first boot"
else
    for key in "$(k4w_path /etc/ssh)"/ssh_host_*; do
        k4w_remove_file "/etc/ssh/${key##*/}"
    done
fi

# --- sshd: keys only ---------------------------------------------------------------------
# Vagrant logs in with its insecure key and replaces it with a key of that machine at the first
# `vagrant up` (config.ssh.insert_key); nothing needs the password, which every Vagrant user knows.
# For sshd the first value of a keyword wins (sshd_config(5)), so the setting goes where sshd
# reads it first: a drop-in its Include reads at the top of sshd_config (24.04), else a block at
# the top of sshd_config itself (16.04's OpenSSH 7.2 has no Include). Packer keeps the one SSH
# connection it opened with the password, and sshd reads this only for new connections.
KEYS_ONLY="PasswordAuthentication no
ChallengeResponseAuthentication no"
sshd_config="$(k4w_path "$SSHD_CONFIG")"
if [[ -f $sshd_config ]]; then
    if grep -qE '^[[:space:]]*Include[[:space:]]+/etc/ssh/sshd_config\.d/' "$sshd_config"; then
        # KbdInteractiveAuthentication is ChallengeResponseAuthentication's name from OpenSSH 8.7 on.
        k4w_write_file "$SSHD_DROP_IN" 0644 "${SSHD_MARK}
PasswordAuthentication no
KbdInteractiveAuthentication no"
    else
        rest="$(awk -v mark="$SSHD_MARK" '$0 == mark { skip = 3 } skip > 0 { skip--; next } { print }' "$sshd_config")"
        k4w_write_file "$SSHD_CONFIG" 0644 "${SSHD_MARK}
${KEYS_ONLY}
${rest}"
    fi
    k4w_log "sshd: public keys only, no password logins"
elif [[ -e $(k4w_path /usr/sbin/sshd) ]]; then
    k4w_die "${SSHD_CONFIG} not found beside /usr/sbin/sshd: cannot turn its password logins off"
fi

# --- machine identity ---------------------------------------------------------------------
machine_id="$(k4w_path /etc/machine-id)"
if [[ -s $machine_id ]]; then
    truncate -s 0 "$machine_id"
    k4w_log "emptied /etc/machine-id (regenerated at first boot)"
fi
dbus_id="$(k4w_path /var/lib/dbus/machine-id)"
if [[ -e $dbus_id && ! -L $dbus_id ]] || [[ -L $dbus_id && $(readlink "$dbus_id") != /etc/machine-id ]]; then
    rm -f "$dbus_id"
fi
if [[ -d $(dirname "$dbus_id") && ! -e $dbus_id && ! -L $dbus_id ]]; then
    ln -s /etc/machine-id "$dbus_id"
fi

k4w_remove_file "$UPLOADED_LIB"

# --- no proxy credentials in the box -----------------------------------------------------------
# Step 01 keeps the build's proxy off the disk (docker's drop-in lives in /run); this proves it
# before the box is sealed, after the logs (installer logs hold preseed answers) were emptied:
# no file may hold the user:password of a proxy URL this build got.
SCANNED_DIRS=(/etc /var /root /home /opt /usr/local /srv /boot)
for variable in HTTP_PROXY HTTPS_PROXY; do
    url="${!variable:-}"
    rest="${url#*://}"
    [[ $rest == *@* ]] || continue
    userinfo="${rest%@*}"
    dirs=()
    for dir in "${SCANNED_DIRS[@]}"; do
        [[ -d $(k4w_path "$dir") ]] && dirs+=("$(k4w_path "$dir")")
    done
    ((${#dirs[@]} > 0)) || continue
    status=0
    # --devices=skip: sockets and FIFOs under /var would block the read.
    found="$(grep -rlsF --devices=skip -e "$userinfo" -- "${dirs[@]}")" || status=$?
    if [[ -n $found ]]; then
        # Paths only, never the matching lines: they hold the credentials.
        k4w_die "the box would keep the build's proxy credentials (${variable}) in: $(printf '%s ' "$found")"
    elif ((status > 1)); then
        # Exit 2 with no match: a file vanished or could not be read while scanning.
        k4w_log "warning: some files could not be read while scanning for the build's ${variable} credentials"
    fi
    k4w_log "no file under ${SCANNED_DIRS[*]} holds the build's ${variable} credentials"
done

# --- free space -----------------------------------------------------------------------------
zero_fill() {
    local avail count
    avail="$(df --output=avail -B1M / | tail -n 1 | tr -d ' ')"
    count=$((avail - ZERO_RESERVE_MIB))
    if ((count <= 0)); then
        k4w_log "less than ${ZERO_RESERVE_MIB} MiB free; nothing to zero-fill"
        return 0
    fi
    k4w_log "zero-filling ${count} MiB of free space"
    dd if=/dev/zero of="$ZERO_FILE" bs=1M count="$count" conv=fsync status=none
    rm -f "$ZERO_FILE"
}

if ! k4w_live; then
    k4w_log "sandbox: free space left as is"
elif [[ $K4W_FREE_SPACE == skip ]]; then
    k4w_log "free space left as is (K4W_FREE_SPACE=skip)"
elif [[ $K4W_FREE_SPACE == trim-or-zero ]] && fstrim --verbose /; then
    k4w_log "free space trimmed"
else
    [[ $K4W_FREE_SPACE == trim-or-zero ]] && k4w_log "the disk does not take TRIM; zero-filling instead"
    zero_fill
fi
sync
k4w_log "caches, logs, machine id and free space cleaned"

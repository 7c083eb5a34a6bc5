#!/usr/bin/env bash
# Step 5: Vagrant's insecure public key for the vagrant user, the box convention: `vagrant up`
# logs in with the matching private key that ships with Vagrant, then replaces it with a
# key generated for that machine (config.ssh.insert_key).
#
# The key text is public (keys/vagrant.pub in hashicorp/vagrant) and embedded here; its
# fingerprints are checked against the widely published ones before it is trusted, so an
# edit to the text cannot slip in another key. No environment variables.
K4W_STEP="05-vagrant-key"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

# The box user, by Vagrant's documented box convention (user vagrant, password vagrant).
VAGRANT_USER=vagrant
INSECURE_KEY='ssh-rsa AAAAB3NzaC1yc2EAAAABIwAAAQEA6NF8iallvQVp22WDkTkyrtvp9eWW6A8YVr+kz4TjGYe7gHzIw+niNltGEFHzD8+v1I2YJ6oXevct1YeS0o9HZyN1Q9qgCgzUFtdOKLv6IedplqoPkcmF0aYet2PkEDo3MlTBckFXPITAMzF8dJSIFo9D8HfdOV0IAdx4O7PtixWKn5y2hMNG0zQPyUecp4pzC6kivAIhyfHilFR61RGL+GPXQ2MWZWFYbAGjyiYJnAmCP3NOTd0jMZEnDkbUvxhMmBYSdETk1rRgm+R4LOzFUGaHqHDLKLX+FIPKcF96hrucXzcWyLbIbEgE98OHlnVYCzRdK8jlqm8tehUc9c9WhQ== vagrant insecure public key'
# Published fingerprints of that key (RSA 2048): MD5 as listed in known-insecure-key
# blocklists and sshd logs, SHA256 as OpenSSH >= 6.8 prints it.
KEY_MD5='MD5:dd:3b:b8:2e:85:04:06:e9:ab:ff:a8:0a:c0:04:6e:d6'
KEY_SHA256='SHA256:1M4RzhMyWuFS/86uPY/ce2prh/dVTHW7iD2RhpquOZA'

k4w_distro >/dev/null

key_file="$(mktemp)"
printf '%s\n' "$INSECURE_KEY" >"$key_file"
md5="$(ssh-keygen -l -E md5 -f "$key_file" | awk '{ print $2 }')"
sha256="$(ssh-keygen -l -E sha256 -f "$key_file" | awk '{ print $2 }')"
rm -f "$key_file"
if [[ $md5 != "$KEY_MD5" || $sha256 != "$KEY_SHA256" ]]; then
    k4w_die "the embedded key has fingerprints ${md5} ${sha256}, not Vagrant's ${KEY_MD5} ${KEY_SHA256}"
fi

if k4w_live; then
    entry="$(getent passwd "$VAGRANT_USER")" || k4w_die "user ${VAGRANT_USER} does not exist (the installer creates it)"
    home="$(cut -d: -f6 <<<"$entry")"
    owner="${VAGRANT_USER}:$(id -gn "$VAGRANT_USER")"
else
    home="/home/${VAGRANT_USER}"
    owner="${VAGRANT_USER}:${VAGRANT_USER}"
fi

ssh_dir="$(k4w_path "${home}/.ssh")"
if [[ ! -d $ssh_dir ]]; then
    mkdir -p "$ssh_dir"
fi
# sshd's StrictModes rejects keys in a directory or file others can write.
[[ $(stat -c '%a' "$ssh_dir") == 700 ]] || chmod 0700 "$ssh_dir"
if k4w_live && [[ $(stat -c '%U:%G' "$ssh_dir") != "$owner" ]]; then
    chown "$owner" "$ssh_dir"
fi

authorized_keys="${home}/.ssh/authorized_keys"
current=""
[[ -f $(k4w_path "$authorized_keys") ]] && current="$(cat "$(k4w_path "$authorized_keys")")"
if grep -qxF "$INSECURE_KEY" <<<"$current"; then
    content="$current"
else
    content="${current:+${current}$'\n'}${INSECURE_KEY}"
fi
k4w_write_file "$authorized_keys" 0600 "$content" "$owner"
k4w_log "Vagrant insecure key (${KEY_SHA256}) authorized for ${VAGRANT_USER}"

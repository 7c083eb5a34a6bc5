#!/usr/bin/env bash
# Step 2: what the kubelet and kube-proxy need from the kernel.
# - Swap off, now and at boot: the kubelet refuses to start with swap on (--fail-swap-on).
# - kernel modules and sysctls (lib.sh k4w_kernel_tunables, K4W_KERNEL_MODULES and K4W_SYSCTLS):
#   br_netfilter and overlay, forwarding and bridged traffic through iptables, and the kernel
#   tunables the kubelet's protectKernelDefaults holds the kernel to.
# No environment variables: these are the same for every box.
K4W_STEP="02-kernel"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

k4w_distro >/dev/null

# --- swap -------------------------------------------------------------------------------
fstab="$(k4w_path /etc/fstab)"
if [[ -f $fstab ]]; then
    # Comment out active swap entries (3rd field "swap"); other lines stay byte for byte.
    new_fstab="$(awk '!/^[[:space:]]*#/ && $3 == "swap" { print "# k4w: swap off for the kubelet: " $0; next } { print }' "$fstab")"
    if [[ $new_fstab != "$(cat "$fstab")" ]]; then
        k4w_write_file /etc/fstab "$(stat -c '%a' "$fstab")" "$new_fstab"
    fi
fi
if k4w_live && [[ $(wc -l </proc/swaps) -gt 1 ]]; then
    k4w_log "turning swap off"
    swapoff -a
fi

# --- kernel modules and sysctls (lib.sh; the cluster scripts call it again) ------------------
k4w_kernel_tunables
k4w_log "swap off, ${K4W_KERNEL_MODULES[*]} loaded at boot, ${!K4W_SYSCTLS[*]} set"

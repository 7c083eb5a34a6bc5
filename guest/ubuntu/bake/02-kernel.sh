#!/usr/bin/env bash
# Step 2: what the kubelet and kube-proxy need from the kernel.
# - Swap off, now and at boot: the kubelet refuses to start with swap on (--fail-swap-on).
# - br_netfilter and overlay loaded at boot: bridged pod traffic must traverse iptables
#   (Flannel, kube-proxy), and Docker's overlay2 storage driver needs overlay.
# - net.ipv4.ip_forward=1 (a kubeadm preflight check) and net.bridge.bridge-nf-call-iptables=1
#   (bridged pod traffic through iptables, which Flannel and kube-proxy rely on).
# - the kernel tunables the kubelet's protectKernelDefaults holds the kernel to (see SYSCTLS).
# No environment variables: these are the same for every box.
K4W_STEP="02-kernel"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

MODULES=(br_netfilter overlay)
MODULES_FILE=/etc/modules-load.d/k4w-kubernetes.conf
SYSCTL_FILE=/etc/sysctl.d/90-k4w-kubernetes.conf
declare -A SYSCTLS=(
    [net.bridge.bridge-nf-call-iptables]=1
    [net.ipv4.ip_forward]=1
    # The kernel tunables a kubelet with protectKernelDefaults (the containerd era's KubeletConfiguration)
    # requires as they are, or it refuses to start: setupKernelTunables in k8s.io/kubernetes@v1.37.2
    # pkg/kubelet/cm/container_manager_linux.go, values from k8s.io/component-helpers@v0.37.2
    # node/util/sysctl/sysctl.go. Set on every box: harmless where the kubelet does not check them.
    [vm.overcommit_memory]=1
    [vm.panic_on_oom]=0
    [kernel.panic]=10
    [kernel.panic_on_oops]=1
    [kernel.keys.root_maxkeys]=1000000
    [kernel.keys.root_maxbytes]=25000000
)

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

# --- kernel modules -----------------------------------------------------------------------
k4w_write_file "$MODULES_FILE" 0644 "# k4w: loaded at boot for Kubernetes networking and Docker overlay2
$(printf '%s\n' "${MODULES[@]}")"
if k4w_live; then
    for module in "${MODULES[@]}"; do
        if [[ ! -d /sys/module/${module} ]]; then
            k4w_log "loading kernel module ${module}"
            modprobe "$module"
        fi
    done
fi

# --- sysctls ------------------------------------------------------------------------------
sysctl_lines="# k4w: forwarding and bridged traffic for kubeadm, Flannel and kube-proxy; the kubelet's kernel defaults"
for key in $(printf '%s\n' "${!SYSCTLS[@]}" | sort); do
    sysctl_lines+=$'\n'"${key} = ${SYSCTLS[$key]}"
done
k4w_write_file "$SYSCTL_FILE" 0644 "$sysctl_lines"
if k4w_live; then
    for key in "${!SYSCTLS[@]}"; do
        # Set only what differs, so a second run changes no kernel state.
        if [[ $(sysctl -n "$key") != "${SYSCTLS[$key]}" ]]; then
            sysctl -w "${key}=${SYSCTLS[$key]}"
        fi
    done
fi
k4w_log "swap off, ${MODULES[*]} loaded at boot, ${!SYSCTLS[*]} set"

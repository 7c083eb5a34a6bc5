#!/usr/bin/env bash
# Give this node the proxy of the cluster.yml it is brought up with, for good: login sessions,
# apt, and the docker and kubelet services (k4w_configure_proxy in lib.sh, scope node). A box
# carries no proxy (bake step 01 keeps the build's proxy off the disk), so cluster-up runs this
# on every Linux node before kubeadm pulls its first image.
# Run by cluster-up as root. Input: K4W_LIB (lib.sh beside this script) and K4W_PROXY_FILE, a
# file of shell assignments of K4W_PROXY_ENV, K4W_APT_PROXY_CONF and K4W_PROXY_FILE_MODE (what
# bake step 01 gets from Packer), and on a containerd node K4W_REGISTRY_FILES and K4W_REGISTRY_AUTH
# (the image mirrors: k4w_configure_registry in lib.sh, scope node; containerd restarts when the
# credentials changed). The values may hold the proxy's and the mirrors' passwords, so they come in a
# file, never on a command line (sudo logs command lines), and the file is deleted once read.
K4W_STEP="cluster-proxy"
set -euo pipefail
set -E  # errtrace: the ERR trap also fires inside lib.sh's functions
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (cluster-up uploads guest/ubuntu/lib.sh beside this script)" >&2; exit 1; }
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$K4W_LIB"

k4w_require K4W_PROXY_FILE
proxy_file="$K4W_PROXY_FILE"
[[ -f $proxy_file ]] || k4w_die "K4W_PROXY_FILE ${proxy_file} does not exist"
# shellcheck source=/dev/null
source "$proxy_file"
rm -f "$proxy_file"
k4w_require_defined K4W_PROXY_ENV K4W_APT_PROXY_CONF
k4w_require K4W_PROXY_FILE_MODE
k4w_configure_proxy "$K4W_PROXY_ENV" "$K4W_APT_PROXY_CONF" "$K4W_PROXY_FILE_MODE" node
if [[ -n ${K4W_REGISTRY_FILES+set} ]]; then
    k4w_require_defined K4W_REGISTRY_AUTH
    k4w_configure_registry "$K4W_REGISTRY_FILES" "$K4W_REGISTRY_AUTH" node
    if ((K4W_REGISTRY_AUTH_CHANGED)) && k4w_unit_active containerd; then
        k4w_log "registry mirror credentials changed: restarting containerd"
        systemctl restart containerd
    fi
fi

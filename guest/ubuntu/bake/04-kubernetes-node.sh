#!/usr/bin/env bash
# Step 4 (containerd era, e.g. ubuntu-2404): the Kubernetes node recipe of this era.
# - kubeadm, kubelet and kubectl from Kubernetes' Linux node tarball (k4w_install_node_binaries:
#   from the build host's verified cache, checked again against the sha512 Kubernetes' release
#   notes print for it);
# - the kubelet unit and kubeadm's drop-in as Kubernetes packages them today (kubernetes/release
#   cmd/krel/templates/latest/kubelet/kubelet.service and kubeadm/10-kubeadm.conf at f618b2a308bc),
#   with the binaries in /usr/local/bin and KUBELET_EXTRA_ARGS from /etc/default/kubelet, where
#   cluster-up puts them (the Debian convention; the packages' RPM path is /etc/sysconfig/kubelet);
# - when the profile asks, the control-plane images pulled into containerd over CRI
#   (K4W_KUBE_CRI_SOCKET), after checking that kubeadm's own list names the same pause image the
#   containerd config pins (step 03): kubeadm 1.35 warns when the runtime's sandbox image differs.
# - before that, with downloads.images: cache, every image of the box imported from the build host's
#   image cache (K4W_IMAGE_IMPORTS, k4w_import_images), each checked against its pinned digest, so the
#   pre-pull finds them present and asks no registry.
# The runtime (step 03-containerd.sh) must already run: kubeadm pulls through it.
#
# Env: K4W_KUBE_VERSION, K4W_KUBE_IMAGE_REPOSITORY, K4W_KUBE_PREPULL_IMAGES, K4W_KUBE_CRI_SOCKET, K4W_IMAGE_IMPORTS,
# K4W_PAUSE_IMAGE, K4W_KUBERNETES_VERSION, K4W_KUBERNETES_FILE and K4W_KUBERNETES_SHA512 or
# K4W_KUBERNETES_SHA256; PACKER_HTTP_ADDR (Packer).
K4W_STEP="04-kubernetes-node"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

BIN_DIR=/usr/local/bin
# What the kubelet and kube-proxy call: iptables and conntrack (service rules and their connection
# cleanup), socat (port-forward), ethtool and ebtables. kubeadm 1.35's preflight insists only on
# iptables of these (cmd/kubeadm/app/preflight/checks_linux.go at 039c72e8 checks conntrack below
# 1.32 only), so their absence would show later, at run time.
PREREQUISITES=(socat ebtables ethtool conntrack iptables)
# containerd's namespace for the images the kubelet (CRI) uses.
CRI_NAMESPACE=k8s.io

k4w_require K4W_KUBE_VERSION K4W_KUBE_IMAGE_REPOSITORY K4W_KUBE_CRI_SOCKET K4W_PAUSE_IMAGE \
    K4W_KUBERNETES_VERSION K4W_KUBERNETES_FILE
k4w_require_defined K4W_KUBE_PREPULL_IMAGES
kubernetes_digest="$(k4w_component_digest kubernetes)"
if [[ $K4W_KUBERNETES_VERSION != "$K4W_KUBE_VERSION" ]]; then
    k4w_die "K4W_KUBERNETES_VERSION=${K4W_KUBERNETES_VERSION} differs from K4W_KUBE_VERSION=${K4W_KUBE_VERSION}: kubeadm, kubelet and kubectl must match the cluster version"
fi
[[ $K4W_KUBE_CRI_SOCKET == unix:///* ]] || k4w_die "K4W_KUBE_CRI_SOCKET must be a unix:/// socket URL, not '${K4W_KUBE_CRI_SOCKET}'"
k4w_distro >/dev/null

k4w_apt_install "${PREREQUISITES[@]}"

# --- kubeadm, kubelet, kubectl ------------------------------------------------------------
k4w_install_node_binaries "$kubernetes_digest" "$BIN_DIR"
kubelet_binary_changed=$K4W_CHANGED

# --- kubelet service -----------------------------------------------------------------------
k4w_install_kubelet_service "$BIN_DIR" krel "$kubelet_binary_changed"

if ! k4w_live; then
    k4w_log "sandbox: binaries and units in place; version checks and image pre-pull skipped"
    exit 0
fi

# --- the binaries are the version the profile pins ----------------------------------------
want="v${K4W_KUBE_VERSION}"
[[ $("${BIN_DIR}/kubeadm" version -o short) == "$want" ]] || k4w_die "kubeadm is not ${want}"
[[ $("${BIN_DIR}/kubelet" --version) == "Kubernetes ${want}" ]] || k4w_die "kubelet is not ${want}"
# kubectl lost --short in 1.28; its first line is the client version.
[[ $("${BIN_DIR}/kubectl" version --client | head -n 1) == "Client Version: ${want}" ]] || k4w_die "kubectl is not ${want}"

# --- images from the build host's image cache -----------------------------------------------
ctr_cri=("${BIN_DIR}/ctr" --address "${K4W_KUBE_CRI_SOCKET#unix://}" --namespace "$CRI_NAMESPACE")
k4w_import_images "${ctr_cri[@]}"

# --- control-plane images -------------------------------------------------------------------
if k4w_flag K4W_KUBE_PREPULL_IMAGES; then
    image_flags=(--kubernetes-version "$want" --image-repository "$K4W_KUBE_IMAGE_REPOSITORY")
    mapfile -t images < <("${BIN_DIR}/kubeadm" config images list "${image_flags[@]}")
    ((${#images[@]} > 0)) || k4w_die "kubeadm listed no control-plane images"
    if [[ " ${images[*]} " != *" ${K4W_PAUSE_IMAGE} "* ]]; then
        k4w_die "kubeadm ${want} wants the sandbox image $(printf '%s\n' "${images[@]}" | grep /pause: || echo '?'), but the profile pins ${K4W_PAUSE_IMAGE} (kubernetes.pause_image) in containerd's config"
    fi
    present() {
        "${ctr_cri[@]}" images list --quiet
    }
    # The list is read once per check, not piped into grep -q: grep leaves at its first match, and
    # ctr writing on into the closed pipe dies of SIGPIPE, which pipefail turns into a failure.
    listed="$(present)"
    missing=()
    for image in "${images[@]}"; do
        grep -qxF "$image" <<<"$listed" || missing+=("$image")
    done
    if ((${#missing[@]} > 0)); then
        k4w_log "pulling ${#missing[@]} control-plane image(s) from ${K4W_KUBE_IMAGE_REPOSITORY}"
        "${BIN_DIR}/kubeadm" config images pull "${image_flags[@]}" --cri-socket "$K4W_KUBE_CRI_SOCKET"
    fi
    listed="$(present)"
    for image in "${images[@]}"; do
        grep -qxF "$image" <<<"$listed" || k4w_die "image ${image} is still missing after the pull"
    done
    k4w_log "control-plane images present: ${images[*]}"
fi
k4w_log "Kubernetes ${want} binaries and the kubelet unit installed"

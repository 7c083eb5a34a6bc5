#!/usr/bin/env bash
# Step 4: kubeadm, kubelet and kubectl from Kubernetes' Linux node tarball (apt.kubernetes.io is
# gone), the CNI plugins kubeadm's kubelet expects in /opt/cni/bin, a kubelet systemd unit with
# kubeadm's drop-in (Kubernetes' "install without a package manager" layout), and, when the
# profile asks, the control-plane images pulled ahead so nodes do not wait for them at cluster-up.
# Before that, with downloads.images: cache, every image of the box is loaded from the build host's
# image cache (K4W_IMAGE_IMPORTS, k4w_load_images), each checked against its pinned manifest, so the
# pre-pull finds them present and asks no registry.
#
# Both tarballs come from the build host (k4w_component_file: build-* fetched them into its cache,
# verified, and Packer's HTTP server serves them), and are checked again here against the digest
# the profile pins: the node tarball's sha512 as Kubernetes' release notes print it, the CNI
# tarball's sha256. What was installed is recorded with its digests, so a second run proves the
# install complete from the files on disk and needs no build host.
#
# Env: K4W_KUBE_VERSION, K4W_KUBEADM_API, K4W_KUBE_IMAGE_REPOSITORY, K4W_KUBE_PREPULL_IMAGES, K4W_IMAGE_IMPORTS,
# K4W_KUBERNETES_VERSION, K4W_KUBERNETES_FILE and K4W_KUBERNETES_SHA512 or K4W_KUBERNETES_SHA256,
# K4W_CNI_VERSION, K4W_CNI_FILE and K4W_CNI_SHA256 or K4W_CNI_SHA512; PACKER_HTTP_ADDR (Packer).
K4W_STEP="04-kubernetes"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

BIN_DIR=/usr/local/bin
CNI_BIN_DIR=/opt/cni/bin
# kubeadm's preflight checks want these on the node (socat/ebtables/ethtool/conntrack are
# errors or warnings in 1.11; the kubelet uses them for port-forward and service traffic).
PREREQUISITES=(curl ca-certificates socat ebtables ethtool conntrack iptables)

k4w_require K4W_KUBE_VERSION K4W_KUBEADM_API K4W_KUBE_IMAGE_REPOSITORY K4W_KUBERNETES_VERSION K4W_KUBERNETES_FILE \
    K4W_CNI_VERSION K4W_CNI_FILE
k4w_require_defined K4W_KUBE_PREPULL_IMAGES
kubernetes_digest="$(k4w_component_digest kubernetes)"
cni_digest="$(k4w_component_digest cni)"
if [[ $K4W_KUBERNETES_VERSION != "$K4W_KUBE_VERSION" ]]; then
    k4w_die "K4W_KUBERNETES_VERSION=${K4W_KUBERNETES_VERSION} differs from K4W_KUBE_VERSION=${K4W_KUBE_VERSION}: kubeadm, kubelet and kubectl must match the cluster version"
fi
k4w_distro >/dev/null

k4w_apt_install "${PREREQUISITES[@]}"

# --- kubeadm, kubelet, kubectl ------------------------------------------------------------
k4w_install_node_binaries "$kubernetes_digest" "$BIN_DIR"
kubelet_binary_changed=$K4W_CHANGED

# --- CNI plugins ---------------------------------------------------------------------------
cni_source="${cni_digest} ${K4W_CNI_FILE}"
if k4w_installed_from cni-plugins "$cni_source"; then
    k4w_log "CNI plugins v${K4W_CNI_VERSION} already installed in ${CNI_BIN_DIR}"
else
    tarball="$(k4w_component_file cni)"
    unpacked="$(mktemp -d)"
    tar -xzf "$tarball" -C "$unpacked"
    record=""
    while IFS= read -r -d '' file; do
        relative="${file#"$unpacked"/}"
        k4w_install_file "$file" "${CNI_BIN_DIR}/${relative}" 0755
        record+="$(k4w_sha256_of "$file")  $(k4w_path "${CNI_BIN_DIR}/${relative}")"$'\n'
    done < <(find "$unpacked" -type f -print0 | sort -z)
    rm -rf "$unpacked"
    k4w_record_install cni-plugins "$cni_source" "$record"
fi

# --- kubelet service -----------------------------------------------------------------------
k4w_install_kubelet_service "$BIN_DIR" 1.11 "$kubelet_binary_changed"

if ! k4w_live; then
    k4w_log "sandbox: binaries and units in place; version checks and image pre-pull skipped"
    exit 0
fi

# --- the binaries are the version the profile pins ----------------------------------------
want="v${K4W_KUBE_VERSION}"
[[ $("${BIN_DIR}/kubeadm" version -o short) == "$want" ]] || k4w_die "kubeadm is not ${want}"
[[ $("${BIN_DIR}/kubelet" --version) == "Kubernetes ${want}" ]] || k4w_die "kubelet is not ${want}"
[[ $("${BIN_DIR}/kubectl" version --client --short) == "Client Version: ${want}" ]] || k4w_die "kubectl is not ${want}"

# --- images from the build host's image cache -----------------------------------------------
k4w_load_images

# --- control-plane images -------------------------------------------------------------------
if k4w_flag K4W_KUBE_PREPULL_IMAGES; then
    case "$K4W_KUBEADM_API" in
        # kubeadm's config kind for the image settings, by API era (v1alpha1/2: 1.10-1.11).
        kubeadm.k8s.io/v1alpha1 | kubeadm.k8s.io/v1alpha2) kind=MasterConfiguration ;;
        *) kind=ClusterConfiguration ;;
    esac
    images_config="$(mktemp --suffix=.yaml)"
    printf 'apiVersion: %s\nkind: %s\nkubernetesVersion: %s\nimageRepository: %s\n' \
        "$K4W_KUBEADM_API" "$kind" "$want" "$K4W_KUBE_IMAGE_REPOSITORY" >"$images_config"
    mapfile -t images < <("${BIN_DIR}/kubeadm" config images list --config "$images_config")
    ((${#images[@]} > 0)) || k4w_die "kubeadm listed no control-plane images"
    missing=()
    for image in "${images[@]}"; do
        docker image inspect "$image" >/dev/null 2>&1 || missing+=("$image")
    done
    if ((${#missing[@]} > 0)); then
        k4w_log "pulling ${#missing[@]} control-plane image(s) from ${K4W_KUBE_IMAGE_REPOSITORY}"
        "${BIN_DIR}/kubeadm" config images pull --config "$images_config"
    fi
    rm -f "$images_config"
    for image in "${images[@]}"; do
        docker image inspect "$image" >/dev/null 2>&1 || k4w_die "image ${image} is still missing after the pull"
    done
    k4w_log "control-plane images present: ${images[*]}"
fi
k4w_log "Kubernetes ${want} binaries, CNI plugins v${K4W_CNI_VERSION} and the kubelet unit installed"

#!/usr/bin/env bash
# Step 3 (containerd era, e.g. ubuntu-2404): the container runtime the kubelet talks to over CRI.
# - containerd from its GitHub release tarball: bin/* into /usr/local/bin, and a unit with the
#   settings of the containerd.service containerd ships at its tag (Type=notify, Delegate=yes,
#   KillMode=process, no task/process limits, the overlay module loaded first);
# - runc into /usr/local/sbin: containerd's release tarball carries no runc;
# - the CNI plugins into /opt/cni/bin, and the CNI conf dir /etc/cni/net.d (Flannel writes there);
# - /etc/containerd/config.toml, config version 3 (containerd 2.x; docs/cri/config.md at v2.3.7):
#   runc with the systemd cgroup driver, the pause image under the CRI images plugin's
#   pinned_images.sandbox (kubelet 1.34+ has no --pod-infra-container-image), the CNI dirs, and
#   the registry hosts folder (config_path, /etc/containerd/certs.d) with the image mirrors of
#   cluster.yml in it, plus the drop-ins it imports (the mirrors' credentials; k4w_configure_registry);
# Then containerd runs, its socket answers, and its effective config shows the pinned pause image.
#
# Every file comes from the build host (k4w_component_file: build-* fetched and verified it into
# its cache, Packer's HTTP server serves it) and is checked again here against the digest the
# profile pins.
#
# Env: K4W_CONTAINERD_VERSION, K4W_CONTAINERD_FILE, K4W_CONTAINERD_SHA256 or K4W_CONTAINERD_SHA512,
# K4W_CONTAINERD_CGROUP_DRIVER, K4W_RUNC_VERSION, K4W_RUNC_FILE, K4W_RUNC_SHA256 or K4W_RUNC_SHA512,
# K4W_CNI_VERSION, K4W_CNI_FILE, K4W_CNI_SHA256 or K4W_CNI_SHA512, K4W_PAUSE_IMAGE,
# K4W_CONTAINERD_CONFIG_VERSION (k4w/derive/containerd_config.py: the config schema this containerd reads
# without migrating it),
# K4W_REGISTRY_FILES and K4W_REGISTRY_AUTH (k4w/derive/registry.py; empty = no mirror); PACKER_HTTP_ADDR
# (Packer).
K4W_STEP="03-containerd"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

BIN_DIR=/usr/local/bin
RUNC=/usr/local/sbin/runc
CNI_BIN_DIR=/opt/cni/bin
CNI_CONF_DIR=/etc/cni/net.d
CONFIG=/etc/containerd/config.toml
UNIT=/etc/systemd/system/containerd.service
# containerd's default CRI socket on Linux (defaults/defaults_linux.go at v2.3.7).
SOCKET=/run/containerd/containerd.sock
# Seconds containerd may take to answer on its socket after a (re)start before the build fails.
CONTAINERD_READY_TIMEOUT=120

k4w_require K4W_CONTAINERD_VERSION K4W_CONTAINERD_FILE K4W_CONTAINERD_CGROUP_DRIVER \
    K4W_RUNC_VERSION K4W_RUNC_FILE K4W_CNI_VERSION K4W_CNI_FILE K4W_PAUSE_IMAGE K4W_CONTAINERD_CONFIG_VERSION
[[ $K4W_CONTAINERD_CONFIG_VERSION =~ ^[1-9][0-9]*$ ]] ||
    k4w_die "K4W_CONTAINERD_CONFIG_VERSION must be a config schema number, not '${K4W_CONTAINERD_CONFIG_VERSION}'"
k4w_require_defined K4W_REGISTRY_FILES K4W_REGISTRY_AUTH
containerd_digest="$(k4w_component_digest containerd)"
runc_digest="$(k4w_component_digest runc)"
cni_digest="$(k4w_component_digest cni)"
case "$K4W_CONTAINERD_CGROUP_DRIVER" in
    systemd) systemd_cgroup=true ;;
    cgroupfs) systemd_cgroup=false ;;
    *) k4w_die "K4W_CONTAINERD_CGROUP_DRIVER must be systemd or cgroupfs, not '${K4W_CONTAINERD_CGROUP_DRIVER}'" ;;
esac
[[ $K4W_PAUSE_IMAGE =~ ^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9./_-]+:[A-Za-z0-9._-]+$ ]] ||
    k4w_die "K4W_PAUSE_IMAGE is not an image reference such as registry.k8s.io/pause:3.10.2: '${K4W_PAUSE_IMAGE}'"
k4w_distro >/dev/null

restart=0

# install_tree NAME SOURCE FROM TO - install every file under FROM at the same place under TO and
# record it for k4w_installed_from. Sets K4W_CHANGED=1 when a file changed.
install_tree() {
    local name="$1" source="$2" from="$3" to="$4" record="" tree_changed=0 file relative
    while IFS= read -r -d '' file; do
        relative="${file#"$from"/}"
        k4w_install_file "$file" "${to}/${relative}" 0755
        ((K4W_CHANGED)) && tree_changed=1
        record+="$(k4w_sha256_of "$file")  $(k4w_path "${to}/${relative}")"$'\n'
    done < <(find "$from" -type f -print0 | sort -z)
    k4w_record_install "$name" "$source" "$record"
    K4W_CHANGED=$tree_changed
}

# --- containerd: bin/* of the release tarball ---------------------------------------------------
source_id="${containerd_digest} ${K4W_CONTAINERD_FILE}"
if k4w_installed_from containerd "$source_id"; then
    k4w_log "containerd ${K4W_CONTAINERD_VERSION} already installed in ${BIN_DIR}"
else
    tarball="$(k4w_component_file containerd)"
    unpacked="$(mktemp -d)"
    tar -xzf "$tarball" -C "$unpacked"
    [[ -f ${unpacked}/bin/containerd ]] || k4w_die "${K4W_CONTAINERD_FILE} holds no bin/containerd"
    install_tree containerd "$source_id" "${unpacked}/bin" "$BIN_DIR"
    ((K4W_CHANGED)) && restart=1
    rm -rf "$unpacked"
fi

# --- runc: one static binary -----------------------------------------------------------------
source_id="${runc_digest} ${K4W_RUNC_FILE}"
if k4w_installed_from runc "$source_id"; then
    k4w_log "runc ${K4W_RUNC_VERSION} already installed at ${RUNC}"
else
    unpacked="$(mktemp -d)"
    cp "$(k4w_component_file runc)" "${unpacked}/${RUNC##*/}"
    install_tree runc "$source_id" "$unpacked" "${RUNC%/*}"
    rm -rf "$unpacked"
fi

# --- CNI plugins -----------------------------------------------------------------------------
source_id="${cni_digest} ${K4W_CNI_FILE}"
if k4w_installed_from cni-plugins "$source_id"; then
    k4w_log "CNI plugins v${K4W_CNI_VERSION} already installed in ${CNI_BIN_DIR}"
else
    tarball="$(k4w_component_file cni)"
    unpacked="$(mktemp -d)"
    tar -xzf "$tarball" -C "$unpacked"
    # The release puts its README.md and LICENSE beside the plugins (containernetworking/plugins
    # v1.9.1 .github/workflows/release.yaml): not programs, so not into the plugin folder.
    rm -f "${unpacked}/README.md" "${unpacked}/LICENSE"
    install_tree cni-plugins "$source_id" "$unpacked" "$CNI_BIN_DIR"
    rm -rf "$unpacked"
fi
conf_dir="$(k4w_path "$CNI_CONF_DIR")"
[[ -d $conf_dir ]] || mkdir -p "$conf_dir"

# --- configuration -------------------------------------------------------------------------
# TOML single-quoted strings are literal: the values above were checked to hold no quote.
# imports: the drop-ins of both scopes of k4w_configure_registry (a glob that matches nothing
# imports nothing). config_path: hosts.toml per registry host (docs/hosts.md at v2.3.7); set
# explicitly, as the default also reads /etc/docker/certs.d, which k4w does not manage.
k4w_write_file "$CONFIG" 0644 "# k4w: containerd ${K4W_CONTAINERD_VERSION} for kubeadm (written by ${K4W_STEP})
version = ${K4W_CONTAINERD_CONFIG_VERSION}
imports = ['${K4W_REGISTRY_AUTH_NODE%/*}/*.toml', '${K4W_REGISTRY_AUTH_BUILD%/*}/*.toml']

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '${K4W_PAUSE_IMAGE}'

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = '${K4W_REGISTRY_HOSTS_DIR}'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = ${systemd_cgroup}

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['${CNI_BIN_DIR}']
  conf_dir = '${CNI_CONF_DIR}'"
((K4W_CHANGED)) && restart=1
k4w_configure_registry "$K4W_REGISTRY_FILES" "$K4W_REGISTRY_AUTH" build
((K4W_REGISTRY_AUTH_CHANGED)) && restart=1

k4w_write_file "$UNIT" 0644 "# k4w: containerd (the settings of containerd.service at v${K4W_CONTAINERD_VERSION})
[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=${BIN_DIR}/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target"
if ((K4W_CHANGED)); then
    restart=1
    k4w_systemctl daemon-reload
fi
k4w_enable containerd

if ! k4w_live; then
    k4w_log "sandbox: containerd, runc, CNI plugins and config in place; service start and checks skipped"
    exit 0
fi

# --- running, answering, and the version and config the profile pins ----------------------
if ! k4w_unit_active containerd; then
    systemctl start containerd
elif ((restart)); then
    k4w_log "restarting containerd for its new binaries or configuration"
    systemctl restart containerd
fi
k4w_wait_for "containerd to answer on ${SOCKET}" "$CONTAINERD_READY_TIMEOUT" \
    "${BIN_DIR}/ctr" --address "$SOCKET" version
version="$("${BIN_DIR}/containerd" --version)"
[[ $version == *" v${K4W_CONTAINERD_VERSION} "* || $version == *" ${K4W_CONTAINERD_VERSION} "* ]] ||
    k4w_die "containerd is not ${K4W_CONTAINERD_VERSION}: ${version}"
[[ $("$RUNC" --version | head -n 1) == "runc version ${K4W_RUNC_VERSION}"* ]] ||
    k4w_die "runc is not ${K4W_RUNC_VERSION}: $("$RUNC" --version | head -n 1)"
# containerd warns about, but starts with, a key it does not know: its own view proves the pin.
"${BIN_DIR}/containerd" --config "$CONFIG" config dump |
    grep -qF -e "sandbox = '${K4W_PAUSE_IMAGE}'" -e "sandbox = \"${K4W_PAUSE_IMAGE}\"" ||
    k4w_die "containerd's effective configuration does not pin ${K4W_PAUSE_IMAGE} as the sandbox image (see ${CONFIG})"
"${BIN_DIR}/containerd" --config "$CONFIG" config dump |
    grep -qF -e "config_path = '${K4W_REGISTRY_HOSTS_DIR}'" -e "config_path = \"${K4W_REGISTRY_HOSTS_DIR}\"" ||
    k4w_die "containerd's effective configuration does not read registry hosts from ${K4W_REGISTRY_HOSTS_DIR} (see ${CONFIG})"
k4w_log "containerd ${K4W_CONTAINERD_VERSION}, runc ${K4W_RUNC_VERSION}, CNI plugins v${K4W_CNI_VERSION} installed; sandbox image ${K4W_PAUSE_IMAGE}"

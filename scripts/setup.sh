#!/usr/bin/env bash
# Install everything k4w and its test suite need on a Debian/Ubuntu machine, idempotently:
# the real validators (shellcheck, debconf-utils, ruby, vagrant), the QEMU end-to-end tools
# (qemu, debootstrap, squid), a virtualenv with the Python packages, and the pinned upstream
# tools of tools/lock.yml (Packer and its plugins, containerd, runc, the CNI plugins, kubeadm,
# kubelet, kubectl), built once from the Go module proxy by scripts/build-tools. Packer is not
# Debian's (1.6.6 cannot read the HCL2 templates' required_plugins).
set -euo pipefail
trap 'echo "setup.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

cd "$(dirname "$0")/.."

# Every apt package k4w.infra.tools.INSTALL names is here (tests/infra/test_tools.py checks it).
APT_PACKAGES=(
  vagrant shellcheck debconf-utils cloud-init ruby
  qemu-system-x86 qemu-utils debootstrap squid busybox openssl wimtools
  python3-venv git ca-certificates openssh-client e2fsprogs tar coreutils gnupg
  # tests/sshd.py: the shared ssh connections of a libvirt cluster (k4w.infra.ssh_mux) run against a real sshd.
  openssh-server
  # host.provider libvirt: `invoke validate` runs `vagrant validate` with the libvirt provider, which only
  # the plugin knows (k4w/validate/vagrant_rules.py); cluster-up checks the networks with virsh.
  vagrant-libvirt libvirt-clients
  # tests/cluster/test_network_libvirt_real.py runs `invoke network-up` against a real libvirtd (started by the
  # test where nothing runs it); dnsmasq-base serves the management network's DHCP.
  libvirt-daemon-system dnsmasq-base
  # The qemu sources boot UEFI from OVMF's files (k4w.infra.packer_cli.UEFI_FIRMWARE); the build preflight
  # refuses a libvirt bake without them.
  ovmf
  # scripts/build-tools: runc is cgo with libseccomp, linked statically like its release; pause is C.
  gcc libc6-dev libseccomp-dev pkg-config
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# A virtualenv keeps us clear of PEP 668 "externally managed" system Pythons.
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# Go itself is not a Debian 12 package of the right version (bookworm has 1.19): the pinned tools need Go 1.26.
if ! command -v go >/dev/null; then
  echo "setup: Go 1.26 is needed to build the pinned tools (https://go.dev/doc/install); then run setup.sh again" >&2
  exit 1
fi
scripts/build-tools --group ci
# The cluster.existing tests run a real etcd and kube-apiserver (tests/cluster/real_control_plane.py);
# they share k8s.io/kubernetes's modules with kubernetes-node (build.json here: 7.8 s and 100.3 s warm).
scripts/build-tools --only etcd --only kubernetes-control-plane
echo "setup: ready. Use .venv/bin/invoke (or activate .venv)."

#!/usr/bin/env bash
# Undo kubeadm init/join on this Linux node, keeping the VM (idempotent). Run as root.
# Beyond `kubeadm reset` it removes what Flannel left: the CNI config it installed, its lease
# file and its bridge/vxlan links, so a new cluster gets a clean pod network.
set -euo pipefail
trap 'echo "cluster-reset.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

kubeadm reset --force
rm -f /etc/cni/net.d/10-flannel.conflist /home/vagrant/.kube/config
rm -rf /run/flannel /var/lib/cni
for link in cni0 flannel.1; do
  if ip link show "$link" >/dev/null 2>&1; then ip link delete "$link"; fi
done
echo "cluster-reset.sh: node reset"

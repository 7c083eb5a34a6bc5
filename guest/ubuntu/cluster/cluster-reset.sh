#!/usr/bin/env bash
# Undo kubeadm init/join on this Linux node, keeping the VM (idempotent). Run as root.
# Beyond `kubeadm reset` it removes what Flannel left: the CNI config it installed, its lease
# file and its bridge/vxlan links, so a new cluster gets a clean pod network.
# Input: K4W_FLANNEL_VXLAN_DEVICE, flanneld's vxlan link flannel.<VNI> for the cluster's net-conf
# (cluster-reset reads the VNI from the rendered kube-flannel.yaml; k4w's vxlan VNI is 4096).
set -euo pipefail
trap 'echo "cluster-reset.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

: "${K4W_FLANNEL_VXLAN_DEVICE:?K4W_FLANNEL_VXLAN_DEVICE (flannel.<VNI> of the cluster net-conf) must be set}"

kubeadm reset --force
rm -f /etc/cni/net.d/10-flannel.conflist /home/vagrant/.kube/config
rm -rf /run/flannel /var/lib/cni
for link in cni0 "$K4W_FLANNEL_VXLAN_DEVICE"; do
  if ip link show "$link" >/dev/null 2>&1; then ip link delete "$link"; fi
done
echo "cluster-reset.sh: node reset"

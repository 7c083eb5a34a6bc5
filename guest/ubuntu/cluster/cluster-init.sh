#!/usr/bin/env bash
# Initialise the master with kubeadm, idempotently. Run by cluster-up as root.
# Input: K4W_KUBEADM_CONFIG (the uploaded, rendered kubeadm-config.yaml).
# A master with /etc/kubernetes/admin.conf is initialised: only the kubeconfig copy is redone.
set -euo pipefail
trap 'echo "cluster-init.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

: "${K4W_KUBEADM_CONFIG:?K4W_KUBEADM_CONFIG (path of kubeadm-config.yaml on this node) must be set}"
ADMIN_CONF=/etc/kubernetes/admin.conf
USER_HOME=/home/vagrant

if [ -f "$ADMIN_CONF" ]; then
  echo "cluster-init.sh: $ADMIN_CONF exists, the master is initialised"
else
  # Leftovers of an interrupted init fail kubeadm's preflight (ports, manifests): start clean.
  if [ -d /etc/kubernetes/manifests ] && [ -n "$(ls -A /etc/kubernetes/manifests)" ]; then
    kubeadm reset --force
  fi
  kubeadm init --config "$K4W_KUBEADM_CONFIG"
fi

install -d -o vagrant -g vagrant -m 0700 "$USER_HOME/.kube"
install -o vagrant -g vagrant -m 0600 "$ADMIN_CONF" "$USER_HOME/.kube/config"
echo "cluster-init.sh: kubeconfig installed for vagrant"

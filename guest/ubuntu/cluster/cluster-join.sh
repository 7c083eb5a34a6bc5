#!/usr/bin/env bash
# Join this Linux worker with kubeadm, idempotently. Run by cluster-up as root.
# Input: K4W_NODE_NAME, K4W_NODE_IP, K4W_API_SERVER (ip:port), K4W_CA_CERT_HASH (sha256:...),
# from a fresh `kubeadm token create --print-join-command`; K4W_KUBELET_EXTRA_ARGS, the era's further
# kubelet flags (k4w.derive.linux_kubelet_flags, from the box profile; may be empty). The join token
# comes on standard input, one line: never on the sudo command line, which sudo logs to /var/log/auth.log.
set -euo pipefail
trap 'echo "cluster-join.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

K4W_JOIN_TOKEN=""
IFS= read -r K4W_JOIN_TOKEN || true   # a last line without a newline still counts
for var in K4W_NODE_NAME K4W_NODE_IP K4W_API_SERVER K4W_JOIN_TOKEN K4W_CA_CERT_HASH; do
  if [ -z "${!var:-}" ]; then echo "cluster-join.sh: $var must be set (the join token: on standard input)" >&2; exit 1; fi
done

# kubeadm's kubelet drop-in reads KUBELET_EXTRA_ARGS from /etc/default/kubelet (Debian packaging,
# every era). --node-ip pins the kubelet to the cluster NIC instead of the management NIC.
wanted="KUBELET_EXTRA_ARGS=--node-ip=$K4W_NODE_IP${K4W_KUBELET_EXTRA_ARGS:+ $K4W_KUBELET_EXTRA_ARGS}"
flags_changed=0
if [ "$(cat /etc/default/kubelet 2>/dev/null || true)" != "$wanted" ]; then
  echo "$wanted" > /etc/default/kubelet
  systemctl daemon-reload
  flags_changed=1
  echo "cluster-join.sh: kubelet pinned to $K4W_NODE_IP"
fi

if [ -f /etc/kubernetes/kubelet.conf ]; then
  echo "cluster-join.sh: /etc/kubernetes/kubelet.conf exists, $K4W_NODE_NAME has joined"
  # A joined kubelet reads its flags only when it starts (a join starts it itself).
  if [ "$flags_changed" = 1 ]; then
    systemctl restart kubelet
    echo "cluster-join.sh: kubelet restarted with its new flags"
  fi
  exit 0
fi
# Leftovers of an interrupted join fail kubeadm's FileAvailable preflight checks.
if [ -f /etc/kubernetes/bootstrap-kubelet.conf ] || [ -f /etc/kubernetes/pki/ca.crt ]; then
  kubeadm reset --force
fi
kubeadm join "$K4W_API_SERVER" --token "$K4W_JOIN_TOKEN" \
  --discovery-token-ca-cert-hash "$K4W_CA_CERT_HASH" --node-name "$K4W_NODE_NAME"
echo "cluster-join.sh: $K4W_NODE_NAME joined"

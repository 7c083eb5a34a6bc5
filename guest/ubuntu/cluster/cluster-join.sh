#!/usr/bin/env bash
# Join this Linux worker with kubeadm, idempotently. Run by cluster-up as root.
# Input: K4W_NODE_NAME, K4W_NODE_IP; K4W_KUBELET_EXTRA_ARGS, the era's further kubelet flags
# (k4w.derive.values.linux_kubelet_flags, from the box profile; may be empty); K4W_LIB (lib.sh beside
# this script). The kubeadm join configuration (k4w/derive/join_config.py: API server, token, CA
# hash, node name) comes on standard input: the token is never on a command line (sudo logs it to
# /var/log/auth.log, and argv is visible to every process). It is written 0600 under /run (tmpfs:
# never on disk) and deleted on exit, failure included. K4W_ROOT (default empty) is an offline
# sandbox for the tests: every path below is under it.
K4W_STEP="cluster-join"
set -euo pipefail
trap 'echo "cluster-join.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR
set -E  # errtrace: the ERR trap also fires inside lib.sh's functions
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (cluster-up uploads guest/ubuntu/lib.sh beside this script)" >&2; exit 1; }
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$K4W_LIB"

for var in K4W_NODE_NAME K4W_NODE_IP; do
  if [ -z "${!var:-}" ]; then echo "cluster-join.sh: $var must be set" >&2; exit 1; fi
done
ROOT="${K4W_ROOT:-}"
join_config=$(umask 077 && mktemp "$ROOT/run/k4w-kubeadm-join.XXXXXX")
trap 'rm -f "$join_config"' EXIT
cat > "$join_config"
if [ ! -s "$join_config" ]; then echo "cluster-join.sh: no kubeadm join configuration on standard input" >&2; exit 1; fi

# The kernel modules and sysctls the kubelet needs, before anything (re)starts it: a box baked
# before a tunable was added lacks it, and a containerd-era kubelet (protectKernelDefaults) exits
# on it, after every reboot too.
k4w_kernel_tunables

# kubeadm's kubelet drop-in reads KUBELET_EXTRA_ARGS from /etc/default/kubelet (Debian packaging,
# every era). --node-ip pins the kubelet to the cluster NIC instead of the management NIC.
wanted="KUBELET_EXTRA_ARGS=--node-ip=$K4W_NODE_IP${K4W_KUBELET_EXTRA_ARGS:+ $K4W_KUBELET_EXTRA_ARGS}"
flags_changed=0
if [ "$(cat "$ROOT/etc/default/kubelet" 2>/dev/null || true)" != "$wanted" ]; then
  echo "$wanted" > "$ROOT/etc/default/kubelet"
  systemctl daemon-reload
  flags_changed=1
  echo "cluster-join.sh: kubelet pinned to $K4W_NODE_IP"
fi

if [ -f "$ROOT/etc/kubernetes/kubelet.conf" ]; then
  echo "cluster-join.sh: /etc/kubernetes/kubelet.conf exists, $K4W_NODE_NAME has joined"
  # A joined kubelet reads its flags only when it starts (a join starts it itself).
  if [ "$flags_changed" = 1 ]; then
    systemctl restart kubelet
    echo "cluster-join.sh: kubelet restarted with its new flags"
  fi
  exit 0
fi
# Leftovers of an interrupted join fail kubeadm's FileAvailable preflight checks.
if [ -f "$ROOT/etc/kubernetes/bootstrap-kubelet.conf" ] || [ -f "$ROOT/etc/kubernetes/pki/ca.crt" ]; then
  kubeadm reset --force
fi
kubeadm join --config "$join_config"
echo "cluster-join.sh: $K4W_NODE_NAME joined"

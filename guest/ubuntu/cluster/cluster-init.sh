#!/usr/bin/env bash
# Initialise the master with kubeadm, idempotently. Run by cluster-up as root.
# Input: K4W_KUBEADM_CONFIG (the uploaded, rendered kubeadm-config.yaml); K4W_LIB (lib.sh beside this script).
# A master whose API server answers and holds the ConfigMaps of kubeadm's last init phases is
# initialised: only the kubeconfig copy is redone. K4W_ROOT (default empty) is an offline sandbox
# for tests, as in guest/ubuntu/lib.sh; K4W_KUBECONFIG_USER (default vagrant) gets the kubeconfig.
K4W_STEP="cluster-init"
set -euo pipefail
trap 'echo "cluster-init.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR
set -E  # errtrace: the ERR trap also fires inside lib.sh's functions
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (cluster-up uploads guest/ubuntu/lib.sh beside this script)" >&2; exit 1; }
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$K4W_LIB"

: "${K4W_KUBEADM_CONFIG:?K4W_KUBEADM_CONFIG (path of kubeadm-config.yaml on this node) must be set}"
ROOT="${K4W_ROOT:-}"
ADMIN_CONF="$ROOT/etc/kubernetes/admin.conf"
MANIFESTS="$ROOT/etc/kubernetes/manifests"
USER_NAME="${K4W_KUBECONFIG_USER:-vagrant}"
USER_HOME="$ROOT/home/$USER_NAME"
# Seconds the API server of an initialised master may take to answer (it starts as a static pod
# after a reboot); longer means a control plane that is broken, which only cluster-reset mends.
API_TIMEOUT_SECONDS="${K4W_API_TIMEOUT_SECONDS:-180}"

api() {
  kubectl --kubeconfig "$ADMIN_CONF" --request-timeout=10s "$@" >/dev/null 2>&1
}

# kubeadm writes admin.conf in its kubeconfig phase, before the control plane runs and long before
# upload-config (kube-system/kubeadm-config) and bootstrap-token (kube-public/cluster-info), which
# every join needs (phase order: cmd/kubeadm/app/cmd/init.go). So admin.conf alone does not mean
# done: an init that failed after writing it is reset and run again.
initialised() {
  [ -f "$ADMIN_CONF" ] || return 1
  local deadline=$((SECONDS + API_TIMEOUT_SECONDS))
  until api get --raw=/healthz; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "cluster-init.sh: $ADMIN_CONF exists but the API server did not answer within ${API_TIMEOUT_SECONDS}s; not resetting a master that may hold a cluster: run 'invoke cluster-reset' to start over" >&2
      exit 1
    fi
    sleep 5
  done
  api -n kube-public get configmap cluster-info && api -n kube-system get configmap kubeadm-config
}

# The kernel modules and sysctls the kubelet needs, before anything relies on it (initialised()
# asks the API server, a static pod the kubelet runs): a box baked before a tunable was added lacks
# it, and a containerd-era kubelet (protectKernelDefaults) exits on it, after every reboot too.
k4w_kernel_tunables

if initialised; then
  echo "cluster-init.sh: the master is initialised (its API answers, cluster-info and kubeadm-config exist)"
else
  # Leftovers of an interrupted init fail kubeadm's preflight (ports, manifests, kubeconfigs): start clean.
  if [ -f "$ADMIN_CONF" ] || { [ -d "$MANIFESTS" ] && [ -n "$(ls -A "$MANIFESTS")" ]; }; then
    echo "cluster-init.sh: an earlier kubeadm init did not finish: kubeadm reset, then init again"
    kubeadm reset --force
  fi
  kubeadm init --config "$K4W_KUBEADM_CONFIG"
fi

install -d -o "$USER_NAME" -g "$USER_NAME" -m 0700 "$USER_HOME/.kube"
install -o "$USER_NAME" -g "$USER_NAME" -m 0600 "$ADMIN_CONF" "$USER_HOME/.kube/config"
echo "cluster-init.sh: kubeconfig installed for $USER_NAME"

"""Every kubeadm timeout k4w renders (kubeadm.k8s.io/v1beta4 `timeouts`), each with why it is that long.

A wait for something to become ready follows cluster.ready_timeout: the user raised it for a slow host,
and kubeadm must not give up sooner than cluster-up does. Any other bound is a named constant here: in
kubeadm it is also how long a failure that no retry mends (an RBAC refusal, a validation error) is
retried, so it must not grow with ready_timeout (up to 7200 s, k4w.model.config).

What each field bounds, k8s.io/kubernetes@v1.37.2 (module zip h1:A2VDEiObzkYqFTKhSsn0ZEb0RlLEXpHWj93gi2HqEwE=)
cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go Timeouts, defaults from constants/constants.go via
v1beta4/defaults.go SetDefaults_Timeouts:
- controlPlaneComponentHealthCheck (default 4m, ControlPlaneComponentHealthCheckTimeout): the wait for
  the static-pod control plane to be healthy (cmd/phases/init/waitcontrolplane.go): a readiness wait.
- kubernetesAPICall (default 1m, KubernetesAPICallTimeout): how long kubeadm retries one API request,
  every 500 ms (KubernetesAPICallRetryInterval), on any error but AlreadyExists: util/apiclient/
  idempotency.go CreateOrUpdate/CreateOrMutate (the RBAC, ConfigMaps and Secrets of init's phases) and
  phases/kubeconfig/kubeconfig.go EnsureAdminClusterRoleBindingImpl. The last is the first thing
  wait-control-plane does (init.go initData.Client()), before the API server has ever answered, so on
  a master this also bounds the wait for the API server's first answer.
- discovery (default 5m, DiscoveryTimeout): a worker's `kubeadm join` fetching and verifying the cluster-info
  ConfigMap until the API server answers (cmd/kubeadm/app/discovery/token/token.go, retried every 5 s).
- tlsBootstrap (default 5m, TLSBootstrapTimeout): the join's wait for the kubelet's TLS bootstrap
  (cmd/phases/join/kubelet.go).
- kubeletHealthCheck (default 4m, KubeletHealthCheckTimeout): the join's wait for the kubelet's /healthz.
The two-node libvirt run's first worker join failed when discovery's 5 minutes ran out while the master's
kube-apiserver, under a guest load of 15-18 on 2 emulated vCPUs, held 404 unaccepted connections and then
restarted: the join's waits are readiness waits like the master's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    seconds: int
    why: str


# kubernetesAPICall: kubeadm 1.37's 1 min default failed `kubeadm init` on a 2-vCPU master under TCG
# (docs/development.md, sixth ubuntu-2404-e2e run: the admin binding's first API answer came later than 60 s). The
# whole `kubeadm init`, that wait included, took 234 to 399 s in the passing TCG runs (docs/development.md;
# ci/e2e/cluster_run.py BUDGETS), so 10 min is that longest run and half again, rounded up.
# A permanent refusal of any call then fails `kubeadm init` after 10 min, not after ready_timeout
# (15 min by default, 25 in the e2e harness, up to 2 h).
KUBERNETES_API_CALL = Bound(600, "the API server's first answer on a slow master: the longest whole kubeadm init "
                                 "measured under TCG (399 s) and half again; also how long a permanent refusal is retried")

# Fields bounded by a constant (never by ready_timeout: they are retry bounds, not readiness waits).
BOUNDED = {"kubernetesAPICall": KUBERNETES_API_CALL}
# Fields that wait for readiness: they follow cluster.ready_timeout. The master's (InitConfiguration) and a
# worker's (JoinConfiguration).
READINESS = {"controlPlaneComponentHealthCheck": "waits for the control plane's static pods to be healthy"}
JOIN_READINESS = {"discovery": "waits for the API server to hand out the cluster-info ConfigMap",
                  "tlsBootstrap": "waits for the kubelet's TLS bootstrap",
                  "kubeletHealthCheck": "waits for the kubelet's health"}


# On an emulated CPU (libvirt.accelerator tcg) kubernetesAPICall is a readiness wait too: the two-node libvirt
# run's `kubeadm init` (docs/linux-host.md "Measured here", third run) failed when the admin binding's first
# API answer had not come after 600 s, while the control plane's own health wait (ready_timeout, 2400 s there)
# never started. The cost, a permanent refusal retried for ready_timeout, is taken on that host only.
EMULATED_CPU_READINESS = {"kubernetesAPICall": "the API server's first answer on an emulated CPU's master"}


def rendered(ready_timeout: int, readiness: dict[str, str] = READINESS, emulated_cpu: bool = False) -> dict[str, str]:
    """{field: duration} of the v1beta4 `timeouts` k4w renders for the master, in the order written."""
    values = {name: f"{ready_timeout}s" for name in readiness}
    values.update({name: f"{bound.seconds}s" for name, bound in BOUNDED.items()})
    if emulated_cpu:
        values.update({name: f"{max(ready_timeout, BOUNDED[name].seconds)}s" for name in EMULATED_CPU_READINESS})
    return values


def join(ready_timeout: int, emulated_cpu: bool = False) -> dict[str, str]:
    """{field: duration} of a v1beta4 worker's JoinConfiguration.timeouts."""
    return rendered(ready_timeout, JOIN_READINESS, emulated_cpu)

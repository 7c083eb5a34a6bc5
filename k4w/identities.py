"""The identities of the Windows node components flanneld and kube-proxy.

Seed era (Docker, 1.11): they run as NSSM services, with the token-Secret kubeconfigs below
(WINDOWS_COMPONENTS). Containerd era: they run as HostProcess DaemonSet pods
(HOSTPROCESS_DAEMONSETS, templates/manifests/windows-containerd/), whose ServiceAccount tokens the
kubelet projects into the pod and rotates: no token Secret and no kubeconfig on the node.

On Linux, flanneld and kube-proxy run as DaemonSet pods with ServiceAccounts of their own. On a
Windows node they run as NSSM services, so each gets a ServiceAccount in kube-system bound to the
same ClusterRole as its Linux twin, a token Secret, and a kubeconfig that `cluster-up` writes to the
node (k4w.cluster.steps). One table, read by the manifest template
(templates/manifests/windows-node-rbac.yaml.j2), the node args templates (--kubeconfig) and
cluster-up, so the three cannot disagree.

Token: a `kubernetes.io/service-account-token` Secret the cluster's token controller fills, on both
eras. It works the same on 1.11 (where each ServiceAccount also gets one auto-created) and on 1.35,
where no token is auto-created any more and the legacy-token cleaner removes only the
auto-created ones (those listed in the ServiceAccount's `secrets`), never a Secret created on
purpose (KEP-2799, kubernetes/enhancements keps/sig-auth/2799-reduction-of-secret-based-service-account-token).
Why not a TokenRequest with a bounded expiry: nothing on a Windows node could renew it (an NSSM
service reads a static kubeconfig, and the node's own credentials may not request tokens for
another ServiceAccount), so the node would lose its pod network when the token expired. The Secret's
token does not expire; it is revoked by deleting the Secret, and rotated by deleting it and running
`invoke cluster-up` again (the manifests step recreates it, the Windows join step writes the new one).
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE = "kube-system"
KUBECONFIG_DIR = "C:\\etc\\kubernetes"   # SYSTEM + Administrators only (guest/windows/node/protect-node-folders.ps1)


@dataclass(frozen=True)
class Identity:
    component: str       # the NSSM service on the Windows node
    service_account: str
    cluster_role: str    # the ClusterRole its Linux twin is bound to
    linux_source: str    # where that binding is, upstream
    namespace: str = NAMESPACE

    @property
    def secret(self) -> str:
        return f"{self.service_account}-token"

    @property
    def kubeconfig(self) -> str:
        return f"{KUBECONFIG_DIR}\\{self.component}.conf"


WINDOWS_COMPONENTS = (
    # The rendered Flannel manifest's own ClusterRole (templates/manifests/flannel/*.yaml.j2,
    # from Documentation/kube-flannel.yml of each Flannel release), bound there to its
    # ServiceAccount "flannel".
    Identity("flanneld", "k4w-windows-flanneld", "flannel", "flannel-io/flannel Documentation/kube-flannel.yml"),
    # kubeadm binds the built-in system:node-proxier to the kube-proxy ServiceAccount
    # (ClusterRoleBinding kubeadm:node-proxier, cmd/kubeadm/app/phases/addons/proxy/proxy.go).
    Identity("kube-proxy", "k4w-windows-kube-proxy", "system:node-proxier", "kubernetes/kubernetes cmd/kubeadm/app/phases/addons/proxy/proxy.go"),
)


def by_component(component: str) -> Identity:
    return next(i for i in WINDOWS_COMPONENTS if i.component == component)


# ------------------------------------------------------------------ containerd era: HostProcess pods

# The namespace of the Windows node DaemonSets (and nothing else). HostProcess pods are host-level
# (SYSTEM on the node, its whole file system and network), which only the Pod Security "privileged"
# level admits (Kubernetes Pod Security Standards, "HostProcess" under Baseline). The namespace sets
# that level explicitly, so no other namespace needs it and cluster defaults cannot change it.
HOSTPROCESS_NAMESPACE = "k4w-windows-node"


@dataclass(frozen=True)
class HostProcessDaemonSet:
    """One Windows node component as a HostProcess DaemonSet: its identity, its DaemonSet and the
    start script (guest/windows/hostprocess/) its container runs from the scripts ConfigMap."""

    identity: Identity
    daemonset: str
    script: str
    args_key: str   # the ConfigMap key holding the binary's flags, one per line (flag_rules reads it)
    binary: str     # the program in C:\k the script starts (installed and checksummed by the bake)


HOSTPROCESS_DAEMONSETS = (
    HostProcessDaemonSet(
        Identity("flanneld", "k4w-windows-flanneld", "flannel", "flannel-io/flannel Documentation/kube-flannel.yml",
                 namespace=HOSTPROCESS_NAMESPACE),
        daemonset="k4w-flannel-windows", script="start-flanneld.ps1", args_key="flanneld.args", binary="flanneld.exe"),
    HostProcessDaemonSet(
        Identity("kube-proxy", "k4w-windows-kube-proxy", "system:node-proxier",
                 "kubernetes/kubernetes cmd/kubeadm/app/phases/addons/proxy/proxy.go", namespace=HOSTPROCESS_NAMESPACE),
        daemonset="k4w-kube-proxy-windows", script="start-kube-proxy.ps1", args_key="kube-proxy.args", binary="kube-proxy.exe"),
)
# Dot-sourced by both start scripts; travels in the same ConfigMap.
HOSTPROCESS_LIBRARY = "hostprocess-lib.ps1"
HOSTPROCESS_CONFIGMAP = "k4w-windows-node-scripts"


def hostprocess_by_component(component: str) -> HostProcessDaemonSet:
    return next(d for d in HOSTPROCESS_DAEMONSETS if d.identity.component == component)


def runs_hostprocess(profile) -> bool:
    """Whether a box's flanneld and kube-proxy are HostProcess DaemonSets (its profile has a
    `hostprocess:` block, the containerd era) rather than services with token-Secret kubeconfigs."""
    return bool(profile.data.get("hostprocess"))


def windows_identity(component: str, hostprocess: bool) -> Identity:
    """The identity a Windows node's flanneld or kube-proxy uses: its DaemonSet's ServiceAccount on
    the containerd era, its service's on the seed era."""
    return hostprocess_by_component(component).identity if hostprocess else by_component(component)


# The seed era's token-Secret identities (templates/manifests/windows-node-rbac.yaml.j2).
SERVICE_IDENTITIES_TEMPLATE = "windows-node-rbac.yaml.j2"
SERVICE_IDENTITIES_MANIFEST = "windows-node-rbac.yaml"


def service_identities_needed(profiles) -> bool:
    """Whether a cluster needs the seed era's token Secrets: unless it has Windows nodes and every one
    runs flanneld and kube-proxy as HostProcess DaemonSets (a cluster without Windows nodes keeps
    rendering them, as it always did, so they are validated either way)."""
    windows = [p for p in profiles if p.is_windows]
    return not windows or any(not runs_hostprocess(p) for p in windows)

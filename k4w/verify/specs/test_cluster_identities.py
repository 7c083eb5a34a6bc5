"""Cluster spec, identities: no node credential reads more than its own node, and flanneld and
kube-proxy on Windows work on ServiceAccounts of their own (k4w/derive/identities.py: their services' on the
seed era, their HostProcess DaemonSets' on the containerd era).

`kubectl auth can-i ... --as` asks the API server's own authorizers (RBAC and the Node
authorizer), so the answers are the cluster's, not a reading of our manifests.
"""

from __future__ import annotations

import pytest

from k4w.derive import identities
from k4w.model import profiles
from k4w.model.version_skew import minor

pytestmark = [pytest.mark.infra, pytest.mark.k4w_spec("cluster")]

# The Node authorizer lets a node list and watch only its own Node object (a fieldSelector on its
# name) from Kubernetes 1.32, where AuthorizeNodeWithSelectors went beta and on by default
# (KEP-4601, kubernetes/enhancements keps/sig-auth/4601-authorize-with-selectors: alpha 1.31,
# beta 1.32, stable 1.34). Before, every node could list all nodes, so only RBAC is checked there.
NODE_SELECTORS_FROM = (1, 32)
# What flannel's annotations on a node say once flanneld has registered its lease (flannel-io/flannel
# pkg/subnet/kube/annotations.go, "public-ip" under the flannel.alpha.coreos.com prefix).
FLANNEL_PUBLIC_IP = "flannel.alpha.coreos.com/public-ip"


def can_i(kubectl, *args: str) -> bool:
    """kubectl auth can-i prints yes or no (exit 0 or 1); anything else is an error, never a no."""
    result = kubectl.run("auth", "can-i", *args, check=False)
    answer = result.stdout.strip().splitlines()[-1:] if result.stdout.strip() else []
    if answer == ["yes"] and result.returncode == 0:
        return True
    if answer == ["no"] and result.returncode == 1:
        return False
    raise AssertionError(f"kubectl auth can-i {' '.join(args)} answered neither yes nor no "
                         f"(exit {result.returncode}): {result.stdout.strip()} {result.stderr.strip()}")


@pytest.mark.k4w_check("identities")
def test_a_node_credential_cannot_list_every_node(kubectl, cluster_cfg):
    version = profiles.load(cluster_cfg.master.box).kubernetes_version
    node = cluster_cfg.nodes[-1].name
    as_node = (f"--as=system:node:{node}", "--as-group=system:nodes")
    if minor(version) >= NODE_SELECTORS_FROM:
        assert not can_i(kubectl, "list", "nodes", *as_node), (
            f"node {node}'s credentials may list every node: a binding to the system:nodes group widens what every "
            "kubelet may read (the Node authorizer alone allows its own node only)")
    # On every era: kube-proxy's rights are not every node's (the old system:nodes binding gave them).
    assert not can_i(kubectl, "list", "endpoints", "--all-namespaces", *as_node), (
        f"node {node}'s credentials may list every endpoint: system:node-proxier is bound to the system:nodes group")


@pytest.mark.k4w_check("identities")
@pytest.mark.parametrize("component", [i.component for i in identities.WINDOWS_COMPONENTS])
def test_windows_component_has_its_linux_twins_rights_and_no_more(kubectl, cluster_cfg, component):
    # The containerd era's DaemonSet ServiceAccount, the seed era's service identity.
    hostprocess = any(identities.runs_hostprocess(profiles.load(n.box)) for n in cluster_cfg.nodes if profiles.load(n.box).is_windows)
    ident = identities.windows_identity(component, hostprocess)
    account = f"--as=system:serviceaccount:{ident.namespace}:{ident.service_account}"
    # flanneld watches node leases; kube-proxy lists services (the flannel ClusterRole, system:node-proxier).
    needed = ("list", "nodes") if component == "flanneld" else ("list", "services")
    assert can_i(kubectl, *needed, account), f"{ident.service_account} may not {' '.join(needed)}: it has no binding to {ident.cluster_role}"
    assert not can_i(kubectl, "get", "secrets", "-n", "kube-system", account), f"{ident.service_account} may read kube-system's secrets"


@pytest.mark.k4w_check("identities")
def test_flanneld_on_windows_registered_each_windows_node(kubectl, cluster_cfg):
    """flanneld, now on its own identity, still patches its node: the lease annotation is there."""
    nodes = {n["metadata"]["name"]: n for n in kubectl.items("nodes")}
    windows = [n for n in cluster_cfg.nodes if profiles.load(n.box).is_windows]
    missing = {n.name: (nodes.get(n.name, {}).get("metadata", {}).get("annotations") or {}).get(FLANNEL_PUBLIC_IP)
               for n in windows}
    wrong = {name: got for name, got in missing.items() if got != str(next(n.ip for n in windows if n.name == name))}
    assert not wrong, f"flanneld has not registered these Windows nodes with their cluster IP ({FLANNEL_PUBLIC_IP}): {wrong}"

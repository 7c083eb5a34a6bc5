"""cluster.existing against a REAL API server: the pinned etcd and kube-apiserver 1.35.4 on this host,
made a kubeadm cluster by the pinned kubeadm's own init phases, with the Flannel objects of k4w's own
rendered modern manifest (Flannel v0.28.9's kube-flannel.yml). k4w then reads the facts, refuses a
mismatch, applies the Windows objects, creates a bootstrap token that really authenticates, and
cluster-reset's removal deletes exactly what it added.

Fails (never skips) when etcd or kube-apiserver is not built: .ci/run's setup.sh builds both.
"""

from __future__ import annotations

import contextlib
import re

import pytest
import yaml

from k4w import render
from k4w.cluster import bootstrap_token, existing, facts as facts_mod
from k4w.cluster_model import Cluster
from k4w.config import parse
from k4w.errors import K4wError
from k4w.kubeapi import Client
from tests.cluster import real_control_plane as cp
from tests.helpers import ROOT

# The REST collections of the kinds in Flannel's manifest (to set the cluster up the way its owner did).
COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
}


def existing_config(admin_conf, **network) -> Cluster:
    data = yaml.safe_load((ROOT / "examples" / "cluster-existing.yml").read_text())
    data["cluster"]["existing"] = str(admin_conf)
    data["network"].update(network)
    return Cluster.resolve(parse(yaml.safe_dump(data)))


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    folder = tmp_path_factory.mktemp("control-plane")
    with contextlib.ExitStack() as stack:
        plane = cp.start(folder, stack)
        api = plane.client()
        modern = Cluster.resolve(parse((ROOT / "examples" / "cluster-modern.yml").read_text()))
        flannel = render.render_files(modern, folder / "modern-out")["manifests/kube-flannel.yaml"]
        for doc in (d for d in yaml.safe_load_all(flannel) if isinstance(d, dict)):
            api.create(COLLECTIONS[doc["kind"]].format(ns=doc["metadata"].get("namespace", "")), doc)
        yield plane


def test_facts_of_a_real_kubeadm_cluster(plane):
    facts = facts_mod.read(plane.client())
    assert facts.version == cp.VERSION
    assert (facts.pod_cidr, facts.service_cidr, facts.cluster_domain) == (cp.POD_CIDR, cp.SERVICE_CIDR, "cluster.local")
    # kubeadm's CoreDNS addon keeps the Service name kube-dns, at the 10th address of the range.
    assert (facts.dns_ip, facts.dns_ip_source) == ("10.96.0.10", "Service kube-system/kube-dns")
    assert (facts.flannel["Network"], facts.flannel["Backend"]) == (cp.POD_CIDR, {"Type": "vxlan", "VNI": 4096, "Port": 4789})
    assert facts.flannel_source == "ConfigMap kube-flannel/kube-flannel-cfg"


def test_a_mismatch_is_refused_naming_both_values(plane):
    cluster = existing_config(plane.admin_conf, pod_cidr="10.245.0.0/16", backend="vxlan")
    with pytest.raises(K4wError) as refused:
        existing.check(plane.client(), cluster, plane.folder)
    text = str(refused.value)
    assert "pod CIDR: the cluster uses 10.244.0.0/16 (kubeadm-config networking.podSubnet), cluster.yml network.pod_cidr is 10.245.0.0/16" in text
    assert "Flannel Network: 10.244.0.0/16 in ConfigMap kube-flannel/kube-flannel-cfg, cluster.yml network.pod_cidr is 10.245.0.0/16" in text
    assert "nothing was started or changed" in text


def test_token_objects_and_reset(plane, tmp_path):
    api = plane.client()
    cluster = existing_config(plane.admin_conf)
    files = render.render_files(cluster, tmp_path)
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "windows-node-rbac.yaml").write_text(files["manifests/windows-node-rbac.yaml"])
    facts = existing.check(api, cluster, tmp_path)          # fits: no refusal, kubeadm's join RBAC found
    record = existing.Record(tmp_path, facts.server)
    said = existing.apply(api, existing.windows_objects(tmp_path, cluster), record)
    assert said == [f"created {n}" for n in ("ServiceAccount kube-system/k4w-windows-flanneld", "Secret kube-system/k4w-windows-flanneld-token",
                                             "ClusterRoleBinding k4w:windows-flanneld", "ServiceAccount kube-system/k4w-windows-kube-proxy",
                                             "Secret kube-system/k4w-windows-kube-proxy-token", "ClusterRoleBinding k4w:windows-kube-proxy")]
    # Idempotent: a second run creates nothing and keeps k4w's own objects.
    assert all(line.startswith("kept ") for line in existing.apply(api, existing.windows_objects(tmp_path, cluster), record))

    join = existing.join_token(api, record)
    token_id = join["token"].split(".")[0]
    secret = api.get(f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token_id}")
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert join["api"] == plane.kubeadm_config.read_text().split("controlPlaneEndpoint: ")[1].split()[0]
    # The real kubeadm lists the token, and pins the very same CA hash k4w computed.
    assert token_id in plane.kubeadm_run("token", "list")
    printed = plane.kubeadm_run("token", "create", "--print-join-command", "--ttl", "5m")
    assert re.search(r"--discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})", printed)[1] == join["hash"]

    # The token authenticates: the API server names the bootstrap user and kubeadm's node group.
    review = Client(api.creds, bearer=join["token"]).request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:bootstrap:{token_id}"
    assert bootstrap_token.NODE_GROUP in user["groups"]

    # cluster-reset's removal: k4w's objects go, kubeadm's and the owner's stay.
    removed = existing.remove(api, tmp_path)
    assert len(removed) == 7 and all(line.startswith("deleted ") for line in removed)
    assert api.get_optional(f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token_id}") is None
    assert api.get_optional("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/k4w:windows-flanneld") is None
    assert api.get_optional("/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy") is not None
    assert api.get_optional("/apis/rbac.authorization.k8s.io/v1/clusterroles/flannel") is not None
    assert not (tmp_path / existing.RECORD_FILE).exists()

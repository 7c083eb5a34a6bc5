"""cluster.existing: the facts reader and its refusals, against API answers recorded from a real
the pinned kube-apiserver set up by the pinned kubeadm (1.37.2, tools/lock.yml) (tests/fixtures/existing-cluster/answers.json, made by
tests/cluster/record_api_answers.py), changed one fact at a time the way another cluster would differ."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from k4w.model import version_skew
from k4w.cluster import existing, facts as facts_mod
from k4w.derive.cluster import Cluster
from k4w.model.config import parse
from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import ApiError, Credentials
from tests.helpers import ROOT

RECORDED = json.loads((ROOT / "tests" / "fixtures" / "existing-cluster" / "answers.json").read_text())["answers"]
FLANNEL_CM = "/api/v1/namespaces/kube-flannel/configmaps/kube-flannel-cfg"


class RecordedApi:
    """The recorded GET answers; a path not recorded is a 404, as the API server says for an absent object."""

    def __init__(self, answers: dict):
        self.answers = answers
        self.creds = Credentials(server="https://192.0.2.10:6443", ca_pem=b"")

    def get(self, path: str) -> dict:
        if path not in self.answers:
            raise ApiError(f"GET {path}: HTTP 404 NotFound", status=404)
        return copy.deepcopy(self.answers[path])

    def get_optional(self, path: str) -> dict | None:
        return copy.deepcopy(self.answers.get(path))


def cluster(**network) -> Cluster:
    data = yaml.safe_load((ROOT / "examples" / "cluster-existing.yml").read_text())
    data["network"].update(network)
    return Cluster.resolve(parse(yaml.safe_dump(data)))


def answers(**changes) -> dict:
    """The recorded answers with some replaced (a value) or removed (None)."""
    result = copy.deepcopy(RECORDED)
    for path, value in changes.items():
        if value is None:
            result.pop(path, None)
        else:
            result[path] = value
    return result


def with_netconf(netconf: dict) -> dict:
    cm = copy.deepcopy(RECORDED[FLANNEL_CM])
    cm["data"]["net-conf.json"] = json.dumps(netconf)
    return answers(**{FLANNEL_CM: cm})


def refusal(api_answers: dict, **network) -> str:
    with pytest.raises(K4wError) as refused:
        facts_mod.check(RecordedApi(api_answers), cluster(**network))
    assert "nothing was started or changed" in str(refused.value)
    return str(refused.value)


def test_the_recorded_kubeadm_cluster_is_read_whole():
    facts = facts_mod.read(RecordedApi(RECORDED))
    assert facts.version == "v1.37.2"
    assert (facts.pod_cidr, facts.pod_cidr_source) == ("10.244.0.0/16", "kubeadm-config networking.podSubnet")
    assert (facts.service_cidr, facts.dns_ip, facts.cluster_domain) == ("10.96.0.0/12", "10.96.0.10", "cluster.local")
    assert facts.flannel["Backend"] == {"Type": "vxlan", "VNI": 4096, "Port": 4789}
    assert facts.nodes == ["cp"] and facts.node_pod_cidrs == {"cp": ["10.244.0.0/24"]}


def test_a_fitting_cluster_yml_is_accepted():
    assert facts_mod.mismatches(facts_mod.read(RecordedApi(RECORDED)), cluster()) == []


@pytest.mark.parametrize("network, expected", [
    ({"pod_cidr": "10.245.0.0/16"},
     "pod CIDR: the cluster uses 10.244.0.0/16 (kubeadm-config networking.podSubnet), cluster.yml network.pod_cidr is 10.245.0.0/16"),
    ({"pod_cidr": "10.245.0.0/16"},
     "Flannel Network: 10.244.0.0/16 in ConfigMap kube-flannel/kube-flannel-cfg, cluster.yml network.pod_cidr is 10.245.0.0/16"),
    ({"service_cidr": "10.112.0.0/12"},
     "service CIDR: the cluster uses 10.96.0.0/12 (kubeadm-config networking.serviceSubnet), cluster.yml network.service_cidr is 10.112.0.0/12"),
    ({"service_cidr": "10.112.0.0/12"},
     "cluster DNS IP: the cluster's is 10.96.0.10 (Service kube-system/kube-dns), cluster.yml's network.service_cidr gives 10.112.0.10"),
])
def test_each_network_mismatch_names_both_values(network, expected):
    assert expected in refusal(RECORDED, **network)


def test_a_flannel_backend_mismatch_names_both_values():
    text = refusal(with_netconf({"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}))
    assert "Flannel backend: host-gw in ConfigMap kube-flannel/kube-flannel-cfg, cluster.yml network.backend is vxlan" in text


def test_flannel_vxlan_with_linux_defaults_is_refused_for_windows():
    # Upstream kube-flannel.yml's own net-conf: vxlan without VNI/Port (VNI 1, port 8472 on Linux).
    text = refusal(with_netconf({"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}))
    assert "Flannel VNI: 1 in ConfigMap kube-flannel/kube-flannel-cfg, Windows nodes need 4096" in text
    assert "Flannel vxlan port: 8472 in ConfigMap kube-flannel/kube-flannel-cfg, Windows nodes need 4789" in text


def test_another_cni_is_named():
    daemonsets = copy.deepcopy(RECORDED["/apis/apps/v1/daemonsets"])
    daemonsets["items"].append({"metadata": {"name": "calico-node", "namespace": "kube-system"}})
    text = refusal(answers(**{FLANNEL_CM: None, "/apis/apps/v1/daemonsets": daemonsets}))
    assert "CNI: k4w's Windows nodes run Flannel (vxlan), the cluster runs Calico (DaemonSet kube-system/calico-node)" in text


def test_without_kubeadm_config_the_nodes_pod_cidrs_decide():
    nodes = copy.deepcopy(RECORDED["/api/v1/nodes"])
    nodes["items"][0]["spec"]["podCIDRs"] = ["10.250.3.0/24"]
    text = refusal(answers(**{facts_mod.KUBEADM_CONFIG: None, "/api/v1/nodes": nodes}))
    assert "pod CIDR: nodes' podCIDRs cp 10.250.3.0/24 lie outside cluster.yml network.pod_cidr 10.244.0.0/16" in text


def test_without_kube_dns_the_kubelet_config_gives_the_dns_ip():
    facts = facts_mod.read(RecordedApi(answers(**{facts_mod.KUBE_DNS: None})))
    assert (facts.dns_ip, facts.dns_ip_source) == ("10.96.0.10", "kube-system/kubelet-config clusterDNS")


@pytest.mark.parametrize("apiserver, expected", [
    ("v1.36.7", "box windows-2022 runs kubelet 1.37.2, newer than the cluster's API server v1.36.7; a kubelet must not be newer"),
    ("v1.41.0", "box windows-2022 runs kubelet 1.37.2, 4 minor versions older than the cluster's API server v1.41.0; "
                "the version-skew policy allows at most 3"),
])
def test_version_skew_is_refused(apiserver, expected):
    version = {**RECORDED["/version"], "gitVersion": apiserver, "minor": apiserver.split(".")[1]}
    assert expected in refusal(answers(**{"/version": version}))


def test_three_minors_older_is_within_the_policy():
    assert version_skew.skew_problem("v1.38.2", "1.35.4", "box b") is None
    # kubelets before 1.25 keep the old window of two (version-skew-policy.md).
    assert "at most 2" in version_skew.skew_problem("v1.14.0", "1.11.10", "box b")


def test_the_kubeadm_join_prerequisites_are_checked_never_changed():
    api = RecordedApi(RECORDED)
    docs = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "k4w:windows-flanneld"},
             "roleRef": {"name": "flannel"}}]
    assert existing.prerequisites(api, docs, windows=True) == []
    daemonsets = copy.deepcopy(RECORDED["/apis/apps/v1/daemonsets"])
    proxy = next(d for d in daemonsets["items"] if d["metadata"]["name"] == "kube-proxy")
    del proxy["spec"]["template"]["spec"]["nodeSelector"]
    missing = answers(**{"/apis/apps/v1/daemonsets": daemonsets,
                         "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kubeadm:kubelet-bootstrap": None,
                         "/apis/rbac.authorization.k8s.io/v1/clusterroles/flannel": None})
    problems = existing.prerequisites(RecordedApi(missing), docs, windows=True)
    assert any(p.startswith("ClusterRoleBinding kubeadm:kubelet-bootstrap is missing") for p in problems)
    assert any(p.startswith("ClusterRole flannel is missing") for p in problems)
    assert any(p.startswith("DaemonSet kube-system/kube-proxy has no nodeSelector kubernetes.io/os: linux") for p in problems)


# ------------------------------------------------------------------ the containerd era's HostProcess objects

def rendered(tmp_path, **network):
    """The example rendered (its Windows box is the containerd era), as cluster-up reads OUT."""
    from k4w import render

    model = cluster(**network)
    render.render(model, tmp_path)
    return model


def hostprocess_refusal(tmp_path, api_answers: dict, model=None) -> str:
    model = model or rendered(tmp_path)
    with pytest.raises(K4wError) as refused:
        existing.check(RecordedApi(api_answers), model, tmp_path)
    assert "nothing was started or changed" in str(refused.value)
    return str(refused.value)


def test_the_containerd_era_applies_the_hostprocess_manifest_not_token_secrets(tmp_path):
    model = rendered(tmp_path)
    docs = existing.windows_objects(tmp_path, model)
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["ClusterRoleBinding", "ConfigMap", "DaemonSet", "Namespace", "ServiceAccount"]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace" and d["kind"] != "ClusterRoleBinding"} \
        == {"k4w-windows-node"}
    assert not any(d["kind"] == "Secret" for d in docs)
    # Every object has a REST path k4w knows, so cluster-reset can delete what it recorded.
    assert all(existing.object_path(d) for d in docs)
    # The recorded cluster fits: no refusal.
    assert existing.check(RecordedApi(RECORDED), model, tmp_path).version == "v1.37.2"


def test_the_api_address_comes_from_cluster_info(tmp_path):
    docs = existing.with_api_endpoint(existing.windows_objects(tmp_path, rendered(tmp_path)), "192.0.2.7:8443")
    for ds in (d for d in docs if d["kind"] == "DaemonSet"):
        env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("192.0.2.7", "8443")


def test_an_api_server_before_hostprocess_is_refused(tmp_path):
    model = rendered(tmp_path)
    docs = existing.windows_objects(tmp_path, model)
    problems = existing.prerequisites(RecordedApi(RECORDED), docs, windows=True, version="v1.25.16")
    assert any(p.startswith("Kubernetes version: the API server is v1.25.16; the Windows workers run flanneld and kube-proxy as "
                            "HostProcess pods") and "stable from 1.26" in p for p in problems)
    assert not any("HostProcess" in p for p in existing.prerequisites(RecordedApi(RECORDED), docs, windows=True, version="v1.26.0"))


def test_a_namespace_of_the_owner_with_k4ws_name_is_refused(tmp_path):
    theirs = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "k4w-windows-node", "labels": {"team": "x"}}}
    text = hostprocess_refusal(tmp_path, answers(**{"/api/v1/namespaces/k4w-windows-node": theirs}))
    assert "Namespace k4w-windows-node already exists and is not k4w's (no label app.kubernetes.io/part-of: k4w)" in text


def test_k4ws_own_namespace_is_kept_unless_it_is_being_deleted(tmp_path):
    model = rendered(tmp_path)
    ours = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "k4w-windows-node", "labels": {"app.kubernetes.io/part-of": "k4w"}}}
    existing.check(RecordedApi(answers(**{"/api/v1/namespaces/k4w-windows-node": ours})), model, tmp_path)
    ours["metadata"]["deletionTimestamp"] = "2026-11-27T12:00:00Z"
    text = hostprocess_refusal(tmp_path, answers(**{"/api/v1/namespaces/k4w-windows-node": ours}), model)
    assert "Namespace k4w-windows-node is still being deleted" in text


def test_k4ws_own_windows_daemonsets_are_not_taken_for_the_owners(tmp_path):
    model = rendered(tmp_path)
    daemonsets = copy.deepcopy(RECORDED["/apis/apps/v1/daemonsets"])
    daemonsets["items"] += [d for d in existing.windows_objects(tmp_path, model) if d["kind"] == "DaemonSet"]
    existing.check(RecordedApi(answers(**{"/apis/apps/v1/daemonsets": daemonsets})), model, tmp_path)


@pytest.mark.parametrize("change, expected", [
    (lambda nc: nc.update(Network="10.245.0.0/16"), "Flannel Network: 10.244.0.0/16 in ConfigMap kube-flannel/kube-flannel-cfg, "
                                                    "10.245.0.0/16 in nodes/winx-1/net-conf.json (what the Windows flanneld reads)"),
    (lambda nc: nc["Backend"].update(VNI=1), "Flannel Backend VNI: 4096 in ConfigMap kube-flannel/kube-flannel-cfg, 1 in "
                                             "nodes/winx-1/net-conf.json"),
])
def test_a_rendered_windows_netconf_that_differs_from_the_clusters_is_refused(tmp_path, change, expected):
    """The class check: the file the Windows flanneld reads is held to the cluster's own net-conf, not
    only cluster.yml (here cluster.yml fits and the rendered file was changed after the render)."""
    model = rendered(tmp_path)
    path = tmp_path / "nodes" / "winx-1" / "net-conf.json"
    netconf = json.loads(path.read_text())
    change(netconf)
    path.write_text(json.dumps(netconf))
    assert expected in hostprocess_refusal(tmp_path, RECORDED, model)

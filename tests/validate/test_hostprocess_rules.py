"""The containerd era's Windows node DaemonSets (flanneld and kube-proxy as HostProcess pods): the
real `invoke render` writes them, the real `invoke validate` passes them and fails a box that still
registers flanneld or kube-proxy as Windows services; every rule of k4w/validate/hostprocess_rules.py
fires on a planted defect; the seed era renders none of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from k4w.derive.cluster import Cluster
from k4w.model import profiles
from k4w.derive.cluster import kube_era
from k4w.validate import hostprocess_rules, manifest_rules, powershell_rules as powershell, powershell_snippets
from k4w.infra.sources import REPO_ROOT as ROOT
from tests.helpers import MODERN_ENV, config_dict, invoke, modern_config, write_config

DAEMONSETS = Path("manifests") / "windows-containerd" / "windows-node-daemonsets.yaml"
NAMESPACE = "k4w-windows-node"
FLANNEL, PROXY = "k4w-flannel-windows", "k4w-kube-proxy-windows"


@pytest.fixture(scope="module")
def modern(tmp_path_factory):
    """(cluster, OUT) of the modern example's cluster, rendered by the real command."""
    tmp = tmp_path_factory.mktemp("modern")
    config = write_config(tmp / "cluster.yml", modern_config())
    out = tmp / "out"
    result = invoke("render", "--config", str(config), "--out", str(out), env=MODERN_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    return Cluster.load(config), out


@pytest.fixture
def planted(modern, tmp_path):
    """A private copy of the modern OUT to plant a defect in."""
    cluster, out = modern
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    return cluster, copy


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _edit(out: Path, edit) -> None:
    path = out / DAEMONSETS
    docs = _docs(path)
    for doc in docs:
        edit(doc)
    path.write_text(yaml.safe_dump_all(docs))


def _daemonset(name: str, change):
    def edit(doc):
        if doc["kind"] == "DaemonSet" and doc["metadata"]["name"] == name:
            change(doc["spec"]["template"]["spec"])
    return edit


def _configmap(change):
    def edit(doc):
        if doc["kind"] == "ConfigMap":
            change(doc["data"])
    return edit


# ------------------------------------------------------------------ what is rendered

def test_the_modern_cluster_renders_both_daemonsets_and_passes_every_rule(modern):
    cluster, out = modern
    docs = _docs(out / DAEMONSETS)
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert ("DaemonSet", FLANNEL) in kinds and ("DaemonSet", PROXY) in kinds and ("Namespace", NAMESPACE) in kinds
    assert not [d for d in docs if d["kind"] == "Secret"]
    for ds in (d for d in docs if d["kind"] == "DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        assert spec["securityContext"]["windowsOptions"] == {"hostProcess": True, "runAsUserName": "NT AUTHORITY\\SYSTEM"}
        # Windows nodes k4w joined only (their kubelet's k4w.io/node label), never the cluster owner's.
        assert spec["hostNetwork"] is True and spec["nodeSelector"] == {"kubernetes.io/os": "windows", "k4w.io/node": "true"}
        [container] = spec["containers"]
        assert container["image"] == cluster.profile("windows-2022").data["hostprocess"]["image"]
        assert "@sha256:" in container["image"]
    # The node keeps only the kubelet's files; no service of flanneld or kube-proxy.
    assert sorted(p.name for p in (out / "nodes" / "worker-win").iterdir()) == ["cni.conf", "kubelet.args", "net-conf.json", "node.json"]
    assert manifest_rules.check_manifests(out, cluster) == []
    assert hostprocess_rules.check(out, None, cluster) == []


def test_each_identity_gets_exactly_its_linux_twins_cluster_role(modern):
    _, out = modern
    bindings = {d["subjects"][0]["name"]: d["roleRef"]["name"] for d in _docs(out / DAEMONSETS) if d["kind"] == "ClusterRoleBinding"}
    assert bindings == {"k4w-windows-flanneld": "flannel", "k4w-windows-kube-proxy": "system:node-proxier"}
    # The rendered kube-flannel.yaml defines that ClusterRole: the twin's rules, not a copy of them.
    assert any(d["kind"] == "ClusterRole" and d["metadata"]["name"] == "flannel" for d in _docs(out / "manifests" / "kube-flannel.yaml"))


def test_the_seed_cluster_renders_no_daemonset_and_keeps_its_services(tmp_path):
    config = write_config(tmp_path / "cluster.yml", config_dict())
    out = tmp_path / "out"
    result = invoke("render", "--config", str(config), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not [p for p in (out / "manifests").glob("windows-*") if p.is_dir()]
    assert {"flanneld.args", "kube-proxy.args"} <= {p.name for p in (out / "nodes" / "worker-win").iterdir()}
    assert "K4W_NODE_SERVICES=kubelet,flanneld,kube-proxy" in (out / "packer" / "windows-1803.pkr.hcl").read_text()


def test_the_daemonset_scripts_in_the_configmap_pass_the_powershell_checks(modern):
    _, out = modern
    snippets = {where.rsplit(" ", 1)[1]: text for where, text in powershell_snippets.rendered(out) if "ConfigMap" in where}
    assert sorted(snippets) == ["hostprocess-lib.ps1", "ready-flanneld.ps1", "start-flanneld.ps1", "start-kube-proxy.ps1"]
    for name, text in snippets.items():
        assert text == (ROOT / "guest" / "windows" / "hostprocess" / name).read_text()
        assert powershell.parse_text_errors(text) == [], name


def test_a_syntax_error_in_a_configmap_script_is_found(planted):
    _, out = planted
    _edit(out, _configmap(lambda data: data.update({"start-flanneld.ps1": data["start-flanneld.ps1"] + "\nif ($x {\n"})))
    [(where, text)] = [(w, t) for w, t in powershell_snippets.rendered(out) if w.endswith("start-flanneld.ps1")]
    assert powershell.parse_text_errors(text) != []


# ------------------------------------------------------------------ no Windows service of theirs (the class check)

def test_validate_fails_a_containerd_box_that_still_registers_flanneld_and_kube_proxy_as_services(tmp_path):
    """The real `invoke validate`, on a windows-2022 profile planted with the seed era's service list."""
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    profile = (ROOT / "boxes" / "windows-2022.yml").read_text()
    assert "\nnode_services: kubelet\n" in profile
    (boxes / "windows-2022.yml").write_text(profile.replace("\nnode_services: kubelet\n", "\nnode_services: kubelet,flanneld,kube-proxy\n"))
    config = write_config(tmp_path / "cluster.yml", modern_config())
    result = invoke("validate", "--config", str(config), "--out", str(tmp_path / "out"),
                    env={**MODERN_ENV, "K4W_BOX_DIRS": str(boxes)})
    assert result.returncode != 0
    assert "K4W_NODE_SERVICES registers flanneld, kube-proxy as Windows services" in result.stdout, result.stdout


def test_a_flanneld_or_kube_proxy_node_file_on_a_hostprocess_node_fails(planted):
    cluster, out = planted
    (out / "nodes" / "worker-win" / "kube-proxy.args").write_text("--hostname-override=worker-win\n")
    problems = manifest_rules.check_manifests(out, cluster)
    assert any("kube-proxy.args rendered, but this node runs flanneld and kube-proxy as HostProcess DaemonSets" in p
               for p in problems), problems


# ------------------------------------------------------------------ every rule fires

PLANTS = {
    "HostProcess elsewhere": (lambda out: _hostprocess_demo(out), "is a HostProcess pod"),
    "namespace without its level": (lambda out: _edit(out, lambda d: d["kind"] == "Namespace" and d["metadata"]["labels"].pop(
        "pod-security.kubernetes.io/enforce")), "must set pod-security.kubernetes.io/enforce: privileged"),
    "image by tag": (lambda out: _edit(out, _daemonset(FLANNEL, lambda s: s["containers"][0].update(
        image="mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0"))), "pinned by digest"),
    "not SYSTEM": (lambda out: _edit(out, _daemonset(PROXY, lambda s: s["securityContext"]["windowsOptions"].update(
        runAsUserName="NT AUTHORITY\\Local service"))), "runAsUserName"),
    "no OS selector": (lambda out: _edit(out, _daemonset(PROXY, lambda s: s.pop("nodeSelector"))), "nodeSelector must select"),
    "another identity": (lambda out: _edit(out, _daemonset(FLANNEL, lambda s: s.update(serviceAccountName="default"))),
                         "its own identity is 'k4w-windows-flanneld'"),
    "a wider role": (lambda out: _edit(out, lambda d: d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "flannel"
                                       and d["roleRef"].update(name="cluster-admin")), "its Linux twin has exactly 'flannel'"),
    "a Secret": (lambda out: (out / DAEMONSETS).write_text((out / DAEMONSETS).read_text() + "---\napiVersion: v1\nkind: Secret\n"
                                                          "metadata: {name: token, namespace: k4w-windows-node}\n"), "Secret token"),
    "a hostPath": (lambda out: _edit(out, _daemonset(FLANNEL, lambda s: s["volumes"].append({"name": "k", "hostPath": {"path": "C:\\k"}}))),
                   "is a hostPath"),
    "the kubelet's kubeconfig": (lambda out: _edit(out, _configmap(lambda data: data.update(
        {"kube-proxy.args": data["kube-proxy.args"] + "\n--kubeconfig=C:\\etc\\kubernetes\\kubelet.conf"}))), "passes --kubeconfig"),
    "another pod CIDR": (lambda out: _edit(out, _configmap(lambda data: data.update(
        {"kube-proxy.args": data["kube-proxy.args"].replace("--cluster-cidr=10.244.0.0/16", "--cluster-cidr=10.200.0.0/16")}))),
        "--cluster-cidr is '10.200.0.0/16'"),
    "a fixed node IP": (lambda out: _edit(out, _configmap(lambda data: data.update(
        {"flanneld.args": data["flanneld.args"].replace("--iface=${NODE_IP}", "--iface=192.168.250.21")}))), "--iface is '192.168.250.21'"),
    "the ClusterIP for the API": (lambda out: _edit(out, _daemonset(PROXY, lambda s: [e.update(value="10.96.0.1") for e in s["containers"][0]["env"]
                                                                                     if e["name"] == "KUBERNETES_SERVICE_HOST"])),
                                  "KUBERNETES_SERVICE_HOST must be the API server's address"),
    # The probe as it was: it dot-sourced the box's hns.ps1, whose Add-Type compiles C# in every probe.
    "a probe that compiles C#": (lambda out: _edit(out, _configmap(lambda data: data.update(
        {"ready-flanneld.ps1": data["ready-flanneld.ps1"].replace("exit 0\n", ". (Join-Path $NodeDir 'hns.ps1')\nexit 0\n")}))),
        "readinessProbe runs hns.ps1, which calls Add-Type"),
    "Add-Type in a probe command": (lambda out: _edit(out, _daemonset(FLANNEL, lambda s: s["containers"][0]["readinessProbe"]["exec"].update(
        command=["powershell.exe", "-Command", "Add-Type -TypeDefinition $t; exit 0"]))), "calls Add-Type in its command"),
    "a field 1.37 lacks": (lambda out: _edit(out, _daemonset(FLANNEL, lambda s: s["securityContext"]["windowsOptions"].update(hostProces=True))),
                           "kubernetes-validate 1.37.0 (strict)"),
}


def _hostprocess_demo(out: Path) -> None:
    path = out / "manifests" / "demo-win-webserver.yaml"
    docs = _docs(path)
    for doc in docs:
        if doc["kind"] == "Deployment":
            doc["spec"]["template"]["spec"]["securityContext"] = {"windowsOptions": {"hostProcess": True}}
    path.write_text(yaml.safe_dump_all(docs))


@pytest.mark.parametrize("defect", list(PLANTS))
def test_every_hostprocess_rule_fails_its_planted_defect(planted, defect):
    cluster, out = planted
    plant, expected = PLANTS[defect]
    before = (out / DAEMONSETS).read_text() + (out / "manifests" / "demo-win-webserver.yaml").read_text()
    plant(out)
    assert (out / DAEMONSETS).read_text() + (out / "manifests" / "demo-win-webserver.yaml").read_text() != before, "nothing planted"
    problems = manifest_rules.check_manifests(out, cluster)
    assert any(expected in p for p in problems), problems


def test_a_containerd_box_under_a_seed_master_is_refused_for_its_api_server(tmp_path, modern):
    # At config load: a 1.37 kubelet may not join a 1.11 API server (the version-skew rule).
    config = write_config(tmp_path / "cluster.yml", config_dict(**{"network.backend": "vxlan", "nodes.2.box": "windows-2022"}))
    result = invoke("validate", "--config", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert ("nodes[2].box: Kubernetes version: worker-win's box windows-2022 runs kubelet 1.37.2, newer than the "
            "cluster's API server 1.11.10") in result.stderr, result.stderr
    # And the manifest rule behind it: the 1.11 API server has no hostProcess field, so it would drop it
    # and run the pods as plain containers.
    _, out = modern
    seed_master = SimpleNamespace(kube=kube_era(profiles.load("ubuntu-1604")))  # Kubernetes 1.11.10
    problems = hostprocess_rules.check_schema_at_cluster_minor(out / DAEMONSETS, _docs(out / DAEMONSETS), seed_master)
    assert len(problems) == 1 and "whose API server has no stable HostProcess pods (GA in 1.26" in problems[0]


def test_the_node_json_says_its_daemons_are_hostprocess(modern):
    _, out = modern
    assert json.loads((out / "nodes" / "worker-win" / "node.json").read_text())["node_daemons"] == "hostprocess"


def test_the_containerd_era_renders_no_token_secret_and_a_planted_one_fails(planted):
    cluster, out = planted
    assert not (out / "manifests" / "windows-node-rbac.yaml").exists()
    (out / "manifests" / "windows-node-rbac.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: k4w-windows-flanneld-token\n  namespace: kube-system\n"
        "  annotations:\n    kubernetes.io/service-account.name: k4w-windows-flanneld\ntype: kubernetes.io/service-account-token\n")
    problems = manifest_rules.check_manifests(out, cluster)
    assert any("windows-node-rbac.yaml: rendered, but every Windows node runs flanneld and kube-proxy as HostProcess" in p
               for p in problems), problems

"""The flag tables of the modern stack (kubelet and kube-proxy 1.37, flanneld 0.28.10) and the
windows-2022 node's rendered arguments held against them (the kubelet's node file, the HostProcess
DaemonSets' ConfigMap for flanneld and kube-proxy): a flag a 1.37 binary lacks, above all
--pod-infra-container-image, or one its source marks for removal, fails validation."""

from __future__ import annotations

import pytest
import yaml

from k4w.derive.cluster import Cluster
from k4w.render import render_files, write_atomically
from k4w.validate import flag_rules, manifest_rules
from tests.helpers import config_dict, modern_config, write_config

NODE = "worker-win"
DAEMONSETS = "manifests/windows-containerd/windows-node-daemonsets.yaml"


def _configmap(out):
    docs = [d for d in yaml.safe_load_all((out / DAEMONSETS).read_text()) if d]
    return next(d for d in docs if d["kind"] == "ConfigMap")


@pytest.fixture
def modern_node(tmp_path):
    """The modern cluster (ubuntu-2404 master and Linux worker, windows-2022 worker, vxlan), rendered."""
    cluster = Cluster.load(write_config(tmp_path / "cluster.yml", modern_config()))
    out = tmp_path / "out"
    write_atomically(render_files(cluster, out), out)
    return cluster, out


def test_the_windows_2022_node_passes_only_flags_its_binaries_have(modern_node):
    cluster, out = modern_node
    checked, problems = flag_rules.check(cluster, out)
    assert problems == []
    assert {f"nodes/{NODE}/kubelet.args", f"{DAEMONSETS} ConfigMap kube-proxy.args", f"{DAEMONSETS} ConfigMap flanneld.args"} <= set(checked)
    assert not (out / "nodes" / NODE / "flanneld.args").exists() and not (out / "nodes" / NODE / "kube-proxy.args").exists()
    assert flag_rules.known_flags("kubelet", "1.37.2", "windows") is not None
    assert flag_rules.known_flags("flanneld", "0.28.10", "windows") is not None


def test_the_pause_flag_is_never_rendered_for_kubelet_1_37(modern_node):
    _, out = modern_node
    assert "pod-infra-container-image" not in (out / "nodes" / NODE / "kubelet.args").read_text()
    table = yaml.safe_load((flag_rules.FACTS / "kubelet-1.37.yml").read_text())
    assert "pod-infra-container-image" not in table["flags"] + table["windows_only"]


def test_a_pause_flag_added_for_kubelet_1_37_fails_both_checks(modern_node):
    cluster, out = modern_node
    args = out / "nodes" / NODE / "kubelet.args"
    args.write_text(args.read_text() + "--pod-infra-container-image=registry.k8s.io/pause:3.10.2\n")
    _, problems = flag_rules.check(cluster, out)
    assert problems == [f"nodes/{NODE}/kubelet.args:{len(args.read_text().splitlines())}: kubelet 1.37.2 has no flag "
                        "--pod-infra-container-image (k4w/validate/facts/, read from upstream source at that tag)"]
    agreement = manifest_rules.check_manifests(out, cluster)
    assert any("--pod-infra-container-image is rendered for kubelet 1.37.2" in p for p in agreement), agreement


def _plant_kubelet_flag(out, flag):
    args = out / "nodes" / NODE / "kubelet.args"
    args.write_text(args.read_text() + flag + "\n")
    return f"nodes/{NODE}/kubelet.args:{len(args.read_text().splitlines())}"


def _plant_kube_proxy_flag(out, flag):
    """After the last of the DaemonSet ConfigMap's kube-proxy args (a JSON string in the YAML)."""
    path = out / DAEMONSETS
    path.write_text(path.read_text().replace("--source-vip=${SOURCE_VIP}", "--source-vip=${SOURCE_VIP}\\n" + flag))
    return f"{DAEMONSETS} ConfigMap kube-proxy.args:{len(_configmap(out)['data']['kube-proxy.args'].splitlines())}"


@pytest.mark.parametrize("binary,plant,flag", [
    # Both registered at v1.37.2 and marked for removal there (MarkDeprecated "... Will be removed"): the table
    # lists them under removed:, so k4w never starts to depend on them.
    ("kubelet", _plant_kubelet_flag, "--minimum-container-ttl-duration=1m"),
    ("kube-proxy", _plant_kube_proxy_flag, "--healthz-port=10256"),
])
def test_a_flag_the_1_37_source_marks_for_removal_is_refused(modern_node, binary, plant, flag):
    cluster, out = modern_node
    table = yaml.safe_load((flag_rules.FACTS / f"{binary}-1.37.yml").read_text())
    name = flag[2:].split("=")[0]
    assert name in table["removed"] and name not in table["flags"]
    where = plant(out, flag)
    _, problems = flag_rules.check(cluster, out)
    assert problems == [f"{where}: {binary} 1.37.2 has no flag --{name} (k4w/validate/facts/, read from upstream source at that tag)"]


def test_the_seed_node_still_needs_its_pause_flag(tmp_path):
    cluster = Cluster.load(write_config(tmp_path / "cluster.yml", config_dict()))
    out = tmp_path / "out"
    write_atomically(render_files(cluster, out), out)
    args = out / "nodes" / NODE / "kubelet.args"
    args.write_text("\n".join(line for line in args.read_text().splitlines() if "pod-infra-container-image" not in line) + "\n")
    assert any("--pod-infra-container-image is missing" in p for p in manifest_rules.check_manifests(out, cluster))


def test_flanneld_0_28_takes_the_net_config_path_that_0_11_lacks(modern_node):
    _, out = modern_node
    assert "--net-config-path=C:\\k\\config\\net-conf.json" in _configmap(out)["data"]["flanneld.args"].split()
    assert "net-config-path" in flag_rules.known_flags("flanneld", "0.28.10", "windows")
    assert "net-config-path" not in flag_rules.known_flags("flanneld", "0.11.0", "windows")


def test_kube_proxy_source_vip_exists_on_windows_1_37_only(modern_node):
    """The kube-proxy DaemonSet's args carry --source-vip=${SOURCE_VIP}, which its start script fills."""
    _, out = modern_node
    assert {"source-vip", "network-name"} <= flag_rules.known_flags("kube-proxy", "1.37.2", "windows")
    assert "source-vip" not in flag_rules.known_flags("kube-proxy", "1.37.2", "linux")
    assert "--source-vip=${SOURCE_VIP}" in _configmap(out)["data"]["kube-proxy.args"].splitlines()
    start = (flag_rules.FACTS.parents[2] / "guest" / "windows" / "hostprocess" / "start-kube-proxy.ps1").read_text()
    assert "SOURCE_VIP = $sourceVip" in start


def test_a_flag_kube_proxy_1_37_lacks_in_the_daemonset_args_fails(modern_node):
    cluster, out = modern_node
    path = out / DAEMONSETS
    path.write_text(path.read_text().replace("--proxy-mode=kernelspace", "--proxy-mode=kernelspace\\n--masquerade-all-windows=true"))
    _, problems = flag_rules.check(cluster, out)
    assert problems == [f"{DAEMONSETS} ConfigMap kube-proxy.args:4: kube-proxy 1.37.2 has no flag --masquerade-all-windows "
                        "(k4w/validate/facts/, read from upstream source at that tag)"]


@pytest.mark.parametrize("table", ["kubelet-1.37.yml", "kube-proxy-1.37.yml", "flanneld-0.28.10.yml"])
def test_the_modern_tables_say_which_module_zip_they_were_read_from(table):
    data = yaml.safe_load((flag_rules.FACTS / table).read_text())
    assert all(m["module_zip"].startswith("h1:") and m["files"] for m in data["source"]["modules"])
    assert data["flags"] == sorted(data["flags"]) and len(data["flags"]) == len(set(data["flags"]))

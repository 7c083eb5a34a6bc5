"""Every flag k4w passes exists in the pinned binary (facts read from upstream source at the tag)."""

from __future__ import annotations

import dataclasses
import re
import shutil

import pytest
import yaml

from k4w import sources
from k4w.cluster_model import Cluster
from k4w.render import render_files, write_atomically
from k4w.sources import REPO_ROOT as ROOT
from k4w.validate import flag_rules
from tests.helpers import config_dict, invoke, use_sources, write_config

# Flag tables only: published-checksums.yml, the runtime config tables (*-config.yml) and the kubeadm
# config field tables (kubeadm_rules) are other facts.
# The flag tables: <binary>-<version>.yml (the other facts files hold other facts, each with its own test).
FACTS = sorted(p for p in flag_rules.FACTS.glob("*.yml")
               if re.fullmatch(r"(kubelet|kube-proxy|kubeadm|flanneld)-[0-9.]+\.yml", p.name))


@pytest.fixture
def rendered(tmp_path):
    cluster = Cluster.load(write_config(tmp_path / "cluster.yml", config_dict()))
    out = tmp_path / "out"
    write_atomically(render_files(cluster, out), out)
    return cluster, out


def test_the_default_cluster_passes_only_flags_its_binaries_have(rendered):
    cluster, out = rendered
    checked, problems = flag_rules.check(cluster, out)
    assert problems == []
    assert {"nodes/worker-win/kubelet.args", "nodes/worker-win/kube-proxy.args", "nodes/worker-win/flanneld.args",
            "kubeadm/kubeadm-config.yaml", "guest/ubuntu/cluster/cluster-join.sh", "guest/windows/cluster/cluster-join-lib.ps1"} <= set(checked)


def test_net_config_path_on_flanneld_0_11_is_caught(rendered):
    # The defect a review found: flanneld v0.11.0 has no --net-config-path (v0.12.0 added it).
    cluster, out = rendered
    args = out / "nodes" / "worker-win" / "flanneld.args"
    args.write_text(args.read_text() + "--net-config-path=C:\\k\\config\\net-conf.json\n")
    _, problems = flag_rules.check(cluster, out)
    assert problems == ["nodes/worker-win/flanneld.args:4: flanneld 0.11.0 has no flag --net-config-path "
                        "(k4w/validate/facts/, read from upstream source at that tag)"]


def test_source_vip_on_kube_proxy_1_11_is_caught(rendered):
    # --source-vip (and --network-name) arrived in kube-proxy 1.14 (kubernetes/kubernetes#70896).
    cluster, out = rendered
    args = out / "nodes" / "worker-win" / "kube-proxy.args"
    args.write_text(args.read_text() + "--source-vip=10.244.1.2\n--network-name=vxlan0\n")
    _, problems = flag_rules.check(cluster, out)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "kube-proxy 1.11.10 has no flag --source-vip (k4w/validate/facts/, read from upstream source at that tag)",
        "kube-proxy 1.11.10 has no flag --network-name (k4w/validate/facts/, read from upstream source at that tag)"]


def test_kubelet_extra_args_in_the_kubeadm_config_are_checked(rendered):
    cluster, out = rendered
    config = out / "kubeadm" / "kubeadm-config.yaml"
    config.write_text(config.read_text().replace("node-ip:", "no-such-flag: x\n    node-ip:", 1))
    _, problems = flag_rules.check(cluster, out)
    assert len(problems) == 1 and "kubelet 1.11.10 has no flag --no-such-flag" in problems[0]


def test_kubeadm_join_flags_in_guest_scripts_are_checked(rendered, tmp_path, monkeypatch):
    cluster, out = rendered
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "guest", root / "guest")
    script = root / "guest" / "ubuntu" / "cluster" / "cluster-join.sh"
    # kubeadm join has no --apiserver-advertise-address in 1.11 (only init does).
    script.write_text(script.read_text().replace('kubeadm join --config "$join_config"', 'kubeadm join --apiserver-advertise-address 1.2.3.4'))
    scratch = use_sources(monkeypatch, root=root)
    _, problems = flag_rules.check(dataclasses.replace(cluster, sources=scratch), out)
    assert problems == [f"guest/ubuntu/cluster/cluster-join.sh:{_line_of(script, 'kubeadm join --apiserver')}: kubeadm join 1.11.10 has no flag "
                        "--apiserver-advertise-address (k4w/validate/facts/, read from upstream source at that tag)"]


def test_a_version_without_a_fact_table_is_refused(rendered, monkeypatch):
    cluster, out = rendered
    monkeypatch.setattr(flag_rules, "FACTS", flag_rules.FACTS.parent / "no-facts-here")
    flag_rules._facts.cache_clear()
    try:
        _, problems = flag_rules.check(cluster, out)
    finally:
        flag_rules._facts.cache_clear()
    assert problems and all("no flag table for" in p for p in problems)


@pytest.mark.parametrize("path", FACTS, ids=[p.name for p in FACTS])
def test_every_fact_table_names_its_upstream_source(path):
    data = yaml.safe_load(path.read_text())
    source = data["source"]
    assert source["repo"] and source["tag"] and len(source["commit"]) == 40 and source["files"]
    assert data.get("flags") or data.get("subcommands")


def _line_of(path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line and not line.lstrip().startswith("#"))


def test_a_linux_workers_era_kubelet_flags_are_held_against_its_own_version(tmp_path):
    """cluster-join.sh takes the era's kubelet flags from the box profile (k4w.derive.linux_kubelet_flags):
    1.11's pause-image flag is fine for ubuntu-1604, and refused for a 1.35 box, naming the profile."""
    boxes = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", boxes)
    profile = boxes / "ubuntu-2404.yml"
    profile.write_text(profile.read_text().replace("  pause_image: registry.k8s.io/pause:3.10.1\n",
                                                   "  pause_image: registry.k8s.io/pause:3.10.1\n  kubelet_pause_image_flag: true\n", 1))
    result = invoke("validate", "--config", str(ROOT / "examples" / "cluster-modern-2022.yml"), "--out", str(tmp_path / "out"),
                    env={sources.BOX_DIRS_ENV: str(boxes)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("ubuntu-2404.yml kubernetes (kubelet flags of a joining worker, k4w.derive.linux_kubelet_flags): "
            "kubelet 1.35.4 has no flag --pod-infra-container-image") in result.stdout + result.stderr
    seed = invoke("validate", "--out", str(tmp_path / "seed-out"))
    assert seed.returncode == 0, seed.stdout + seed.stderr


def test_kubeadm_config_mixed_with_other_join_flags_is_refused(rendered, tmp_path, monkeypatch):
    """kubeadm 1.11 refuses --config beside --node-name, --token and the like (ValidateMixedArguments):
    a join script that mixes them fails validation, naming the flags."""
    cluster, out = rendered
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "guest", root / "guest")
    script = root / "guest" / "ubuntu" / "cluster" / "cluster-join.sh"
    script.write_text(script.read_text().replace('kubeadm join --config "$join_config"',
                                                 'kubeadm join --config "$join_config" --node-name "$K4W_NODE_NAME" --v 2'))
    scratch = use_sources(monkeypatch, root=root)
    _, problems = flag_rules.check(dataclasses.replace(cluster, sources=scratch), out)
    assert problems == [f"guest/ubuntu/cluster/cluster-join.sh:{_line_of(script, 'kubeadm join --config')}: kubeadm join --config together "
                        "with --node-name: kubeadm 1.11 refuses the mix (ValidateMixedArguments); put them in the config file"]

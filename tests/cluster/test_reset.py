"""`invoke cluster-reset` through the real CLI, with the fake `vagrant` first on PATH: it works after a
config change (the very case cluster-up's refusal sends you to it for), and it removes the vxlan link
Flannel really created, flannel.<VNI> of the rendered net-conf."""

from __future__ import annotations

import json
import re

import pytest

from k4w.cluster import steps as S, up as up_mod
from tests.cluster.conftest import LINUX_ONLY_VXLAN, render_to
from tests.fakes.vagrant import VagrantOnPath
from tests.helpers import config_dict, invoke, write_config


@pytest.fixture
def running(tmp_path, monkeypatch):
    """A rendered OUT whose VMs the fake vagrant reports running."""
    config = write_config(tmp_path / "cluster.yml", config_dict())
    out = tmp_path / "build"
    rendered = invoke("render", "--config", str(config), "--out", str(out))
    assert rendered.returncode == 0, rendered.stderr
    fake = VagrantOnPath(tmp_path, monkeypatch)
    fake.host_powershell()   # the reset puts each cluster NIC back from the host first
    (fake.dir / "machines.json").write_text(json.dumps({n: "running" for n in ("master", "worker-linux", "worker-win")}))
    return config, out, fake


def test_reset_after_a_config_change_resets_instead_of_refusing(running):
    config, out, fake = running
    # A cluster built from another config: cluster-up refuses and names cluster-reset.
    (out / "cluster-state.json").write_text(json.dumps({
        "version": 1, "digest": "0" * 64, "nodes": {},
        "steps": {key: {"at": "2024-01-01T00:00:00Z", "seconds": 1} for key in ("up", "cluster-ip", "master-init", "manifests")}}))
    result = invoke("cluster-reset", "--config", str(config), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cluster reset: run `invoke cluster-up`" in result.stdout
    state = json.loads((out / "cluster-state.json").read_text())
    # a state file from before the cluster-nic step: the reset attaches the NICs and records it, as cluster-up does
    assert list(state["steps"]) == ["up", "cluster-ip", "cluster-nic"]
    assert state["digest"] == up_mod.artifacts_digest(out)   # cluster-up now resumes on the new config
    ran = [c["argv"][-1] for c in fake.calls() if c["argv"][0] in ("ssh", "winrm")]
    assert any("cluster-reset.sh" in command for command in ran) and any("cluster-reset.ps1" in command for command in ran)
    # Someone may have started the VMs (a `vagrant up` or `reload` moves every NIC to the management switch):
    # every cluster NIC is put back from the host before the first guest command.
    calls = fake.calls()
    first_guest = next(i for i, c in enumerate(calls) if c["argv"][0] in ("ssh", "winrm"))
    attached = {re.search(r"-VMName '([^']+)'", c["stdin"]).group(1) for c in calls[:first_guest]
                if c["argv"][0] == "powershell" and "cluster-nic.ps1" in c["stdin"]}
    assert attached == {"k4w-master", "k4w-worker-linux", "k4w-worker-win"}


def test_reset_removes_the_vxlan_link_of_the_rendered_vni(running):
    config, out, fake = running
    result = invoke("cluster-reset", "--config", str(config), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    resets = [c["argv"][-1] for c in fake.calls() if c["argv"][0] == "ssh" and "cluster-reset.sh" in c["argv"][-1]]
    # host-gw (the default) has no VNI in its net-conf: flannel's default 1 names the link
    assert resets and all("K4W_FLANNEL_VXLAN_DEVICE=flannel.1 " in command for command in resets)


def test_vxlan_device_follows_the_vni_of_the_rendered_net_conf(tmp_path):
    out = tmp_path / "build"
    render_to(out, LINUX_ONLY_VXLAN)
    netconf = json.loads(next(line for line in (out / "manifests" / "kube-flannel.yaml").read_text().splitlines()
                              if '"Backend"' in line))
    assert S.flannel_vxlan_device(out) == f"flannel.{netconf['Backend']['VNI']}" == "flannel.4096"


def test_reset_without_a_rendered_flannel_manifest_names_the_file(running):
    config, out, fake = running
    (out / "manifests" / "kube-flannel.yaml").unlink()
    result = invoke("cluster-reset", "--config", str(config), "--out", str(out))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{out / 'manifests' / 'kube-flannel.yaml'}" in result.stdout + result.stderr
    assert not any(c["argv"][0] in ("ssh", "winrm") for c in fake.calls())


def test_reset_deletes_each_worker_node_object_from_the_master_before_resetting_it(running):
    config, out, fake = running
    (out / "cluster-state.json").write_text(json.dumps({
        "version": 1, "digest": up_mod.artifacts_digest(out), "nodes": {},
        "steps": {key: {"at": "2024-01-01T00:00:00Z", "seconds": 1} for key in ("up", "cluster-ip", "master-init")}}))
    result = invoke("cluster-reset", "--config", str(config), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    ran = [(c["argv"][1] if len(c["argv"]) > 1 else "", c["argv"][-1]) for c in fake.calls() if c["argv"][0] in ("ssh", "winrm")]
    for worker, script in (("worker-linux", "cluster-reset.sh"), ("worker-win", "cluster-reset.ps1")):
        delete = next(i for i, (_, cmd) in enumerate(ran) if f"delete node {worker} --ignore-not-found" in cmd)
        reset = next(i for i, (_, cmd) in enumerate(ran) if script in cmd)
        assert delete < reset


def test_containerd_reset_removes_pod_sandboxes_through_the_cri_before_the_hns_network():
    from tests.helpers import ROOT

    text = (ROOT / "guest" / "windows" / "cluster" / "cluster-reset.ps1").read_text(encoding="utf-8")
    call = text.index("Invoke-K4wKubeadmCriReset $Node }")
    assert "reset --force --cri-socket $Node.runtime_endpoint" in text
    assert "$Node.PSObject.Properties['runtime_endpoint']" in text[call - 120:call]   # containerd recipe only
    assert call < text.index("& (Join-Path $K 'kube-cleanup.ps1')")

"""`invoke validate` runs Vagrant's own `vagrant validate` on the cluster Vagrantfile with the Hyper-V
provider (k4w/validate/vagrant_rules.py): option names and types are Vagrant's to judge, and the
project's shim bypasses only the provider's host check."""

from __future__ import annotations

import shutil

import pytest

from k4w.validate import vagrant_rules
from tests.cluster.conftest import LINUX_ONLY_VXLAN, render_to
from tests.helpers import ROOT, config_dict, system_tool


@pytest.fixture
def rendered(tmp_path):
    out = tmp_path / "build"
    render_to(out, config_dict())
    return out / "vagrant" / "cluster.json"


def planted(tmp_path, old: str, new: str):
    """A copy of vagrant/ whose Vagrantfile has one defect planted."""
    folder = tmp_path / "planted"
    shutil.copytree(ROOT / "vagrant", folder)
    text = (folder / "Vagrantfile").read_text()
    assert old in text
    (folder / "Vagrantfile").write_text(text.replace(old, new, 1))
    return folder


@pytest.mark.tools
def test_vagrant_accepts_the_cluster_vagrantfile_with_the_hyperv_provider_and_says_what_it_left_out(rendered):
    outcome = vagrant_rules.validate(system_tool("vagrant"), ROOT / "vagrant", rendered)
    assert outcome.problems == [] and outcome.validated == ["master", "worker-linux"]
    assert outcome.not_validated == ["worker-win"]
    assert "worker-win" in outcome.note and "winrm gem" in outcome.note and "ruby -c" in outcome.note


@pytest.mark.tools
def test_a_linux_only_cluster_is_validated_whole(tmp_path):
    out = tmp_path / "build"
    render_to(out, LINUX_ONLY_VXLAN)
    outcome = vagrant_rules.validate(system_tool("vagrant"), ROOT / "vagrant", out / "vagrant" / "cluster.json")
    assert outcome.problems == [] and outcome.validated == ["master", "worker-a"] and outcome.note == ""


@pytest.mark.tools
def test_a_misspelt_hyperv_option_is_rejected_by_vagrant(tmp_path, rendered):
    folder = planted(tmp_path, 'h.memory = m.fetch("memory")', 'h.memroy = m.fetch("memory")')
    outcome = vagrant_rules.validate(system_tool("vagrant"), folder, rendered)
    assert len(outcome.problems) == 1, outcome.problems
    assert "Hyper-V:" in outcome.problems[0] and "The following settings shouldn't exist: memroy" in outcome.problems[0]


@pytest.mark.tools
def test_a_hyperv_option_of_the_wrong_type_is_rejected_by_vagrant(tmp_path, rendered):
    folder = planted(tmp_path, "heartbeat: true,", 'heartbeat: "yes",')
    outcome = vagrant_rules.validate(system_tool("vagrant"), folder, rendered)
    assert len(outcome.problems) == 1 and "Hyper-V:" in outcome.problems[0], outcome.problems
    assert "yes" in outcome.problems[0]


@pytest.mark.tools
def test_without_the_shim_vagrant_refuses_the_hyperv_provider_on_this_host(tmp_path, rendered, monkeypatch):
    """The shim is what lets the Hyper-V provider load here, so the run above really is Hyper-V's
    validation (not a provider-less one)."""
    empty = tmp_path / "empty.rb"
    empty.write_text("# no shim\n")
    monkeypatch.setattr(vagrant_rules, "SHIM", empty)
    outcome = vagrant_rules.validate(system_tool("vagrant"), ROOT / "vagrant", rendered)
    assert len(outcome.problems) == 1 and "hyperv" in outcome.problems[0]
    assert "Windows" in outcome.problems[0], outcome.problems[0]


# ------------------------------------------------------------------ host.provider libvirt


def libvirt_rendered(tmp_path, **overrides):
    from tests.cluster.conftest import libvirt_config

    out = tmp_path / "build"
    render_to(out, libvirt_config(**overrides))
    return out / "vagrant" / "cluster.json"


@pytest.mark.tools
@pytest.mark.parametrize("accelerator", ["kvm", "tcg"])
def test_vagrant_accepts_the_cluster_vagrantfile_with_the_libvirt_provider(tmp_path, accelerator):
    """Both branches of the libvirt block: kvm, and tcg with its custom CPU model and features."""
    rendered = libvirt_rendered(tmp_path, **{"libvirt.accelerator": accelerator})
    outcome = vagrant_rules.validate(system_tool("vagrant"), ROOT / "vagrant", rendered)
    assert outcome.problems == [] and outcome.validated == ["master", "worker-linux"], outcome.problems
    assert outcome.not_validated == ["worker-win"] and "winrm gem" in outcome.note


@pytest.mark.tools
@pytest.mark.parametrize("old, new, wrong", [
    ('lv.management_network_keep = true', 'lv.management_network_kept = true', "management_network_kept"),
    ('lv.cpu_model = LIBVIRT.fetch("cpu_model")', 'lv.cpu_modle = LIBVIRT.fetch("cpu_model")', "cpu_modle"),
])
def test_a_misspelt_libvirt_option_is_rejected_by_vagrant_libvirt(tmp_path, old, new, wrong):
    """The run really is vagrant-libvirt's validation of the libvirt block (tcg: its CPU settings too)."""
    rendered = libvirt_rendered(tmp_path, **{"libvirt.accelerator": "tcg"})
    folder = planted(tmp_path, old, new)
    outcome = vagrant_rules.validate(system_tool("vagrant"), folder, rendered)
    assert len(outcome.problems) == 1, outcome.problems
    assert "libvirt provider" in outcome.problems[0] and f"The following settings shouldn't exist: {wrong}" in outcome.problems[0]


@pytest.mark.tools
def test_without_vagrant_libvirt_the_libvirt_check_says_it_did_not_run(tmp_path, monkeypatch):
    """A host without the plugin: a failure naming the install command, never a pass (nor a silent skip)."""
    monkeypatch.setattr(vagrant_rules, "LIBVIRT_PLUGIN", "vagrant-libvirt-not-installed")
    outcome = vagrant_rules.validate(system_tool("vagrant"), ROOT / "vagrant", libvirt_rendered(tmp_path))
    assert outcome.validated == [] and len(outcome.problems) == 1, outcome
    assert "did not run" in outcome.problems[0] and "apt-get install -y vagrant-libvirt" in outcome.problems[0]


def test_the_dry_run_shows_the_libvirt_provider_and_the_plugin_check(tmp_path):
    from k4w.derive.cluster import Cluster
    from k4w.model import config as config_mod
    from tests.cluster.conftest import libvirt_config
    import yaml

    cluster = Cluster.resolve(config_mod.parse(yaml.safe_dump(libvirt_config()), "test.yml"))
    lines = vagrant_rules.would_run(cluster, tmp_path, [])
    assert any("VAGRANT_DEFAULT_PROVIDER=libvirt" in line and line.endswith("plugin list") for line in lines)
    assert lines[-1].endswith("vagrant validate") and "VAGRANT_DEFAULT_PROVIDER=libvirt" in lines[-1]
    assert not any(str(vagrant_rules.SHIM) in line for line in lines)

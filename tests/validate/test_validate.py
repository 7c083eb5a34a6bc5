import dataclasses
"""`invoke validate` runs every real consumer over the rendered artifacts, and they accept them."""

import re

import pytest
import yaml

from tests.helpers import ROOT, config_dict, invoke, use_sources, write_config

VALIDATORS = {
    "Packer templates": "packer init + packer validate",
    "Packer templates (sources)": "every value quoted (| hcl)",
    "preseed": "debconf-set-selections --checkonly",
    "bash scripts": "shellcheck",
    "PowerShell scripts": "tree-sitter-powershell",
    "Autounattend.xml": "lxml + structural rules",
    "Kubernetes manifests and node configs": "kubernetes-validate + structural rules",
    "Vagrantfiles": "ruby -c",
    "cluster Vagrantfile": "vagrant validate (hyperv provider)",
}

CONFIGS = {
    "default": config_dict(),
    "proxy": config_dict(**{
        "proxy.http": "http://alice:S3cret@proxy.corp.example:3128",
        "proxy.https": "http://proxy.corp.example:3129",
        "proxy.no_proxy": [".corp.example", "intranet"],
    }),
    "vxlan-linux-only": {**config_dict(**{"network.backend": "vxlan"}), "nodes": config_dict()["nodes"][:2]},
}


@pytest.mark.tools
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_validator_runs_and_accepts_the_artifacts(name, tmp_path):
    cfg = write_config(tmp_path / "cluster.yml", CONFIGS[name])
    result = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "out"))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for validator, tool in VALIDATORS.items():
        line = re.search(rf"✓ {re.escape(validator)}: (\d+) checked by {re.escape(tool)}", output)
        assert line, f"{validator} did not report success:\n{output}"
        windows_free = validator == "Autounattend.xml" and name == "vxlan-linux-only"
        assert int(line.group(1)) == 0 if windows_free else int(line.group(1)) > 0, f"{validator}: wrong file count"
    # What Vagrant could not validate here (the Windows machine's WinRM settings) is said, not hidden.
    winrm_note = "note: not validated by Vagrant: the WinRM settings of worker-win"
    assert (winrm_note in output) == (name != "vxlan-linux-only"), output


@pytest.mark.tools
def test_packer_validate_rejects_an_option_its_builder_does_not_have(tmp_path):
    """The validators are not rubber stamps: the pinned Packer with the real hyperv plugin decodes
    every option of the rendered HCL2, so an option the builder lacks fails validate, named."""
    from k4w import render, validate
    from k4w.derive.cluster import Cluster
    from k4w.validate import packer_rules

    cluster = Cluster.load(ROOT / "cluster.yml")
    out = tmp_path / "out"
    render.render(cluster, out)
    tpl = out / "packer" / "ubuntu-1604.pkr.hcl"
    assert packer_rules.run(cluster, out).ok
    tpl.write_text(tpl.read_text().replace("  headless ", "  headless_typo = true\n  headless ", 1))
    result = packer_rules.run(cluster, out)
    assert not result.ok and 'An argument named "headless_typo" is not expected here' in " ".join(result.problems), result.problems


@pytest.mark.tools
def test_invoke_validate_rejects_a_value_packer_cannot_take(tmp_path):
    """A profile value the builder cannot decode (a duration that is no Go duration) reaches the
    rendered template through the hcl filter, and the real `invoke validate` fails on it."""
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    data = yaml.safe_load((ROOT / "boxes" / "ubuntu-1604.yml").read_text())
    data["build"]["ssh_timeout"] = "2 hours"
    (boxes / "ubuntu-1604.yml").write_text(yaml.safe_dump(data))
    cfg = write_config(tmp_path / "cluster.yml", config_dict())
    result = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "out"), env={"K4W_BOX_DIRS": str(boxes)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert "✗ Packer templates" in output and "ubuntu-1604.pkr.hcl: packer validate" in output, output
    assert 'error decoding \'ssh_timeout\': time: unknown unit " hours" in duration "2 hours"' in output, output


def test_host_scripts_are_parsed_and_linted_like_guest_scripts(tmp_path, monkeypatch):
    """host/network-up.ps1 is a file like any guest script, so validate checks it (it used to be a
    string in Python that nothing parsed)."""
    from k4w.model import config
    from k4w import validate
    from k4w.derive.cluster import Cluster
    from k4w.validate import ps51_rules

    cfg = config.load(ROOT / "cluster.yml")
    cluster = Cluster.resolve(cfg)
    real = ps51_rules.run(cluster, tmp_path / "out")
    assert "host/network-up.ps1" in real.checked and real.ok, real.problems

    scratch = use_sources(monkeypatch, root=tmp_path)
    (tmp_path / "guest").mkdir()
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "network-up.ps1").write_text('Write-Host "at $Gateway: now"\nif ($x {\n')
    broken = ps51_rules.run(dataclasses.replace(cluster, sources=scratch), tmp_path / "out")
    assert broken.checked == ["host/network-up.ps1"]
    assert any("syntax error" in p or "missing" in p for p in broken.problems), broken.problems
    assert any("invalid variable" in p for p in broken.problems), broken.problems

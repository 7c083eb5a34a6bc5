"""`invoke validate` runs every real consumer over the rendered artifacts, and they accept them."""

import re

import pytest

from tests.helpers import ROOT, config_dict, invoke, write_config

VALIDATORS = {
    "Packer templates": "packer validate",
    "preseed": "debconf-set-selections --checkonly",
    "bash scripts": "shellcheck",
    "PowerShell scripts": "tree-sitter-powershell",
    "Autounattend.xml": "lxml + structural rules",
    "Kubernetes manifests and node configs": "kubernetes-validate + structural rules",
    "Vagrantfiles": "ruby -c",
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


@pytest.mark.tools
def test_a_broken_artifact_fails_validation(tmp_path):
    """The validators are not rubber stamps: a template Packer rejects makes validate fail."""
    from k4w import render, validate
    from k4w.cluster_model import Cluster

    cluster = Cluster.load(ROOT / "cluster.yml")
    out = tmp_path / "out"
    render.render(cluster, out)
    tpl = out / "packer" / "ubuntu-1604.json"
    tpl.write_text(tpl.read_text().replace('"builders"', '"builderz"', 1))
    result = validate.packer_templates(cluster, out)
    assert not result.ok and "builderz" in " ".join(result.problems)

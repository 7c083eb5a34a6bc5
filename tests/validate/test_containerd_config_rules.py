"""Every containerd config k4w writes carries its containerd's own schema version (4 for 2.3.7:
containerd@v2.3.7 version/version.go ConfigVersion), so containerd never migrates it at start; a
planted `version = 3` anywhere k4w writes one is named by `invoke validate`."""

from __future__ import annotations

import shutil

import pytest
import yaml

from k4w.derive import containerd_config, registry
from k4w import render
from k4w.derive.cluster import Cluster
from k4w.validate import containerd_config_rules as rules
from tests.helpers import MODERN_ENV, ROOT, invoke, modern_config, write_config

GUEST = ROOT / "guest"
# The two steps that write config.toml, and the line each writes the version with.
CONFIG_WRITERS = {GUEST / "ubuntu" / "bake" / "03-containerd.sh": "version = ${K4W_CONTAINERD_CONFIG_VERSION}",
                  GUEST / "windows" / "bake" / "03-containerd.ps1": "version = {5}"}
BELOW = "containerd config version 3, below containerd 2.3.7's 4: it migrates the file at every start"


@pytest.fixture
def modern(tmp_path, monkeypatch):
    """The modern cluster (ubuntu-2404 and windows-2022, both containerd 2.3.7), loaded in this process."""
    monkeypatch.setenv(*next(iter(MODERN_ENV.items())))
    return Cluster.load(write_config(tmp_path / "cluster.yml", modern_config()))


def test_the_facts_and_the_constant_agree_with_containerd_2_3_7():
    # RELEASES.md at v2.3.7: "The latest version is `version = 4`" (4 needs containerd >= v2.3.0).
    assert rules.config_version("2.3.7") == containerd_config.CONFIG_VERSION == 4


def test_the_rendered_modern_cluster_gives_each_containerd_box_version_4(modern, tmp_path):
    out = tmp_path / "out"
    render.render(modern, out)
    checked, problems = rules.check(modern, out)
    assert problems == []
    assert checked[:2] == ["ubuntu-2404: containerd 2.3.7 config version 4", "windows-2022: containerd 2.3.7 config version 4"]
    for box in ("ubuntu-2404", "windows-2022"):
        assert '"K4W_CONTAINERD_CONFIG_VERSION=4"' in (out / "packer" / f"{box}.pkr.hcl").read_text()


def test_a_version_3_in_the_constant_reaches_the_rendered_template_and_is_refused(modern, tmp_path, monkeypatch):
    monkeypatch.setattr(containerd_config, "CONFIG_VERSION", 3)
    out = tmp_path / "out"
    render.render(modern, out)
    _, problems = rules.check(modern, out)
    assert problems == [f"{out / 'packer' / box}.pkr.hcl: K4W_CONTAINERD_CONFIG_VERSION: {BELOW} and logs "
                        "\"Configuration migrated from version 3\"" for box in ("ubuntu-2404", "windows-2022")]


def test_a_version_above_containerds_own_is_refused_too(tmp_path):
    template = tmp_path / "ubuntu-2404.pkr.hcl"
    template.write_text('environment_vars = ["K4W_CONTAINERD_CONFIG_VERSION=5"]\n')
    assert rules.rendered_problems(template, 4, "2.3.7") == [
        f"{template}: K4W_CONTAINERD_CONFIG_VERSION: containerd config version 5, above containerd 2.3.7's 4: it refuses to start"]


@pytest.mark.parametrize("script", sorted(CONFIG_WRITERS), ids=lambda p: p.name)
def test_a_literal_version_3_planted_in_a_config_writing_step_is_named(script, tmp_path):
    assert rules.literal_problems([script]) == []
    text = script.read_text()
    line = text[:text.index(CONFIG_WRITERS[script])].count("\n") + 1
    planted = tmp_path / script.name
    planted.write_text(text.replace(CONFIG_WRITERS[script], "version = 3", 1))
    problems = rules.literal_problems([planted])
    assert len(problems) == 1 and problems[0].startswith(f"{planted}:{line}: a containerd config written with the literal `version = 3`")


def test_no_guest_script_writes_a_literal_version(modern):
    scripts = sorted(p for p in GUEST.rglob("*") if p.suffix in (".sh", ".ps1"))
    assert len(scripts) > 20 and rules.literal_problems(scripts) == []


def test_a_registry_drop_in_of_version_3_is_refused(tmp_path, monkeypatch):
    data = modern_config()
    data["registry"] = {"mirrors": {"registry.k8s.io": {"endpoint": "https://puller:pw@harbor.internal/k8s-proxy"}}}
    monkeypatch.setenv(*next(iter(MODERN_ENV.items())))
    cluster = Cluster.load(write_config(tmp_path / "cluster.yml", data))
    out = tmp_path / "out"
    render.render(cluster, out)
    auth = registry.auth_toml(cluster.config)
    assert "\nversion = 4\n" in auth and rules.check(cluster, out)[1] == []
    monkeypatch.setattr(registry, "auth_toml", lambda _cfg: auth.replace("version = 4", "version = 3"))
    assert rules.check(cluster, out)[1] == [f"the registry credentials drop-in: {BELOW} and logs \"Configuration migrated from version 3\""]


@pytest.mark.tools
def test_invoke_validate_refuses_a_box_whose_containerd_has_no_known_config_version(tmp_path):
    """A box pinned to another containerd (here 2.2.1, whose ConfigVersion is 3) has no facts file:
    the real `invoke validate` fails naming it instead of writing a version that containerd may refuse."""
    boxes = tmp_path / "boxes"
    shutil.copytree(ROOT / "boxes", boxes)
    data = yaml.safe_load((boxes / "windows-2022.yml").read_text())
    data["components"]["containerd"]["version"] = "2.2.1"
    (boxes / "windows-2022.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    cfg = write_config(tmp_path / "cluster.yml", modern_config())
    result = invoke("validate", "--config", str(cfg), "--out", str(tmp_path / "out"), env={"K4W_BOX_DIRS": str(boxes)})
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1 and "Traceback" not in output, output
    assert "✗ containerd config versions" in output, output
    assert "windows-2022.yml: containerd 2.2.1 has no facts file" in output, output

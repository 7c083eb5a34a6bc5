"""The hyperv builders' enumerated options hold values the builders name (facts read at
hashicorp/packer@v1.6.6 and hashicorp/packer-plugin-hyperv@v1.1.4), in every rendered template."""

from __future__ import annotations

import json

import pytest

from k4w.validate import packer_option_rules
from tests.helpers import MODERN_ENV, invoke, modern_config, write_config


def _render(tmp_path, config=None, env=None):
    args = ["render", "--out", str(tmp_path / "out")]
    if config is not None:
        args += ["--config", str(write_config(tmp_path / "cluster.yml", config))]
    result = invoke(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp_path / "out"


def test_both_builders_are_named_at_their_tags():
    sources = packer_option_rules.facts()["sources"]
    assert (sources["packer"]["tag"], sources["plugin"]["tag"]) == ("v1.6.6", "v1.1.4")
    assert all(len(s["commit"]) == 40 for s in sources.values())


@pytest.mark.parametrize("era", ["seed", "modern"])
def test_every_rendered_hyperv_template_uses_the_builders_own_choices(tmp_path, era):
    out = _render(tmp_path, *((modern_config(), MODERN_ENV) if era == "modern" else ()))
    checked, problems = packer_option_rules.check(out)
    assert len(checked) == 2 and problems == []
    for template in checked:
        builder = json.loads(open(template).read())["builders"][0]
        assert builder["guest_additions_mode"] == "none"


@pytest.mark.parametrize("option,planted", [("guest_additions_mode", "disable"), ("secure_boot_template", "MicrosoftLinux"),
                                             ("generation", 3), ("communicator", "psrp")])
def test_a_value_the_builder_does_not_name_is_refused(tmp_path, option, planted):
    out = _render(tmp_path)
    template = out / "packer" / "windows-1803.json"
    data = json.loads(template.read_text())
    data["builders"][0][option] = planted
    template.write_text(json.dumps(data))
    problems = packer_option_rules.check_template(template)
    assert len(problems) == 1 and f"{option} is {planted!r}" in problems[0] and "packer-plugin-hyperv@v1.1.4" in problems[0]


def test_every_windows_restart_waits_out_a_pending_reboot(tmp_path):
    out = _render(tmp_path)
    template = out / "packer" / "windows-1803.json"
    restarts = [p for p in json.loads(template.read_text())["provisioners"] if p["type"] == "windows-restart"]
    assert restarts and all(p["check_registry"] is True for p in restarts)
    assert packer_option_rules.check_restarts(template) == []
    data = json.loads(template.read_text())
    for p in data["provisioners"]:
        p.pop("check_registry", None)
    template.write_text(json.dumps(data))
    problems = packer_option_rules.check_restarts(template)
    assert len(problems) == len(restarts) and "check_registry" in problems[0]

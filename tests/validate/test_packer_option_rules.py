"""The hyperv builder's enumerated options hold values the builder names (facts read at
hashicorp/packer-plugin-hyperv@v1.0.4, the pinned plugin), in every rendered template."""

from __future__ import annotations

import re

import pytest

from k4w.infra import packer_hcl, pinned_tools
from k4w.validate import packer_option_rules
from tests.helpers import MODERN_ENV, invoke, modern_config, write_config


def _render(tmp_path, config=None, env=None):
    args = ["render", "--out", str(tmp_path / "out")]
    if config is not None:
        args += ["--config", str(write_config(tmp_path / "cluster.yml", config))]
    result = invoke(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp_path / "out"


def test_the_facts_are_read_at_the_plugin_version_the_templates_pin():
    sources = packer_option_rules.facts()["sources"]
    assert list(sources) == ["plugin"] and sources["plugin"]["tag"] == "v" + pinned_tools.packer_pins()["hyperv"]
    assert all(len(s["commit"]) == 40 for s in sources.values())


@pytest.mark.parametrize("era", ["seed", "modern"])
def test_every_rendered_hyperv_template_uses_the_builders_own_choices(tmp_path, era):
    out = _render(tmp_path, *((modern_config(), MODERN_ENV) if era == "modern" else ()))
    checked, problems = packer_option_rules.check(out)
    assert len(checked) == 2 and problems == []
    for template in checked:
        builder = packer_hcl.load(template)["builders"][0]
        assert builder["guest_additions_mode"] == "none"


@pytest.mark.parametrize("option,planted", [("guest_additions_mode", "disable"), ("secure_boot_template", "MicrosoftLinux"),
                                             ("generation", 3), ("communicator", "psrp")])
def test_a_value_the_builder_does_not_name_is_refused(tmp_path, option, planted):
    out = _render(tmp_path)
    template = out / "packer" / "windows-1803.pkr.hcl"
    text, count = re.subn(rf"^(\s*{option}\s*=).*$", lambda m: f"{m.group(1)} {packer_hcl.literal(planted)}", template.read_text(),
                          count=1, flags=re.M)
    assert count == 1
    template.write_text(text)
    problems = packer_option_rules.check_template(template)
    assert len(problems) == 1 and f"{option} is {planted!r}" in problems[0] and "packer-plugin-hyperv@v1.0.4" in problems[0]


def test_every_windows_restart_waits_out_a_pending_reboot(tmp_path):
    out = _render(tmp_path)
    template = out / "packer" / "windows-1803.pkr.hcl"
    restarts = [p for p in packer_hcl.load(template)["provisioners"] if p["type"] == "windows-restart"]
    assert restarts and all(p["check_registry"] is True for p in restarts)
    assert packer_option_rules.check_restarts(template) == []
    template.write_text(re.sub(r"^\s*check_registry\s*=.*\n", "", template.read_text(), flags=re.M))
    problems = packer_option_rules.check_restarts(template)
    assert len(problems) == len(restarts) and "check_registry" in problems[0]

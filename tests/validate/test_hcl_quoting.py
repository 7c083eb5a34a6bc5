"""Every value in a Packer template is an HCL literal that Packer reads back as the same value.

The `hcl` filter (k4w.infra.packer_hcl.literal) is checked against the real Packer: a template whose
variables default to the filter's output is evaluated by the pinned `packer console`, and every value
(quotes, backslashes, newlines, "${", "%{", control characters) comes back unchanged, never
evaluated. The class rule (k4w.validate.hcl_template_rules) refuses a template that interpolates
without the filter.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from k4w.infra import packer_hcl
from k4w.infra import sources
from k4w.render.templates import environment as _environment
from k4w.validate import hcl_template_rules
from tests.helpers import invoke, system_tool

# A password, a path or a proxy URL may hold any of these.
TRICKY_VALUES = ['plain', 'q"uote', "back\\slash", "new\nline\ttab\rcr", "${var.admin_password}", "%{ if true }x%{ endif }",
                 "$${already}", "$$${three}", "C:\\k\\", "pa$$word{}", "\x01\x7f", "", "ünï €", "{{ .HTTPIP }}",
                 "${file(\"/etc/passwd\")}"]
OTHER_VALUES = [0, 8780, -1, 2.5, True, False, ["a", 1, ["-kernel", "b\"c"]], {"key": "${x}"}]


def _console(template, expression: str):
    """What `packer console` evaluates expression to in template, as JSON (jsonencode)."""
    packer = system_tool("packer")
    result = subprocess.run([packer, "console", str(template)], input=f"jsonencode({expression})\n", capture_output=True,
                            text=True, env={"CHECKPOINT_DISABLE": "1", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_packer_reads_every_literal_back_as_the_value(tmp_path):
    values = TRICKY_VALUES + OTHER_VALUES
    template = tmp_path / "t.pkr.hcl"
    template.write_text("".join(f'variable "v{i}" {{\n  default = {packer_hcl.literal(v)}\n}}\n' for i, v in enumerate(values)))
    assert _console(template, "[" + ", ".join(f"var.v{i}" for i in range(len(values))) + "]") == values


def test_a_variable_reference_is_the_one_interpolation_written(tmp_path):
    """Step variables carry references to the sensitive proxy variables (k4w.derive.step_env); only
    those become ${var.x}, while the same text typed by a user stays literal."""
    text = "HTTP_PROXY=" + packer_hcl.var_ref("http_proxy") + " literal=${var.http_proxy}"
    template = tmp_path / "t.pkr.hcl"
    template.write_text('variable "http_proxy" {\n  default = "http://u:p@proxy:3128"\n}\n'
                        f'locals {{\n  env = {packer_hcl.literal(text)}\n}}\n')
    assert _console(template, "local.env") == "HTTP_PROXY=http://u:p@proxy:3128 literal=${var.http_proxy}"
    with pytest.raises(ValueError):
        packer_hcl.var_ref("x}${file(\"/etc/passwd\")")


def test_the_repository_templates_quote_every_value():
    templates = sources.REPO.templates
    checked, problems = hcl_template_rules.check(_environment(templates), templates)
    assert "templates/packer/windows.pkr.hcl.j2" in checked and "templates/packer/ubuntu/installer-preseed.pkr.hcl.j2" in checked
    assert problems == []


def test_a_value_without_the_filter_is_refused(tmp_path):
    """The class rule: a planted `<< box.name >>` without the filter is named with its line."""
    templates = tmp_path / "templates"
    shutil.copytree(sources.REPO.templates, templates)
    windows = templates / "packer" / "windows.pkr.hcl.j2"
    lines = windows.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if 'vm_name    = << ("k4w-build-" ~ box.name) | hcl >>' in line)
    lines[at] = '  vm_name = "k4w-build-<< box.name >>"\n'
    windows.write_text("".join(lines))
    checked, problems = hcl_template_rules.check(_environment(templates), templates)
    assert problems == [f"templates/packer/windows.pkr.hcl.j2:{at + 1}: a value written into HCL without the quoting filter "
                        "(end it with '| hcl': a quote, newline, ${ or %{ in it would be HCL syntax that Packer parses or evaluates)"]


def test_validate_reports_the_hcl_template_rule(tmp_path):
    result = invoke("validate", "--dry-run", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "every value in a Packer template goes through the quoting hcl filter" in result.stdout
    assert " init " in result.stdout and "ubuntu-1604.pkr.hcl" in result.stdout

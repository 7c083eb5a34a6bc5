"""Every value a Packer template interpolates goes through the quoting `hcl` filter.

A value written raw into HCL2 is HCL syntax: a quote or newline in a path breaks the file, and
"${...}" or "%{...}" in a password or proxy URL is evaluated by Packer (an expression, a file()
read, a directive) instead of being taken as text. k4w.infra.packer_hcl.literal writes every value as a
complete, escaped literal, so one rule closes the class: in templates/packer/**/*.pkr.hcl.j2, each
<< expression >> ends in `| hcl`, or is a fail(...) call (the mechanism: quoting_rules).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import jinja2

from k4w.derive.cluster import Cluster
from ..render.templates import environment

from . import quoting_rules
from .result import Result

HCL_TEMPLATES = "packer/**/*.pkr.hcl.j2"
QUOTING_FILTERS = ("hcl",)
WHY = ("a value written into HCL without the quoting filter (end it with '| hcl': "
       "a quote, newline, ${ or %{ in it would be HCL syntax that Packer parses or evaluates)")


def hcl_templates(templates: Path) -> list[Path]:
    return sorted(templates.glob(HCL_TEMPLATES))


def check(env: jinja2.Environment, templates: Path) -> tuple[list[str], list[str]]:
    """(templates checked, problems), each problem 'templates/<path>:<line>: why'."""
    return quoting_rules.check(env, templates, hcl_templates(templates), QUOTING_FILTERS, WHY)


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("Packer templates (sources)", "every value quoted (| hcl)")
    templates = cluster.sources.templates
    res.checked, res.problems = check(environment(templates), templates)
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every value in a Packer template goes through the quoting hcl filter"]

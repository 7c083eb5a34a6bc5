"""Every value a YAML template interpolates goes through the quoting `yaml` filter.

A plain scalar in YAML is typed by whoever reads it: go-yaml v2 (kubeadm, kubelet, kube-proxy)
turns a node named `n` or `on` into a bool and `08` into a float, cloud-init's PyYAML turns `~`
into null. k4w.render.escape.yaml double-quotes every string, so one rule makes the whole class
impossible: in a template whose output is YAML, each << expression >> ends in `| yaml` (or
`| json`, whose strings are double-quoted too, for JSON carried in a block scalar), or is a
fail(...) call (the mechanism: quoting_rules).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import jinja2

from k4w.derive.cluster import Cluster
from ..render.templates import environment

from . import quoting_rules
from .result import Result

# The rendered files that are YAML: by name, and cloud-init's NoCloud seeds (user-data and
# meta-data, which cloud-init reads as YAML; cloudinit/sources/DataSourceNoCloud.py).
YAML_TEMPLATES = ("**/*.yaml.j2", "**/*.yml.j2", "**/user-data.j2", "**/meta-data.j2")
QUOTING_FILTERS = ("yaml", "json")
WHY = ("a value written into YAML without the quoting filter "
       "(end it with '| yaml': a plain n, on, 08 or ~ is read as a bool, number or null)")


def yaml_templates(templates: Path) -> list[Path]:
    return sorted({path for pattern in YAML_TEMPLATES for path in templates.glob(pattern)})


def check(env: jinja2.Environment, templates: Path) -> tuple[list[str], list[str]]:
    """(templates checked, problems), each problem 'templates/<path>:<line>: why'."""
    return quoting_rules.check(env, templates, yaml_templates(templates), QUOTING_FILTERS, WHY)


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("YAML templates", "every value quoted (| yaml)")
    templates = cluster.sources.templates
    res.checked, res.problems = check(environment(templates), templates)
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return ["# in this process: every value in a YAML template goes through the quoting yaml filter"]

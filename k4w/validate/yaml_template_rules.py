"""Every value a YAML template interpolates goes through the quoting `yaml` filter.

A plain scalar in YAML is typed by whoever reads it: go-yaml v2 (kubeadm, kubelet, kube-proxy)
turns a node named `n` or `on` into a bool and `08` into a float, cloud-init's PyYAML turns `~`
into null. k4w.render.escape.yaml double-quotes every string, so one rule makes the whole class
impossible: in a template whose output is YAML, each << expression >> ends in `| yaml` (or
`| json`, whose strings are double-quoted too, for JSON carried in a block scalar), or is a
fail(...) call. Read from the Jinja syntax tree, so comments and literal text are not matched.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from jinja2 import nodes

# The rendered files that are YAML: by name, and cloud-init's NoCloud seeds (user-data and
# meta-data, which cloud-init reads as YAML; cloudinit/sources/DataSourceNoCloud.py).
YAML_TEMPLATES = ("**/*.yaml.j2", "**/*.yml.j2", "**/user-data.j2", "**/meta-data.j2")
QUOTING_FILTERS = ("yaml", "json")


def yaml_templates(templates: Path) -> list[Path]:
    return sorted({path for pattern in YAML_TEMPLATES for path in templates.glob(pattern)})


def _allowed(expr: nodes.Expr) -> bool:
    if isinstance(expr, nodes.Filter) and expr.name in QUOTING_FILTERS:
        return True
    return isinstance(expr, nodes.Call) and isinstance(expr.node, nodes.Name) and expr.node.name == "fail"


def problems_in(env: jinja2.Environment, path: Path, rel: str) -> list[str]:
    try:
        tree = env.parse(path.read_text(encoding="utf-8"), name=rel)
    except jinja2.TemplateSyntaxError as exc:
        return [f"{rel}:{exc.lineno}: {exc.message}"]
    found = []
    for output in tree.find_all(nodes.Output):
        for expr in output.nodes:
            if isinstance(expr, nodes.TemplateData) or _allowed(expr):
                continue
            found.append(f"{rel}:{expr.lineno}: a value written into YAML without the quoting filter "
                         f"(end it with '| yaml': a plain n, on, 08 or ~ is read as a bool, number or null)")
    return found


def check(env: jinja2.Environment, templates: Path) -> tuple[list[str], list[str]]:
    """(templates checked, problems), each problem 'templates/<path>:<line>: why'."""
    checked, problems = [], []
    for path in yaml_templates(templates):
        rel = f"templates/{path.relative_to(templates).as_posix()}"
        checked.append(rel)
        problems += problems_in(env, path, rel)
    return checked, problems

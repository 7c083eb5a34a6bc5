"""Every value a Packer template interpolates goes through the quoting `hcl` filter.

A value written raw into HCL2 is HCL syntax: a quote or newline in a path breaks the file, and
"${...}" or "%{...}" in a password or proxy URL is evaluated by Packer (an expression, a file()
read, a directive) instead of being taken as text. k4w.packer_hcl.literal writes every value as a
complete, escaped literal, so one rule closes the class: in templates/packer/**/*.pkr.hcl.j2, each
<< expression >> ends in `| hcl`, or is a fail(...) call. Read from the Jinja syntax tree, so
comments and literal text are not matched.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from jinja2 import nodes

HCL_TEMPLATES = "packer/**/*.pkr.hcl.j2"
QUOTING_FILTER = "hcl"


def hcl_templates(templates: Path) -> list[Path]:
    return sorted(templates.glob(HCL_TEMPLATES))


def _allowed(expr: nodes.Expr) -> bool:
    if isinstance(expr, nodes.Filter) and expr.name == QUOTING_FILTER:
        return True
    return isinstance(expr, nodes.Call) and isinstance(expr.node, nodes.Name) and expr.node.name == "fail"


def problems_in(env: jinja2.Environment, path: Path, rel: str) -> list[str]:
    try:
        tree = env.parse(path.read_text(encoding="utf-8"), name=rel)
    except jinja2.TemplateSyntaxError as exc:
        return [f"{rel}:{exc.lineno}: {exc.message}"]
    return [f"{rel}:{expr.lineno}: a value written into HCL without the quoting filter (end it with '| hcl': "
            f"a quote, newline, ${{ or %{{ in it would be HCL syntax that Packer parses or evaluates)"
            for output in tree.find_all(nodes.Output) for expr in output.nodes
            if not isinstance(expr, nodes.TemplateData) and not _allowed(expr)]


def check(env: jinja2.Environment, templates: Path) -> tuple[list[str], list[str]]:
    """(templates checked, problems), each problem 'templates/<path>:<line>: why'."""
    checked, problems = [], []
    for path in hcl_templates(templates):
        rel = f"templates/{path.relative_to(templates).as_posix()}"
        checked.append(rel)
        problems += problems_in(env, path, rel)
    return checked, problems

"""The mechanism of the quoting rules (yaml_template_rules, hcl_template_rules): in a template whose
output is read by a parser, each << expression >> must end in one of that format's quoting filters,
or be a fail(...) call. Read from the Jinja syntax tree, so comments and literal text are not matched.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from jinja2 import nodes


def _allowed(expr: nodes.Expr, filters: tuple[str, ...]) -> bool:
    if isinstance(expr, nodes.Filter) and expr.name in filters:
        return True
    return isinstance(expr, nodes.Call) and isinstance(expr.node, nodes.Name) and expr.node.name == "fail"


def problems_in(env: jinja2.Environment, path: Path, rel: str, filters: tuple[str, ...], why: str) -> list[str]:
    """'<rel>:<line>: <why>' for each unquoted value in one template (or its syntax error)."""
    try:
        tree = env.parse(path.read_text(encoding="utf-8"), name=rel)
    except jinja2.TemplateSyntaxError as exc:
        return [f"{rel}:{exc.lineno}: {exc.message}"]
    return [f"{rel}:{expr.lineno}: {why}"
            for output in tree.find_all(nodes.Output) for expr in output.nodes
            if not isinstance(expr, nodes.TemplateData) and not _allowed(expr, filters)]


def check(env: jinja2.Environment, templates: Path, paths: list[Path], filters: tuple[str, ...],
          why: str) -> tuple[list[str], list[str]]:
    """(templates checked, problems), each problem 'templates/<path>:<line>: why'."""
    checked, problems = [], []
    for path in paths:
        rel = f"templates/{path.relative_to(templates).as_posix()}"
        checked.append(rel)
        problems += problems_in(env, path, rel, filters, why)
    return checked, problems

"""The package shows the pipeline: each stage of k4w imports only the stages below it, so the import
graph between k4w's packages has no circle (docs/architecture.md; /DESIGN "The package shows the
pipeline").

Every import counts, at module level and inside functions (a function-level import is a circle that
waits for its first call), except under `if TYPE_CHECKING:` (never run: annotations only).
The imports are read from the source, so no module is executed and a circle that only one code path
takes is found all the same.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.helpers import ROOT

# Bottom to top. A stage may import a stage left of it, never one to its right.
ORDER = (
    "defaults",   # k4w/defaults.py: Invoke's defaults, read by tasks.py at start-up
    "infra",      # processes, tools, files, locks, console, redaction, signals, errors, downloads, packer, vagrant
    "outdir",     # the --out folder: its lock, its state, private files
    "model",      # cluster.yml validated once, box profiles, pins, version facts
    "media",      # ISOs, their image indexes, the build media a bake serves
    "derive",     # values derived once from the model, and the resolved Cluster
    "render",     # templates -> artifacts under --out
    "validate",   # each artifact checked by the tool that consumes it
    "bake",       # packer builds
    "cluster",    # vagrant up, kubeadm, joins, an existing cluster
    "verify",     # testinfra specs and their runner
    "commands",   # what a task calls: cli, doctor, plan, inventory
    "devtools",   # what only scripts/ runs
    "__main__",   # python -m k4w
)


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "k4w" and len(parts) > 1 else None


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path) -> list[tuple[str, str, str]]:
    """(importing module, imported k4w module, file:line) for every import in root/k4w that can run."""
    modules = {_module_name(p, root): p for p in (root / "k4w").rglob("*.py")}
    found = []
    for name, path in sorted(modules.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        never_run = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                never_run.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(tree):
            if id(node) in never_run:
                continue
            where = f"{path.relative_to(root).as_posix()}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                found += [(name, alias.name, where) for alias in node.names if alias.name.startswith("k4w")]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join(base + [node.module] if node.module else base) if node.level else node.module
                if not target or not target.startswith("k4w"):
                    continue
                for alias in node.names:  # `from k4w import render` imports the package k4w.render
                    found.append((name, f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target, where))
    return found


def stage_edges(root: Path) -> dict[tuple[str, str], list[str]]:
    edges = defaultdict(list)
    for source, target, where in imports(root):
        a, b = _stage(source), _stage(target)
        if a and b and a != b:
            edges[a, b].append(f"{where} imports {target}")
    return edges


def circles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more stages (Tarjan): each holds at least one circle."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


@pytest.fixture(scope="module")
def edges():
    return stage_edges(ROOT)


def test_the_import_graph_between_k4w_packages_has_no_circle(edges):
    found = circles(edges)
    detail = [f"{a} -> {b}: {lines[0]}" for group in found for (a, b), lines in sorted(edges.items())
              if a in group and b in group]
    assert not found, f"import circles between stages {found}:\n" + "\n".join(detail)


def test_each_stage_imports_only_stages_below_it(edges):
    rank = {stage: i for i, stage in enumerate(ORDER)}
    unknown = sorted({s for pair in edges for s in pair} - rank.keys())
    assert not unknown, f"a k4w package or loose module with no place in ORDER: {unknown}"
    upward = [f"{a} -> {b}: {', '.join(lines[:3])}" for (a, b), lines in sorted(edges.items()) if rank[a] < rank[b]]
    assert not upward, "a stage imports a stage above it:\n" + "\n".join(upward)


def test_a_planted_circle_is_found(tmp_path):
    """The check sees a circle a function-level import closes (derive -> render -> derive)."""
    (tmp_path / "k4w" / "derive").mkdir(parents=True)
    (tmp_path / "k4w" / "render").mkdir()
    for folder in ("k4w", "k4w/derive", "k4w/render"):
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "k4w" / "render" / "templates.py").write_text("from k4w.derive import values\n")
    (tmp_path / "k4w" / "derive" / "values.py").write_text("def f():\n    from ..render import templates\n")
    (tmp_path / "k4w" / "derive" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from k4w.render import templates\n")
    edges = stage_edges(tmp_path)
    assert circles(edges) == [["derive", "render"]]
    assert edges["derive", "render"] == ["k4w/derive/values.py:2 imports k4w.render.templates"]  # not typed.py's


def test_the_package_init_files_of_the_stages_import_nothing():
    """Importing one module (tasks.py: k4w.infra.signals) runs its package's __init__ first: a stage's
    __init__ that imported its modules would load them all. Only render, validate, bake, cluster and
    verify are packages whose __init__ is their entry point; the rest hold a docstring."""
    entry_points = {"render", "validate", "bake", "cluster", "verify"}
    heavy = []
    for init in sorted((ROOT / "k4w").glob("*/__init__.py")):
        if init.parent.name in entry_points:
            continue
        tree = ast.parse(init.read_text(encoding="utf-8"))
        if any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(tree)):
            heavy.append(init.relative_to(ROOT).as_posix())
    assert not heavy, f"these package __init__ files import modules: {heavy}"

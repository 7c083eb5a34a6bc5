"""The Vagrantfiles k4w ships (the cluster's and each box's), through ruby -c."""

from __future__ import annotations

import shlex
from collections.abc import Collection
from pathlib import Path

from k4w.infra import sources
from k4w.derive.cluster import Cluster
from k4w.infra.tools import require
from .result import Result, rel, run_each, tool


def _ruby_syntax(ruby: str, vagrantfile: Path) -> list[str]:
    return [ruby, "-c", str(vagrantfile)]


def _vagrantfiles(repo: sources.Sources) -> list[Path]:
    return [repo.vagrant / "Vagrantfile", *sorted((repo.vagrant / "box").glob("*.Vagrantfile"))]


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("Vagrantfiles", "ruby -c")
    ruby = require("ruby")
    files = _vagrantfiles(cluster.sources)
    res.checked += [rel(vf) for vf in files if not vf.is_file()]
    res.problems += [f"{rel(vf)}: missing" for vf in files if not vf.is_file()]
    return run_each(res, [vf for vf in files if vf.is_file()], lambda vf: _ruby_syntax(ruby, vf))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    ruby = tool("ruby")
    return [shlex.join(_ruby_syntax(ruby, vf)) for vf in _vagrantfiles(cluster.sources)]

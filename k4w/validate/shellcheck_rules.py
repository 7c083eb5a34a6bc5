"""Every bash script of the guest, the host, scripts/ and .ci/, through shellcheck."""

from __future__ import annotations

import shlex
from collections.abc import Collection
from pathlib import Path

from k4w.infra import sources
from k4w.derive.cluster import Cluster
from k4w.infra.tools import require
from .result import Result, run_each, tool as tool_or_name


def _shellcheck(tool: str, script: Path) -> list[str]:
    return [tool, "-x", "--source-path=SCRIPTDIR", "--severity=style", str(script)]


def _shell_script_files(repo: sources.Sources) -> list[Path]:
    scripts = sorted(repo.guest.rglob("*.sh")) + sorted(repo.host.rglob("*.sh")) + sorted((repo.root / "scripts").glob("*.sh"))
    return scripts + [p for p in (repo.root / ".ci").glob("*") if p.is_file()]


def run(cluster: Cluster, out: Path) -> Result:
    tool = require("shellcheck")
    return run_each(Result("bash scripts", "shellcheck"), _shell_script_files(cluster.sources),
                    lambda script: _shellcheck(tool, script), separator=":\n")


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    tool = tool_or_name("shellcheck")
    return [shlex.join(_shellcheck(tool, script)) for script in _shell_script_files(cluster.sources)]

"""Debian installer preseeds, through debconf-set-selections --checkonly."""

from __future__ import annotations

import shlex
from collections.abc import Collection
from pathlib import Path

from k4w.derive.cluster import Cluster
from k4w.infra.tools import require
from .result import PRESEEDS, Result, matching, run_each, tool as tool_or_name


def _preseed_check(tool: str, seed: Path) -> list[str]:
    return [tool, "--checkonly", str(seed)]


def run(cluster: Cluster, out: Path) -> Result:
    tool = require("debconf-set-selections")
    # debconf-set-selections --checkonly prints its complaints and may still exit 0.
    return run_each(Result("preseed", "debconf-set-selections --checkonly"), sorted(out.glob(PRESEEDS)),
                    lambda seed: _preseed_check(tool, seed), quiet_when_ok=True)


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    tool = tool_or_name("debconf-set-selections")
    return [shlex.join(_preseed_check(tool, seed)) for seed in matching(rendered, out, PRESEEDS)]

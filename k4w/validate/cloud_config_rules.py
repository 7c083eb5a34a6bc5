"""The whole user-data as cloud-init in the live installer reads it: `#cloud-config` first, every
key it knows of the right shape (the autoinstall section is subiquity's: autoinstall_rules)."""

from __future__ import annotations

import shlex
from collections.abc import Collection
from pathlib import Path

from k4w.derive.cluster import Cluster
from k4w.infra.tools import require
from .result import USER_DATA, Result, matching, run_each, tool as tool_or_name


def _cloud_init_schema(tool: str, user_data: Path) -> list[str]:
    # Debian 12's cloud-init 22.4 spells it `schema -c FILE` (newer ones also take --config-file).
    return [tool, "schema", "-c", str(user_data)]


def run(cluster: Cluster, out: Path) -> Result:
    files = sorted(out.glob(USER_DATA))
    res = Result("cloud-config (user-data)", "cloud-init schema")
    if not files:
        return res
    tool = require("cloud-init")
    return run_each(res, files, lambda seed: _cloud_init_schema(tool, seed))


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    tool = tool_or_name("cloud-init")
    return [shlex.join(_cloud_init_schema(tool, seed)) for seed in matching(rendered, out, USER_DATA)]

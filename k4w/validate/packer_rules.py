"""Packer templates: packer init (the required plugins, from PACKER_PLUGIN_PATH: no network when they
are installed), then packer validate, which decodes every option with the plugins themselves."""

from __future__ import annotations

import os
import shlex
from collections.abc import Collection
from pathlib import Path

from k4w.derive.cluster import Cluster
from k4w.infra.tools import find
from k4w.infra.tools import require
from .result import PACKER_TEMPLATES, Result, matching, rel, run as run_tool

# Only the variable's presence matters to validate; the real value is generated per build.
PACKER_VALIDATE_ENV = {"K4W_ADMIN_PASSWORD": "validate-only-placeholder", "CHECKPOINT_DISABLE": "1"}


def _packer_init(packer: str, template: Path) -> list[str]:
    return [packer, "init", str(template)]


def _packer_validate(packer: str, template: Path) -> list[str]:
    return [packer, "validate", str(template)]


def _packer_env() -> dict[str, str]:
    """What packer init and validate run with: the pinned Packer's plugin cache
    (k4w.infra.packer_cli.plugin_env), and the variables the templates read."""
    from k4w.infra import packer_cli

    return {**os.environ, **packer_cli.plugin_env(), **PACKER_VALIDATE_ENV}


def run(cluster: Cluster, out: Path) -> Result:
    packer, env = require("packer"), _packer_env()
    res = Result("Packer templates", f"packer init + packer validate ({packer})")
    for template in sorted(out.glob(PACKER_TEMPLATES)):
        res.checked.append(rel(template))
        for argv in (_packer_init(packer, template), _packer_validate(packer, template)):
            code, text = run_tool(argv, env=env)
            if code != 0:
                res.problems.append(f"{rel(template)}: packer {argv[1]}: {text or f'exit {code}'}")
                break
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    from k4w.infra import packer_cli

    packer = find("packer") or "packer"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**packer_cli.plugin_env(packer), **PACKER_VALIDATE_ENV}.items())
    return [f"env {env} {shlex.join(argv(packer, t))}" for t in matching(rendered, out, PACKER_TEMPLATES)
            for argv in (_packer_init, _packer_validate)]

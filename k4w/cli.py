"""Glue between Invoke tasks and the package: load the config, report errors without tracebacks."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from invoke.exceptions import Exit

from . import render as render_mod, ui, validate as validate_mod
from .cluster_model import Cluster
from .errors import K4wError

DEFAULT_CONFIG = "cluster.yml"
DEFAULT_OUT = "build"


def user_errors(fn):
    """Turn a K4wError into a red message and exit code 1, the way a user expects a CLI to fail."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except K4wError as exc:
            ui.error(str(exc))
            raise Exit(code=1) from None
        except KeyboardInterrupt:
            ui.error("interrupted")
            raise Exit(code=130) from None

    return wrapper


def load(config: str) -> Cluster:
    """The one place a command reads its config: everything downstream gets this Cluster."""
    return Cluster.load(config)


def do_render(config: str, out: str, quiet: bool = False) -> tuple[Cluster, Path, dict]:
    cluster = load(config)
    out_path = Path(out).resolve()
    started = time.monotonic()
    files = render_mod.render(cluster, out_path)
    if not quiet:
        ui.say(f"rendered {len(files)} artifacts from {config} into {out_path} in {time.monotonic() - started:.2f} s")
    return cluster, out_path, files


def do_validate(cluster: Cluster, out: Path) -> bool:
    rows = []

    def report(res: validate_mod.Result) -> None:
        status = "ok" if res.ok else f"FAILED ({len(res.problems)})"
        ui.say(f"{'✓' if res.ok else '✗'} {res.validator}: {len(res.checked)} checked by {res.tool} in {res.seconds:.1f} s")
        for problem in res.problems:
            ui.say(f"    {problem}", style="red")
        rows.append([res.validator, res.tool, len(res.checked), status, f"{res.seconds:.1f}"])

    results = validate_mod.validate_all(cluster, out, report)
    ui.table("Validation", ["artifact", "checked by", "files", "result", "seconds"], rows)
    return all(r.ok for r in results)

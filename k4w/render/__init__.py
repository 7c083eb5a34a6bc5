"""Render every artifact from one validated config, atomically.

The stages, each in its own module: templates (every artifact in memory, found by convention,
docs/internals.md), secrets (the per-build passwords the Windows templates need) and the atomic
swap of --out (k4w.outdir.swap). Nothing is written until every template rendered; the render is then
staged beside the managed folders of --out and committed in one atomic step (write_atomically), so
bad input, a crash or Ctrl-C leaves --out wholly old or wholly new.
"""

from __future__ import annotations

from pathlib import Path

from k4w.outdir import lock as outlock
from k4w.derive.cluster import Cluster
from k4w.outdir import swap
from . import owned
from .secrets import (BOX_USER_SECRETS, PLACEHOLDER_SECRETS, box_user_secrets_path, load_box_user_password, load_secrets,
                      rotate_secrets, secrets_path)
from .templates import NOT_FOR_EXISTING, cluster_json, environment, http_templates, render_files

__all__ = ["BOX_USER_SECRETS", "NOT_FOR_EXISTING", "PLACEHOLDER_SECRETS", "box_user_secrets_path", "cluster_json",
           "environment", "http_templates", "load_box_user_password", "load_secrets", "render", "render_files",
           "rotate_secrets", "secrets_path", "write_atomically"]


def write_atomically(files: dict[str, str], out: Path) -> None:
    """Stage the render, with the list of the files it wrote (owned.MANIFEST), and switch --out's
    managed folders to it in one atomic commit (k4w.outdir.swap). Only folders a render made are
    replaced (owned.check)."""
    swap.write_atomically(files, out, root_files={owned.MANIFEST: owned.manifest_text(files, swap.MANAGED)},
                          before=lambda folder: owned.check(folder, swap.MANAGED))


def render(cluster: Cluster, out: Path) -> dict[str, str]:
    """Render with real per-build secrets and write. Returns the files written."""
    out = Path(out).resolve()

    def secrets_for(box: str) -> dict:
        if not cluster.profile(box).is_windows:
            return PLACEHOLDER_SECRETS
        return {**load_secrets(out, box), "box_user_password": load_box_user_password(out)}

    if out.is_dir():
        with outlock.hold(out):
            swap.finish_swap(out)
            owned.check(out, swap.MANAGED)  # before secrets/ is written: a refused --out gets nothing
    files = render_files(cluster, out, secrets_for=secrets_for)
    write_atomically(files, out)
    return files

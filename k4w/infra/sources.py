"""Where the repository keeps each kind of source, by pipeline stage (docs/architecture.md).

Every module asks this one object for a source folder, so moving a folder is a one-line change
and a test can point a whole run at a fixture repository by building its own Sources.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # k4w/infra/sources.py -> the checkout
# Extra box profile folders, searched before boxes/ (os.pathsep-separated). Child processes
# (a testinfra spec run, a nested invoke) inherit it, so they resolve the same boxes.
BOX_DIRS_ENV = "K4W_BOX_DIRS"


@dataclass(frozen=True)
class Sources:
    root: Path = REPO_ROOT
    # Searched before boxes/: the CI-only profile under tests/, or a test's edited copy.
    box_folders: tuple[Path, ...] = ()

    @property
    def boxes(self) -> Path:
        """Box profiles a user may pick: data only, one YAML file per box."""
        return self.root / "boxes"

    @property
    def box_dirs(self) -> tuple[Path, ...]:
        return (*self.box_folders, self.boxes)

    @property
    def templates(self) -> Path:
        """Jinja templates; a path under templates/ equals its rendered path under OUT/."""
        return self.root / "templates"

    @property
    def guest(self) -> Path:
        """Static scripts that run inside a guest, by OS and lifecycle (setup, bake, cluster, node)."""
        return self.root / "guest"

    @property
    def host(self) -> Path:
        """Static scripts that run on the Hyper-V host (network-up)."""
        return self.root / "host"

    @property
    def vagrant(self) -> Path:
        return self.root / "vagrant"

    @property
    def iso(self) -> Path:
        return self.root / "iso"


def from_environment() -> Sources:
    extra = os.environ.get(BOX_DIRS_ENV, "")
    return Sources(box_folders=tuple(Path(p) for p in extra.split(os.pathsep) if p))


REPO = from_environment()


@contextmanager
def using(other: Sources) -> Iterator[Sources]:
    """Run a block against another source tree, child processes included (the CI harness
    adds its own box folder this way)."""
    global REPO
    before, env_before = REPO, os.environ.get(BOX_DIRS_ENV)
    REPO = other
    os.environ[BOX_DIRS_ENV] = os.pathsep.join(str(p) for p in other.box_folders)
    try:
        yield other
    finally:
        REPO = before
        if env_before is None:
            os.environ.pop(BOX_DIRS_ENV, None)
        else:
            os.environ[BOX_DIRS_ENV] = env_before

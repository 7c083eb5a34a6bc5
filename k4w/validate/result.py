"""What every validator shares: its Result, the run of one consumer per file, and the globs of the
rendered artifacts the external consumers read (relative to OUT)."""

from __future__ import annotations

import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

from k4w.infra import packer_hcl

from k4w.infra import proc

from k4w.infra import sources

PACKER_TEMPLATES = packer_hcl.GLOB
PRESEEDS = "http/*/preseed.cfg"
# NoCloud seeds of autoinstall boxes (templates/http/ubuntu/autoinstall/).
USER_DATA = "http/*/user-data"


@dataclass
class Result:
    validator: str
    tool: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    missing_tool: str | None = None  # the validator could not run: this program is not installed
    notes: list[str] = field(default_factory=list)  # what this consumer could not check here, said out loud

    @property
    def ok(self) -> bool:
        return not self.problems


def run(cmd: list[str], env: dict | None = None) -> tuple[int, str]:
    result = proc.run(cmd, env=env)
    return result.returncode, result.output.strip()


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(sources.REPO.root))
    except ValueError:
        return str(path)


def run_each(res: Result, files: list[Path], argv_of: Callable[[Path], list[str]], env: dict | None = None,
             quiet_when_ok: bool = False, separator: str = ": ") -> Result:
    """Run one consumer per file; a non-zero exit (or, with quiet_when_ok, any output) is a problem."""
    for path in files:
        res.checked.append(rel(path))
        code, text = run(argv_of(path), env=env)
        if code != 0 or (quiet_when_ok and text):
            res.problems.append(f"{rel(path)}{separator}{text or f'exit {code}'}")
    return res


def from_check(artifact: str, checked_by: str, outcome: tuple[list[str], list[str]]) -> Result:
    """The Result of a rule's check(...) that returns (checked, problems)."""
    res = Result(artifact, checked_by)
    res.checked, res.problems = outcome
    return res


def tool(name: str) -> str:
    """The program a real run would start; its bare name when this host lacks it (a dry run
    must not fail for a missing tool, the real run names its install command)."""
    return shutil.which(name) or name


def matching(rendered: Collection[str], out: Path, pattern: str) -> list[Path]:
    return [out / r for r in sorted(rendered) if PurePosixPath(r).match(pattern)]

"""Phases of the end-to-end run: each has a time budget, a clear failure, and a timing row.

A phase's deadline is handed to every command it runs (subprocess timeouts, wait loops), so
an expired budget stops the phase where it is and says which command was running.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from k4w.infra import proc
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact

# Lines of a failed command's output quoted in the error (the full output is in the log).
TAIL_LINES = 25


class E2EError(K4wError):
    """A phase of the end-to-end run failed; the message names the phase and what to read."""


class PhaseTimeout(E2EError):
    """A phase used up its time budget."""


@dataclass
class Phase:
    name: str
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    note: str = ""  # one line for the timing table, e.g. "reused" or "42 access-log lines"

    @property
    def deadline(self) -> float:
        return self.started + self.budget_s

    def remaining(self, what: str) -> float:
        """Seconds left for `what`; raises PhaseTimeout when none are."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise PhaseTimeout(f"phase '{self.name}' used up its {self.budget_s:.0f} s budget before {what}")
        return left

    def timeout_error(self, what: str) -> PhaseTimeout:
        return PhaseTimeout(f"phase '{self.name}' exceeded its {self.budget_s:.0f} s budget while {what}")


@dataclass
class PhaseRecord:
    name: str
    budget_s: float
    seconds: float
    status: str  # ok | failed | timeout | not run
    note: str = ""


class Phases:
    """Runs named phases in order and keeps their timings, also for the phases that failed."""

    def __init__(self, say: Callable[[str], None], total_budget_s: float | None = None):
        self.say = say
        self.records: list[PhaseRecord] = []
        self.started = time.monotonic()
        self.total_budget_s = total_budget_s

    @contextlib.contextmanager
    def phase(self, name: str, budget_s: float, capped: bool = True) -> Iterator[Phase]:
        """capped: the phase also ends with the run's total budget (cleanup is not capped)."""
        if capped and self.total_budget_s is not None:
            left = self.total_budget_s - (time.monotonic() - self.started)
            if left <= 0:
                raise PhaseTimeout(f"the run used up its total budget of {self.total_budget_s:.0f} s before phase '{name}'")
            budget_s = min(budget_s, left)
        current = Phase(name, budget_s)
        self.say(f"== e2e phase '{name}' (budget {budget_s:.0f} s)")
        status = "failed"
        try:
            yield current
            status = "ok"
        except PhaseTimeout:
            status = "timeout"
            raise
        finally:
            seconds = time.monotonic() - current.started
            self.records.append(PhaseRecord(name, budget_s, seconds, status, current.note))
            self.say(f"== e2e phase '{name}': {status} in {seconds:.1f} s{f' ({current.note})' if current.note else ''}")

    def table(self) -> str:
        rows = [("phase", "status", "seconds", "budget", "note")]
        rows += [(r.name, r.status, f"{r.seconds:.1f}", f"{r.budget_s:.0f}", r.note) for r in self.records]
        rows.append(("total", "", f"{sum(r.seconds for r in self.records):.1f}", "", ""))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        return "\n".join(
            "  ".join(cell.ljust(widths[i]) if i < 4 else cell for i, cell in enumerate(row)).rstrip() for row in rows
        )


# ------------------------------------------------------------------ running commands


class Log:
    """The e2e log file (OUT/logs/e2e.log): every command and its output, redacted."""

    def __init__(self, path: Path, say: Callable[[str], None]):
        self.path = path
        self.say = say
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "a", encoding="utf-8")

    def write(self, text: str) -> None:
        self._fh.write(redact(text))
        self._fh.flush()

    def event(self, text: str) -> None:
        """A line for the console and the log."""
        self.write(f"# {time.strftime('%H:%M:%S')} {text}\n")
        self.say(text)

    def close(self) -> None:
        self._fh.close()


def run(cmd: list, phase: Phase, log: Log, what: str, *, input: str | None = None,
        cwd: Path | None = None, env: dict | None = None, check: bool = True) -> proc.Result:
    """Run cmd within the phase's budget, its output (stdout+stderr) streamed into the log.

    Returns the result with its output in .stdout. A non-zero exit (check=True) raises
    E2EError quoting the last lines; an expired budget stops the whole process group.
    """
    timeout = phase.remaining(what)
    log.write(f"$ {' '.join(str(c) for c in cmd)}\n")
    try:
        # Line by line into the log as it comes, so a long command can be followed with tail -f.
        result = proc.stream(cmd, log.write, cwd=cwd, env=env, input=input, timeout=timeout, group=True)
    except proc.TimedOut:
        raise phase.timeout_error(what) from None
    if check and result.returncode != 0:
        raise E2EError(f"{what} failed (exit {result.returncode}):\n{tail(result.stdout)}\n  full log: {log.path}")
    return result


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join("    " + line for line in proc.tail(text, lines).splitlines())

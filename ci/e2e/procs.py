"""Processes the e2e run starts indirectly (Packer and its QEMU, the spec's pytest): a phase
watchdog that stops them when the budget runs out, and the check that none is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

from .phases import Log, Phase

# Seconds Packer gets after SIGINT to stop its VM and delete its output before SIGKILL.
CANCEL_GRACE = 60


def _stat(pid: int) -> tuple[str, int] | None:
    """(comm, parent pid) from /proc/<pid>/stat, None if the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm is in parentheses and may contain spaces; the fields after the last ')' are fixed.
    comm = text[text.index("(") + 1:text.rindex(")")]
    ppid = int(text[text.rindex(")") + 2:].split()[1])
    return comm, ppid


def children(parent: int | None = None) -> list[tuple[int, str]]:
    """Direct children of parent (default: this process) as (pid, comm)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = _stat(int(entry.name))
            if info and info[1] == parent:
                found.append((int(entry.name), info[0]))
    return found


def alive(pid: int) -> bool:
    info = _stat(pid)
    if info is None:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"  # a zombie has exited; only its parent's wait() is missing


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        # A child in its own session (Packer under k4w.bake) leads its group: signal all of it.
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


@contextlib.contextmanager
def watchdog(phase: Phase, log: Log, protect: set[int]) -> Iterator[None]:
    """Stop this process's children (except `protect`) when the phase's deadline passes.

    Packer gets SIGINT first (it then stops its VM and deletes its output), the rest SIGTERM;
    whatever still runs CANCEL_GRACE seconds later is killed. The body's failure is then
    reported as the phase's timeout.
    """
    fired = threading.Event()
    done = threading.Event()

    def fire() -> None:
        fired.set()
        victims = [(pid, comm) for pid, comm in children() if pid not in protect]
        log.event(f"phase '{phase.name}' exceeded its {phase.budget_s:.0f} s budget: stopping "
                  + (", ".join(f"{comm} {pid}" for pid, comm in victims) or "nothing (no child process)"))
        for pid, comm in victims:
            _signal(pid, signal.SIGINT if comm == "packer" else signal.SIGTERM)
        end = time.monotonic() + CANCEL_GRACE
        while time.monotonic() < end and any(alive(pid) for pid, _ in victims):
            if done.wait(1):  # the body returned: nothing left to escalate
                return
        for pid, _ in victims:
            if alive(pid):
                _signal(pid, signal.SIGKILL)

    timer = threading.Timer(max(phase.deadline - time.monotonic(), 0.0), fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception as exc:
        if fired.is_set():
            raise phase.timeout_error("its processes ran") from exc
        raise
    finally:
        done.set()
        timer.cancel()
    if fired.is_set():
        raise phase.timeout_error("its processes ran")


def leftovers(pids: list[int], markers: list[str]) -> list[str]:
    """Processes still running that we started (pids) or whose command line names one of our
    folders (markers: the work folder, Packer's VM folder): each as 'pid command line'."""
    found: dict[int, str] = {}
    for pid in pids:
        if alive(pid):
            found[pid] = _cmdline(pid)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        cmdline = _cmdline(int(entry.name))
        if cmdline and any(m in cmdline for m in markers) and alive(int(entry.name)):
            found[int(entry.name)] = cmdline
    return [f"{pid} {cmd}" for pid, cmd in sorted(found.items())]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""

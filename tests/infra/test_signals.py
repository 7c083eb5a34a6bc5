"""Ctrl-C and SIGTERM at any moment of a real `invoke` end in one line and exit 130 or 143."""

from __future__ import annotations

import signal
import time

import pytest

from tests.helpers import start_invoke


def _handlers_installed(pid: int) -> bool:
    """Whether k4w.infra.signals.install() ran in pid: SIGTERM is caught (Python alone leaves it default)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def _signal_after(tmp_path, signum: int, moment: tuple[str, float]) -> tuple[int, str, bool]:
    """Start `invoke plan`, wait for the moment ("imports": tasks.py's first lines ran, so k4w,
    rich and pydantic are being imported and Invoke parses next; "task": the task printed its
    first line), then its delay in seconds, and signal it: (exit code, output, finished first)."""
    phase, delay = moment
    proc = start_invoke("plan", "--out", str(tmp_path / "out"))
    deadline = time.monotonic() + 120
    first = ""
    if phase == "imports":
        while not _handlers_installed(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "k4w never installed its signal handlers"
            time.sleep(0.002)
    else:
        first = proc.stdout.readline()
        assert first, "the task printed nothing"
    time.sleep(delay)
    finished = proc.poll() is not None
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=120)
    return proc.returncode, first + output, finished


# During the imports after k4w's first line, and Invoke's parsing; then inside the task (render done,
# the plan and the build gate running).
MOMENTS = [("imports", 0.0), ("imports", 0.01), ("imports", 0.05), ("imports", 0.15), ("imports", 0.4),
           ("task", 0.0), ("task", 0.1), ("task", 0.5)]


@pytest.mark.parametrize("signum, code, line", [(signal.SIGINT, 130, "error: interrupted (Ctrl-C)"),
                                                (signal.SIGTERM, 143, "error: terminated (SIGTERM)")],
                         ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", MOMENTS, ids=[f"{phase}+{delay}s" for phase, delay in MOMENTS])
def test_a_signal_at_any_moment_ends_in_one_line(signum, code, line, moment, tmp_path):
    returncode, output, finished = _signal_after(tmp_path, signum, moment)
    if finished:
        pytest.fail(f"plan finished before the signal at {moment}; the test needs a slower command")
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert returncode == code, output
    assert output.strip().splitlines()[-1] == line, output
    assert output.count("error:") == 1, output


def test_inside_a_task_a_signal_raises_so_the_task_cleans_up():
    """In a task, SIGTERM and SIGINT raise KeyboardInterrupt (cleanups run: `finally`, the --out
    lock, child processes) instead of ending the process; the outcome still names the signal."""
    import os

    from k4w.infra import signals

    previous = {s: signal.getsignal(s) for s in signals.OUTCOMES}
    signals.install()
    cleaned = []
    try:
        for signum, expected in ((signal.SIGTERM, (143, "terminated (SIGTERM)")), (signal.SIGINT, (130, "interrupted (Ctrl-C)"))):
            with pytest.raises(KeyboardInterrupt) as caught:
                with signals.task():
                    try:
                        os.kill(os.getpid(), signum)
                        time.sleep(5)  # the handler raises here
                    finally:
                        cleaned.append(signum)
            assert signals.outcome(caught.value) == expected
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert cleaned == [signal.SIGTERM, signal.SIGINT]

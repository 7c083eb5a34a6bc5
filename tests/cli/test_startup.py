"""Start-up: a Ctrl-C in the first moments of `python -m k4w` (the `k4w` command) ends in one line,
never Python's KeyboardInterrupt traceback; tasks.py loads no stage of k4w until a task runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.helpers import ROOT


def test_tasks_py_loads_no_stage_of_k4w():
    """Each task imports its stages in its body: `invoke --list`, --help and the parsing of every
    command line wait only for Invoke and this much of k4w."""
    code = "import sys, tasks; print(' '.join(sorted(m for m in sys.modules if m == 'k4w' or m.startswith('k4w.'))))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert loaded == ["k4w", "k4w.defaults", "k4w.infra", "k4w.infra.signals"], loaded


def test_the_handler_is_installed_before_invoke_is_imported():
    """python -X importtime lists each import as it completes: k4w.infra.signals (installed at once) before Invoke."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "k4w", "--version"], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    order = [line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:") and "|" in line]
    assert "k4w.infra.signals" in order and "invoke" in order, order
    assert order.index("k4w.infra.signals") < min(i for i, name in enumerate(order) if name.startswith("invoke")), order


def _handler_installed(pid: int) -> bool:
    """k4w.infra.signals.install() ran in pid: SIGTERM is caught (Python alone leaves it default)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def test_ctrl_c_at_any_early_moment_prints_one_line_and_no_traceback(tmp_path):
    """From the handler on (before Invoke's import, test above): Invoke's import, tasks.py, the task."""
    for extra in (0.0, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 0.3, 0.45):
        proc = subprocess.Popen([sys.executable, "-m", "k4w", "render", "--dry-run", "--out", str(tmp_path / "out")],
                                cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while not _handler_installed(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "k4w never installed its signal handlers"
            time.sleep(0.001)
        time.sleep(extra)
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=120)[0]
        assert "Traceback" not in output, (extra, output)
        assert proc.returncode in (130, 0), (extra, proc.returncode, output)  # 0: it finished first
        if proc.returncode == 130:
            assert output.rstrip().endswith("interrupted (Ctrl-C)"), (extra, output)


def test_python_m_k4w_runs_the_tasks_as_invoke_does(tmp_path):
    result = subprocess.run([sys.executable, "-m", "k4w", "doctor", "--stage", "nope"], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 2 and "--stage must be one of" in result.stderr, result.stderr

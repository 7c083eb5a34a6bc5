"""Start-up: a Ctrl-C in the first moments of `python -m k4w` (the `k4w` command) ends in one line,
never Python's KeyboardInterrupt traceback; tasks.py loads no stage of k4w until a task runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.helpers import ROOT


def _seconds(argv: list[str]) -> float:
    """The shortest of three runs of argv, start to exit."""
    best = float("inf")
    for _ in range(3):
        start = time.monotonic()
        subprocess.run(argv, cwd=ROOT, capture_output=True, check=False)
        best = min(best, time.monotonic() - start)
    return best


def test_tasks_py_loads_no_stage_of_k4w():
    """Each task imports its stages in its body: `invoke --list`, --help and the parsing of every
    command line wait only for Invoke and this much of k4w."""
    code = "import sys, tasks; print(' '.join(sorted(m for m in sys.modules if m == 'k4w' or m.startswith('k4w.'))))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert loaded == ["k4w", "k4w.defaults", "k4w.signals"], loaded


def test_ctrl_c_at_any_early_moment_prints_one_line_and_no_traceback(tmp_path):
    # Python's own start-up (its site module, the venv's .pth files) comes before any k4w code and
    # is Python's; every moment after it, Invoke's import included, is k4w's.
    python_alone = _seconds([sys.executable, "-c", "pass"])
    for extra in (0.0, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 0.3, 0.45):
        proc = subprocess.Popen([sys.executable, "-m", "k4w", "render", "--dry-run", "--out", str(tmp_path / "out")],
                                cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        time.sleep(python_alone * 1.5 + extra)
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

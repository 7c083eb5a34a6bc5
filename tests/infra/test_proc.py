"""k4w.infra.proc, the one way k4w runs programs: output kept or streamed, timeouts that stop what
they started, redacted error tails, dry runs that run nothing, and waits on a fake clock."""

from __future__ import annotations

import os
import sys
import time

import pytest

from k4w.infra import proc
from k4w.infra.errors import K4wError
from k4w.infra.redact import register_secret
from tests.helpers import process_alive

PY = sys.executable


def test_run_keeps_stdout_and_stderr_apart():
    result = proc.run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.output == "out\nerr\n"


def test_a_failure_quotes_the_last_lines_redacted():
    register_secret("pr0xy-Passw0rd")
    script = "for i in range(30): print('line', i)\nprint('via http://bob:pr0xy-Passw0rd@proxy:3128'); raise SystemExit(2)"
    with pytest.raises(proc.Failed) as err:
        proc.run([PY, "-c", script], check=True)
    message = str(err.value)
    assert "exited 2:" in message and "pr0xy-Passw0rd" not in message and "http://***@proxy:3128" in message
    assert "line 10" not in message and "line 11" in message  # the last TAIL_LINES lines only


def test_a_missing_folder_is_not_reported_as_a_missing_program(tmp_path):
    with pytest.raises(FileNotFoundError):
        proc.run([PY, "-c", "pass"], cwd=tmp_path / "nowhere")


def test_run_timeout_stops_the_program_and_keeps_what_it_printed():
    started = time.monotonic()
    with pytest.raises(proc.TimedOut, match="did not finish within 1 s") as err:
        proc.run([PY, "-c", "import time; print('begun', flush=True); time.sleep(30)"], timeout=1)
    assert time.monotonic() - started < 10 and "begun" in err.value.output


def test_stream_hands_over_each_line_and_keeps_the_whole_output():
    seen = []
    result = proc.stream([PY, "-c", "import sys; print('a'); print('b', file=sys.stderr, flush=True); print('c')"],
                         seen.append, input=None)
    assert seen and "".join(seen) == result.stdout and sorted(result.stdout.split()) == ["a", "b", "c"]


def test_stream_feeds_input():
    result = proc.stream([PY, "-c", "import sys; print(sys.stdin.read().upper())"], lambda line: None, input="hello")
    assert result.stdout.strip() == "HELLO"


@pytest.mark.skipif(os.name == "nt", reason="process groups are POSIX sessions here")
def test_a_stream_timeout_in_its_own_group_stops_everything_it_started():
    lines = []
    started = time.monotonic()
    with pytest.raises(proc.TimedOut):
        proc.stream(["sh", "-c", "sleep 30 & echo $!; wait"], lines.append, timeout=1, group=True, grace=2)
    assert time.monotonic() - started < 10
    grandchild = int(lines[0])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and process_alive(grandchild):
        time.sleep(0.1)
    assert not process_alive(grandchild)


@pytest.mark.skipif(os.name == "nt", reason="SIGINT delivery is POSIX here")
def test_interrupt_forwards_one_ctrl_c_to_a_program_in_its_own_group():
    child = proc.start([PY, "-c", "import time\ntry:\n    print('ready', flush=True)\n    time.sleep(30)\n"
                                  "except KeyboardInterrupt:\n    print('cancelled cleanly')\n    raise SystemExit(7)"],
                       group=True)
    lines = child.lines()
    assert next(lines).strip() == "ready"
    child.interrupt()
    assert "cancelled cleanly" in "".join(lines) and child.wait(10) == 7


def test_a_dry_run_shows_the_exact_command_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "ran"
    code, output = proc.Runner(dry_run=True).run(["touch", marker], cwd=tmp_path, extra_env={"A": "b c"})
    assert (code, output) == (0, "") and not marker.exists()
    assert capsys.readouterr().out.strip() == f"$ cd {tmp_path} && A='b c' touch {marker}"


def test_a_runner_logs_redacted_output_and_raises_on_failure(tmp_path, capsys):
    register_secret("runner-S3cret")
    log = tmp_path / "logs" / "flow.log"
    with pytest.raises(K4wError, match="exited 4"):
        proc.Runner(log=log).run([PY, "-c", "print('token runner-S3cret'); raise SystemExit(4)"])
    assert "runner-S3cret" not in log.read_text() and "token ***" in log.read_text()
    assert "token ***" in capsys.readouterr().out  # shown live, redacted too


def test_wait_for_returns_the_state_once_done_and_times_out_on_a_fake_clock():
    now = [0.0]
    answers = iter([(False, "Pending"), (True, "Running")])
    assert proc.wait_for("pod x", lambda: next(answers), 60, clock=lambda: now[0], sleep=lambda s: None) == "Running"

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(proc.WaitTimeout, match="timed out after 30 s waiting for pod x; last seen: Pending") as err:
        proc.wait_for("pod x", lambda: (False, "Pending"), 30, clock=lambda: now[0], sleep=sleep, poll=5)
    assert isinstance(err.value, TimeoutError) and isinstance(err.value, K4wError)
    assert 30 <= now[0] <= 35


def test_a_runner_failure_does_not_repeat_output_the_user_just_saw(capsys):
    with pytest.raises(proc.Failed) as err:
        proc.Runner().run([PY, "-c", "print('shown live'); raise SystemExit(4)"])
    assert "shown live" in capsys.readouterr().out
    after_command = str(err.value).split(" exited ", 1)[1]  # the command line itself quotes the script
    assert after_command == "4 (its output is above)"


def test_a_captured_runner_failure_quotes_the_stdout_nobody_saw(capsys):
    with pytest.raises(proc.Failed) as err:
        proc.Runner().run([PY, "-c", "import sys; print('kept'); print('shown', file=sys.stderr); sys.exit(5)"], capture=True)
    assert "shown" in capsys.readouterr().out
    after_command = str(err.value).split(" exited ", 1)[1]  # the command line itself quotes the script
    assert after_command == "5:\nkept"

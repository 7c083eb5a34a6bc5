"""Every program k4w starts goes through here: run and capture, stream line by line, wait.

- run(): run to the end and keep stdout and stderr (validators, version probes, kubectl, git).
- stream(): hand each output line to a callback as it comes (Vagrant, pytest, the e2e harness).
- start(): a Process handle for callers that must signal the child while it runs (Packer) or
  leave it running in the background (the e2e squid and QEMU).
- Runner: a program the user follows: shown exactly as it runs, copied redacted into a log,
  and in a dry run only shown.
- wait_for(): poll a condition until it holds or a deadline passes; the clock is a parameter.

A missing executable raises ToolMissing with its install command (k4w.infra.tools.INSTALL); an
expired timeout raises TimedOut; every message that quotes output is redacted.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from k4w.infra import files as outfiles
from k4w.infra import tools, ui
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact

TAIL_LINES = 20  # of a failed program's output, quoted in its error message
STOP_GRACE = 15  # seconds a stopped process group gets between SIGTERM and SIGKILL
POLL_SECONDS = 3  # between two looks at a condition; the deadline is what bounds a wait

T = TypeVar("T")


class Result(subprocess.CompletedProcess):
    """A finished program: .args, .returncode, .stdout and .stderr as text."""

    @property
    def output(self) -> str:
        return (self.stdout or "") + (self.stderr or "")


class Failed(K4wError):
    """A program exited non-zero where the caller asked for success."""

    def __init__(self, result: Result, unseen: str | None = None):
        """unseen: the part of the output the user has not seen yet (default: all of it); output
        already shown live is not repeated in the error."""
        self.result = result
        last = tail(result.output if unseen is None else unseen)
        shown = "" if unseen is None or last else " (its output is above)"
        super().__init__(redact(f"{shlex.join(result.args)} exited {result.returncode}{shown}" + (f":\n{last}" if last else "")))


class TimedOut(K4wError):
    """A program did not finish within its timeout; it was stopped. .output is what it printed."""

    def __init__(self, argv: list[str], seconds: float, output: str):
        self.argv, self.seconds, self.output = argv, seconds, output
        super().__init__(redact(f"{shlex.join(argv)} did not finish within {seconds:.0f} s"))


class WaitTimeout(K4wError, TimeoutError):
    """A condition did not hold before its deadline (a TimeoutError too, for the pytest specs)."""


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last lines of a program's output, redacted, for an error message."""
    return redact("\n".join(text.rstrip().splitlines()[-lines:]))


def show(argv: list, cwd: Path | None = None, env: dict | None = None) -> None:
    """Print a command exactly as it runs: its folder, the variables it adds, its arguments."""
    prefix = f"cd {shlex.quote(str(cwd))} && " if cwd else ""
    assignments = "".join(f"{k}={shlex.quote(str(v))} " for k, v in (env or {}).items())
    ui.command(prefix + assignments + shlex.join([str(a) for a in argv]))


def _text(data: str | bytes | None) -> str:
    # TimeoutExpired carries bytes even from a text-mode run.
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data or ""


@contextlib.contextmanager
def _tool_missing(argv: list[str], cwd: Path | None) -> Iterator[None]:
    """A FileNotFoundError from starting argv means its program is not installed (unless the
    folder to run in is what is missing)."""
    try:
        yield
    except FileNotFoundError:
        if cwd is not None and not Path(cwd).is_dir():
            raise
        raise tools.missing(Path(argv[0]).name) from None


def run(argv: list, *, cwd: Path | None = None, env: dict | None = None, input: str | None = None,
        timeout: float | None = None, check: bool = False) -> Result:
    """Run argv to the end and keep its output. env is the child's whole environment (None: ours)."""
    argv = [str(a) for a in argv]
    with _tool_missing(argv, cwd):
        try:
            done = subprocess.run(argv, cwd=cwd, env=env, input=input, capture_output=True, text=True,
                                  encoding="utf-8", errors="replace", timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise TimedOut(argv, timeout or 0, _text(exc.stdout) + _text(exc.stderr)) from None
    result = Result(argv, done.returncode, done.stdout, done.stderr)
    if check and result.returncode != 0:
        raise Failed(result)
    return result


class Process(subprocess.Popen):
    """A started program. With group=True it leads its own process group, so a terminal's
    Ctrl-C reaches only k4w, which decides what to forward, and stop() ends all it started."""

    def __init__(self, argv: list[str], *, group: bool, **kwargs):
        self.group = group
        if group:
            kwargs.update({"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt"
                          else {"start_new_session": True})
        super().__init__(argv, **kwargs)

    def lines(self) -> Iterator[str]:
        """Its output (stdout and stderr merged) line by line, until it closes."""
        assert self.stdout is not None, "started with capture=False"
        yield from self.stdout

    def interrupt(self) -> None:
        """What Ctrl-C in a terminal sends: SIGINT to the program, and with group=True to its whole
        process group as a terminal does; on Windows CTRL_BREAK (to its group), which Go programs
        such as Packer map to os.Interrupt."""
        with contextlib.suppress(OSError):
            if os.name == "nt":
                self.send_signal(signal.CTRL_BREAK_EVENT)
            elif self.group:
                os.killpg(self.pid, signal.SIGINT)
            else:
                self.send_signal(signal.SIGINT)

    def kill_all(self) -> None:
        """SIGKILL it and, in its own group, everything it started, even after it exited; no wait."""
        self._signal_all(kill=True)

    def stop(self, grace: float = STOP_GRACE) -> bool:
        """Stop it (and, in its own group, everything it started): SIGTERM, then SIGKILL after
        grace seconds. True when the grace ran out."""
        expired = False
        if self.poll() is None:
            self._signal_all(kill=False)
            try:
                self.wait(grace)
            except subprocess.TimeoutExpired:
                expired = True
        # Also after the leader exited: helpers it started may still hold the group.
        self._signal_all(kill=True)
        self.wait()
        return expired

    def _signal_all(self, kill: bool) -> None:
        if self.group and os.name != "nt":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL if kill else signal.SIGTERM)
        elif self.poll() is None:
            with contextlib.suppress(OSError):
                if kill:
                    self.kill()
                else:
                    self.terminate()


def start(argv: list, *, cwd: Path | None = None, env: dict | None = None, input: str | None = None,
          group: bool = False, capture: bool = True) -> Process:
    """Start argv. capture: its output is read through lines() (else discarded). input, when
    given, is written to its stdin from a thread, so a chatty program cannot block on it."""
    argv = [str(a) for a in argv]
    # A program in its own group is not the terminal's foreground job: it must not read the terminal.
    stdin = subprocess.PIPE if input is not None else subprocess.DEVNULL if group else None
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if capture else \
        {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    with _tool_missing(argv, cwd):
        process = Process(argv, group=group, cwd=cwd, env=env, stdin=stdin, text=True, encoding="utf-8",
                          errors="replace", **output)
    if input is not None:
        def feed() -> None:
            with contextlib.suppress(BrokenPipeError, OSError):
                process.stdin.write(input)
                process.stdin.close()

        threading.Thread(target=feed, daemon=True).start()
    return process


def stream(argv: list, on_line: Callable[[str], None], *, cwd: Path | None = None, env: dict | None = None,
           input: str | None = None, timeout: float | None = None, group: bool = False,
           grace: float = STOP_GRACE, check: bool = False) -> Result:
    """Run argv, handing each output line (stdout and stderr merged) to on_line as it comes.

    Returns its whole output in .stdout. When timeout runs out the program is stopped before
    TimedOut is raised; with group=True it is also stopped when this thread is interrupted
    (Ctrl-C), and either stop ends all it started.
    """
    process = start(argv, cwd=cwd, env=env, input=input, group=group)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        process.stop(grace)

    timer = threading.Timer(timeout, expire) if timeout is not None else None
    chunks: list[str] = []
    if timer:
        timer.start()
    try:
        for line in process.lines():
            chunks.append(line)
            on_line(line)
        process.wait()
    except BaseException:
        # Outside our group the terminal's Ctrl-C reached the program too: it stops on its own.
        if group:
            process.stop(grace)
        raise
    finally:
        if timer:
            timer.cancel()
            timer.join()  # a stop under way finishes before we say what happened
    text = "".join(chunks)
    if expired.is_set():
        raise TimedOut(process.args, timeout, text)
    result = Result(process.args, process.returncode, text, "")
    if check and result.returncode != 0:
        raise Failed(result)
    return result


# ------------------------------------------------------------------ a program the user follows


@dataclass
class Runner:
    """Programs whose output the user follows (a Windows `vagrant up` takes minutes): shown as
    they run, their output shown live and copied, redacted, into `log`; a dry run only shows."""

    log: Path | None = None
    dry_run: bool = False
    # Several programs may run at once (cluster-up's one `vagrant up` per VM): whole lines only.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def show(self, argv: list, cwd: Path | None = None, env: dict | None = None) -> None:
        show(argv, cwd, env)

    def _write(self, text: str) -> None:
        if self.log:
            with self._lock:
                with outfiles.open_for_write(self.log, append=True) as fh:
                    fh.write(redact(text))

    def _echo(self, line: str) -> None:
        self._write(line)
        with self._lock:
            ui.say(line.rstrip("\n"))

    def run(self, argv: list, cwd: Path | None = None, env: dict | None = None, extra_env: dict | None = None,
            capture: bool = False, check: bool = True) -> tuple[int, str]:
        """Run argv, its output shown live, or with capture=True keeping its stdout to parse
        (stderr is shown: Vagrant prints its notices there). Returns (exit code, output).

        env is the child's whole environment (None: ours); extra_env is added on top and shown
        in the printed command.
        """
        self.show(argv, cwd, extra_env)
        if self.dry_run:
            return 0, ""
        full_env = {**(os.environ if env is None else env), **(extra_env or {})}
        argv = [str(a) for a in argv]
        self._write(f"$ {shlex.join(argv)}\n")
        if capture:
            result = run(argv, cwd=cwd, env=full_env)
            self._write(result.output)
            for line in result.stderr.splitlines():
                ui.say(line)
        else:
            result = stream(argv, self._echo, cwd=cwd, env=full_env)
        if check and result.returncode != 0:
            # Streamed output was shown live, and so was a captured run's stderr.
            raise Failed(result, unseen=result.stdout if capture else "")
        return result.returncode, result.stdout


# ------------------------------------------------------------------ waiting


def wait_for(what: str, check: Callable[[], tuple[bool, T]], timeout: float, *, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep, poll: float = POLL_SECONDS) -> T:
    """Poll check() -> (done, state) until done, and return that state; after `timeout`
    seconds raise WaitTimeout naming what was awaited and the last state seen. No fixed sleeps:
    clock and sleep are parameters, so a test's fake clock makes a timeout instant."""
    deadline = clock() + timeout
    while True:
        done, state = check()
        if done:
            return state
        if clock() >= deadline:
            raise WaitTimeout(redact(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {state}"))
        sleep(poll)

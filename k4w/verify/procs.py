"""Run the host-side programs of the test flows (vagrant, pytest) with a log and a dry run.

Output is shown live (a Windows `vagrant up` takes minutes) and copied, redacted, into the
flow's log under OUT/logs. In a dry run nothing runs: the exact command is printed instead.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import ui
from ..errors import K4wError
from ..redact import redact


TAIL_LINES = 20  # of a failed program's output, quoted in the error


@dataclass
class Runner:
    log: Path | None
    dry_run: bool = False

    def show(self, argv: list[str], cwd: Path | None = None, env: dict | None = None) -> None:
        prefix = f"cd {shlex.quote(str(cwd))} && " if cwd else ""
        assignments = "".join(f"{k}={shlex.quote(str(v))} " for k, v in (env or {}).items())
        ui.command(prefix + assignments + shlex.join([str(a) for a in argv]))

    def _write(self, text: str) -> None:
        if self.log:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("a", encoding="utf-8") as fh:
                fh.write(redact(text))

    def run(self, argv: list[str], cwd: Path | None = None, env: dict | None = None, extra_env: dict | None = None,
            capture: bool = False, check: bool = True) -> tuple[int, str]:
        """Run argv, showing its output live, or with capture=True keeping its stdout to parse.

        Returns (exit code, output): all of stdout when captured, else the last TAIL_LINES lines.

        env is the child's whole environment (None: this process's); extra_env is added on
        top and shown in the printed command.
        """
        self.show(argv, cwd, extra_env)
        if self.dry_run:
            return 0, ""
        full_env = {**(os.environ if env is None else env), **(extra_env or {})}
        argv = [str(a) for a in argv]
        self._write(f"$ {shlex.join(argv)}\n")
        try:
            if capture:
                code, output = self._captured(argv, cwd, full_env)
            else:
                code, output = self._streamed(argv, cwd, full_env)
        except FileNotFoundError:
            raise K4wError(f"'{argv[0]}' is not installed or not on PATH") from None
        if check and code != 0:
            tail = "\n".join(output.strip().splitlines()[-TAIL_LINES:])
            raise K4wError(redact(f"{shlex.join(argv)} exited {code}" + (f":\n{tail}" if tail else "")))
        return code, output

    def _captured(self, argv: list[str], cwd, env) -> tuple[int, str]:
        """stdout only (it is parsed: Vagrant prints warnings on stderr), stderr shown and logged."""
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, encoding="utf-8", errors="replace",
                              check=False)
        self._write(proc.stdout + proc.stderr)
        for line in proc.stderr.splitlines():
            ui.say(line)
        return proc.returncode, proc.stdout

    def _streamed(self, argv: list[str], cwd, env) -> tuple[int, str]:
        """Both streams shown live; the last TAIL_LINES lines kept for the error message."""
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                encoding="utf-8", errors="replace")
        tail: list[str] = []
        for line in proc.stdout:
            self._write(line)
            ui.say(line.rstrip("\n"))
            tail = (tail + [line])[-TAIL_LINES:]
        return proc.wait(), "".join(tail)

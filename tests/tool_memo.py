"""A memo in front of shellcheck for one pytest session: the real shellcheck answers each distinct
input once, and a run with the same input gets that same answer again.

`invoke validate`, `plan` and every build's gate shellcheck the repository's own scripts (17 of
them, about a second of CPU each since each re-reads guest/ubuntu/lib.sh), so the suite ran
shellcheck on the same unchanged files some thousands of times. Its answer depends only on what
the key below holds, so a repeat is answered from the memo: same stdout, stderr and exit code.

The key: the real program (path, size, mtime), SHELLCHECK_OPTS, the working directory, the
arguments, standard input when an argument is `-`, and the bytes of every file an argument names,
of every file beside it and one folder up (what `# shellcheck source=../lib.sh` and
--source-path=SCRIPTDIR can reach), and of every file a `# shellcheck source=` directive names.
A test that plants a defect changes some of those bytes, so the real shellcheck sees it.

Run as: python tool_memo.py REAL_SHELLCHECK MEMO_FOLDER ARGS... (tests/conftest.py writes the
`shellcheck` launcher that does so and puts it first on PATH).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

_DIRECTIVE = re.compile(rb"#\s*shellcheck\s+source=(\S+)")


def _feed(digest, label: str, data: bytes) -> None:
    digest.update(f"{label}\0{len(data)}\0".encode())
    digest.update(data)


def _files_beside(script: Path) -> list[Path]:
    found = []
    for folder in (script.parent, script.parent.parent):
        try:
            found += sorted(p for p in folder.iterdir() if p.is_file())
        except OSError:
            pass
    try:
        for name in _DIRECTIVE.findall(script.read_bytes()):
            found.append(script.parent / os.fsdecode(name))
    except OSError:
        pass
    return found


def key(real: str, args: list[str], stdin: bytes | None) -> str | None:
    """The memo key, or None when an input cannot be read (then the real tool just runs)."""
    digest = hashlib.sha256()
    stat = os.stat(real)
    _feed(digest, "tool", f"{os.path.realpath(real)} {stat.st_size} {stat.st_mtime_ns}".encode())
    _feed(digest, "opts", os.environ.get("SHELLCHECK_OPTS", "").encode())
    _feed(digest, "cwd", os.getcwd().encode())
    _feed(digest, "args", "\0".join(args).encode())
    if stdin is not None:
        _feed(digest, "stdin", stdin)
    for arg in args:
        path = Path(arg)
        if arg.startswith("-") or not path.is_file():
            continue
        for related in [path, *_files_beside(path)]:
            try:
                _feed(digest, str(related.resolve()), related.read_bytes())
            except FileNotFoundError:
                _feed(digest, str(related), b"<missing>")
            except OSError:
                return None
    return digest.hexdigest()


def _write_entry(memo: Path, name: str, result: subprocess.CompletedProcess) -> None:
    scratch = memo / f".{name}.{os.getpid()}"
    scratch.mkdir(parents=True)
    (scratch / "stdout").write_bytes(result.stdout)
    (scratch / "stderr").write_bytes(result.stderr)
    (scratch / "returncode").write_text(str(result.returncode))
    try:
        scratch.rename(memo / name)  # whole or not at all; a parallel writer may have won
    except OSError:
        for part in scratch.iterdir():
            part.unlink()
        scratch.rmdir()


def _note(memo: Path, word: str) -> None:
    with open(memo / "runs.log", "a", encoding="ascii") as log:  # one short append: atomic
        log.write(word + "\n")


def main(argv: list[str]) -> int:
    real, memo, args = argv[0], Path(argv[1]), argv[2:]
    stdin = sys.stdin.buffer.read() if "-" in args else None
    name = key(real, args, stdin)
    entry = memo / name if name else None
    if entry is not None and (entry / "returncode").is_file():
        _note(memo, "memo")
        sys.stdout.buffer.write((entry / "stdout").read_bytes())
        sys.stderr.buffer.write((entry / "stderr").read_bytes())
        return int((entry / "returncode").read_text())
    result = subprocess.run([real, *args], input=stdin, capture_output=True, check=False)
    _note(memo, "real")
    if name is not None and result.returncode >= 0:  # never keep an answer cut short by a signal
        _write_entry(memo, name, result)
    sys.stdout.buffer.write(result.stdout)
    sys.stderr.buffer.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

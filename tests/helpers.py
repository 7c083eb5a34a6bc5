"""Shared test helpers: build config dicts and run the real `invoke` CLI."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from k4w.infra import sources
from k4w.infra import tools
from k4w.infra.errors import ToolMissing

ROOT = Path(__file__).resolve().parent.parent

BASE = yaml.safe_load((ROOT / "cluster.yml").read_text())


def config_dict(**overrides) -> dict:
    """The default cluster.yml as a dict, with dotted-path overrides, e.g. {"network.backend": "vxlan"}."""
    data = copy.deepcopy(BASE)
    for dotted, value in overrides.items():
        target = data
        *parents, last = dotted.replace("__", ".").split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
        if last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
    return data


# The modern era's box profiles (boxes/ubuntu-2404.yml: kubeadm v1beta4 and Flannel v0.28;
# boxes/windows-2022.yml), as the tests of that era read them.
MODERN_BOXES = ROOT / "boxes"
MODERN_ENV = {sources.BOX_DIRS_ENV: str(MODERN_BOXES)}


def modern_config(**overrides) -> dict:
    """cluster.yml with the modern boxes (master and Linux worker ubuntu-2404, Windows worker
    windows-2022) and the vxlan backend; run the CLI with env=MODERN_ENV."""
    return config_dict(**{"network.backend": "vxlan", "nodes.0.box": "ubuntu-2404", "nodes.1.box": "ubuntu-2404",
                          "nodes.2.box": "windows-2022", **overrides})


def write_config(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _invoke_argv(args: tuple[str, ...], cwd: Path) -> list[str]:
    # -m invoke finds tasks.py from the working directory; from elsewhere, name the collection.
    return [sys.executable, "-m", "invoke"] + (["--search-root", str(ROOT)] if Path(cwd) != ROOT else []) + list(args)


def start_invoke(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.Popen:
    """Start the real CLI and return at once, for a test that signals it while it runs. Its
    output goes to the returned process's stdout (stderr merged), as text."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.Popen(_invoke_argv(args, cwd), cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def invoke(*args: str, cwd: Path = ROOT, env: dict | None = None, memory_mb: int | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real CLI, exactly as a user types it; memory_mb caps its address space."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    argv = _invoke_argv(args, cwd)

    def cap():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))

    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=full_env, check=False, timeout=timeout,
                          preexec_fn=cap if memory_mb else None)


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under folder with its sha256 and mode: equal digests mean byte-for-byte unchanged."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest() + oct(path.stat().st_mode)
    return out


def use_sources(monkeypatch, **changes) -> sources.Sources:
    """Point the whole package at another source tree for one test: a fixture repository
    (root=...) or other box profile folders (box_folders=(...)). Undone after the test."""
    new = dataclasses.replace(sources.REPO, **changes)
    monkeypatch.setattr(sources, "REPO", new)
    return new


def system_tool(name: str) -> str:
    """A program scripts/setup.sh installs with apt (packer, vagrant, shellcheck, ruby, ...).

    Found the way k4w finds it (k4w.infra.tools.require). A missing one FAILS the test, naming the
    install command, and never skips it: in CI a skipped check reads like a passed one.
    """
    try:
        return tools.require(name)
    except ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)


def packer_validate(template: Path, env: dict | None = None, cwd: Path | None = None,
                    variables: dict | None = None) -> subprocess.CompletedProcess:
    """`packer init` then `packer validate` of a rendered template, as `invoke validate` runs them:
    the Packer k4w finds (the pinned cache's first) with its plugins (k4w.infra.packer_cli.plugin_env).
    variables: given to validate as -var name=value, as a build gives them. The result of the
    first that fails, else of validate."""
    from k4w.infra import packer_cli

    packer = system_tool("packer")
    full_env = {**os.environ, **packer_cli.plugin_env(packer), "CHECKPOINT_DISABLE": "1", **(env or {})}
    given = [arg for name, value in (variables or {}).items() for arg in ("-var", f"{name}={value}")]
    for action in ("init", "validate"):
        result = subprocess.run([packer, action, *(given if action == "validate" else []), str(template)],
                                capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120)
        if result.returncode != 0:
            break
    return result


def venv_tool(name: str) -> str:
    """A console script installed into this interpreter's environment by scripts/setup.sh.

    Looked up beside sys.executable, never on PATH: the suite runs as `.venv/bin/python -m pytest`
    without the venv's bin/ on PATH, and a copy elsewhere on PATH must not stand in for it.
    """
    path = Path(sys.executable).parent / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{name} is not installed in {path.parent}: run bash scripts/setup.sh")
    return str(path)


def process_alive(pid: int) -> bool:
    """Whether pid is a live process (a zombie, exited but not reaped, counts as gone)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def gone_within(pids: list[int], seconds: float = 5.0) -> list[int]:
    """The pids still alive after up to `seconds`: SIGKILL to a process group is delivered
    asynchronously, so a killed grandchild can still be running for a moment on a loaded host."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [pid for pid in pids if process_alive(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)



# How long a stopped test daemon may take to exit after SIGTERM, and after SIGKILL.
DAEMON_STOP_TIMEOUT_S = 30


@contextlib.contextmanager
def running_daemon(argv: list[str], *, answers, timeout: float, log: Path, what: str, poll: float = 0.2, env: dict | None = None):
    """A real daemon a test talks to (containerd, libvirtd, sshd): started in the foreground with its output in
    log, waited for by polling answers() (never a fixed sleep) up to timeout, and stopped by its PID however
    the block ends (SIGTERM, then SIGKILL). A daemon that exits or never answers fails the test with its log."""
    with log.open("wb") as sink:
        daemon = subprocess.Popen([str(a) for a in argv], stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + timeout
        while not answers():
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{what} did not answer within {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(poll)
        yield daemon
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=DAEMON_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=DAEMON_STOP_TIMEOUT_S)


def image_archive(folder: Path, name: str, size: int, stem: str = "image") -> Path:
    """An archive of image `name` (ci/e2e/oci_archive.py) in folder as <stem>.tar: one layer holding one
    incompressible file of size bytes, so each call makes an image of its own digest."""
    from ci.e2e import oci_archive

    folder.mkdir(parents=True, exist_ok=True)
    payload = folder / f"{stem}.bin"
    payload.write_bytes(os.urandom(size))
    archive = folder / f"{stem}.tar"
    oci_archive.write(archive, oci_archive.Image(name=name, entries=[oci_archive.Entry("/payload.bin", source=payload, mode=0o644)]))
    return archive

"""What k4w prints on the terminal: a broken stdout is named as such."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT


def test_a_full_stdout_is_blamed_on_stdout_not_on_out(tmp_path):
    out = tmp_path / "out"
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "invoke", "plan", "--dry-run", "--out", str(out)], cwd=ROOT,
                                stdout=full, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
                                timeout=300)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == ["error: cannot write to stdout: No space left on device (stdout is redirected to a full disk or "
                     "device, or to a pipe that was closed)"], result.stderr
    assert "--out" not in result.stderr and str(out) not in result.stderr


# ----------------------------------------------------------------- plan on a terminal of any width

import fcntl  # noqa: E402
import pty  # noqa: E402
import re  # noqa: E402
import struct  # noqa: E402
import termios  # noqa: E402

import pytest  # noqa: E402

from k4w.derive.cluster import Cluster  # noqa: E402
from tests.helpers import config_dict, write_config  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _plan_on_a_terminal(args: list[str], columns: int, via: str) -> str:
    """Run the real `invoke plan` on a pseudo-terminal `columns` wide: told by COLUMNS (via="env")
    or by the terminal's own window size (via="pty"); what it wrote, colours stripped."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns if via == "pty" else 300, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if via == "env":
        env["COLUMNS"] = str(columns)
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "plan", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


@pytest.mark.parametrize("via", ["env", "pty"])
@pytest.mark.parametrize("columns", [20, 80, 132])
def test_plan_never_cuts_a_value_a_user_copies(columns, via, tmp_path):
    cfg = write_config(tmp_path / "cluster.yml", config_dict(**{
        "proxy.http": "http://proxy.corp.example:3128", "proxy.no_proxy": [".corp.example", "10.0.0.0/8"]}))
    cluster = Cluster.load(cfg)
    output = _plan_on_a_terminal(["--dry-run", "--config", str(cfg), "--out", str(tmp_path / "out")], columns, via)
    values = [*(str(node.ip) for node in cluster.config.nodes), cluster.proxy.no_proxy_str,
              f"https://{cluster.network.api_ip}:{cluster.network.api_port}", cluster.network.pod_cidr,
              *(str(prof.data.iso.name) for prof in cluster.profiles.values())]
    for value in values:
        assert value in output, f"{value!r} is cut at {columns} columns ({via}):\n{output}"
    assert "Nodes" in output and "master" in output  # the tables are not empty

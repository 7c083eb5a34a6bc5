"""A bad cluster.yml is refused before any work, in one problem line naming the field and its line.

Each case edits one line of the shipped cluster.yml and runs the real `invoke render`; the
expected line is found in the edited text, so the test follows the file if it changes.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import ROOT, invoke

BASE = (ROOT / "cluster.yml").read_text()


def edited(old: str, new: str) -> tuple[str, int]:
    """cluster.yml with the first line containing `old` replaced by `new`, and the line of `new`'s last line."""
    lines = BASE.splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if old in line)
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    lines[i] = "".join(indent + part + "\n" for part in new.split("\n"))
    return "".join(lines), i + new.count("\n") + 1


def refused(tmp_path, text: str | bytes):
    cfg = tmp_path / "cluster.yml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = invoke("render", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    problems = [line for line in result.stderr.splitlines() if line.lstrip().startswith("- ")]
    assert len(problems) == 1, result.stderr
    return problems[0]


# (the line to change, its replacement, what the one problem must say)
CASES = {
    "cpus-bool": ("cpus: 2", "cpus: true", "nodes[0].cpus"),
    "memory-odd": ("memory: 2048", "memory: 2049", "multiple of 2 MiB"),
    "node-cidr-loopback": ("node_cidr:", "node_cidr: 127.0.0.0/24", "loopback"),
    "node-cidr-multicast": ("node_cidr:", "node_cidr: 224.0.0.0/24", "multicast"),
    "node-cidr-public": ("node_cidr:", "node_cidr: 8.8.8.0/24", "RFC 1918"),
    "pod-cidr-link-local": ("pod_cidr:", "pod_cidr: 169.254.0.0/16", "link-local"),
    "service-cidr-reserved": ("service_cidr:", "service_cidr: 240.0.0.0/12", "reserved"),
    "windows-name-digits": ("name: worker-win", "- name: '12345'", "digits only"),
    "cluster-switch-empty": ("cluster_switch:", "cluster_switch: ''", "hyperv.cluster_switch"),
    "timezone-unknown": ("timezone:", "timezone: Mars/Olympus_Mons", "tz database"),
    "nodes-empty": ("nodes:", "nodes: []", "nodes: the list is empty"),
    "key-not-a-string": ("role: master", "role: master\n5: five", "key 5 is not a string"),
    "key-bool": ("role: master", "role: master\nyes: x", "key yes is not a string"),
    "duplicate-key": ("role: master", "role: master\nrole: worker", "duplicate key role"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_value_is_refused_naming_field_and_line(case, tmp_path):
    old, new, says = CASES[case]
    text, line = edited(old, new)
    if case == "nodes-empty":  # the list's items go with it
        text = text[: text.index("nodes: []")] + "nodes: []\n"
    problem = refused(tmp_path, text)
    assert says in problem and f"line {line}" in problem, problem
    if case == "windows-name-digits":
        assert "nodes[2].name" in problem


def test_a_nul_byte_names_its_line(tmp_path):
    text, line = edited("domain:", "domain: cluster\x00.local")
    problem = refused(tmp_path, text)
    assert f"line {line}, column" in problem and "0x0000" in problem, problem


@pytest.mark.parametrize("source", ["/dev/zero", "sparse"])
def test_an_endless_or_huge_config_is_refused_after_the_limit(source, tmp_path):
    """Refused at once: under a 600 MiB address-space cap, reading /dev/zero or a 2 GiB file whole
    would end in a MemoryError."""
    path = source
    if source == "sparse":
        path = str(tmp_path / "big.yml")
        with open(path, "wb") as fh:
            fh.truncate(2 << 30)
    result = invoke("render", "--config", path, "--out", str(tmp_path / "out"), memory_mb=600, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    # A device is refused as one before a byte is read (k4w.outdir.private.read_bounded); it once read 1 MiB + 1 of it.
    says = "is a device, not a regular file" if source == "/dev/zero" else "larger than 1024 KiB"
    assert says in result.stderr and path in result.stderr, result.stderr

"""Bad cluster.yml: the real `invoke render` fails, names the field and line, and leaves --out untouched."""

import re

import pytest

from tests.helpers import ROOT, invoke, tree_digest

GOOD = (ROOT / "cluster.yml").read_text()


def edit(old: str, new: str, count: int = 1) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, count)


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[occurrence - 1]


CASES = {
    "malformed YAML": (edit("  backend: host-gw", "  backend: [host-gw"), "malformed YAML", "backend: [host-gw"),
    "unknown key": (edit("  pod_cidr: 10.244", "  podcidr: 10.244"), "network.podcidr: unknown key", "podcidr:"),
    "unknown box": (edit("box: windows-1803", "box: windows-2016"), "nodes[2].box: unknown box 'windows-2016'", "box: windows-2016"),
    "pod overlaps service": (edit("pod_cidr: 10.244.0.0/16", "pod_cidr: 10.96.0.0/16"), "pod_cidr 10.96.0.0/16 overlaps service_cidr", "pod_cidr:"),
    "node overlaps pod": (edit("node_cidr: 192.168.250.0/24", "node_cidr: 10.244.250.0/24"), "node_cidr 10.244.250.0/24 overlaps pod_cidr", "node_cidr:"),
    "ip outside node_cidr": (edit("ip: 192.168.250.11", "ip: 192.168.251.11"), "nodes[1].ip: 192.168.251.11 is outside network.node_cidr", "ip: 192.168.251.11"),
    "duplicate name": (edit("- name: worker-linux", "- name: master"), "nodes[1].name: 'master' is already used by nodes[0]", ("- name: master", 2)),
    "duplicate ip": (edit("ip: 192.168.250.21", "ip: 192.168.250.11"), "nodes[2].ip: 192.168.250.11 is already used by nodes[1]", ("ip: 192.168.250.11", 2)),
    "no master": (edit("role: master             # master | worker", "role: worker"), "exactly one node must have role 'master', found 0", None),
    "two masters": (edit("    role: worker\n    box: ubuntu-1604", "    role: master\n    box: ubuntu-1604"), "exactly one node must have role 'master', found 2", None),
    "windows master": (
        edit("role: master             # master | worker\n    box: ubuntu-1604", "role: master\n    box: windows-1803").replace("memory: 2048             # MiB", "memory: 4096  # MiB", 1),
        "nodes[0].role: a Windows node cannot be the master", "role: master"),
    "vxlan on 1803": (edit("backend: host-gw ", "backend: vxlan "), "network.backend: vxlan is not supported by box windows-1803", "backend: vxlan"),
    "proxy without port": (edit("http: null ", "http: http://proxy.corp "), "proxy.http: must look like http://host:port", "http: http://proxy.corp"),
    "proxy without scheme": (edit("https: null ", "https: proxy.corp:3128 "), "proxy.https: must look like http://host:port", "https: proxy.corp"),
    "memory too small": (edit("memory: 4096", "memory: 1024"), "nodes[2].memory: 1024 MiB is too small for windows-1803; it needs at least 2048 MiB", "memory: 1024"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_with_field_and_line_and_out_untouched(case, rendered, tmp_path):
    text, message, line_needle = CASES[case]
    bad = tmp_path / "cluster.yml"
    bad.write_text(text)
    before = tree_digest(rendered)
    result = invoke("render", "--config", str(bad), "--out", str(rendered))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert message in " ".join(output.split()), output
    assert "Traceback" not in output
    if line_needle:
        needle, occurrence = line_needle if isinstance(line_needle, tuple) else (line_needle, 1)
        assert re.search(rf"line {line_of(text, needle, occurrence)}\b", output), output
    assert tree_digest(rendered) == before

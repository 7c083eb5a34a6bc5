"""The CLI on a bad cluster.yml: the real `invoke render` fails, names the field and line, and
leaves --out untouched."""

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
    "proxy password with a bad percent escape": (edit("http: null ", "http: http://bob:50%off@proxy.corp:3128 "), "proxy.http: the user:password part has a character", "http: http://bob"),
    "proxy password with #": (edit("https: null ", "https: http://bob:a#b@proxy.corp:3128 "), "percent-encode any other character", "https: http://bob"),
    "proxy password with ?": (edit("http: null ", "http: http://bob:a?b@proxy.corp:3128 "), "'?' as %3F", "http: http://bob"),
    "proxy password with a backtick": (edit("http: null ", "http: http://bob:a`b@proxy.corp:3128 "), "proxy.http: the user:password part", "http: http://bob"),
    "proxy password with [": (edit("http: null ", "http: http://bob:a[b@proxy.corp:3128 "), "proxy.http: the user:password part", "http: http://bob"),
    "proxy password with non-ASCII": (edit("http: null ", "http: http://bob:päss@proxy.corp:3128 "), "proxy.http: the user:password part", "http: http://bob"),
    "proxy port out of range": (edit("http: null ", "http: http://proxy.corp:70000 "), "port 70000 is not between 1 and 65535", "http: http://proxy"),
    "proxy with a trailing newline": (edit("  http: null ", '  http: "http://proxy.corp:3128\\n" '), "proxy.http: must look like", "http: \"http"),
    "no_proxy with a trailing newline": (edit("no_proxy: []", 'no_proxy: ["corp.example\\n"]'), "proxy.no_proxy: entries must be", "no_proxy:"),
    "cluster name with a trailing newline": (edit("  name: k4w ", '  name: "k4w\\n" '), "cluster.name: must be 1-15", "name: \"k4w"),
    "empty domain": (edit("domain: cluster.local", 'domain: ""'), "cluster.domain: must be a lower-case DNS name", "domain:"),
    "upper-case domain": (edit("domain: cluster.local", "domain: Cluster.Local"), "cluster.domain: must be a lower-case DNS name", "domain:"),
    "domain with a quote": (edit("domain: cluster.local", "domain: it's.local"), "cluster.domain: must be a lower-case DNS name", "domain:"),
    "domain with a space": (edit("domain: cluster.local", 'domain: "cluster.local --v=9"'), "cluster.domain: must be a lower-case DNS name", "domain:"),
    "service_cidr too small for the DNS IP": (edit("service_cidr: 10.96.0.0/12", "service_cidr: 10.96.0.0/29"), "the cluster DNS takes the 10th: use /28 or larger", "service_cidr:"),
    "pod_cidr with fewer /24s than nodes": (edit("pod_cidr: 10.244.0.0/16", "pod_cidr: 10.244.0.0/23"), "holds 2 /24 node subnets, fewer than the 3 nodes", "pod_cidr:"),
    "YAML alias": (edit("  management_switch: Default Switch", "  management_switch: &sw Default Switch\n  cluster_switch_copy: *sw"), "YAML anchors and aliases", "management_switch: &sw"),
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


BILLION_LAUGHS = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefghij", "bcdefghijk")
) + "nodes: *k\n"


@pytest.mark.parametrize("name,content,message", [
    ("alias bomb", BILLION_LAUGHS.encode(), "line 1: YAML anchors and aliases (&name, *name) are not allowed"),
    ("deep nesting", ("a: " + "[" * 5000 + "]" * 5000 + "\n").encode(), "nested more than 16 levels deep"),
    ("not UTF-8", b"nodes:\n  - name: m\xe4ster\n", "line 2: not UTF-8 text"),
    ("directory", None, "is a directory; --config takes a YAML file"),
])
def test_hostile_or_odd_files_are_refused_in_bounded_time_and_memory(name, content, message, rendered, tmp_path):
    bad = tmp_path / "cluster.yml"
    if content is None:
        bad.mkdir()
    else:
        bad.write_bytes(content)
    before = tree_digest(rendered)
    result = invoke("render", "--config", str(bad), "--out", str(rendered), memory_mb=512, timeout=30)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and message in output and "Traceback" not in output, output
    assert tree_digest(rendered) == before


def test_a_missing_default_config_says_to_run_from_the_repository_root(tmp_path):
    result = invoke("render", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 1
    assert "run invoke from the repository root" in result.stderr and "copy" not in result.stderr


def test_plan_says_once_how_many_artifacts_it_rendered(tmp_path):
    result = invoke("plan", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert len([line for line in result.stdout.splitlines() if re.search(r"(?i)render(ed)? \d+ artifacts", line)]) == 1


def test_doctor_names_the_given_config_in_the_proxy_fix(tmp_path):
    # Port 9 (discard) on loopback: nothing listens there, so the proxy check fails at once.
    config = tmp_path / "site.yml"
    config.write_text(GOOD.replace("  http: null ", "  http: http://127.0.0.1:9 ", 1))
    result = invoke("doctor", "--config", str(config), "--out", str(tmp_path / "out"))
    output = result.stdout + result.stderr
    assert f"check proxy.http in {config} and" in output, output
    assert "{label}" not in output and "in cluster.yml" not in output

"""Names YAML 1.1 would read as another type stay strings in every rendered YAML.

PyYAML is a YAML 1.1 resolver, like go-yaml v2 in kubeadm and the kubelet: a plain `n`, `on` or
`1e3` is a bool or a number to both. go-yaml v2 also reads `08` and `0o10` as numbers (strconv),
which PyYAML does not, so a quoted scalar is the only form safe for both.
"""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from k4w.infra import sources
from k4w.render import escape
from k4w.render.templates import environment as _environment
from k4w.validate import yaml_template_rules
from tests.helpers import ROOT, config_dict, invoke, write_config

# Node names (lower-case, RFC 1123) that some YAML 1.1 resolver types as bool, null, int or float.
TRICKY_NAMES = ["n", "y", "no", "on", "off", "yes", "true", "null", "1e3", "08", "0o10", "0x1f", "010", "1"]
# Scalars the filter meets elsewhere (proxy hosts, versions, paths...): the rest of YAML 1.1's types.
TRICKY_SCALARS = TRICKY_NAMES + [".inf", "-.inf", ".nan", "~", "Null", "NO", "1_000", "1:20", "2001-12-14", "=", "<<",
                                 "+1", "0b101", "", " lead", "a: b", "- x", "#c", "'q'", '"d"', "x\ny"]


@pytest.mark.parametrize("text", TRICKY_SCALARS)
def test_the_yaml_filter_quotes_every_string(text):
    dumped = escape.yaml(text)
    assert dumped.startswith('"'), dumped
    assert yaml.safe_load(dumped) == text


# go-yaml v2's resolver (kubeadm, kubelet, kube-proxy), from go-yaml/yaml@v2.4.0:resolve.go
# (commit 7649d4548cb53a614db133b2a8ac1f31859dda8c): its table of plain words (resolveMapList),
# strconv.ParseInt(plain, 0, 64) (0x, 0o, 0b prefixes and a leading-0 octal), yamlStyleFloat.
_GO_YAML_V2_WORDS = {*"y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF".split(),
                     "", "~", "null", "Null", "NULL", ".nan", ".NaN", ".NAN", *(f"{sign}.{inf}" for sign in ("", "+", "-")
                                                                            for inf in ("inf", "Inf", "INF")), "<<"}
_GO_INT = re.compile(r"[-+]?(0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|0[0-7_]*|[1-9][0-9_]*)")
_GO_YAML_V2_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


def go_yaml_v2_types(plain: str) -> bool:
    """Whether go-yaml v2 reads this plain (unquoted) scalar as something other than a string."""
    return plain in _GO_YAML_V2_WORDS or bool(_GO_INT.fullmatch(plain) or _GO_YAML_V2_FLOAT.fullmatch(plain))


def _plain_strings_go_yaml_v2_misreads(text: str) -> list[str]:
    """Plain scalars that PyYAML keeps as strings but go-yaml v2 reads as numbers or bools."""
    found, stack = [], list(yaml.compose_all(text))
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            stack += [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
        elif node is not None and node.style is None and node.tag == "tag:yaml.org,2002:str" and go_yaml_v2_types(node.value):
            found.append(f"line {node.start_mark.line + 1}: {node.value}")
    return found


BASELINE_NAME = "mastername"  # a name no resolver types, and that no template text contains


def _yaml_docs(out) -> dict[str, list]:
    """Every rendered YAML file of out, parsed by PyYAML (a YAML 1.1 resolver)."""
    paths = [*out.rglob("*.yaml"), *out.rglob("user-data"), *out.rglob("meta-data")]
    return {str(p.relative_to(out)): list(yaml.safe_load_all(p.read_text())) for p in paths}


def _render(tmp_path, name: str):
    cfg = write_config(tmp_path / f"{name}.yml", config_dict(**{"nodes.0.name": name}))
    out = tmp_path / f"out-{name}"
    result = invoke("render", "--config", str(cfg), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return _yaml_docs(_render(tmp_path_factory.mktemp("baseline"), BASELINE_NAME))


def _renamed(value, name: str):
    """The baseline's parsed YAML with the master's name replaced in every string: what the
    tricky render must parse to if every value it carries stayed a string."""
    if isinstance(value, dict):
        return {_renamed(k, name): _renamed(v, name) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, name) for v in value]
    return value.replace(BASELINE_NAME, name) if isinstance(value, str) else value


@pytest.mark.parametrize("name", TRICKY_NAMES)
def test_a_tricky_master_name_stays_a_string_in_every_rendered_yaml(name, baseline, tmp_path):
    out = _render(tmp_path, name)
    docs = _yaml_docs(out)
    kubeadm = docs["kubeadm/kubeadm-config.yaml"]
    assert [d["nodeRegistration"]["name"] for d in kubeadm if d and "nodeRegistration" in d] == [name]
    assert set(docs) == set(baseline)
    for path, parsed in docs.items():
        assert parsed == _renamed(baseline[path], name), path  # e.g. True, None, 1000.0 where the name belongs
        # 08 and 0o10 are strings to PyYAML but numbers to go-yaml v2: they must be quoted.
        assert _plain_strings_go_yaml_v2_misreads((out / path).read_text()) == [], path


@pytest.mark.parametrize("plain, typed", [("08", True), ("0o10", True), ("010", True), ("1e3", True), ("on", True),
                                          ("0x1f", True), ("-0b1", True), ("mastername", False), ("v1.11.0", False),
                                          ("10.244.0.0/16", False), ("1.2.3", False)])
def test_the_go_yaml_v2_resolver_model(plain, typed):
    assert go_yaml_v2_types(plain) is typed


def test_validate_refuses_an_unquoted_value_in_a_yaml_template(tmp_path):
    """The class rule: a planted `<< net.master.name >>` without the filter is named with its line."""
    templates = tmp_path / "templates"
    shutil.copytree(sources.REPO.templates, templates)
    kubeadm = templates / "kubeadm" / "api" / "v1beta4.yaml.j2"
    lines = kubeadm.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "net.master.name | yaml" in line)
    lines[at] = lines[at].replace("net.master.name | yaml", "net.master.name")
    kubeadm.write_text("".join(lines))
    checked, problems = yaml_template_rules.check(_environment(templates), templates)
    assert "templates/kubeadm/api/v1beta4.yaml.j2" in checked and "templates/http/ubuntu/autoinstall/user-data.j2" in checked
    assert problems == [f"templates/kubeadm/api/v1beta4.yaml.j2:{at + 1}: a value written into YAML without the quoting "
                        "filter (end it with '| yaml': a plain n, on, 08 or ~ is read as a bool, number or null)"]


def test_validate_reports_the_yaml_template_rule(tmp_path):
    result = invoke("validate", "--dry-run", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "every value in a YAML template goes through the quoting yaml filter" in result.stdout

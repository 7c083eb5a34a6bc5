"""`invoke schema`: the cluster.yml reference and JSON Schema come from the config model, the
committed copies are what it gives now, and every shipped config names the schema and passes it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from invoke import Config as InvokeConfig, Context
from invoke.exceptions import Exit

import tasks
from k4w.infra import sources
from k4w.model import config
from k4w.commands import schema
from k4w.model.config import Strict
from k4w.defaults import DEFAULTS
from k4w.infra.errors import ConfigError, K4wError
from tests.helpers import ROOT

# cluster.yml and every example config: what users copy, and what their editors open.
CONFIGS = [ROOT / "cluster.yml", *sorted((ROOT / "examples").rglob("*.yml"))]
MODELINE = re.compile(r"# yaml-language-server: \$schema=(\S+)")


@pytest.fixture(scope="module")
def published() -> dict:
    return json.loads((ROOT / schema.SCHEMA_FILE).read_text(encoding="utf-8"))


def run_task(root: Path, **options) -> None:
    """The real `schema` task of tasks.py, against a repository at ROOT."""
    with sources.using(sources.Sources(root=root)):
        tasks.schema(Context(InvokeConfig(overrides={"k4w": DEFAULTS})), **options)


# ---------------------------------------------------------------- generated, and up to date

def test_the_committed_reference_and_schema_are_what_the_config_model_gives():
    stale = schema.stale(ROOT)
    assert stale == [], f"{stale}: run `invoke schema` and commit the result"


def test_the_schema_declares_its_dialect_id_and_title(published):
    assert published["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert published["$id"] and published["title"] == "k4w cluster.yml"
    jsonschema.Draft202012Validator.check_schema(published)


def test_every_field_of_the_config_model_has_a_description():
    """Read from the model itself, not from the schema walk that the generation uses."""
    missing, todo, seen = [], [config.Config], set()
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        if not (model.__doc__ or "").strip():
            missing.append(model.__name__)
        for name, field in model.model_fields.items():
            if not (field.description or "").strip():
                missing.append(f"{model.__name__}.{name}")
            todo += list(schema._models_in(field.annotation))
    assert {m.__name__ for m in seen} == {"Config", "Cluster", "Proxy", "Network", "Host", "HyperV", "Libvirt",
                                          "Downloads", "Registry", "RegistryMirror", "Node"}
    assert missing == []


class _Mirror(Strict):
    """A nested block."""

    documented: int = 1
    """Has one."""
    undocumented: int = 2


class _Planted(Strict):
    """A model with a field a maintainer forgot to describe, nested in a list."""

    mirrors: list[_Mirror] = []
    """Described."""


def test_a_field_without_a_description_stops_the_generation():
    with pytest.raises(K4wError) as caught:
        schema.json_schema(_Planted)
    message = str(caught.value)
    assert "_Planted has field(s) without a description: mirrors[].undocumented;" in message, message
    assert "tests/commands/test_cluster_schema.py" in message and "invoke schema" in message


def test_check_refuses_a_stale_or_missing_file_naming_it(tmp_path, capsys):
    for path, text in schema.generated().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    run_task(tmp_path, check=True)
    assert "cluster-yml.md: up to date" in capsys.readouterr().out

    reference = tmp_path / schema.REFERENCE_FILE
    reference.write_text(reference.read_text().replace("Virtual CPUs.", "Virtual CPUs, at most 8."), encoding="utf-8")
    (tmp_path / schema.SCHEMA_FILE).unlink()
    with pytest.raises(Exit) as caught:
        run_task(tmp_path, check=True)
    assert caught.value.code == 1
    err = " ".join(capsys.readouterr().err.split())
    assert (f"{tmp_path / schema.SCHEMA_FILE}, {reference}: missing, or other than what the config model "
            "(k4w/model/config.py) gives now; run `invoke schema` and commit the result") in err, err


def test_dry_run_writes_nothing_then_the_task_writes_both_files(tmp_path, capsys):
    run_task(tmp_path, dry_run=True)
    out = capsys.readouterr().out
    assert f"would write {tmp_path / schema.SCHEMA_FILE} (" in out and f"would write {tmp_path / schema.REFERENCE_FILE} (" in out
    assert list(tmp_path.iterdir()) == []

    run_task(tmp_path)
    assert f"wrote {tmp_path / schema.REFERENCE_FILE}" in capsys.readouterr().out
    assert schema.stale(tmp_path) == []
    assert (tmp_path / schema.SCHEMA_FILE).read_text() == (ROOT / schema.SCHEMA_FILE).read_text()


def test_the_reference_has_a_section_per_block_and_a_row_per_field(published):
    page = (ROOT / schema.REFERENCE_FILE).read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", page, re.M)
    assert headings == ["Top level", "cluster", "proxy", "network", "host", "hyperv", "libvirt", "downloads", "registry",
                        "registry mirrors", "nodes"]
    node = published["$defs"]["Node"]["properties"]
    section = page.split("\n## nodes\n", 1)[1]
    assert [row.split(" | ")[0] for row in section.splitlines() if row.startswith("| `")] == [f"| `{key}`" for key in node]
    assert "| `backend` | string | `host-gw` | `host-gw`, `vxlan` |" in page
    assert "| `ip` | string (IPv4 address) | **required** |" in page
    assert "| `no_proxy` | list of strings | `[]` |" in page  # a default_factory's default, which pydantic leaves out
    # every in-page link names a heading (mkdocs anchors: the lower-case heading, spaces as '-')
    anchors = {h.lower().replace(" ", "-") for h in headings}
    assert set(re.findall(r"\]\(#([^)]+)\)", page)) <= anchors


# ---------------------------------------------------------------- the shipped configs

@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_config_names_the_schema_on_its_first_line_from_its_own_folder(path):
    """yaml-language-server resolves a relative $schema in the modeline from the folder of the YAML
    file (redhat-developer/yaml-language-server@1.23.0, 558f181f395c3544df513a54536acbfb28832d5d,
    src/languageservice/services/yamlSchemaService.ts getSchemaForResource: path.resolve(the
    document's folder, the modeline's path))."""
    first = path.read_text(encoding="utf-8").splitlines()[0]
    found = MODELINE.fullmatch(first)
    assert found, f"{path.name}: first line is {first!r}"
    assert (path.parent / found[1]).resolve() == ROOT / schema.SCHEMA_FILE


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_config_passes_the_schema_and_the_loader(path, published):
    text = path.read_text(encoding="utf-8")
    validator = jsonschema.Draft202012Validator(published, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert [e.message for e in validator.iter_errors(yaml.safe_load(text))] == []
    loaded = config.load(path)
    # The modeline is a comment: the file means the same without it.
    assert config.parse(text.split("\n", 1)[1], str(path)) == loaded


BASE = yaml.safe_load((ROOT / "cluster.yml").read_text(encoding="utf-8"))


def _set(data: dict, dotted: str, value) -> dict:
    data = copy.deepcopy(data)
    *parents, last = dotted.split(".")
    target = data
    for part in parents:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    if value is _DELETE:
        del target[int(last) if last.isdigit() else last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return data


_DELETE = object()
_MIRROR = {"endpoint": "https://mirror.corp.example", "plain_http": "yes"}
# (an edit of cluster.yml, the field both the schema and the loader must name)
BAD = {
    "unknown key": (("network.podcidr", "10.244.0.0/16"), "network.podcidr"),
    "backend not in the list": (("network.backend", "ipip"), "network.backend"),
    "role not in the list": (("nodes.1.role", "boss"), "nodes[1].role"),
    "cpus below its bound": (("nodes.0.cpus", 0), "nodes[0].cpus"),
    "memory as a string": (("nodes.2.memory", "4096"), "nodes[2].memory"),
    "ready_timeout below its bound": (("cluster.ready_timeout", 30), "cluster.ready_timeout"),
    "a node without an ip": (("nodes.0.ip", _DELETE), "nodes[0].ip"),
    "ip that is not an address": (("nodes.1.ip", "192.168.250.300"), "nodes[1].ip"),
    "switch type not in the list": (("hyperv.cluster_switch_type", "Private"), "hyperv.cluster_switch_type"),
    "no_proxy not a list": (("proxy.no_proxy", "corp.example"), "proxy.no_proxy"),
    "name not a string": (("cluster.name", 5), "cluster.name"),
    "plain_http not a boolean": (("registry.mirrors", {"docker.io": _MIRROR}), "registry.mirrors.docker.io.plain_http"),
    "no nodes key": (("nodes", _DELETE), "nodes"),
}


def _schema_fields(errors) -> set[str]:
    """The cluster.yml field each schema error is about, spelt as the loader spells it (nodes[0].ip)."""
    fields = set()
    for error in errors:
        path = list(error.absolute_path)
        if error.validator == "additionalProperties":
            extra = [[*path, key] for key in error.instance if key not in error.schema.get("properties", {})]
        elif error.validator == "required":
            extra = [[*path, key] for key in error.validator_value if key not in error.instance]
        else:
            extra = [path]
        fields |= {"".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(loc)) for loc in extra}
    return fields


@pytest.mark.parametrize("case", BAD)
def test_a_bad_config_is_refused_by_the_schema_and_the_loader_at_the_same_field(case, published):
    (dotted, value), field = BAD[case]
    data = _set(BASE, dotted, value)
    validator = jsonschema.Draft202012Validator(published, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert _schema_fields(validator.iter_errors(data)) == {field}
    with pytest.raises(ConfigError) as caught:
        config.parse(yaml.safe_dump(data, sort_keys=False))
    named = {re.match(r"(?:line \d+: )?(\S+?): ", problem)[1] for problem in caught.value.problems}
    assert named == {field}, caught.value.problems

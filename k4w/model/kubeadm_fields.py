"""The rendered kubeadm config uses only fields kubeadm accepts at the master's kubeadm API.

No kubeadm binary can run here (neither Debian nor PyPI packages one), so the config is held
against the field set of kubeadm's own types, read from upstream source at the version's tag and
vendored as facts/kubeadm-config-<version>.yml (each file names repository, commit and files).
Every key of every document must be a field of its type, with a value of that field's kind: a
v1alpha2-style map where v1beta4 wants a list of {name, value}, a timeout outside `timeouts`, or
a misspelt key is named with its path. A kubeadm API with no vendored table is itself a problem:
the check never passes by having nothing to compare with.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import yaml

FACTS = Path(__file__).resolve().parents[1] / "validate" / "facts"  # kubeadm's field tables sit with the other facts
# Go's time.ParseDuration syntax (metav1.Duration unmarshals with it): "4m0s", "900s", "1h30m".
DURATION = re.compile(r"[0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h)([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))*")
SCALARS = {"string": str, "bool": bool, "map": dict, "object": dict}


def table_path(api: str) -> Path:
    return FACTS / f"kubeadm-config-{api.rsplit('/', 1)[-1]}.yml"


@lru_cache(maxsize=None)
def field_table(api: str) -> dict | None:
    """The vendored field table of a kubeadm API (e.g. kubeadm.k8s.io/v1beta4); None when absent."""
    path = table_path(api)
    if not path.is_file():
        return None
    table = yaml.safe_load(path.read_text(encoding="utf-8"))
    return table if table.get("api") == api else None


def check(path: Path, api: str) -> list[str]:
    """Every problem of the kubeadm config at path for the master's kubeadm API (empty = accepted)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [f"kubeadm/{path.name}: not rendered"]
    return check_text(text, api, f"kubeadm/{path.name}")


def check_text(text: str, api: str, where: str) -> list[str]:
    """The same for a kubeadm config held in memory (a join configuration, which carries a token
    and is never written under OUT); `where` names it in each problem."""
    table = field_table(api)
    if table is None:
        return [f"{where}: no field table for {api} in {table_path(api).relative_to(FACTS.parent.parent.parent)}: "
                "read the types from kubeadm's source at the tag and vendor them before using that API"]
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        return [f"{where}: not valid YAML: {exc}"]
    if not docs:
        return [f"{where}: no documents"]
    problems: list[str] = []
    for number, doc in enumerate(docs, 1):
        if not isinstance(doc, dict):
            problems.append(f"{where} document {number}: not a mapping")
            continue
        version, kind = doc.get("apiVersion"), doc.get("kind")
        type_name = ((table["documents"].get(version) or {}).get(kind)) if isinstance(version, str) else None
        if type_name is None:
            known = ", ".join(f"{v} {k}" for v, kinds in table["documents"].items() for k in kinds)
            problems.append(f"{where} document {number}: {version} {kind} is not a document kubeadm reads with {api} "
                            f"(known: {known})")
            continue
        problems += _check_value(doc, type_name, table, f"{where} {kind}")
    return problems


def _check_value(value, kind, table: dict, at: str) -> list[str]:
    """kind is a field type of the table; [T] (a YAML list of one type) is a list of T."""
    if isinstance(kind, list):
        if not isinstance(value, list):
            hint = " (v1beta4 takes a list of {name, value}, not a map)" if kind == ["Arg"] and isinstance(value, dict) else ""
            return [f"{at}: must be a list{hint}, is {type(value).__name__}"]
        return [p for i, item in enumerate(value) for p in _check_value(item, kind[0], table, f"{at}[{i}]")]
    if kind == "int":
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{at}: must be an integer, is {value!r}"]
    if kind == "duration":
        ok = isinstance(value, str) and DURATION.fullmatch(value)
        return [] if ok else [f"{at}: must be a duration such as \"4m0s\" (Go time.ParseDuration), is {value!r}"]
    if kind in SCALARS:
        wanted = SCALARS[kind]
        ok = isinstance(value, wanted) and not (wanted is not bool and isinstance(value, bool))
        return [] if ok else [f"{at}: must be a {kind}, is {type(value).__name__} {value!r}"]
    fields = table["types"].get(kind)
    if fields is None:
        return [f"{at}: the field table names type {kind} but does not define it ({table_path(table['api']).name})"]
    if not isinstance(value, dict):
        return [f"{at}: must be a mapping ({kind}), is {type(value).__name__}"]
    problems = []
    for key, item in value.items():
        if key not in fields:
            subset = " (not in the vendored subset: read it from the source file and add it)" if kind in (table.get("partial") or []) else ""
            problems.append(f"{at}.{key}: {kind} has no field {key!r} in {table['api']}{subset}")
            continue
        problems += _check_value(item, fields[key], table, f"{at}.{key}")
    for key in (table.get("required") or {}).get(kind, []):
        if key not in value:
            problems.append(f"{at}: {kind} needs {key!r}")
    return problems

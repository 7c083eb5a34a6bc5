"""`invoke schema`: the cluster.yml reference page and its JSON Schema, both generated from the
config model (k4w.model.config.Config), so the page a user reads, the schema an editor checks cluster.yml
against and the loader cannot drift apart.

Each field's description is the docstring under it in k4w/model/config.py; a field without one stops the
generation, naming it. `invoke schema --check` (and tests/commands/test_cluster_schema.py) fails
when the committed files differ from what this module builds.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from ..infra import ui
from ..infra import sources
from ..infra import files as outfiles
from ..model.config import Config
from ..infra.errors import K4wError

SCHEMA_FILE = Path("docs/reference/cluster.schema.json")
REFERENCE_FILE = Path("docs/reference/cluster-yml.md")
# The dialect model_json_schema() writes (draft 2020-12: $defs, keywords beside $ref), which it
# names but does not write into the schema.
DIALECT = GenerateJsonSchema.schema_dialect
# k4w publishes the schema at no URL; a URN names it without pointing editors at a host.
SCHEMA_ID = "urn:k4w:cluster.yml"
TITLE = "k4w cluster.yml"
REGENERATE = "invoke schema"


@dataclass(frozen=True)
class Block:
    """One mapping of cluster.yml: its place (('registry', 'mirrors', '<host>')), its schema and how a
    reader reaches it from its parent ("Each value of registry.mirrors ...")."""

    path: tuple[str, ...]
    schema: dict
    where: str

    @property
    def heading(self) -> str:
        """The section's title: the keys on the way, without placeholders ('registry mirrors')."""
        return " ".join(p for p in self.path if not p.startswith("<") and p != "[]") or "Top level"

    @property
    def anchor(self) -> str:
        # Python-Markdown's toc slugify (what mkdocs links by) of a heading of words and spaces.
        return self.heading.lower().replace(" ", "-")


# ---------------------------------------------------------------- the JSON Schema

def json_schema(model: type[BaseModel] = Config) -> dict:
    """MODEL's JSON Schema as published: draft 2020-12, with $id and a title, one-line descriptions
    and no titles pydantic made up from field names. Refused when a field has no description."""
    raw = model.model_json_schema()
    _factory_defaults(model, raw)
    _tidy(raw, top=True)
    missing = missing_descriptions(raw)
    if missing:
        raise K4wError(f"{model.__name__} has field(s) without a description: {', '.join(missing)}; write a docstring "
                       f"under each field in {_source_of(model)}, then run `{REGENERATE}`")
    schema = {"$schema": DIALECT, "$id": SCHEMA_ID, "title": TITLE, "description": raw.pop("description", "")}
    schema.update(raw)
    return schema


def _factory_defaults(model: type[BaseModel], schema: dict) -> None:
    """Write the default of a field that has a default_factory (no_proxy: [], mirrors: {}) into the
    schema, as for every other default: pydantic leaves it out, and an editor shows what is omitted."""
    seen: set[type[BaseModel]] = set()

    def visit(cls: type[BaseModel], node: dict) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for name, field in cls.model_fields.items():
            prop = node["properties"][field.alias or name]
            if field.default_factory is not None and "default" not in prop:
                prop["default"] = TypeAdapter(field.annotation).dump_python(field.default_factory(), mode="json")
            for inner in _models_in(field.annotation):
                visit(inner, schema["$defs"][inner.__name__])

    visit(model, schema)


def _models_in(annotation) -> Iterator[type[BaseModel]]:
    """The pydantic models a field's type names, at any depth (list[Node], dict[str, RegistryMirror])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _source_of(model: type[BaseModel]) -> str:
    """The file that defines MODEL, relative to the repository when it is in it (k4w/model/config.py)."""
    path = Path(inspect.getsourcefile(model) or model.__module__).resolve()
    return path.relative_to(sources.REPO_ROOT).as_posix() if path.is_relative_to(sources.REPO_ROOT) else str(path)


def _tidy(node, top: bool = False) -> None:
    """One line per description (a docstring wraps at the code's width); property titles dropped:
    pydantic derives them from the key ("Node Cidr"), which tells an editor's user nothing more."""
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())
        for value in (node.get("properties") or {}).values():
            if isinstance(value, dict):
                value.pop("title", None)
        if top:
            node.pop("title", None)
        for value in node.values():
            _tidy(value)
    elif isinstance(node, list):
        for value in node:
            _tidy(value)


def missing_descriptions(schema: dict) -> list[str]:
    """Every field (as cluster.yml spells its place, e.g. nodes[].memory) and every block without a description."""
    return [_dotted(block.path + (key,)) for block in blocks(schema) for key, prop in _properties(block.schema)
            if not prop.get("description")] + [f"{_dotted(block.path) or 'the top level'} (the block itself)"
                                               for block in blocks(schema) if not block.schema.get("description")]


def _properties(schema: dict) -> Iterator[tuple[str, dict]]:
    yield from (schema.get("properties") or {}).items()


def _dotted(path: tuple[str, ...]) -> str:
    text = ""
    for part in path:
        text += part if part == "[]" else (f".{part}" if text else part)
    return text


def _resolve(schema: dict, node: dict) -> dict:
    ref = node.get("$ref")
    if not ref:
        return node
    if not ref.startswith("#/$defs/"):
        raise K4wError(f"unexpected $ref {ref} in the generated schema")
    return schema["$defs"][ref.removeprefix("#/$defs/")]


def _inner(schema: dict, prop: dict) -> tuple[str, dict] | None:
    """(how a nested block sits under PROP, the block's schema), or None for a plain value."""
    options = [o for o in prop.get("anyOf", [prop]) if o.get("type") != "null"]
    if len(options) != 1:
        return None
    option = options[0]
    if "$ref" in option:
        return "", _resolve(schema, option)
    if option.get("type") == "array" and "$ref" in (option.get("items") or {}):
        return "[]", _resolve(schema, option["items"])
    if option.get("type") == "object" and "$ref" in (option.get("additionalProperties") or {}):
        return "<key>", _resolve(schema, option["additionalProperties"])
    return None


def blocks(schema: dict) -> list[Block]:
    """The top level, then every nested block, each right after the field that holds it."""
    found: list[Block] = []

    def visit(block: Block) -> None:
        found.append(block)
        for key, prop in _properties(block.schema):
            inner = _inner(schema, prop)
            if inner is None:
                continue
            how, target = inner
            path = block.path + (key,)
            if how == "[]":
                visit(Block(path + ("[]",), target, f"Each item of the `{_dotted(path)}` list."))
            elif how == "<key>":
                visit(Block(path + ("<key>",), target, f"Each value of the `{_dotted(path)}` mapping, under its key."))
            else:
                visit(Block(path, target, ""))

    visit(Block((), schema, ""))
    return found


# ---------------------------------------------------------------- the reference page

_FORMATS = {"ipv4": "IPv4 address", "ipv4network": "IPv4 network, CIDR"}


def _type(schema: dict, prop: dict, by_schema: dict[int, Block]) -> str:
    options = prop.get("anyOf", [prop])
    words = [_one_type(schema, option, by_schema) for option in options if option.get("type") != "null"]
    if any(option.get("type") == "null" for option in options):
        words.append("null")
    return " or ".join(words)


def _one_type(schema: dict, option: dict, by_schema: dict[int, Block]) -> str:
    if "$ref" in option:
        block = by_schema[id(_resolve(schema, option))]
        return f"mapping ([{block.heading}](#{block.anchor}))"
    kind = option.get("type", "any")
    if kind == "array":
        items = option.get("items") or {}
        return f"list of {_one_type(schema, items, by_schema)}" if "$ref" in items else f"list of {items.get('type', 'any')}s"
    if kind == "object" and isinstance(option.get("additionalProperties"), dict):
        values = option["additionalProperties"]
        return f"mapping of string to {_one_type(schema, values, by_schema)}"
    if option.get("format") in _FORMATS:
        return f"string ({_FORMATS[option['format']]})"
    return kind


def _allowed(prop: dict) -> str:
    parts = []
    for option in prop.get("anyOf", [prop]):
        if "enum" in option:
            parts.append(", ".join(_code(v) for v in option["enum"]))
        if "const" in option:
            parts.append(_code(option["const"]))
        low, high = option.get("minimum"), option.get("maximum")
        if low is not None and high is not None:
            parts.append(f"{low} to {high}")
        elif low is not None:
            parts.append(f"at least {low}")
        elif high is not None:
            parts.append(f"at most {high}")
    return "; ".join(parts)


def _default(key: str, block: Block, prop: dict, inner) -> str:
    if key in block.schema.get("required", ()):
        return "**required**"
    if "default" not in prop:
        return ""
    if inner is not None and inner[0] == "":
        return "its keys' defaults"
    return _code(prop["default"])


def _code(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return f"`{text}`"


def _markdown_text(text: str) -> str:
    """Text for a table cell: code spans kept, and outside them the characters Markdown would read as
    HTML, a table border or a link (<name>, |, [user:password@]) escaped."""
    pieces = re.split(r"(`[^`]*`)", text)
    out = []
    for piece in pieces:
        if piece.startswith("`") and piece.endswith("`") and len(piece) > 1:
            out.append(piece)
        else:
            out.append(piece.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
                       .replace("[", "\\[").replace("]", "\\]"))
    return "".join(out)


def reference(schema: dict, model: type[BaseModel] = Config) -> str:
    """The cluster.yml reference page (Markdown) from SCHEMA, MODEL's: one section per block, one row per key."""
    source = _source_of(model)  # named from the model, so a move of the module shows up as a stale page
    found = blocks(schema)
    by_schema = {id(block.schema): block for block in found}
    lines = [
        "# cluster.yml reference",
        "",
        f"<!-- Generated by `{REGENERATE}` from the config model, {source}: edit the docstrings there, "
        "not this page. -->",
        "",
        _markdown_text(schema["description"]),
        "",
        "A key you leave out takes its default; only the keys marked **required** must be written. "
        "`invoke validate` (and every other task, when it loads the file) checks the whole file and names the line "
        "of each problem.",
        "",
        f"The same model is published as a JSON Schema, [cluster.schema.json](cluster.schema.json) (draft 2020-12). "
        "An editor with the YAML language server (the VS Code YAML extension, and others) completes and checks "
        "cluster.yml as you type, because the first line of cluster.yml and of each example names the schema:",
        "",
        "```yaml",
        f"# yaml-language-server: $schema={SCHEMA_FILE.as_posix()}",
        "```",
        "",
        "The path is taken from the folder of the YAML file that names it (examples/ write "
        f"`../{SCHEMA_FILE.as_posix()}`): a config you keep elsewhere names the schema by its own relative or "
        "absolute path. The schema checks each key on its own; the rules across keys above are checked when k4w "
        "loads the file.",
        "",
        f"After a change to {source}, `{REGENERATE}` writes this page and the schema again, and "
        f"`{REGENERATE} --check` fails while they are stale.",
    ]
    for block in found:
        lines += ["", f"## {block.heading}", ""]
        intro = " ".join(text for text in (block.where, _markdown_text(block.schema.get("description", ""))) if text)
        if block.path and intro:
            lines += [intro, ""]
        lines += ["| Key | Type | Default | Allowed values | Description |", "|---|---|---|---|---|"]
        for key, prop in _properties(block.schema):
            inner = _inner(schema, prop)
            cells = [f"`{key}`", _type(schema, prop, by_schema), _default(key, block, prop, inner), _allowed(prop),
                     _markdown_text(prop.get("description", ""))]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the files

def generated(model: type[BaseModel] = Config) -> dict[Path, str]:
    """{path relative to the repository: text} of every file `invoke schema` writes."""
    schema = json_schema(model)
    return {SCHEMA_FILE: json.dumps(schema, indent=2, ensure_ascii=False) + "\n", REFERENCE_FILE: reference(schema, model)}


def stale(root: Path, files: dict[Path, str] | None = None) -> list[Path]:
    """The generated files under ROOT that are missing or differ from what the model gives now."""
    files = generated() if files is None else files
    return [path for path, text in files.items()
            if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text]


def write(root: Path, *, dry_run: bool = False) -> list[Path]:
    """Write the generated files under ROOT; only those whose text changed. Returns what was (or,
    with DRY_RUN, would be) written."""
    files = generated()
    changed = stale(root, files)
    for path, text in files.items():
        target = root / path
        if path not in changed:
            ui.say(f"{target}: up to date")
        elif dry_run:
            ui.say(f"would write {target} ({len(text.encode('utf-8'))} bytes)")
        else:
            outfiles.write_file(target, text)
            ui.say(f"wrote {target}")
    return changed


def check(root: Path) -> None:
    """Refuse stale generated files, naming each and the command that brings it up to date."""
    files = generated()
    changed = stale(root, files)
    if changed:
        raise K4wError(f"{', '.join(str(root / p) for p in changed)}: missing, or other than what the config model "
                       f"({_source_of(Config)}) gives now; run `{REGENERATE}` and commit the result")
    for path in files:
        ui.say(f"{root / path}: up to date")

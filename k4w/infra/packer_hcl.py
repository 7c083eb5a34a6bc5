"""Packer's HCL2 templates from Python: the literals k4w writes into them, and how k4w reads them back.

Writing: `literal` is the `hcl` filter of the templates (templates/packer/*.pkr.hcl.j2); every value
a template interpolates goes through it, so a password or path holding "${" is never evaluated.

Reading: the rendered OUT/packer/<box>.pkr.hcl, parsed by python-hcl2, as the structure k4w's own
checks (doctor, the build gate, the validate rules, the e2e harness) inspect: builders,
provisioners and post-processors in order, each with its "type", plus the input variables. Strings
keep HCL's template syntax ("${var.x}", "$${"), which `resolve` evaluates for variables the way
Packer does.
"""

from __future__ import annotations

import re
from pathlib import Path

import hcl2

from k4w.infra.errors import K4wError

# Where render writes a box's template, relative to OUT, and the glob of all of them.
SUFFIX = ".pkr.hcl"
GLOB = f"packer/*{SUFFIX}"


def rel_path(box: str) -> str:
    return f"packer/{box}{SUFFIX}"


# HCL2's quoted-template escapes (hashicorp/hcl v2 hclsyntax spec.md, "Template Expressions"):
# \\ \" \n \r \t and \uNNNN for the other control characters; "${" and "%{" open an
# interpolation or a directive, so a literal one is written "$${" / "%%{".
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# A reference to a Packer input variable inside a value (k4w.derive.step_env._packer_ref): the one
# thing the hcl filter writes as an interpolation. NUL never occurs in a value k4w.model.config accepts.
VAR_REF = re.compile(r"\x00var\.([a-z_][a-z0-9_]*)\x00")


def var_ref(name: str) -> str:
    """The marker the hcl filter turns into ${var.<name>}; any other "${" in a value is literal."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"not a Packer variable name: {name!r}")
    return f"\x00var.{name}\x00"


def _hcl_string(text: str) -> str:
    return '"' + "".join(_split_refs(text)) + '"'


def _split_refs(text: str) -> list[str]:
    """text as HCL template pieces: literals escaped, variable markers as interpolations."""
    pieces, last = [], 0
    for match in VAR_REF.finditer(text):
        pieces.append(_hcl_literal(text[last:match.start()]))
        pieces.append("${var." + match.group(1) + "}")
        last = match.end()
    pieces.append(_hcl_literal(text[last:]))
    return pieces


def _hcl_literal(text: str) -> str:
    if "\x00" in text:
        raise ValueError("a NUL character has no place in a Packer template")
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out).replace("${", "$${").replace("%{", "%%{")


def literal(value) -> str:
    """A complete HCL2 literal: a quoted string (escaped, "${"/"%{" made literal), a number, a bool,
    a list (tuple) or a map (object) of those. The one filter every value in a Packer template goes
    through (k4w.validate.hcl_template_rules enforces it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _hcl_string(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{literal(str(key))} = {literal(item)}" for key, item in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    raise ValueError(f"no HCL literal for {type(value).__name__} {value!r}")


_PARSE_OPTIONS = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)


def parse(text: str, name: str = "template") -> dict:
    """A rendered template as {"required_plugins", "variables", "sensitive-variables", "builders",
    "provisioners", "post-processors"}; each builder carries "type" and "name" (its source labels).
    K4wError when it is not HCL2."""
    try:
        tree = hcl2.loads(text, serialization_options=_PARSE_OPTIONS)
    except Exception as exc:  # python-hcl2 raises lark's exceptions, whose classes vary by version
        raise K4wError(f"{name} is not an HCL2 template: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    plugins: dict = {}
    for packer in tree.get("packer", []):
        for block in packer.get("required_plugins", []):
            plugins.update(block)
    variables, sensitive = {}, []
    for block in tree.get("variable", []):
        for var_name, body in block.items():
            variables[var_name] = body.get("default")
            if body.get("sensitive") is True:
                sensitive.append(var_name)
    builders = []
    for block in tree.get("source", []):
        for kind, named in block.items():
            for source_name, body in named.items():
                builders.append({"type": kind, "name": source_name, **body})
    build = (tree.get("build") or [{}])[0]
    return {
        "required_plugins": plugins,
        "variables": variables,
        "sensitive-variables": sensitive,
        "description": build.get("description"),
        "builders": builders,
        "provisioners": _typed(build.get("provisioner", [])),
        "post-processors": _typed(build.get("post-processor", [])),
    }


def _typed(blocks: list[dict]) -> list[dict]:
    return [{"type": kind, **body} for block in blocks for kind, body in block.items()]


def load(path: Path) -> dict:
    return parse(Path(path).read_text(encoding="utf-8"), Path(path).name)


_ENV_DEFAULT = re.compile(r'^\$\{env\("([A-Za-z_][A-Za-z0-9_]*)"\)\}$')
_TEMPLATE_PART = re.compile(r"\$\$\{|%%\{|\$\{var\.([A-Za-z_][A-Za-z0-9_-]*)\}")


def variable_values(template: dict, environ: dict[str, str]) -> dict[str, str]:
    """The input variables as Packer gives them for a build with environ: a default of
    env("X") reads environ ("" when unset, as Packer's env function does)."""
    values = {}
    for name, default in (template.get("variables") or {}).items():
        match = _ENV_DEFAULT.match(str(default))
        values[name] = environ.get(match.group(1), "") if match else resolve(str(default), {})
    return values


def resolve(text: str, values: dict[str, str]) -> str:
    """A string of the parsed template as Packer evaluates it: ${var.x} replaced from values (a
    KeyError for an unknown one), "$${" and "%%{" back to their literal selves."""
    def part(match: re.Match) -> str:
        if match.group(1) is not None:
            return values[match.group(1)]
        return match.group(0)[1:]
    return _TEMPLATE_PART.sub(part, text)


def resolve_all(value, values: dict[str, str]):
    """resolve() on every string of a parsed template (or part of one)."""
    if isinstance(value, str):
        return resolve(value, values)
    if isinstance(value, list):
        return [resolve_all(item, values) for item in value]
    if isinstance(value, dict):
        return {key: resolve_all(item, values) for key, item in value.items()}
    return value

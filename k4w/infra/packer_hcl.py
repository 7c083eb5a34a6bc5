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

import posixpath
import re
from pathlib import Path

import hcl2

from k4w.infra.errors import K4wError

# Where render writes a box's template, relative to OUT, and the glob of all of them.
SUFFIX = ".pkr.hcl"
GLOB = f"packer/*{SUFFIX}"


# The Vagrant provider of the box each builder makes: hashicorp/packer-plugin-vagrant v1.0.3 (abbce8c4)
# post-processor/vagrant/post-processor.go builtins maps the builder ids MSOpenTech.hyperv to "hyperv" and
# transcend.qemu to "libvirt"; the hyperv plugin's builders (hyperv-iso, hyperv-vmcx) carry the first id,
# the qemu builder the second.
BOX_PROVIDERS = {"hyperv-iso": "hyperv", "hyperv-vmcx": "hyperv", "qemu": "libvirt"}


def box_provider(template: dict) -> str | None:
    """The Vagrant provider of the box a parsed template's (first) builder makes; None for another builder."""
    return next((BOX_PROVIDERS.get(str(b.get("type"))) for b in template.get("builders", [])), None)


def installs_with_qemu(template: dict) -> bool:
    """A qemu builder that installs from the ISO (a libvirt host's bake), not the CI's disk_image one."""
    return any(b.get("type") == "qemu" and not b.get("disk_image") for b in template.get("builders", []))


def rel_path(box: str) -> str:
    return f"packer/{box}{SUFFIX}"


# HCL2's quoted-template escapes (hashicorp/hcl v2 hclsyntax spec.md, "Template Expressions"):
# \\ \" \n \r \t and \uNNNN for the other control characters; "${" and "%{" open an
# interpolation or a directive, so a literal one is written "$${" / "%%{".
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# A reference to a Packer input variable inside a value (k4w.derive.step_env._packer_ref), or to the
# template's own folder (PATH_ROOT): the only things the hcl filter writes as interpolations. NUL
# never occurs in a value k4w.model.config accepts.
VAR_REF = re.compile(r"\x00var\.([a-z_][a-z0-9_]*)\x00")
_REF = re.compile(r"\x00(var\.[a-z_][a-z0-9_]*|path\.root)\x00")
# Where a rendered path starts when the file ships in --out: Packer's path.root, the folder of the
# template it reads (hashicorp/packer@v1.9.4 hcl2template/parser.go: Basedir is the template's
# filepath.Dir; types.packer_config.go EvalContext: path.root = Basedir). A relative path in a
# template is taken from the directory Packer runs in, not the template's (the shell provisioner
# stats `script` as given, provisioner/shell/provisioner.go Prepare), so a path that is to survive
# the folder being moved or handed on starts here, as chef/bento's templates do.
PATH_ROOT = "\x00path.root\x00"
PATH_ROOT_EXPR = "${path.root}"
# --out as the templates name it: they sit in OUT/packer/ (rel_path), so path.root/.. is OUT.
OUT_FROM_ROOT = PATH_ROOT + "/.."


def var_ref(name: str) -> str:
    """The marker the hcl filter turns into ${var.<name>}; any other "${" in a value is literal."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"not a Packer variable name: {name!r}")
    return f"\x00var.{name}\x00"


def referenced_variables(text: str) -> list[str]:
    """The input variables a value refers to (var_ref markers), in order."""
    return VAR_REF.findall(text)


def environment_locals(environment_vars: list[str]) -> dict:
    """A box's step environment as its template's two locals: "plain", the entries that name no
    input variable, and "secret", those that do (a proxy URL, a credential), with "referenced", the
    variables these name. Packer 1.9.4 does not carry a variable's sensitivity into a value built
    from it (no marks: hcl2template/parser.go filterVarsFromLogs masks the strings of a sensitive
    variable's or local's value), so the template declares the second local sensitive itself."""
    plain = [item for item in environment_vars if not referenced_variables(item)]
    secret = [item for item in environment_vars if referenced_variables(item)]
    referenced = sorted({name for item in secret for name in referenced_variables(item)})
    return {"plain": plain, "secret": secret, "referenced": referenced}


def _hcl_string(text: str) -> str:
    return '"' + "".join(_split_refs(text)) + '"'


def _split_refs(text: str) -> list[str]:
    """text as HCL template pieces: literals escaped, reference markers as interpolations."""
    pieces, last = [], 0
    for match in _REF.finditer(text):
        pieces.append(_hcl_literal(text[last:match.start()]))
        pieces.append("${" + match.group(1) + "}")
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


def parse(text: str, name: str = "template", root: Path | str | None = None) -> dict:
    """A rendered template as {"required_plugins", "variables", "sensitive-variables", "locals",
    "sensitive-locals", "builders", "provisioners", "post-processors"}; each builder carries "type"
    and "name" (its source labels). A value that is a reference to locals (local.x, or concat() of
    several) reads as the locals' value, as Packer gives it to the plugin. root: the folder the
    template sits in (Packer's path.root); given, a path that starts with ${path.root} reads as the
    path it names. K4wError when it is not HCL2."""
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
    local_values: dict = {}
    sensitive_locals = []
    for block in tree.get("locals", []):
        local_values.update(block)
    for block in tree.get("local", []):
        for local_name, body in block.items():
            local_values[local_name] = body.get("expression")
            if body.get("sensitive") is True:
                sensitive_locals.append(local_name)
    builders = []
    for block in tree.get("source", []):
        for kind, named in block.items():
            for source_name, body in named.items():
                builders.append({"type": kind, "name": source_name, **body})
    build = (tree.get("build") or [{}])[0]

    def evaluated(value):
        return _with_root(_with_locals(value, local_values, name), root)

    return {
        "required_plugins": plugins,
        "variables": variables,
        "sensitive-variables": sensitive,
        "locals": local_values,
        "sensitive-locals": sensitive_locals,
        "description": build.get("description"),
        "builders": evaluated(builders),
        "provisioners": evaluated(_typed(build.get("provisioner", []))),
        "post-processors": evaluated(_typed(build.get("post-processor", []))),
    }


# The expressions k4w's templates write that are not literals: one local, or the concatenation of
# several lists held in locals (concat is Packer's, hcl2template/functions.go at v1.9.4).
_LOCAL = re.compile(r"^\$\{local\.([A-Za-z_][A-Za-z0-9_-]*)\}$")
_CONCAT_LOCALS = re.compile(r"^\$\{concat\(\s*(local\.[A-Za-z_][A-Za-z0-9_-]*(?:\s*,\s*local\.[A-Za-z_][A-Za-z0-9_-]*)*)\s*\)\}$")


def _with_locals(value, local_values: dict, name: str):
    if isinstance(value, list):
        return [_with_locals(item, local_values, name) for item in value]
    if isinstance(value, dict):
        return {key: _with_locals(item, local_values, name) for key, item in value.items()}
    if not isinstance(value, str):
        return value
    match = _LOCAL.match(value)
    if match:
        return _local(match.group(1), local_values, name)
    match = _CONCAT_LOCALS.match(value)
    if match:
        joined: list = []
        for ref in match.group(1).split(","):
            joined.extend(_local(ref.strip().removeprefix("local."), local_values, name))
        return joined
    return value


def _local(local_name: str, local_values: dict, name: str):
    if local_name not in local_values:
        raise K4wError(f"{name}: local.{local_name} is used but not defined")
    return local_values[local_name]


def _with_root(value, root: Path | str | None):
    """${path.root}/x as the path it names under root (normalised, '/'-separated as Packer makes it)."""
    if root is None:
        return value
    if isinstance(value, list):
        return [_with_root(item, root) for item in value]
    if isinstance(value, dict):
        return {key: _with_root(item, root) for key, item in value.items()}
    if isinstance(value, str) and (chosen := _COALESCE.match(value)) and chosen.group(2).startswith(PATH_ROOT_EXPR):
        # coalesce(var.x, "${path.root}/..."): the fallback path as the path it names.
        fallback = _unquote(chosen.group(2))
        quoted = _with_root(fallback, root).replace("\\", "\\\\").replace('"', '\\"')
        return f'${{coalesce(var.{chosen.group(1)}, "{quoted}")}}'
    if isinstance(value, str) and value.startswith(PATH_ROOT_EXPR):
        rest = value[len(PATH_ROOT_EXPR):]
        base = str(root).replace("\\", "/")
        joined = posixpath.normpath(base + rest)
        # normpath drops a trailing "/", which means "the folder's contents" to the file provisioner.
        return joined + "/" if rest.endswith("/") and not joined.endswith("/") else joined
    return value


def _typed(blocks: list[dict]) -> list[dict]:
    return [{"type": kind, **body} for block in blocks for kind, body in block.items()]


def load(path: Path) -> dict:
    """The template at path; its ${path.root} is path's folder, as for `packer build path`."""
    path = Path(path)
    return parse(path.read_text(encoding="utf-8"), path.name, root=path.parent)


_ENV_DEFAULT = re.compile(r'^\$\{env\("([A-Za-z_][A-Za-z0-9_]*)"\)\}$')
_TEMPLATE_PART = re.compile(r"\$\$\{|%%\{|\$\{var\.([A-Za-z_][A-Za-z0-9_-]*)\}")


# Packer reads a variable's value from, last wins: its default, PKR_VAR_<name> in the environment,
# var files, then -var on the command line (hashicorp/packer@v1.9.4
# hcl2template/types.variables.go collectInputVariableValues and Variable.Value).
VAR_ENV_PREFIX = "PKR_VAR_"


def variable_values(template: dict, environ: dict[str, str], argv: dict[str, str] | None = None) -> dict[str, str]:
    """The input variables as Packer gives them for a build with environ and argv (the -var
    name=value pairs): a default of env("X") reads environ ("" when unset, as Packer's env
    function does); PKR_VAR_<name> overrides the default, -var overrides both."""
    values = {}
    for name, default in (template.get("variables") or {}).items():
        match = _ENV_DEFAULT.match(str(default))
        values[name] = environ.get(match.group(1), "") if match else resolve(str(default), {})
        if VAR_ENV_PREFIX + name in environ:
            values[name] = environ[VAR_ENV_PREFIX + name]
        if argv and name in argv:
            values[name] = argv[name]
    return values


# coalesce(var.x, "fallback"), as the templates choose a file a build may name instead of the default
# one: Packer's coalesce skips "" (hashicorp/packer@v1.9.4 hcl2template/functions.go uses
# hashicorp/go-cty-funcs collection.CoalesceFunc, which passes over null and "" strings).
_COALESCE = re.compile(r'^\$\{coalesce\(var\.([A-Za-z_][A-Za-z0-9_-]*),\s*"((?:[^"\\]|\\.)*)"\s*\)\}$')


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def resolve(text: str, values: dict[str, str]) -> str:
    """A string of the parsed template as Packer evaluates it: ${var.x} replaced from values (a
    KeyError for an unknown one), coalesce(var.x, "fallback") as the first non-empty, "$${" and
    "%%{" back to their literal selves."""
    chosen = _COALESCE.match(text)
    if chosen:
        return values[chosen.group(1)] or _unquote(chosen.group(2))

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

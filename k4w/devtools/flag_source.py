"""Generate a flag table (k4w/validate/facts/<binary>-<version>.yml) from upstream Go source at a tag.

The tables that k4w.validate.flag_rules holds every rendered flag against must come from the
pinned release's own source, not from memory. This reads the source files that register a
binary's flags, as the Go module proxy serves the tag (`go mod download module@tag`, the module
zip that sum.golang.org records by its h1: hash), and lists every flag name they register:

- a pflag/flag registration `<set>.<Type>Var[P](&field, NAME, ...)`, `<set>.<Type>[P](NAME, ...)`,
  `<set>.Var[P](value, NAME, ...)`, where NAME is a string literal or a constant of the files
  read (`options.NodeName` -> cmd/kubeadm/app/cmd/options/constant.go);
- for kubeadm, the flags of the option helpers a subcommand's file calls (`options.AddConfigFlag`);
- `<set>.MarkDeprecated(NAME, why)`: such a flag is left out and listed under `removed:` with the
  source's words, so that k4w never comes to depend on a flag a later patch drops (the
  conservative rule the 1.35 tables followed by hand).

Run by scripts/flag-table (its --help). The generated header names module, tag, zip hash and files;
tests/validate/test_flag_source.py checks the parser on source text and that each committed 1.37
table is what this module makes of the tag's source.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# pflag's and Go flag's registration methods: Bool, BoolVar, BoolP, BoolVarP, ..., Var, VarP.
# Only calls on a flag set count (fs, flagSet, mainfs, flannelFlags, ...), not time.Duration(x).
REGISTRATION = re.compile(r"\b(?P<set>\w*(?:fs|[Ff]lag[Ss]et|[Ff]lags))\.(?P<method>[A-Z]\w*)\(")
TYPE_METHODS = re.compile(r"(Bool|String|Int|Int8|Int16|Int32|Int64|Uint|Uint8|Uint16|Uint32|Uint64|Float32|Float64|"
                          r"Duration|IP|IPMask|IPNet|IPSlice|StringSlice|StringArray|StringToString|StringToInt|"
                          r"BoolSlice|IntSlice|Int32Slice|Int64Slice|UintSlice|Float64Slice|DurationSlice|Count|BytesHex)"
                          r"(Var)?(P)?$")
DEPRECATION = re.compile(r"\.MarkDeprecated\(")
# NAME = "v", NAME string = "v", NAME ProxyMode = "v" (a const block's line, or a one-line const).
CONSTANT = re.compile(r"^\s*(?:const\s+)?([A-Z][A-Za-z0-9_]*)\s*(?:[A-Z]?\w*\s*)?=\s*\"([^\"]+)\"", re.M)
HELPER_CALL = re.compile(r"\b(?P<pkg>[a-z]\w*)\.(?P<func>Add\w*Flags?)\(")
FUNC = re.compile(r"^func (?:\([^)]*\) )?(?P<name>\w+)\(", re.M)
STRING = re.compile(r'^"((?:[^"\\]|\\.)*)"$|^`([^`]*)`$')


@dataclass
class Flags:
    names: set[str] = field(default_factory=set)
    deprecated: dict[str, str] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)  # a NAME argument that is neither a literal nor a known constant


def _call_args(text: str, open_paren: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose '(' is at open_paren, and the index after ')'."""
    depth, start, args, i, quote = 0, open_paren + 1, [], open_paren, None
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"`'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i].strip())
                return [a for a in args if a], i + 1
        elif ch == "," and depth == 1:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    return args, len(text)


def _strip_comments(text: str) -> str:
    """Go source without // and /* */ comments (string literals kept), so a commented-out flag is not read."""
    out, i, quote = [], 0, None
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\" and quote == '"' and i + 1 < len(text):
                out.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            continue
        else:
            if ch in "\"`":
                quote = ch
            out.append(ch)
        i += 1
    return "".join(out)


def constants(texts: list[str]) -> dict[str, str]:
    """Go string constants NAME = "value" of the given files, by their bare name."""
    found: dict[str, str] = {}
    for text in texts:
        for name, value in CONSTANT.findall(text):
            found.setdefault(name, value)
    return found


def _name(arg: str, consts: dict[str, str]) -> str | None:
    literal = STRING.match(arg)
    if literal:
        return literal.group(1) if literal.group(1) is not None else literal.group(2)
    ident = arg.rsplit(".", 1)[-1]
    return consts.get(ident) if re.fullmatch(r"[\w.]+", arg) else None


def registered(text: str, consts: dict[str, str]) -> Flags:
    """The flags one Go source text registers and deprecates."""
    text = _strip_comments(text)
    flags = Flags()
    for match in REGISTRATION.finditer(text):
        method = match.group("method")
        typed = TYPE_METHODS.fullmatch(method)
        if method in ("Var", "VarP"):
            position = 1
        elif typed:
            position = 1 if typed.group(2) else 0
        else:
            continue
        args, _ = _call_args(text, match.end() - 1)
        if len(args) <= position:
            continue
        name = _name(args[position], consts)
        if name is None:
            # A wrapper handing on its own parameter (component-base's goFlagSet.Var(value, name, ...)) or a
            # computed name (flanneld's copyFlag): named in the table's source.unread, never guessed.
            flags.unresolved.append(f"{match.group('set')}.{method}({args[position]}, ...)")
        else:
            flags.names.add(name)
    for match in DEPRECATION.finditer(text):
        args, _ = _call_args(text, match.end() - 1)
        if len(args) >= 2:
            name = _name(args[0], consts)
            why = _name(args[1], {}) or args[1]
            if name:
                flags.deprecated[name] = " ".join(why.split())
    return flags


def helper_flags(text: str, consts: dict[str, str]) -> dict[str, set[str]]:
    """{function name: flags its body registers} for a file of flag helpers (kubeadm's options.AddConfigFlag)."""
    text = _strip_comments(text)
    starts = [(m.group("name"), m.start()) for m in FUNC.finditer(text)]
    bodies, calls = {}, {}
    for n, (name, start) in enumerate(starts):
        end = starts[n + 1][1] if n + 1 < len(starts) else len(text)
        bodies[name] = registered(text[start:end], consts).names
        calls[name] = helper_calls(text[start:end])
    # One level of helpers calling helpers (AddTTLFlag -> AddTTLFlagWithName(fs, options.TokenTTL)).
    return {name: names | {f for call in calls[name] for f in bodies.get(call, set())} for name, names in bodies.items()}


def helper_calls(text: str) -> list[str]:
    return [m.group("func") for m in HELPER_CALL.finditer(_strip_comments(text))]


# ---------------------------------------------------------------------------------------------
# What each table is made of. Paths are relative to the module's folder in the Go module cache.


@dataclass(frozen=True)
class Part:
    module: str
    version: str
    files: tuple[str, ...]
    section: str = "flags"  # flags | windows_only | linux_only


@dataclass(frozen=True)
class Spec:
    binary: str
    minor: str
    parts: tuple[Part, ...]
    # kubeadm only: subcommand -> files whose registrations (and called option helpers) make its flags.
    subcommands: dict | None = None
    helpers: tuple[Part, ...] = ()
    constant_files: tuple[Part, ...] = ()
    extra: dict = field(default_factory=dict)  # flags added outside the files' registrations, each with its source
    note: str = ""
    # kube-proxy only: the file whose validateProxyMode<OS> functions list the modes each OS accepts, and the
    # file of the ProxyMode constants.
    modes: tuple[Part, ...] = ()


K8S, K8S_TAG, STAGING_TAG = "k8s.io/kubernetes", "v1.37.2", "v0.37.2"

SPECS = {
    "kubelet-1.37": Spec(
        "kubelet", "1.37",
        (Part(K8S, K8S_TAG, ("cmd/kubelet/app/options/options.go",)),
         Part(K8S, K8S_TAG, ("cmd/kubelet/app/options/osflags_windows.go",), "windows_only"),
         Part("k8s.io/component-base", STAGING_TAG, ("logs/api/v1/options.go",))),
        note="cmd/kubelet/app/server.go at the tag builds the kubelet's flag set from KubeletFlags.AddFlags, "
             "AddKubeletConfigFlags (options.go; every flag it adds but v, vmodule, log-flush-frequency, provider-id and "
             "fail-cgroupv1 is marked \"should be set via the config file\", still accepted), addOSFlags "
             "(osflags_windows.go) and logsapi.AddFlags (component-base logs/api/v1/options.go). AddGlobalFlags "
             "(globalflags*.go: --version, cadvisor's --housekeeping-interval, copied from global flag sets by name) is "
             "left out: k4w passes none of them."),
    "kube-proxy-1.37": Spec(
        "kube-proxy", "1.37",
        (Part(K8S, K8S_TAG, ("cmd/kube-proxy/app/options.go",)),
         Part(K8S, K8S_TAG, ("cmd/kube-proxy/app/init_windows.go",), "windows_only"),
         Part("k8s.io/component-base", STAGING_TAG, ("logs/api/v1/options.go",))),
        modes=(Part(K8S, K8S_TAG, ("pkg/proxy/apis/config/validation/validation.go", "pkg/proxy/apis/config/types.go")),),
        note="Options.AddFlags (options.go) registers the flags, addOSFlags (init_windows.go) the Windows ones, "
             "logsapi.AddFlags (component-base logs/api/v1/options.go) the logging ones. modes: the values "
             "validateProxyModeLinux and validateProxyModeWindows (pkg/proxy/apis/config/validation/validation.go) "
             "accept without a feature gate (ipvs needs the KubeProxyIPVS gate in 1.37, so it is not listed)."),
    "kubeadm-1.37": Spec(
        "kubeadm", "1.37", (),
        subcommands={"init": ("cmd/kubeadm/app/cmd/init.go",), "join": ("cmd/kubeadm/app/cmd/join.go",)},
        helpers=(Part(K8S, K8S_TAG, ("cmd/kubeadm/app/cmd/options/generic.go", "cmd/kubeadm/app/cmd/options/token.go",
                                     "cmd/kubeadm/app/cmd/util/cmdutil.go")),),
        constant_files=(Part(K8S, K8S_TAG, ("cmd/kubeadm/app/cmd/options/constant.go",)),),
        note="Each subcommand's flags: what its file registers, plus the flags of the option helpers it calls "
             "(options.AddConfigFlag, bto.AddTokenFlag, cmdutil.AddCRISocketFlag, ...; generic.go, token.go, cmdutil.go), names resolved through "
             "options/constant.go."),
    "flanneld-0.28.10": Spec(
        "flanneld", "", (Part("github.com/flannel-io/flannel", "v0.28.10", ("main.go",)),),
        extra={"h": "Go's flag package answers -h and -help itself (flag.ErrHelp)",
               "help": "Go's flag package answers -h and -help itself (flag.ErrHelp)"},
        note="init() in main.go registers flannelFlags and copies klog's flags into it by name (copyFlag(\"v\"), ...)."),
}


def module_dir(module: str, version: str) -> tuple[Path, str]:
    """The module's folder in the Go module cache (downloaded through the proxy if missing) and its h1: hash."""
    env_go = ["go", "mod", "download", "-json", f"{module}@{version}"]
    out = subprocess.run(env_go, capture_output=True, text=True, check=False,
                         env={**__import__("os").environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"})
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or not info.get("Dir"):
        raise SystemExit(f"flag-table: go mod download {module}@{version} failed: {info.get('Error') or out.stderr.strip()}")
    return Path(info["Dir"]), info.get("Sum", "")


def proxy_modes(validation: str, types: str) -> dict[str, list[str]]:
    """{linux|windows: modes} from kube-proxy's validateProxyMode<OS>: the sets.New[string](...) each starts from."""
    validation = _strip_comments(validation)
    consts = constants([types])
    modes = {}
    for os_name in ("Linux", "Windows"):
        body = re.search(r"func validateProxyMode" + os_name + r"\(.*?\n}", validation, re.S)
        start = body.group(0).index("sets.New[string](") if body else -1
        if start < 0:
            raise SystemExit(f"flag-table: validation.go has no validateProxyMode{os_name} with sets.New[string]")
        args, _ = _call_args(body.group(0), start + len("sets.New[string]"))
        modes[os_name.lower()] = sorted(consts[re.search(r"\.(\w+)\)", a).group(1)] for a in args)
    return modes


def _copied_klog_flags(text: str) -> set[str]:
    """flanneld's main.go copies klog flags into its own set: copyFlag("v")."""
    return set(re.findall(r'copyFlag\("([\w-]+)"\)', _strip_comments(text)))


def generate(name: str, read=None) -> dict:
    """The table for SPECS[name]; read(module, version, path) -> text (default: the Go module cache)."""
    spec = SPECS[name]
    sources: dict[tuple[str, str], str] = {}

    def text_of(part: Part, path: str) -> str:
        if read is not None:
            return read(part.module, part.version, path)
        folder, _ = module_dir(part.module, part.version)
        return (folder / path).read_text(encoding="utf-8")

    all_parts = spec.parts + spec.helpers + spec.constant_files + spec.modes
    consts = constants([text_of(p, f) for p in all_parts for f in p.files])
    table: dict = {"binary": spec.binary}
    if spec.binary == "flanneld":
        table["version"] = name.split("-", 1)[1]
    else:
        table["minor"] = spec.minor
    modules = []
    for part in all_parts:
        entry = (part.module, part.version)
        if entry not in sources:
            sources[entry] = "" if read is not None else module_dir(*entry)[1]
            modules.append({"module": part.module, "tag": part.version, "module_zip": sources[entry] or None,
                            "files": []})
        next(m for m in modules if (m["module"], m["tag"]) == entry)["files"] += list(part.files)
    kubeadm = spec.subcommands is not None
    unread: list[str] = []
    table["source"] = {"method": "generated by scripts/flag-table " + name + " (k4w/devtools/flag_source.py) from the "
                                 "tag's source as the Go module proxy serves it; " + spec.note,
                       "modules": modules}
    if kubeadm:
        k8s_part = spec.helpers[0]
        helpers: dict[str, set[str]] = {}
        for f in k8s_part.files:
            helpers.update(helper_flags(text_of(k8s_part, f), consts))
        table["subcommands"] = {}
        removed: dict[str, str] = {}
        for sub, files in spec.subcommands.items():
            names: set[str] = set()
            for f in files:
                text = text_of(Part(K8S, K8S_TAG, (f,)), f)
                found = registered(text, consts)
                unread += [f"{f}: {u}" for u in found.unresolved]
                names |= found.names
                for call in helper_calls(text):
                    names |= helpers.get(call, set())
                removed.update(found.deprecated)
            table["subcommands"][sub] = sorted(names - set(removed))
        if unread:
            table["source"]["unread"] = unread
        if removed:
            table["removed"] = dict(sorted(removed.items()))
        return table
    sections: dict[str, set[str]] = {}
    removed = {}
    for part in spec.parts:
        for f in part.files:
            text = text_of(part, f)
            found = registered(text, consts)
            unread += [f"{f}: {u}" for u in found.unresolved]
            names = found.names | (_copied_klog_flags(text) if spec.binary == "flanneld" else set())
            sections.setdefault(part.section, set()).update(names)
            removed.update(found.deprecated)
    sections["flags"] = sections.get("flags", set()) | set(spec.extra)
    if unread:
        table["source"]["unread"] = unread
    if spec.extra:
        table["source"]["added"] = dict(sorted(spec.extra.items()))
    if removed:
        table["removed"] = dict(sorted(removed.items()))
    for section in ("flags", "windows_only", "linux_only"):
        if section in sections:
            table[section] = sorted(sections[section] - set(removed) - (sections["flags"] if section != "flags" else set()))
    if spec.modes:
        part = spec.modes[0]
        table["modes"] = proxy_modes(text_of(part, part.files[0]), text_of(part, part.files[1]))
    return table


HEADER = """# Flags {binary} {version} accepts, GENERATED from upstream source at the tag: do not edit by hand.
# Method (source.method): every flag registration in the files named below, read from the module zip the Go
# module proxy serves for that tag (its h1: hash, recorded by sum.golang.org, is source.modules[].module_zip);
# a flag the source marks deprecated is moved to removed: with the source's words, so k4w never comes to
# depend on it. k4w.validate.flag_rules refuses any rendered flag missing here. Regenerate with
# `scripts/flag-table {name}`; tests/validate/test_flag_source.py checks this file equals what the tag makes.
"""


def render(name: str, table: dict) -> str:
    version = table.get("version") or table.get("minor")
    header = HEADER.format(binary=table["binary"], version=version, name=name)
    return header + yaml.safe_dump(table, sort_keys=False, width=110, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/flag-table", description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=sorted(SPECS), help="the table to generate")
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed table differs")
    args = parser.parse_args(argv)
    path = Path(__file__).resolve().parents[1] / "validate" / "facts" / f"{args.table}.yml"
    text = render(args.table, generate(args.table))
    if args.check:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        print(f"flag-table: {path.name} {'matches' if same else 'DIFFERS from'} the source at the tag")
        return 0 if same else 1
    path.write_text(text, encoding="utf-8")
    print(f"flag-table: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

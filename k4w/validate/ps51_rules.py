"""Rules over the PowerShell syntax tree for what Windows PowerShell 5.1 does differently from 7.

Every guest script runs under Windows PowerShell 5.1 (Packer's powershell provisioner, `vagrant
winrm`, the services' launchers), and nothing here can run 5.1. A script that is correct in
PowerShell 7 can be wrong there without a parse error, so each known difference is a rule over
the tree-sitter tree. Each finding is "line:col: [rule] message" (callers prefix the file name).

Sources of the differences (one line each, the rule names them):
- exitcode-without-handle: Start-Process -PassThru's Process has a null ExitCode unless its
  Handle was read before the process exits (PowerShell/PowerShell#5421, #20716; fixed in 7.4.1).
- web-request-basic-parsing: 5.1's Invoke-WebRequest/Invoke-RestMethod parse HTML with Internet
  Explorer's engine unless -UseBasicParsing; Server Core has no IE, so they fail (about_Invoke-
  WebRequest 5.1: "-UseBasicParsing ... Required when Internet Explorer is not installed").
  `curl` and `wget` are aliases of Invoke-WebRequest in 5.1 only (removed in 6.0).
- lastexitcode-after-cmdlet: $LASTEXITCODE is set only by native programs and scripts; read
  after a cmdlet it is a stale value (about_Automatic_Variables).
- pipeline-chain: `&&` and `||` exist from 7.0 on (about_Pipeline_Chain_Operators); 5.1 refuses
  the whole script. Ternary `?:` and `??` are parse errors for the grammar already.
- join-path-children: Join-Path takes one child in 5.1; -AdditionalChildPath is 6.0+.
- convertto-json-depth: ConvertTo-Json's default -Depth 2 flattens deeper objects to their type
  name, silently in 5.1 (7.1 at least warns).
- file-encoding: Out-File and `>`/`>>` write UTF-16LE, Set-Content/Add-Content the ANSI code page,
  and `-Encoding UTF8` a byte-order mark, in 5.1 (7 writes BOM-less UTF-8; utf8NoBOM is 6.0+).
  Files here are read by kubelet, flanneld, containerd, kubeadm (Go: a BOM or UTF-16 breaks
  their JSON/YAML), so every write names an encoding 5.1 writes without a BOM; only a log that
  is appended to (-Append, read by people) may be UTF-8 with its one BOM.
- ps6-parameter / ps6-variable: parameters and automatic variables that 5.1 does not have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .powershell_rules import parse

# Verb-Noun: the shape of a cmdlet (or an advanced function) name.
_CMDLET = re.compile(r"^[A-Za-z]+-[A-Za-z0-9]+$")
_WEB_CMDLETS = {"invoke-webrequest", "iwr", "invoke-restmethod", "irm"}
_ALIASES_OF_IWR_IN_51 = {"curl", "wget"}
_WRITERS = {"out-file", "set-content", "add-content"}
# Encodings 5.1 writes with no BOM and no UTF-16 (about_Character_Encoding, "Windows PowerShell 5.1").
_SAFE_ENCODINGS = {"ascii", "oem", "default"}
# Only in PowerShell 6.0+ (each cmdlet's 7.x help page lists the parameter; its 5.1 page does not).
_PS6_PARAMETERS = {
    "convertfrom-json": {"-ashashtable", "-depth", "-noenumerate"},
    "foreach-object": {"-parallel", "-throttlelimit", "-asjob"},
    "invoke-webrequest": {"-skipcertificatecheck", "-skiphttperrorcheck", "-authentication", "-token",
                          "-resume", "-statuscodevariable", "-sslprotocol", "-retryintervalsec", "-maximumretrycount"},
    "invoke-restmethod": {"-skipcertificatecheck", "-skiphttperrorcheck", "-authentication", "-token",
                          "-resume", "-statuscodevariable", "-sslprotocol", "-retryintervalsec", "-maximumretrycount"},
    "get-content": {"-asbytestream"},
    "set-content": {"-asbytestream"},
    "add-content": {"-asbytestream"},
    "split-path": {"-leafbase", "-extension"},
    "join-path": {"-additionalchildpath"},
    "select-string": {"-raw", "-noemphasis"},
    "test-connection": {"-targetname", "-tcpport"},
    "get-date": {"-asutc", "-unixtimeseconds"},
    "start-process": {"-environment"},
}
_PS6_VARIABLES = {"$iswindows", "$islinux", "$ismacos", "$iscoreclr"}

_WRAPPERS = {"logical_expression", "bitwise_expression", "comparison_expression", "additive_expression",
             "multiplicative_expression", "format_expression", "range_expression", "array_literal_expression",
             "unary_expression", "pipeline", "pipeline_chain"}


@dataclass(frozen=True)
class Finding:
    line: int
    col: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.line}:{self.col}: [{self.rule}] {self.message}"


def _walk(node):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _text(node) -> str:
    return node.text.decode("utf-8", "replace")


def _at(node, rule: str, message: str) -> Finding:
    line, col = node.start_point
    return Finding(line + 1, col + 1, rule, message)


def _command_name(command) -> str | None:
    """The literal name a command calls (lower case), None for `& $x` / `& (expr)`."""
    for child in command.children:
        if child.type == "command_name":
            return _text(child).lower()
    return None


def _elements(command) -> list:
    for child in command.children:
        if child.type == "command_elements":
            return [c for c in child.children if c.type != "command_argument_sep"]
    return []


def _parameters(command) -> list[str]:
    return [_text(e).lower().rstrip(":") for e in _elements(command) if e.type == "command_parameter"]


def _parameter_value(command, name: str) -> str | None:
    elements = _elements(command)
    for i, element in enumerate(elements):
        if element.type == "command_parameter":
            text = _text(element)
            if text.lower().startswith(name + ":"):
                return text.split(":", 1)[1]
            if text.lower() == name and i + 1 < len(elements):
                return _text(elements[i + 1]).strip("'\"")
    return None


def _positional_count(command) -> int:
    """Arguments not bound by name (a switch parameter takes none; a named one its next element)."""
    elements = _elements(command)
    count, i = 0, 0
    while i < len(elements):
        element = elements[i]
        if element.type == "command_parameter":
            takes_value = not _text(element).endswith(":") and i + 1 < len(elements) \
                and elements[i + 1].type not in ("command_parameter", "redirection")
            i += 2 if takes_value else 1
            continue
        if element.type not in ("redirection", "redirections"):
            count += 1
        i += 1
    return count


def _is_native_or_script(command, functions: set[str]) -> bool:
    """True when running this command may set $LASTEXITCODE: a program, a script, `& ...`, or a
    function of the project's own (they wrap programs)."""
    name = _command_name(command)
    if name is None:
        return True   # `& $exe` / `& (Join-Path ...)`: a program or a script
    if name in functions:
        return True
    return not _CMDLET.match(name)


# ------------------------------------------------------------------ the rules


def _exitcode_without_handle(root, functions: set[str]) -> list[Finding]:
    passthru: dict[str, int] = {}
    for node in _walk(root):
        if node.type != "assignment_expression":
            continue
        target = _text(node.children[0]).strip().lower()
        for command in (n for n in _walk(node) if n.type == "command"):
            if _command_name(command) == "start-process" and "-passthru" in _parameters(command):
                passthru[target] = node.end_byte
    findings = []
    if not passthru:
        return findings
    handle_reads: dict[str, list[int]] = {}
    exit_reads = []
    for node in _walk(root):
        if node.type != "member_access":
            continue
        owner = _text(node.children[0]).strip().lower()
        member = _text(node.children[-1]).lower()
        if owner in passthru and member == "handle":
            handle_reads.setdefault(owner, []).append(node.start_byte)
        elif owner in passthru and member == "exitcode":
            exit_reads.append((owner, node))
    for owner, node in exit_reads:
        if not any(passthru[owner] <= at < node.start_byte for at in handle_reads.get(owner, [])):
            findings.append(_at(node, "exitcode-without-handle",
                                f"{_text(node)} of a Start-Process -PassThru process is $null on Windows PowerShell 5.1 "
                                f"unless {owner}.Handle was read right after the start (PowerShell#5421)"))
    return findings


def _web_request_basic_parsing(root, functions: set[str]) -> list[Finding]:
    findings = []
    for command in (n for n in _walk(root) if n.type == "command"):
        name = _command_name(command)
        if name in _WEB_CMDLETS and "-usebasicparsing" not in _parameters(command):
            findings.append(_at(command, "web-request-basic-parsing",
                                f"{name} without -UseBasicParsing needs Internet Explorer's engine on Windows PowerShell 5.1 "
                                "(absent on Server Core)"))
        elif name in _ALIASES_OF_IWR_IN_51:
            findings.append(_at(command, "web-request-basic-parsing",
                                f"'{name}' is an alias of Invoke-WebRequest in Windows PowerShell 5.1, not the program; "
                                f"write {name}.exe or Invoke-WebRequest -UseBasicParsing"))
    return findings


def _statement_of(node):
    """The statement (a child of a statement_list) that holds node."""
    while node.parent is not None and node.parent.type != "statement_list":
        node = node.parent
    return node


def _last_commands(statement) -> list:
    return [n for n in _walk(statement) if n.type == "command"]


def _lastexitcode_after_cmdlet(root, functions: set[str]) -> list[Finding]:
    findings = []
    for node in _walk(root):
        if node.type != "variable" or _text(node).lower().replace("global:", "") != "$lastexitcode":
            continue
        if node.parent is not None and _is_assigned(node):
            continue
        statement = _statement_of(node)
        # Commands that run before the read: earlier in the same statement, else the nearest
        # earlier statement (in this block, then the blocks around it) that runs one.
        commands = [c for c in _last_commands(statement) if c.end_byte <= node.start_byte]
        cursor = statement
        while not commands and cursor is not None:
            sibling = cursor.prev_named_sibling
            while sibling is not None and not commands:
                commands = _last_commands(sibling)
                sibling = sibling.prev_named_sibling
            if not commands:
                cursor = _statement_of(cursor.parent) if cursor.parent is not None and cursor.parent.parent is not None else None
        if commands and not any(_is_native_or_script(c, functions) for c in commands):
            ran = ", ".join(sorted({_command_name(c) or "?" for c in commands}))
            findings.append(_at(node, "lastexitcode-after-cmdlet",
                                f"$LASTEXITCODE read after only cmdlets ({ran}): cmdlets never set it, so this reads the "
                                "exit code of an earlier program; test $? or the cmdlet's result"))
    return findings


def _is_assigned(variable) -> bool:
    node = variable
    while node.parent is not None and node.parent.type in _WRAPPERS:
        node = node.parent
    return node.parent is not None and node.parent.type == "left_assignment_expression"


def _pipeline_chain(root, functions: set[str]) -> list[Finding]:
    return [_at(n, "pipeline-chain", f"'{_text(n.children[0])}' is PowerShell 7 syntax: Windows PowerShell 5.1 refuses "
                                     "the whole script; use `if ($LASTEXITCODE -eq 0) { ... }`")
            for n in _walk(root) if n.type == "pipeline_chain_tail"]


def _join_path_children(root, functions: set[str]) -> list[Finding]:
    findings = []
    for command in (n for n in _walk(root) if n.type == "command"):
        if _command_name(command) == "join-path" and _positional_count(command) > 2:
            findings.append(_at(command, "join-path-children",
                                "Join-Path takes one child path in Windows PowerShell 5.1 (-AdditionalChildPath is 6.0+); "
                                "nest the calls or write the joined relative path"))
    return findings


def _convertto_json_depth(root, functions: set[str]) -> list[Finding]:
    return [_at(c, "convertto-json-depth",
                "ConvertTo-Json without -Depth cuts objects deeper than 2 levels to a type name, silently in 5.1")
            for c in _walk(root) if c.type == "command" and _command_name(c) == "convertto-json" and "-depth" not in _parameters(c)]


def _file_encoding(root, functions: set[str]) -> list[Finding]:
    findings = []
    for node in _walk(root):
        if node.type == "command" and _command_name(node) in _WRITERS and "-asbytestream" not in _parameters(node):
            name = _command_name(node)
            encoding = _parameter_value(node, "-encoding")
            if encoding is None:
                default = "UTF-16LE" if name == "out-file" else "the ANSI code page"
                findings.append(_at(node, "file-encoding", f"{name} without -Encoding writes {default} in Windows PowerShell 5.1; "
                                                           "name an encoding (ASCII) or write with [IO.File]::WriteAllText and UTF8Encoding($false)"))
            elif encoding.lower() == "utf8" and "-append" in _parameters(node):
                pass   # a log appended to: read by people, the BOM once at its top is harmless
            elif encoding.lower() not in _SAFE_ENCODINGS:
                findings.append(_at(node, "file-encoding", f"{name} -Encoding {encoding} writes a byte-order mark (or UTF-16) in Windows "
                                                           "PowerShell 5.1, or does not exist there (utf8NoBOM); Go's JSON/YAML readers reject it"))
        elif node.type == "redirection":
            operator = _text(node.children[0]).strip()
            target = _text(node.children[-1]).strip().lower() if len(node.children) > 1 else ""
            if operator.endswith(">") and not operator.endswith("&1") and target != "$null":
                findings.append(_at(node, "file-encoding", f"'{operator}' to a file writes UTF-16LE in Windows PowerShell 5.1; "
                                                           "pipe to Set-Content -Encoding ASCII, or to $null"))
    return findings


def _ps6_parameter(root, functions: set[str]) -> list[Finding]:
    findings = []
    for command in (n for n in _walk(root) if n.type == "command"):
        name = _command_name(command)
        newer = _PS6_PARAMETERS.get(name or "", set())
        for parameter in _parameters(command):
            if parameter in newer:
                findings.append(_at(command, "ps6-parameter", f"{name} {parameter} does not exist in Windows PowerShell 5.1"))
            if name in _WRITERS | {"get-content"} and parameter == "-encoding" and (_parameter_value(command, "-encoding") or "").lower().startswith("utf8n"):
                findings.append(_at(command, "ps6-parameter", f"{name} -Encoding utf8NoBOM does not exist in Windows PowerShell 5.1"))
    return findings


def _ps6_variable(root, functions: set[str]) -> list[Finding]:
    return [_at(n, "ps6-variable", f"{_text(n)} is PowerShell 6+ only; under Set-StrictMode 5.1 throws on it")
            for n in _walk(root) if n.type == "variable" and _text(n).lower() in _PS6_VARIABLES]


RULES = {
    "exitcode-without-handle": _exitcode_without_handle,
    "web-request-basic-parsing": _web_request_basic_parsing,
    "lastexitcode-after-cmdlet": _lastexitcode_after_cmdlet,
    "pipeline-chain": _pipeline_chain,
    "join-path-children": _join_path_children,
    "convertto-json-depth": _convertto_json_depth,
    "file-encoding": _file_encoding,
    "ps6-parameter": _ps6_parameter,
    "ps6-variable": _ps6_variable,
}


def defined_functions(sources: list[bytes]) -> set[str]:
    """Names of the functions the project's own scripts define (lower case): a call to one may run
    a program, so it may set $LASTEXITCODE."""
    names = set()
    for source in sources:
        for node in _walk(parse(source).root_node):
            if node.type == "function_statement":
                for child in node.children:
                    if child.type == "function_name":
                        names.add(_text(child).lower())
    return names


def check_source(source: bytes, functions: set[str] = frozenset()) -> list[Finding]:
    root = parse(source).root_node
    found = [finding for rule in RULES.values() for finding in rule(root, set(functions))]
    return sorted(set(found), key=lambda f: (f.line, f.col, f.rule))


def check_text(text: str, functions: set[str] = frozenset()) -> list[str]:
    return [str(f) for f in check_source(text.encode("utf-8"), functions)]


def check_files(paths: list[Path]) -> dict[Path, list[str]]:
    """Findings per file; functions any of them define count as possible program runners."""
    sources = {path: path.read_bytes() for path in paths}
    functions = defined_functions(list(sources.values()))
    return {path: [str(f) for f in check_source(source, functions)] for path, source in sources.items()}

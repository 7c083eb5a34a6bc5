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
- function-output: not a 5.1 difference, the same kind of silent trap (see its section below).
- defender-process-path: not a 5.1 difference either: what a script tells Defender (its section).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from k4w.derive.cluster import Cluster
from . import powershell_rules, powershell_snippets
from .powershell_rules import parse
from .result import Result, rel

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


# ------------------------------------------------------------------ function output
# Not a 5.1 difference but the same kind of trap: a PowerShell function returns everything its
# body writes to the success stream, not only what `return` names (about_Return: "the results of
# each statement are returned as output, even without a statement that contains the return
# keyword"). A message written with Write-Output, a `$list.Add()` or a native program's stdout in
# a function whose value is assigned becomes part of that value (start-kube-proxy.ps1's
# Get-SourceVip handed kube-proxy "message 10.244.1.2" as --source-vip).
#
# Allowed in such a function, besides its result (`return $x`, or the expression or command in
# tail position: the last statement, or the last of each branch of a last if/switch/try/loop):
#   `$null = expr`, `[void](expr)` / `[void]$o.Method()`, `expr | Out-Null`, `cmd > $null` /
#   `*> $null`, any assignment or ++/--, and commands that write nothing to the success stream
#   (_SILENT_COMMANDS without -PassThru, and the project's own functions that write nothing).
# Write-Output of a string literal is a message, never a result: Write-Host or Write-Verbose it.

# Cmdlets that write nothing to the success stream unless -PassThru (each one's help page, OUTPUTS:
# "None"); Write-Host/-Verbose/-Warning/... write to other streams (about_Output_Streams).
_SILENT_COMMANDS = {
    "write-host", "write-verbose", "write-warning", "write-error", "write-debug", "write-information",
    "write-progress", "out-null", "out-host", "out-file", "set-content", "add-content", "clear-content",
    "remove-item", "set-item", "set-itemproperty", "remove-itemproperty", "copy-item", "move-item",
    "rename-item", "start-sleep", "start-service", "stop-service", "restart-service", "set-service",
    "start-process", "stop-process", "wait-process", "set-acl", "set-location", "push-location",
    "pop-location", "set-strictmode", "set-variable", "remove-variable", "clear-variable", "import-module",
    "remove-module", "expand-archive", "unregister-scheduledtask", "remove-netfirewallrule", "set-netfirewallrule",
    "remove-netroute", "remove-netipaddress", "set-netipinterface", "set-dnsclientserveraddress",
    "set-mppreference", "add-mppreference", "remove-mppreference", "set-executionpolicy", "set-alias",
    "add-type", "export-clixml", "set-netadapteradvancedproperty", "disable-netadapterbinding",
    "enable-netadapterbinding", "set-vmnetworkadapter", "set-vmnetworkadaptervlan", "set-vmprocessor",
    "set-vmmemory", "set-vm", "start-vm", "stop-vm", "remove-vm", "set-netconnectionprofile",
    "remove-netnat", "remove-vmswitch", "set-netadapter", "rename-netadapter",
}
# Not Wait-Event: it returns the event it waited for (its help, OUTPUTS: PSEventArgs).
# .NET methods that return void on every type the scripts call them on (IDisposable.Dispose,
# Stream.Close/Flush, System.IO.File.WriteAll*/AppendAllText). Any other method call may return a
# value (ArrayList.Add returns the index, List[T].Add nothing; the rule cannot tell): [void] it.
_VOID_METHODS = {"dispose", "close", "flush", "writealltext", "writeallbytes", "writealllines", "appendalltext"}
_LOOPS = {"foreach_statement", "for_statement", "while_statement", "do_statement"}
_COMPOUND = {"if_statement", "try_statement", "switch_statement", *_LOOPS}


def _function_name(function) -> str:
    return next(_text(c).lower() for c in function.children if c.type == "function_name")


def _function_body(function):
    """The statement_list of a function's script block (None for an empty body)."""
    for child in function.children:
        if child.type == "script_block":
            for part in child.children:
                if part.type == "script_block_body":
                    return next((c for c in part.children if c.type == "statement_list"), None)
    return None


def _statements(block):
    return [c for c in block.named_children if c.type != "comment"] if block is not None else []


def _inner_lists(statement):
    """(statement_list, tail-capable) of each block of a compound statement; conditions and script
    blocks passed to commands are not statements of the function."""
    lists = []
    for node in _walk(statement):
        if node != statement and node.type in ("script_block_expression", "function_statement"):
            continue
        if node.type == "statement_block":
            # A `finally` block's output is never the result people mean.
            tail = not (node.parent is not None and node.parent.type == "finally_clause")
            lists += [(c, tail) for c in node.named_children if c.type == "statement_list"]
    # Only the outermost blocks: statements nested deeper are reached by the recursion.
    return [(block, tail) for block, tail in lists if _enclosing_statement(block) == statement]


def _enclosing_statement(block):
    node = block.parent
    while node is not None and node.type not in _COMPOUND:
        node = node.parent
    return node


def _pipeline_parts(pipeline):
    chain = next((c for c in pipeline.named_children if c.type == "pipeline_chain"), None)
    return [c for c in chain.named_children] if chain is not None else []


def _silenced(pipeline) -> bool:
    """`| Out-Null`, `> $null`, `[void]...`, ++/--: nothing reaches the success stream."""
    parts = _pipeline_parts(pipeline)
    if not parts:
        return True
    last = parts[-1]
    if last.type == "command":
        if _command_name(last) == "out-null":
            return True
        for element in _elements(last):
            if element.type == "redirection":
                operator = _text(element.children[0]).strip()
                target = _text(element.children[-1]).strip().lower()
                if operator in (">", "1>", "*>") and target == "$null":
                    return True
        return False
    text = _text(last).strip().lower()
    if text.startswith("[void]"):
        return True
    calls = [n for n in _walk(last) if n.type == "invokation_expression" and n.end_byte == last.end_byte]
    if calls:
        member = next((c for c in calls[0].children if c.type == "member_name"), None)
        if member is not None and _text(member).lower() in _VOID_METHODS:
            return True
    return any(n.type in ("post_increment_expression", "post_decrement_expression",
                          "pre_increment_expression", "pre_decrement_expression")
               for n in _walk(last) if n.start_byte == last.start_byte or n.end_byte == last.end_byte)


def _writes_output(pipeline, silent_functions: set[str]) -> bool:
    if any(c.type == "assignment_expression" for c in pipeline.children) or _silenced(pipeline):
        return False
    last = _pipeline_parts(pipeline)[-1]
    if last.type != "command":
        return True
    name = _command_name(last)
    if name is None:
        return True   # `& $exe`: a program's stdout
    if "-passthru" in _parameters(last):
        return True
    return name not in _SILENT_COMMANDS and name not in silent_functions


def _message(pipeline) -> bool:
    """Write-Output of a string literal: a message, never a function's result."""
    parts = _pipeline_parts(pipeline)
    if len(parts) != 1 or parts[0].type != "command" or _command_name(parts[0]) not in ("write-output", "echo"):
        return False
    arguments = [e for e in _elements(parts[0]) if e.type not in ("command_parameter", "redirection")]
    return bool(arguments) and all(any(n.type in ("string_literal", "expandable_string_literal") for n in _walk(a))
                                   and not any(n.type == "command" for n in _walk(a)) for a in arguments)


def _outputs(block, tail: bool, silent_functions: set[str]):
    """(pipeline, in tail position) of every statement in block that writes to the success stream."""
    statements = _statements(block)
    for i, statement in enumerate(statements):
        at_tail = tail and i == len(statements) - 1
        if statement.type == "pipeline":
            if _writes_output(statement, silent_functions):
                yield statement, at_tail
        elif statement.type in _COMPOUND:
            for inner, inner_tail in _inner_lists(statement):
                yield from _outputs(inner, at_tail and inner_tail, silent_functions)
        # flow_control_statement: `return X` is the result; throw/exit/break write nothing.
        # function_statement, trap_statement: not run as part of this body.


def _returned_commands(function, silent_functions: set[str]) -> set[str]:
    """Project functions whose value becomes this function's value (tail position or `return`)."""
    names = set()
    body = _function_body(function)
    for pipeline, tail in _outputs(body, True, silent_functions):
        if tail:
            names |= {_command_name(c) for c in _walk(pipeline) if c.type == "command"}
    for node in _walk(body) if body is not None else []:
        if node.type == "flow_control_statement" and _text(node.children[0]).lower() == "return":
            names |= {_command_name(c) for c in _walk(node) if c.type == "command"}
    return {n for n in names if n}


_VALUE_USES = {"assignment_expression", "parenthesized_expression", "sub_expression", "array_expression"}


def _valued_calls(root) -> set[str]:
    """Names of commands whose output is used as a value: assigned (`$x = Fn`, `$x = @(Fn)`), in
    parentheses or a subexpression (`(Fn).Count`, `"$(Fn)"`), or tested (`if (Fn)`, `while (Fn)`).
    A call that is a statement of its own hands its output on to its caller: see _returned_commands."""
    names = set()
    for command in (n for n in _walk(root) if n.type == "command"):
        node = command.parent
        while node is not None:
            if node.type in _VALUE_USES or node.type in _COMPOUND or node.type in (
                    "elseif_clause", "switch_condition", "flow_control_statement"):
                # A compound statement reached without passing one of its blocks: a condition.
                # flow_control_statement: `throw Fn` / `exit Fn` use it (`return Fn` is the result).
                if node.type != "flow_control_statement" or _text(node.children[0]).lower() != "return":
                    names.add(_command_name(command))
                break
            if node.type in ("statement_list", "statement_block", "script_block_expression"):
                if node.type == "statement_list" and node.parent is not None and node.parent.type in _VALUE_USES:
                    names.add(_command_name(command))   # @(Fn), $(Fn)
                break
            node = node.parent
    return {n for n in names if n}


def function_output_findings(roots: dict) -> dict:
    """Findings of rule function-output per key of roots (tree roots of the scripts that see each
    other's functions: a script and the libraries it dot-sources; callers pass the whole tree, a
    superset)."""
    functions = [(key, node) for key, root in roots.items() for node in _walk(root) if node.type == "function_statement"]
    # Functions that write nothing at all, to a fixpoint: calling one writes nothing either.
    silent: set[str] = set()
    changed = True
    while changed:
        changed = False
        for _, function in functions:
            name = _function_name(function)
            if name not in silent and not any(True for _ in _outputs(_function_body(function), True, silent)):
                silent.add(name)
                changed = True
    # Functions whose value is used: assigned or tested, or returned by a function whose value is used.
    valued = set().union(*(_valued_calls(root) for root in roots.values())) if roots else set()
    changed = True
    while changed:
        changed = False
        for _, function in functions:
            if _function_name(function) in valued:
                more = _returned_commands(function, silent) - valued
                if more:
                    valued |= more
                    changed = True
    found: dict = {key: [] for key in roots}
    for key, function in functions:
        name = _function_name(function)
        if name not in valued:
            continue
        for pipeline, tail in _outputs(_function_body(function), True, silent):
            if _message(pipeline):
                found[key].append(_at(pipeline, "function-output",
                                      f"Write-Output of a message in {name}, whose value is used: the message becomes "
                                      "part of that value; use Write-Host or Write-Verbose"))
            elif not tail:
                found[key].append(_at(pipeline, "function-output",
                                      f"'{_text(pipeline).strip()[:60]}' writes to the output of {name}, whose value is used: "
                                      "it becomes part of that value; capture it ($null = ..., | Out-Null) "
                                      "or return it"))
    return found


# ------------------------------------------------------------------ Defender process exclusions
# Add-MpPreference/Set-MpPreference -ExclusionProcess with a file name alone excludes every process
# of that name, in any folder, a pod's too; with a full path only that program (Microsoft, "Configure
# exclusions for files opened by processes"). So every program that reaches -ExclusionProcess must
# be joined onto one of k4w's node folders: K4W_NODE_DIR (C:\k) or the runtime's folder under
# $env:ProgramFiles, each of which only SYSTEM and Administrators may write.
_DEFENDER_CMDLETS = {"add-mppreference", "set-mppreference"}
_NODE_FOLDER_SOURCES = ("k4w_node_dir", "$env:programfiles")


def _assignments(root) -> dict[str, list]:
    found: dict[str, list] = {}
    for node in _walk(root):
        if node.type == "assignment_expression":
            value = [c for c in node.children if c.type != "comment"][-1]   # a trailing comment is a child too
            found.setdefault(_text(node.children[0]).strip().lower(), []).append(value)
    return found


def _under_node_folder(node, assignments: dict, depth: int = 0) -> bool:
    """True when an expression is, or is assigned from, one of the node folders' sources."""
    text = _text(node).lower()
    if any(source in text for source in _NODE_FOLDER_SOURCES):
        return True
    if depth > 3:
        return False
    names = {_text(v).lower() for v in _walk(node) if v.type == "variable"}
    return any(_under_node_folder(value, assignments, depth + 1) for name in names for value in assignments.get(name, []))


def _programs_reaching(node, assignments: dict, depth: int = 0, seen=None):
    """Every string literal naming a program (.exe) in the expression or what its variables hold."""
    seen = set() if seen is None else seen
    for literal in (n for n in _walk(node) if n.type in ("string_literal", "expandable_string_literal", "generic_token")):
        if _text(literal).strip("'\"").lower().endswith(".exe"):
            yield literal
    if depth > 3:
        return
    for variable in {_text(v).lower() for v in _walk(node) if v.type == "variable"} - seen:
        seen.add(variable)
        for value in assignments.get(variable, []):
            yield from _programs_reaching(value, assignments, depth + 1, seen)


def _join_path_parent(literal):
    """The parent path of the Join-Path whose child this literal is, or None."""
    command = literal.parent
    while command is not None and command.type != "command":
        command = command.parent
    if command is None or _command_name(command) != "join-path":
        return None
    elements = [e for e in _elements(command) if e.type not in ("command_parameter", "redirection")]
    if len(elements) != 2 or not (elements[1].start_byte <= literal.start_byte < elements[1].end_byte):
        return None
    return elements[0]


def _defender_process_path(root, functions: set[str]) -> list[Finding]:
    findings = []
    assignments = None
    for command in (n for n in _walk(root) if n.type == "command"):
        if _command_name(command) not in _DEFENDER_CMDLETS:
            continue
        elements = _elements(command)
        for i, element in enumerate(elements):
            if element.type != "command_parameter" or _text(element).lower().rstrip(":") != "-exclusionprocess":
                continue
            if i + 1 >= len(elements):
                continue
            assignments = assignments if assignments is not None else _assignments(root)
            for literal in _programs_reaching(elements[i + 1], assignments):
                parent = _join_path_parent(literal)
                if parent is None or not _under_node_folder(parent, assignments):
                    findings.append(_at(literal, "defender-process-path",
                                        f"{_text(literal)} reaches -ExclusionProcess without a node folder: Defender would "
                                        "exclude every process of that name, in any folder (a pod's too); "
                                        "write Join-Path $nodeDir (K4W_NODE_DIR) or a folder under $env:ProgramFiles"))
    return findings


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
    "defender-process-path": _defender_process_path,
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


def check_source(source: bytes, functions: set[str] = frozenset(), *, function_output: bool = True) -> list[Finding]:
    root = parse(source).root_node
    found = [finding for rule in RULES.values() for finding in rule(root, set(functions))]
    if function_output:
        found += function_output_findings({0: root})[0]
    return sorted(set(found), key=lambda f: (f.line, f.col, f.rule))


def check_text(text: str, functions: set[str] = frozenset()) -> list[str]:
    return [str(f) for f in check_source(text.encode("utf-8"), functions)]


def check_files(paths: list[Path]) -> dict[Path, list[str]]:
    """Findings per file; functions any of them define count as possible program runners, and a
    function's value counts as used when any of them assigns it (function-output)."""
    sources = {path: path.read_bytes() for path in paths}
    functions = defined_functions(list(sources.values()))
    outputs = function_output_findings({path: parse(source).root_node for path, source in sources.items()})
    return {path: [str(f) for f in sorted(set(check_source(source, functions, function_output=False) + outputs[path]),
                                          key=lambda f: (f.line, f.col, f.rule))]
            for path, source in sources.items()}


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def _powershell_files(repo) -> list[Path]:
    return sorted(repo.guest.rglob("*.ps1")) + sorted(repo.host.rglob("*.ps1"))


def run(cluster: Cluster, out: Path) -> Result:
    """Every PowerShell script, and the PowerShell inline in the rendered artifacts: the parse catches
    syntax errors; the lint what PowerShell refuses but the grammar allows; the 5.1 rules what runs
    but differs from PowerShell 7."""
    res = Result("PowerShell scripts", "tree-sitter-powershell + Windows PowerShell 5.1 rules")
    scripts = _powershell_files(cluster.sources)
    pitfalls = check_files(scripts)
    for script in scripts:
        res.checked.append(rel(script))
        found = powershell_rules.parse_errors(script) + powershell_rules.lint_errors(script) + pitfalls[script]
        res.problems += [f"{rel(script)}:{p}" for p in found]
    functions = defined_functions([script.read_bytes() for script in scripts])
    for where, snippet in powershell_snippets.rendered(out):
        res.checked.append(where)
        found = powershell_rules.parse_text_errors(snippet) + check_text(snippet, functions)
        res.problems += [f"{where}:{p}" for p in found]
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    names = [str(p) for p in _powershell_files(cluster.sources)]
    return [f"# in this process: parse and lint {name}, with the Windows PowerShell 5.1 rules" for name in names] + \
        ["# in this process: the same on the PowerShell inline in the rendered Packer templates and Autounattend.xml"]

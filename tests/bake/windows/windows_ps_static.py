"""Static analysis of the Windows guest scripts with the tree-sitter PowerShell grammar:
"every download is checksum-verified before use" (DESIGN.md), checked on the code itself.

The rules that follow from the design of guest/windows/common.ps1 (components come from the build
CD that build-* made from the host's verified cache; docs/internals.md, "The component cache"):
1. No Windows guest script downloads anything over HTTP: raw download primitives
   (Invoke-WebRequest, WebClient.DownloadFile, curl.exe, BITS, ...) appear nowhere.
2. A file found on the build CD (Find-K4wBuildMediaFile) is kept in a variable whose next
   mention is an Assert-K4wFileHash -Path on it: nothing can use it before its hash is checked.
   The one other form is an image archive (downloads.images: cache), whose checksum is the image's
   pinned manifest digest: its next mention is `ctr images import` of it, and the statements after
   read the imported name's digest (Get-ImageDigest) and throw unless it is the pinned $digest.
3. Every other script gets components only through Get-K4wVerifiedFile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from k4w.validate.powershell_rules import parse

RAW_COMMANDS = {
    "invoke-webrequest", "iwr", "invoke-restmethod", "irm", "start-bitstransfer",
    "curl", "curl.exe", "wget", "wget.exe", "bitsadmin", "bitsadmin.exe",
}
RAW_METHODS = {"downloadfile", "downloadstring", "downloaddata", "downloadfileasync", "downloadfiletaskasync", "openread"}
MEDIA_FINDER = "find-k4wbuildmediafile"
VERIFIED = "get-k4wverifiedfile"


@dataclass(frozen=True)
class Call:
    name: str  # lower-case command or method name
    line: int
    function: str | None  # enclosing function, lower-case
    out_file: str | None  # text of the -OutFile argument, if any
    node: object


def _enclosing_function(node) -> str | None:
    while node is not None:
        if node.type == "function_statement":
            for child in node.children:
                if child.type == "function_name":
                    return child.text.decode().lower()
        node = node.parent
    return None


def _out_file(command) -> str | None:
    elements = [c for c in command.children if c.type == "command_elements"]
    if not elements:
        return None
    parts = [c for c in elements[0].children if c.type != "command_argument_sep"]
    for i, part in enumerate(parts):
        if part.type == "command_parameter" and part.text.decode().lower() in ("-outfile", "-destination"):
            return parts[i + 1].text.decode() if i + 1 < len(parts) else ""
    return None


def calls(source: bytes) -> list[Call]:
    found: list[Call] = []
    stack = [parse(source).root_node]
    while stack:
        node = stack.pop()
        if node.type == "command":
            name_nodes = [c for c in node.children if c.type == "command_name"]
            if name_nodes:
                found.append(Call(name_nodes[0].text.decode().lower(), node.start_point[0] + 1,
                                  _enclosing_function(node), _out_file(node), node))
        elif node.type == "invokation_expression":
            members = [c for c in node.children if c.type == "member_name"]
            if members:
                found.append(Call(members[0].text.decode().lower(), node.start_point[0] + 1,
                                  _enclosing_function(node), None, node))
        stack.extend(node.children)
    return sorted(found, key=lambda c: c.line)


def _statement_of(node):
    """The statement (direct child of a statement_list) that contains node."""
    while node.parent is not None and node.parent.type != "statement_list":
        node = node.parent
    return node


def _hash_checked_first(call: Call) -> bool:
    """Is the call's result assigned to a variable whose next mention is an Assert-K4wFileHash on it?"""
    statement = _statement_of(call.node)
    assigned = re.match(r"\s*(\$[A-Za-z0-9_:]+)\s*=", statement.text.decode())
    if not assigned:
        return False
    target = assigned.group(1)
    mention = re.compile(re.escape(target) + r"(?![A-Za-z0-9_])")
    sibling = statement.next_named_sibling
    while sibling is not None:
        text = sibling.text.decode()
        if mention.search(text):
            return bool(re.search(r"Assert-K4wFileHash\b[^\n]*-Path\s+" + re.escape(target) + r"(?![A-Za-z0-9_])", text, re.I))
        sibling = sibling.next_named_sibling
    return False


def _assigned_target(call: Call):
    statement = _statement_of(call.node)
    assigned = re.match(r"\s*(\$[A-Za-z0-9_:]+)\s*=", statement.text.decode())
    return (statement, assigned.group(1)) if assigned else (statement, None)


def _imported_then_digest_checked(call: Call) -> bool:
    """Is the call's result an image archive whose next mention imports it (`'images', 'import', $archive`),
    after which the imported name's digest is read and anything but the pinned $digest throws?"""
    statement, target = _assigned_target(call)
    if target is None:
        return False
    mention = re.compile(re.escape(target) + r"(?![A-Za-z0-9_])")
    sibling = statement.next_named_sibling
    while sibling is not None and not mention.search(sibling.text.decode()):
        sibling = sibling.next_named_sibling
    if sibling is None or not re.search(r"'images',\s*'import',\s*" + re.escape(target) + r"\s*\)", sibling.text.decode()):
        return False
    after = []
    sibling = sibling.next_named_sibling
    while sibling is not None:
        after.append(sibling.text.decode())
        sibling = sibling.next_named_sibling
    rest = "\n".join(after)
    read = re.search(r"(\$[A-Za-z0-9_]+)\s*=\s*Get-ImageDigest\b", rest)
    return bool(read and re.search(r"if\s*\(\s*" + re.escape(read.group(1)) + r"\s+-ne\s+\$digest\s*\)\s*\{[^}]*\bthrow\b", rest, re.S))


def download_problems(source: bytes, name: str) -> list[str]:
    """Violations of the rules above in one script (name = its file name)."""
    problems = []
    for call in calls(source):
        where = f"{name}:{call.line}"
        if call.name in RAW_COMMANDS or call.name in RAW_METHODS:
            problems.append(f"{where}: raw download '{call.name}': the box downloads nothing itself; "
                            "components come from the build CD through Get-K4wVerifiedFile")
        if call.name == MEDIA_FINDER and not (_hash_checked_first(call) or _imported_then_digest_checked(call)):
            problems.append(f"{where}: a build-CD file is used before Assert-K4wFileHash checks it (an image archive: "
                            "before `ctr images import` of it and the check against the pinned $digest)")
    return problems


def verified_downloads(source: bytes) -> list[str]:
    """The -Component of every Get-K4wVerifiedFile call."""
    return re.findall(r"Get-K4wVerifiedFile\s+-Component\s+'([a-z0-9_-]+)'", source.decode(), re.I)

"""Static analysis of the Windows guest scripts with the tree-sitter PowerShell grammar:
"every download is checksum-verified before use" (DESIGN.md), checked on the code itself.

The rules that follow from the design of guest/windows/common.ps1:
1. Raw download primitives (Invoke-WebRequest, WebClient.DownloadFile, curl.exe, BITS, ...)
   appear only inside common.ps1's Invoke-K4wWebRequest.
2. Invoke-K4wWebRequest writes a file (-OutFile X) only where the next statement that touches X
   is an Assert-K4wFileHash -Path X: nothing can use the file before its hash is checked.
3. Invoke-K4wWebRequest without -OutFile (content in memory) only fetches a published checksum
   (Get-K4wPublishedChecksum): the reference value, never executed.
4. Every other script downloads only through Get-K4wVerifiedFile.
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
WRAPPER = "invoke-k4wwebrequest"
HASH_CHECK = "assert-k4wfilehash"
CHECKSUM_FETCHER = "get-k4wpublishedchecksum"
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
    """Is the next statement that mentions the downloaded file an Assert-K4wFileHash on it?"""
    target = call.out_file or ""
    statement = _statement_of(call.node)
    sibling = statement.next_named_sibling
    mention = re.compile(re.escape(target) + r"(?![A-Za-z0-9_])")
    while sibling is not None:
        text = sibling.text.decode()
        if mention.search(text):
            return bool(re.search(r"Assert-K4wFileHash\b[^\n]*-Path\s+" + re.escape(target) + r"(?![A-Za-z0-9_])", text, re.I))
        sibling = sibling.next_named_sibling
    return False


def download_problems(source: bytes, name: str) -> list[str]:
    """Violations of the download rules above in one script (name = its file name)."""
    problems = []
    is_common = name == "common.ps1"
    for call in calls(source):
        where = f"{name}:{call.line}"
        raw = call.name in RAW_COMMANDS or call.name in RAW_METHODS
        if raw and not (is_common and call.function == WRAPPER):
            problems.append(f"{where}: raw download '{call.name}' outside Invoke-K4wWebRequest: use Get-K4wVerifiedFile")
        if call.name == WRAPPER:
            if not is_common:
                problems.append(f"{where}: Invoke-K4wWebRequest used directly: downloads go through Get-K4wVerifiedFile")
            elif call.out_file is None and call.function != CHECKSUM_FETCHER:
                problems.append(f"{where}: in-memory download outside Get-K4wPublishedChecksum")
            elif call.out_file is not None and not _hash_checked_first(call):
                problems.append(f"{where}: {call.out_file} is downloaded but not passed to Assert-K4wFileHash before it is used")
    return problems


def verified_downloads(source: bytes) -> list[str]:
    """The -Component of every Get-K4wVerifiedFile call."""
    return re.findall(r"Get-K4wVerifiedFile\s+-Component\s+'([a-z0-9_-]+)'", source.decode(), re.I)

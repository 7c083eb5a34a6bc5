"""Parse PowerShell with tree-sitter-powershell: the syntax check for guest scripts.

Nothing here can run Windows PowerShell, so every .ps1 is at least parsed by a real grammar.
Any ERROR or MISSING node in the tree is a problem, reported as "line:col: message" (callers
prefix the file name).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from k4w.infra.errors import ToolMissing
from k4w.infra.tools import INSTALL



@lru_cache(maxsize=1)
def _parser():
    try:
        import tree_sitter
        import tree_sitter_powershell
    except ImportError as exc:  # a missing validator is a failure, never a silent pass
        raise ToolMissing("tree-sitter-powershell", INSTALL["tree-sitter-powershell"]) from exc
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_powershell.language()))


def parse(source: bytes):
    """The tree-sitter tree of a PowerShell source (for other static checks)."""
    return _parser().parse(source)


def _syntax_problems(source: bytes) -> list[str]:
    """"line:col: message" for every ERROR region and MISSING node of the tree."""
    found: list[tuple[int, int, str]] = []
    stack = [parse(source).root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            line, col = node.start_point
            kind = f"missing '{node.type}'" if node.is_missing else "syntax error"
            snippet = source[node.start_byte:node.end_byte][:60].decode("utf-8", "replace").replace("\n", "\\n")
            found.append((line + 1, col + 1, f"{kind} near {snippet!r}"))
            if node.type == "ERROR":
                continue  # one report per broken region
        stack.extend(node.children)
    return [f"{line}:{col}: {message}" for line, col, message in sorted(found)]


def parse_errors(path: str | Path) -> list[str]:
    """Problems found parsing one .ps1 file ("line:col: message"); empty when the grammar
    accepts all of it."""
    return _syntax_problems(Path(path).read_bytes())


def parse_text_errors(text: str) -> list[str]:
    """The same for PowerShell held in memory (e.g. a script k4w generates at run time)."""
    return _syntax_problems(text.encode("utf-8"))


# "$name:" inside a double-quoted string is a drive-qualified variable reference with no name:
# PowerShell refuses the whole script at parse time, but tree-sitter's grammar accepts it.
_BAD_SCOPED_VARIABLE = re.compile(r"(?<![`$])\$([A-Za-z_][A-Za-z0-9_]*):(?![A-Za-z_{])")


def lint_errors(path: str | Path) -> list[str]:
    """Parse errors of Windows PowerShell that the tree-sitter grammar does not report
    ("line:col: message")."""
    source = Path(path).read_bytes()
    problems = []
    stack = [parse(source).root_node]
    while stack:
        node = stack.pop()
        if node.type == "expandable_string_literal":
            text = node.text.decode("utf-8", "replace")
            for match in _BAD_SCOPED_VARIABLE.finditer(text):
                line, col = node.start_point
                problems.append(
                    f"{line + 1}:{col + 1}: \"{match.group(0)}\" in a double-quoted string is an invalid variable "
                    f"reference; write \"${{{match.group(1)}}}:\""
                )
        stack.extend(node.children)
    return sorted(problems, key=lambda p: tuple(int(x) for x in p.split(":")[:2]))

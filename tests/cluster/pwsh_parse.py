"""Parse PowerShell with tree-sitter-powershell: any ERROR or MISSING node is a syntax error."""

from __future__ import annotations

import pytest

from k4w import tools

try:
    import tree_sitter
    import tree_sitter_powershell
except ImportError:  # a missing validator fails the tests that need it, naming the install command
    tree_sitter = None


def parse_errors(text: str) -> list[str]:
    if tree_sitter is None:
        pytest.fail(str(tools.missing("tree-sitter-powershell")))
    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_powershell.language()))
    tree = parser.parse(text.encode("utf-8"))
    problems: list[str] = []

    def walk(node) -> None:
        if node.type == "ERROR" or node.is_missing:
            row, col = node.start_point
            snippet = text.encode("utf-8")[node.start_byte:node.end_byte][:60].decode("utf-8", "replace")
            problems.append(f"line {row + 1} col {col + 1}: {'missing ' + node.type if node.is_missing else 'syntax error'} near {snippet!r}")
        for child in node.children:
            walk(child)

    walk(tree.root_node)
    return problems


def tree(text: str):
    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_powershell.language()))
    return parser.parse(text.encode("utf-8"))

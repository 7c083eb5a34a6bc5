"""Guest code is written once (DESIGN.md: "Shared guest code lives in one library per OS and
lifecycle"): no two guest scripts define a function of the same name, and no two share a long run of
identical lines. A copy belongs in guest/ubuntu/lib.sh, guest/windows/common.ps1 (bake),
cluster/cluster-join-lib.ps1 (join), node/node-lib.ps1 (node) or hostprocess/hostprocess-lib.ps1 (pods)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import ROOT

GUEST = ROOT / "guest"
# Identical consecutive code lines (comments, blank lines and lone punctuation skipped) that make a copy.
RUN = 8
# What every script must carry (k4w/validate's header rules), so repeating it is no copy.
_HEADER = re.compile(
    r"^(\$ErrorActionPreference = 'Stop'|Set-StrictMode -Version Latest|trap \{|\[CmdletBinding\(\)\]|param\(|"
    r"Write-Output \$_\.InvocationInfo\.PositionMessage|exit 1|set -E?euo pipefail|trap '.*' ERR|"
    r"K4W_LIB=.*|\[\[ -r \$K4W_LIB \]\].*|source \"\$K4W_LIB\")$")
_FUNCTION = {
    ".ps1": re.compile(r"^[ \t]*function[ \t]+([\w-]+)", re.I | re.M),
    ".sh": re.compile(r"^[ \t]*(?:function[ \t]+)?([A-Za-z_][\w:-]*)[ \t]*\(\)[ \t]*\{", re.M),
}


def _scripts(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in _FUNCTION and p.is_file())


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text folded) of the lines that carry code."""
    lines, in_block = [], False
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = " ".join(raw.split())
        if path.suffix == ".ps1":
            if in_block or line.startswith("<#"):
                in_block = "#>" not in line
                continue
        if not line or line.startswith("#") or not re.search(r"\w", line) or _HEADER.match(line):
            continue
        lines.append((number, line))
    return lines


def duplicate_functions(root: Path) -> list[str]:
    """One message per function name that two places define."""
    seen: dict[str, str] = {}
    found = []
    for path in _scripts(root):
        for match in _FUNCTION[path.suffix].finditer(path.read_text(encoding="utf-8")):
            # PowerShell's names are case-insensitive; bash's are not.
            name = match.group(1).lower() if path.suffix == ".ps1" else match.group(1)
            where = f"{path.relative_to(root)}:{path.read_text(encoding='utf-8').count(chr(10), 0, match.start()) + 1}"
            if (path.suffix, name) in seen:
                found.append(f"function {match.group(1)} is defined in {seen[(path.suffix, name)]} and {where}")
            else:
                seen[(path.suffix, name)] = where
    return found


def copied_runs(root: Path, run: int = RUN) -> list[str]:
    """One message per pair of places that share `run` identical consecutive code lines."""
    windows: dict[tuple[str, ...], tuple[Path, int]] = {}
    found: dict[tuple[Path, Path], str] = {}
    for path in _scripts(root):
        lines = _code_lines(path)
        for i in range(len(lines) - run + 1):
            key = tuple(text for _, text in lines[i:i + run])
            first = windows.setdefault(key, (path, lines[i][0]))
            if first[0] != path and (first[0], path) not in found:
                found[(first[0], path)] = (f"{first[0].relative_to(root)}:{first[1]} and {path.relative_to(root)}:{lines[i][0]} "
                                           f"share {run} identical lines from `{key[0][:70]}`")
    return list(found.values())


def test_no_two_guest_scripts_define_the_same_function():
    assert duplicate_functions(GUEST) == []


def test_no_two_guest_scripts_share_a_long_identical_block():
    assert copied_runs(GUEST) == []


def _plant(tmp_path: Path, name: str, text: str) -> Path:
    tree = tmp_path / "guest"
    for path in _scripts(GUEST):
        target = tree / path.relative_to(GUEST)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    (tree / name).write_text(text, encoding="utf-8")
    return tree


def test_a_copied_library_function_is_found(tmp_path):
    lib = (GUEST / "windows" / "node" / "node-lib.ps1").read_text(encoding="utf-8")
    stop = lib[lib.index("function Stop-NodeService"):]
    tree = _plant(tmp_path, "windows/node/extra.ps1", stop[:stop.index("\n}\n") + 3])
    [problem] = duplicate_functions(tree)
    line = lib.count("\n", 0, lib.index("function Stop-NodeService")) + 1
    assert problem == f"function Stop-NodeService is defined in windows/node/extra.ps1:1 and windows/node/node-lib.ps1:{line}"


def test_a_copied_kubelet_unit_is_found(tmp_path):
    # What the two 04-kubernetes*.sh steps held before lib.sh's k4w_install_kubelet_service.
    lib = (GUEST / "ubuntu" / "lib.sh").read_text(encoding="utf-8")
    body = lib[lib.index("k4w_install_kubelet_service() {"):]
    body = body[body.index("    k4w_write_file /etc/systemd/system/kubelet.service"):body.index("    K4W_CHANGED=$units_changed")]
    tree = _plant(tmp_path, "ubuntu/bake/99-copy.sh", "#!/usr/bin/env bash\n" + body)
    [problem] = copied_runs(tree)
    assert problem.startswith("ubuntu/bake/99-copy.sh:2 and ubuntu/lib.sh:") and "share 8 identical lines" in problem


def test_a_run_shorter_than_the_limit_is_no_copy(tmp_path):
    lines = [f"Write-Output 'line {n}'" for n in range(RUN - 1)]
    tree = tmp_path / "guest"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "one.ps1").write_text("\n".join(lines) + "\n")
    (tree / "a" / "two.ps1").write_text("\n".join(lines) + "\n")
    assert copied_runs(tree) == []
    (tree / "a" / "two.ps1").write_text("\n".join(lines + ["Write-Output 'line 7'"]) + "\n")
    (tree / "a" / "one.ps1").write_text("\n".join(lines + ["Write-Output 'line 7'"]) + "\n")
    assert copied_runs(tree) == ["a/one.ps1:1 and a/two.ps1:1 share 8 identical lines from `Write-Output 'line 0'`"]

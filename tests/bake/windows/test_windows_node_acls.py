"""The node folders' ACL plan (guest/windows/node/protect-node-folders.ps1): what is locked to
SYSTEM and Administrators, and the one folder opened to containers, the kubelet's pod folder.
Checked on the script's own defaults, so widening the opened folder (to C:\\var\\lib\\kubelet, where
the kubelet's key lives) or leaving it out fails here, before any box is baked."""

from __future__ import annotations

import ast
import re
from pathlib import PureWindowsPath

import pytest

from k4w import identities
from k4w.sources import REPO_ROOT as ROOT
from k4w.validate.powershell_rules import parse

SPEC = ROOT / "k4w" / "verify" / "specs" / "test_windows_box.py"
SCRIPT = ROOT / "guest" / "windows" / "node" / "protect-node-folders.ps1"
# The kubelet's --root-dir is /var/lib/kubelet, C:\var\lib\kubelet on drive C:, and its pod volumes
# are below root-dir\pods (kubernetes/kubernetes pkg/kubelet/config/defaults.go
# DefaultKubeletPodsDirName, pkg/kubelet/kubelet_getters.go getPodsDir).
PODS = "C:\\var\\lib\\kubelet\\pods"
# Every kubelet path on the Windows nodes' command lines (both eras).
KUBELET_ARGS = sorted((ROOT / "templates" / "nodes").glob("windows*/kubelet.args.j2"))


def _defaults(text: bytes) -> dict[str, list[str]]:
    """The string values of each parameter's default array, by parameter name (lower case)."""
    root = parse(text).root_node
    found: dict[str, list[str]] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "script_parameter":
            name = next(c for c in node.children if c.type == "variable").text.decode().lower()
            default = next((c for c in node.children if c.type == "script_parameter_default"), None)
            if default is not None:
                found[name] = re.findall(r"'([^']*)'", default.text.decode())
        stack.extend(node.children)
    return found


def _plan(text: bytes) -> tuple[list[str], list[str]]:
    defaults = _defaults(text)
    return defaults["$folders"], defaults["$containerfolders"]


def _below(path: str, folder: str) -> bool:
    return PureWindowsPath(folder) in PureWindowsPath(path).parents or PureWindowsPath(path) == PureWindowsPath(folder)


def _secret_places() -> list[str]:
    """Where a Windows node keeps what no pod may read: the kubelet's key and kubeconfigs, its
    config, kubeadm's flags, the components' kubeconfigs, Flannel's subnet file."""
    places = [identities.KUBECONFIG_DIR, "C:\\var\\lib\\kubelet\\kubeadm-flags.env", "C:\\run\\flannel\\subnet.env"]
    for args in KUBELET_ARGS:
        places += re.findall(r"^--(?:cert-dir|config|kubeconfig|bootstrap-kubeconfig|client-ca-file)=(C:\\\S+)$",
                             args.read_text(), re.M)
    return places


def _problems(text: bytes) -> list[str]:
    locked, opened = _plan(text)
    problems = []
    if opened != [PODS]:
        problems.append(f"the folders opened to containers are {opened}, not only the kubelet's pod folder {PODS}")
    for folder in opened:
        if not any(_below(folder, top) and folder != top for top in locked):
            problems.append(f"{folder} is not below a locked folder: its siblings would not stay locked")
    for place in _secret_places():
        if not any(_below(place, top) for top in locked):
            problems.append(f"{place} is below no locked folder")
        for folder in opened:
            if _below(place, folder):
                problems.append(f"{place} is below {folder}, which containers may read")
    source = text.decode()
    if "$ContainerSid = 'S-1-5-11'" not in source or '"*${ContainerSid}:(OI)(CI)M"' not in source:
        problems.append("the containers' grant is not Authenticated Users (S-1-5-11) modify, inheritable")
    return problems


def test_the_plan_locks_every_secret_and_opens_only_the_pod_folder():
    assert _secret_places(), "no kubelet path found in the kubelet.args templates"
    assert _problems(SCRIPT.read_bytes()) == []


def _spec_constants() -> dict:
    """The box spec's module constants (read, not imported: it is a testinfra module)."""
    constants = {}
    for node in ast.parse(SPEC.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return constants


def test_the_box_spec_checks_the_same_plan():
    locked, opened = _plan(SCRIPT.read_bytes())
    constants = _spec_constants()
    assert constants["PROTECTED_FOLDERS"] == tuple(locked)
    assert constants["CONTAINER_FOLDERS"] == tuple(opened)
    assert constants["AUTHENTICATED_USERS_SID"] == "S-1-5-11"


@pytest.mark.parametrize("planted, expected", [
    # Opening the kubelet's whole root would hand every pod its key (pki) and config.
    (("'C:\\var\\lib\\kubelet\\pods'", "'C:\\var\\lib\\kubelet'"), "C:\\var\\lib\\kubelet\\pki is below C:\\var\\lib\\kubelet"),
    # Leaving the pod folder locked: Nano Server pods are denied their volumes.
    (("@('C:\\var\\lib\\kubelet\\pods')", "@()"), "not only the kubelet's pod folder"),
    # Full control would let a container's identity change the folder's ACL.
    (('"*${ContainerSid}:(OI)(CI)M"', '"*${ContainerSid}:(OI)(CI)F"'), "not Authenticated Users (S-1-5-11) modify"),
    # C:\var no longer locked: the pod folder's siblings (pki) open to every local account.
    (("'C:\\etc', 'C:\\var', 'C:\\run'", "'C:\\etc', 'C:\\run'"), "is not below a locked folder"),
])
def test_the_plan_check_catches(planted, expected):
    old, new = planted
    text = SCRIPT.read_text()
    assert old in text
    problems = _problems(text.replace(old, new, 1).encode())
    assert any(expected in p for p in problems), problems

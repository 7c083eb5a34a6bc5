"""The node folders' ACL plan (guest/windows/node/protect-node-folders.ps1): what is locked to
SYSTEM and Administrators, and the one folder opened to containers, the kubelet's pod folder.
Checked on the script's own defaults, so widening the opened folder (to C:\\var\\lib\\kubelet, where
the kubelet's key lives) or leaving it out fails here, before any box is baked."""

from __future__ import annotations

import ast
import re
from pathlib import PureWindowsPath

import pytest

from k4w.derive import identities
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.validate.powershell_rules import parse

SPEC = ROOT / "k4w" / "verify" / "specs" / "test_windows_box.py"
SCRIPT = ROOT / "guest" / "windows" / "node" / "protect-node-folders.ps1"
# The kubelet's --root-dir is /var/lib/kubelet, C:\var\lib\kubelet on drive C:, and its pod volumes
# are below root-dir\pods (kubernetes/kubernetes pkg/kubelet/config/defaults.go
# DefaultKubeletPodsDirName, pkg/kubelet/kubelet_getters.go getPodsDir).
PODS = "C:\\var\\lib\\kubelet\\pods"
# User Manager\ContainerUser, Nano Server's identity in a container (moby/moby@4be37b15
# pkg/idtools/idtools_windows.go ContainerUserSidString).
CONTAINER_USER_SID = "S-1-5-93-2-2"
# Groups every account on the node is in (Microsoft, "Well-known SIDs"), by SID and by English name:
# a grant to one on a folder holding pod volumes hands every pod's Secrets and tokens to
# LocalService, NetworkService, NT SERVICE\* and non-administrator HostProcess pods.
BROAD = {"s-1-5-11", "s-1-5-32-545", "s-1-1-0", "authenticated users", "nt authority\\authenticated users",
         "users", "builtin\\users", "everyone", "interactive", "s-1-5-4"}
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


def _grants(source: str) -> list[tuple[str, str]]:
    """Every icacls grant in the script, "principal:(flags)rights", as (principal, flags and
    rights), its principal's $Variable resolved from the script's string assignments."""
    values = {m[0].lower(): m[1] for m in re.findall(r"^\s*\$(\w+)\s*=\s*'([^']*)'", source, re.M)}
    grants = []
    for principal, access in re.findall(r"[\"']\*?(\$\{?\w+\}?|[^\"'$:]+):((?:\([A-Z]+\))*[A-Z]+)[\"']", source):
        if principal.startswith("$"):
            principal = values.get(principal.strip("${}").lower(), principal)
        grants.append((principal.lstrip("*"), access))
    return grants


def _grant_problems(source: str) -> list[str]:
    grants = _grants(source)
    problems = [f"the script grants {who}:{access}, a group every account on the node is in"
                for who, access in grants if who.lower() in BROAD]
    others = [(who, access) for who, access in grants if who not in ("S-1-5-18", "S-1-5-32-544")]
    if others != [(CONTAINER_USER_SID, "(OI)(CI)(IO)M")]:
        problems.append(f"the grants besides SYSTEM and Administrators are {others}, not only ContainerUser "
                        f"({CONTAINER_USER_SID}) modify, inherit-only")
    return problems


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
    problems += _grant_problems(text.decode())
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
    assert constants["CONTAINER_USER_SID"] == CONTAINER_USER_SID
    assert {sid.lower() for sid in constants["BROAD_SIDS"]} == {"s-1-5-11", "s-1-5-32-545", "s-1-1-0"}


@pytest.mark.parametrize("planted, expected", [
    # Opening the kubelet's whole root would hand every pod its key (pki) and config.
    (("'C:\\var\\lib\\kubelet\\pods'", "'C:\\var\\lib\\kubelet'"), "C:\\var\\lib\\kubelet\\pki is below C:\\var\\lib\\kubelet"),
    # Leaving the pod folder locked: Nano Server pods are denied their volumes.
    (("@('C:\\var\\lib\\kubelet\\pods')", "@()"), "not only the kubelet's pod folder"),
    # Full control would let a container's identity change the folder's ACL.
    (('"*${ContainerSid}:(OI)(CI)(IO)M"', '"*${ContainerSid}:(OI)(CI)(IO)F"'), "not only ContainerUser"),
    # Not inherit-only: ContainerUser could create files in the pods folder itself.
    (('"*${ContainerSid}:(OI)(CI)(IO)M"', '"*${ContainerSid}:(OI)(CI)M"'), "not only ContainerUser"),
    # The grant of before, and every other group each local account is in.
    (("$ContainerSid = 'S-1-5-93-2-2'", "$ContainerSid = 'S-1-5-11'"), "grants S-1-5-11:(OI)(CI)(IO)M, a group every"),
    (("$ContainerSid = 'S-1-5-93-2-2'", "$ContainerSid = 'S-1-5-32-545'"), "grants S-1-5-32-545:(OI)(CI)(IO)M, a group"),
    (("$ContainerSid = 'S-1-5-93-2-2'", "$ContainerSid = 'S-1-1-0'"), "grants S-1-1-0:(OI)(CI)(IO)M, a group"),
    (('"*${ContainerSid}:(OI)(CI)(IO)M"', "'Everyone:(OI)(CI)RX'"), "grants Everyone:(OI)(CI)RX, a group"),
    (('"*${ContainerSid}:(OI)(CI)(IO)M"', "'NT AUTHORITY\\Authenticated Users:(OI)(CI)(IO)M'"),
     "grants NT AUTHORITY\\Authenticated Users:(OI)(CI)(IO)M, a group"),
    (('"*${ContainerSid}:(OI)(CI)(IO)M"', "'*S-1-5-11:(OI)(CI)(IO)M'"), "grants S-1-5-11:(OI)(CI)(IO)M, a group"),
    # A grant added beside ContainerUser's, to Users (BUILTIN\Users), by name.
    (('"*${ContainerSid}:(OI)(CI)(IO)M"', '"*${ContainerSid}:(OI)(CI)(IO)M", \'Users:(OI)(CI)R\''), "grants Users:(OI)(CI)R, a group"),
    # C:\var no longer locked: the pod folder's siblings (pki) open to every local account.
    (("'C:\\etc', 'C:\\var', 'C:\\run'", "'C:\\etc', 'C:\\run'"), "is not below a locked folder"),
])
def test_the_plan_check_catches(planted, expected):
    old, new = planted
    text = SCRIPT.read_text()
    assert old in text
    problems = _problems(text.replace(old, new, 1).encode())
    assert any(expected in p for p in problems), problems

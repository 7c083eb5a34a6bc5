"""The PowerShell that rendered templates carry inline, so that the parse and the Windows PowerShell
5.1 rules read it as they read the .ps1 files: Packer's powershell provisioner `inline` lines,
the `powershell.exe ... -Command "..."` command lines of Autounattend.xml (run by Windows Setup
under 5.1, as everything else) and the `.ps1` keys of rendered ConfigMaps (the containerd era's
Windows node DaemonSets run them with the node's Windows PowerShell)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from lxml import etree

from k4w.infra import packer_hcl
from k4w.infra.errors import K4wError

# The command after -Command up to the closing quote of the command line (Autounattend's
# CommandLine is one cmd.exe-style line: powershell.exe <options> -Command "<script>").
_COMMAND = re.compile(r'^\s*"?powershell(?:\.exe)?"?\s.*?-Command\s+"(?P<script>.*)"\s*$', re.IGNORECASE | re.DOTALL)
_UNATTEND_NS = "urn:schemas-microsoft-com:unattend"


def packer_inline(template: Path) -> list[tuple[str, str]]:
    """(where, script) for every powershell provisioner with inline lines in a Packer template, and
    every builder's shutdown_command that runs powershell -Command."""
    try:
        data = packer_hcl.load(template)
    except K4wError:
        return []  # not HCL2: packer validate names the syntax error; there is no snippet to read
    found = []
    for number, provisioner in enumerate(data.get("provisioners", []), 1):
        if provisioner.get("type") == "powershell" and provisioner.get("inline"):
            found.append((f"{template.name} provisioner {number} inline", "\n".join(provisioner["inline"])))
    # The builder's shutdown_command is PowerShell too (it disables Administrator and deletes the bake's
    # WinRM key: templates/packer/windows.pkr.hcl.j2), and the last thing a build runs.
    for builder in data.get("builders", []):
        match = _COMMAND.match(str(builder.get("shutdown_command") or ""))
        if match:
            found.append((f"{template.name} {builder.get('type', 'builder')} shutdown_command", match.group("script")))
    return found


def unattend_commands(answer_file: Path) -> list[tuple[str, str]]:
    """(where, script) for every CommandLine of an answer file that runs powershell -Command."""
    try:
        root = etree.fromstring(answer_file.read_bytes())
    except etree.XMLSyntaxError:
        return []  # not XML: the Autounattend rules name the parse error; there is no snippet to read
    found = []
    for element in root.iter(f"{{{_UNATTEND_NS}}}CommandLine"):
        match = _COMMAND.match(element.text or "")
        if match:
            found.append((f"{answer_file.parent.name}/{answer_file.name} line {element.sourceline} CommandLine",
                          match.group("script")))
    return found


def configmap_scripts(manifest: Path) -> list[tuple[str, str]]:
    """(where, script) for every `*.ps1` key of every ConfigMap in a rendered manifest."""
    try:
        documents = [d for d in yaml.safe_load_all(manifest.read_text(encoding="utf-8")) if isinstance(d, dict)]
    except yaml.YAMLError:
        return []  # not YAML: the manifest rules name the parse error; there is no snippet to read
    found = []
    for doc in documents:
        if doc.get("kind") != "ConfigMap":
            continue
        for key, text in (doc.get("data") or {}).items():
            if str(key).endswith(".ps1"):
                found.append((f"{manifest.parent.name}/{manifest.name} ConfigMap {doc['metadata'].get('name')} {key}", str(text)))
    return found


def rendered(out: Path) -> list[tuple[str, str]]:
    """Every inline PowerShell snippet of a rendered OUT."""
    snippets = []
    for template in sorted(out.glob(packer_hcl.GLOB)):
        snippets += packer_inline(template)
    for answer_file in sorted(out.glob("http/*/Autounattend.xml")):
        snippets += unattend_commands(answer_file)
    for manifest in sorted(out.glob("manifests/**/*.yaml")):
        snippets += configmap_scripts(manifest)
    return snippets

"""Structural checks for a rendered Autounattend.xml.

Windows Setup gives no error for most answer-file mistakes: a component with the wrong
architecture or in the wrong pass is silently ignored, and the install stops at a dialog
while Packer waits for WinRM forever. These rules catch the classic mistakes before a build:

- a component in a configuration pass where it is not valid, or a setting (UserAccounts,
  AutoLogon, FirstLogonCommands, ...) in a pass where Setup ignores it;
- a component without processorArchitecture="amd64", Microsoft's publicKeyToken,
  language="neutral" or versionScope="nonSxS";
- a partition layout that does not fit the Hyper-V generation (GPT with EFI+MSR for Gen2,
  MBR with an active system partition for Gen1) or an InstallTo that points elsewhere;
- an image selected by anything but the box profile's choice: /IMAGE/NAME with iso.image_name,
  or /IMAGE/INDEX with iso.index when the profile names no image (k4w/media/iso_images.py checks that
  choice against the ISO itself before a build);
- leading or trailing whitespace in any value (Setup compares values literally);
- PlainText passwords, or encoded ones with the wrong suffix;
- AutoLogon that logs on more than once, a FirstLogonCommand that is too long or expects a
  fixed drive letter for the Setup media;
- proxy values that differ from the configuration (https copied from http, credentials);
- Setup's Dynamic Update not switched off (Microsoft-Windows-Setup DynamicUpdate, windowsPE).

Valid passes are from Microsoft's "Unattended Windows Setup Reference" (component pages).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from k4w.derive.cluster import Cluster
from .result import Result, rel

NS = "urn:schemas-microsoft-com:unattend"
PASSES = ("windowsPE", "offlineServicing", "generalize", "specialize", "auditSystem", "auditUser", "oobeSystem")
REQUIRED_ATTRIBUTES = {
    "processorArchitecture": "amd64",  # x64 media; any other value makes Setup skip the component
    "publicKeyToken": "31bf3856ad364e35",  # Microsoft's component signing key
    "language": "neutral",
    "versionScope": "nonSxS",
}

# Component -> the configuration passes in which it has settings.
COMPONENT_PASSES: dict[str, set[str]] = {
    "Microsoft-Windows-International-Core-WinPE": {"windowsPE"},
    "Microsoft-Windows-International-Core": {"specialize", "oobeSystem"},
    "Microsoft-Windows-Setup": {"windowsPE"},
    "Microsoft-Windows-Shell-Setup": {"offlineServicing", "specialize", "auditSystem", "auditUser", "oobeSystem"},
    "Microsoft-Windows-Deployment": {"generalize", "specialize", "auditSystem", "auditUser", "oobeSystem"},
    "Microsoft-Windows-Security-SPP-UX": {"specialize"},
    "Microsoft-Windows-TerminalServices-LocalSessionManager": {"offlineServicing", "specialize"},
    "Microsoft-Windows-TCPIP": {"windowsPE", "specialize"},
    "Microsoft-Windows-UnattendedJoin": {"specialize"},
    "Microsoft-Windows-PnpCustomizationsWinPE": {"windowsPE"},
    "Microsoft-Windows-PnpCustomizationsNonWinPE": {"offlineServicing", "auditSystem"},
}

# (component, top-level setting) -> passes where Setup applies it (narrower than the component).
SETTING_PASSES: dict[tuple[str, str], set[str]] = {
    ("Microsoft-Windows-Shell-Setup", "UserAccounts"): {"auditSystem", "oobeSystem"},
    ("Microsoft-Windows-Shell-Setup", "AutoLogon"): {"auditSystem", "oobeSystem", "specialize"},
    ("Microsoft-Windows-Shell-Setup", "FirstLogonCommands"): {"oobeSystem"},
    ("Microsoft-Windows-Shell-Setup", "OOBE"): {"oobeSystem"},
    ("Microsoft-Windows-Shell-Setup", "ComputerName"): {"offlineServicing", "specialize"},
    ("Microsoft-Windows-Deployment", "RunSynchronous"): {"specialize", "auditUser"},
    ("Microsoft-Windows-Deployment", "RunAsynchronous"): {"specialize", "auditUser"},
}

# Maximum lengths from the same reference.
MAX_FIRST_LOGON_COMMAND = 1024
MAX_RUN_SYNCHRONOUS_PATH = 259
MAX_DESCRIPTION = 256

PRODUCT_KEY = re.compile(r"^[0-9A-Z]{5}(-[0-9A-Z]{5}){4}$")
URL_CREDENTIALS = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]+:[^/@\s]*@")
# A drive-qualified path other than the system drive, e.g. D:\k4w-bootstrap.ps1 or E:/x.
FIXED_MEDIA_DRIVE = re.compile(r"(?<![A-Za-z0-9])([ABD-Zabd-z]):[\\/]")


@dataclass(frozen=True)
class ExpectedProxy:
    """What the answer file must say about the proxy: host:port values, no credentials."""

    http: str | None
    https: str | None
    no_proxy: str | None


def expected_proxy(proxy) -> ExpectedProxy:
    """From k4w.derive.values.Proxy: the values Autounattend.xml.j2 is meant to render."""
    return ExpectedProxy(
        http=proxy.http_host_port,
        https=proxy.https_host_port,
        no_proxy=proxy.no_proxy_str if proxy.enabled else None,
    )


def _q(tag: str) -> str:
    return f"{{{NS}}}{tag}"


def _local(el) -> str:
    return etree.QName(el).localname


def _text(el, path: str) -> str | None:
    found = el.find(path, {"u": NS})
    return found.text if found is not None else None


def _where(el) -> str:
    return f"line {el.sourceline}"


def check_unattend(xml_text: str, generation: int, image_index: int, proxy=None, image_name: str | None = None) -> list[str]:
    """Problems found in an Autounattend.xml for a Hyper-V VM of this generation (1 or 2).

    image_index and image_name are the box profile's iso.index and iso.image_name: the file must
    select /IMAGE/NAME image_name when a name is given, else /IMAGE/INDEX image_index. proxy, when
    given (a k4w.derive.values.Proxy or ExpectedProxy), is the proxy the file must configure.
    """
    problems: list[str] = []
    try:
        root = etree.fromstring(xml_text.encode("utf-8"), etree.XMLParser(remove_blank_text=False, resolve_entities=False))
    except etree.XMLSyntaxError as exc:
        return [f"not well-formed XML: {exc}"]
    if root.tag != _q("unattend"):
        return [f"root element is {root.tag}, expected <unattend xmlns=\"{NS}\">"]
    if generation not in (1, 2):
        return [f"generation must be 1 or 2, got {generation}"]

    problems += _check_whitespace(root)
    components = _check_passes_and_components(root, problems)
    problems += _check_disks(components, generation)
    problems += _check_image(components, image_index, image_name)
    problems += _check_product_key(components)
    problems += _check_dynamic_update(components)
    problems += _check_passwords(root)
    problems += _check_auto_logon(components)
    problems += _check_commands(components)
    if URL_CREDENTIALS.search(xml_text):
        problems.append("a URL with user:password@ credentials: the answer file stays in the box (C:\\Windows\\Panther)")
    if proxy is not None:
        if not isinstance(proxy, ExpectedProxy):
            proxy = expected_proxy(proxy)
        problems += _check_proxy(components, proxy)
    return problems


# --------------------------------------------------------------------------------------- rules

def _check_whitespace(root) -> list[str]:
    problems = []
    for el in root.iter():
        if not isinstance(el.tag, str) or len(el):
            continue  # comments, containers
        text = el.text or ""
        if text != text.strip():
            problems.append(f"{_where(el)}: <{_local(el)}> value {text!r} has leading/trailing whitespace (Setup compares it literally)")
    return problems


def _check_passes_and_components(root, problems: list[str]) -> dict[str, dict[str, list]]:
    """{pass: {component name: [component elements]}}; appends pass/component problems."""
    components: dict[str, dict[str, list]] = {}
    for settings in root.findall(_q("settings")):
        pass_name = settings.get("pass")
        if pass_name not in PASSES:
            problems.append(f"{_where(settings)}: unknown configuration pass {pass_name!r} (valid: {', '.join(PASSES)})")
            continue
        if pass_name in components:
            problems.append(f"{_where(settings)}: pass {pass_name} appears twice; Setup reads only one")
        by_name = components.setdefault(pass_name, {})
        for comp in settings.findall(_q("component")):
            name = comp.get("name") or ""
            for attr, wanted in REQUIRED_ATTRIBUTES.items():
                if comp.get(attr) != wanted:
                    problems.append(
                        f"{_where(comp)}: component {name} has {attr}={comp.get(attr)!r}, expected {wanted!r} "
                        "(Setup silently ignores a component that does not match the image)"
                    )
            valid = COMPONENT_PASSES.get(name)
            if valid is None:
                problems.append(f"{_where(comp)}: unknown component {name!r}: add it with its valid passes to k4w/validate/unattend_rules.py")
            elif pass_name not in valid:
                problems.append(f"{_where(comp)}: component {name} is not valid in pass {pass_name} (valid: {', '.join(sorted(valid))})")
            if name in by_name:
                problems.append(f"{_where(comp)}: component {name} appears twice in pass {pass_name}")
            by_name.setdefault(name, []).append(comp)
            for child in comp:
                if not isinstance(child.tag, str):
                    continue
                allowed = SETTING_PASSES.get((name, _local(child)))
                if allowed is not None and pass_name not in allowed:
                    problems.append(
                        f"{_where(child)}: {name}/{_local(child)} is ignored in pass {pass_name} (valid: {', '.join(sorted(allowed))})"
                    )
    for required in ("windowsPE", "specialize", "oobeSystem"):
        if required not in components:
            problems.append(f"no <settings pass=\"{required}\">")
    return components


def _one(components, pass_name: str, name: str):
    found = components.get(pass_name, {}).get(name, [])
    return found[0] if found else None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _check_disks(components, generation: int) -> list[str]:
    setup = _one(components, "windowsPE", "Microsoft-Windows-Setup")
    if setup is None:
        return ["no Microsoft-Windows-Setup component in windowsPE: Setup would ask how to partition and what to install"]
    disks = setup.findall("u:DiskConfiguration/u:Disk", {"u": NS})
    if len(disks) != 1:
        return [f"expected exactly one DiskConfiguration/Disk, found {len(disks)}"]
    disk = disks[0]
    problems = []
    if _text(disk, "u:WillWipeDisk") != "true":
        problems.append(f"{_where(disk)}: WillWipeDisk must be true, or Setup stops on a disk that already has partitions")
    creates = {}
    for cp in disk.findall("u:CreatePartitions/u:CreatePartition", {"u": NS}):
        order = _int(_text(cp, "u:Order"))
        creates[order] = {
            "type": _text(cp, "u:Type"),
            "size": _int(_text(cp, "u:Size")),
            "extend": _text(cp, "u:Extend") == "true",
            "el": cp,
        }
    if sorted(creates) != list(range(1, len(creates) + 1)):
        problems.append(f"{_where(disk)}: CreatePartition Order values must be 1..n, found {sorted(k for k in creates if k is not None)}")
        return problems
    modifies = {}
    for mp in disk.findall("u:ModifyPartitions/u:ModifyPartition", {"u": NS}):
        pid = _int(_text(mp, "u:PartitionID"))
        if pid not in creates:
            problems.append(f"{_where(mp)}: ModifyPartition for PartitionID {pid}, which is not created")
            continue
        modifies[pid] = {
            "format": _text(mp, "u:Format"),
            "active": _text(mp, "u:Active"),
            "letter": _text(mp, "u:Letter"),
        }
    types = [creates[i]["type"] for i in sorted(creates)]
    windows_id = max(creates)
    if not creates[windows_id]["extend"] and not creates[windows_id]["size"]:
        problems.append(f"{_where(creates[windows_id]['el'])}: the last (Windows) partition needs Extend=true or a Size")

    if generation == 2:
        # UEFI/GPT: EFI system partition, MSR, Windows (Microsoft's recommended layout).
        if types != ["EFI", "MSR", "Primary"]:
            problems.append(f"Gen2 (UEFI) needs GPT partitions EFI, MSR, Primary in this order; found {', '.join(map(str, types))}")
        else:
            if (creates[1]["size"] or 0) < 100:
                problems.append(f"{_where(creates[1]['el'])}: the EFI partition must be at least 100 MB")
            if creates[2]["size"] != 16:
                problems.append(f"{_where(creates[2]['el'])}: the MSR partition must be 16 MB")
            if modifies.get(1, {}).get("format") != "FAT32":
                problems.append("Gen2: the EFI partition (PartitionID 1) must be formatted FAT32")
        for pid, mod in modifies.items():
            if mod["active"] is not None:
                problems.append(f"Gen2: PartitionID {pid} sets Active, which only exists on MBR disks (Setup fails on GPT)")
    else:
        # BIOS/MBR: active System Reserved partition, then Windows.
        if "EFI" in types or "MSR" in types:
            problems.append(f"Gen1 (BIOS) boots from MBR: EFI/MSR partitions make Setup fail; found {', '.join(map(str, types))}")
        elif types != ["Primary", "Primary"]:
            problems.append(f"Gen1 (BIOS) needs two Primary partitions (System Reserved, Windows); found {', '.join(map(str, types))}")
        else:
            if modifies.get(1, {}).get("active") != "true":
                problems.append("Gen1: the System Reserved partition (PartitionID 1) must be Active, or the BIOS finds nothing to boot")
            if modifies.get(1, {}).get("format") != "NTFS":
                problems.append("Gen1: the System Reserved partition (PartitionID 1) must be formatted NTFS")
    if modifies.get(windows_id, {}).get("format") != "NTFS":
        problems.append(f"the Windows partition (PartitionID {windows_id}) must be formatted NTFS")

    install_to = setup.find("u:ImageInstall/u:OSImage/u:InstallTo", {"u": NS})
    if install_to is None:
        problems.append("no ImageInstall/OSImage/InstallTo: Setup would ask where to install")
    else:
        if _text(install_to, "u:DiskID") != _text(disk, "u:DiskID"):
            problems.append(f"{_where(install_to)}: InstallTo DiskID {_text(install_to, 'u:DiskID')} is not the configured disk {_text(disk, 'u:DiskID')}")
        if _int(_text(install_to, "u:PartitionID")) != windows_id:
            problems.append(
                f"{_where(install_to)}: InstallTo PartitionID {_text(install_to, 'u:PartitionID')} is not the Windows partition "
                f"({windows_id} for Gen{generation})"
            )
    return problems


def _check_image(components, image_index: int, image_name: str | None = None) -> list[str]:
    setup = _one(components, "windowsPE", "Microsoft-Windows-Setup")
    if setup is None:
        return []
    metadata = setup.findall("u:ImageInstall/u:OSImage/u:InstallFrom/u:MetaData", {"u": NS})
    keys = [(_text(m, "u:Key"), _text(m, "u:Value"), m) for m in metadata]
    if not keys:
        return ["no InstallFrom/MetaData: on media with several images Setup stops to ask which one"]
    wanted_key, wanted = ("/IMAGE/NAME", image_name) if image_name else ("/IMAGE/INDEX", str(image_index))
    why = "the box profile's iso.image_name" if image_name else "the box profile's iso.index (it sets no iso.image_name)"
    problems = []
    if len(keys) > 1:
        problems.append(f"{len(keys)} InstallFrom/MetaData entries: Setup needs exactly one image selection")
    for key, value, el in keys:
        if key != wanted_key:
            problems.append(f"{_where(el)}: image selected by {key!r}; it must be {wanted_key}, {why}")
        elif value != wanted:
            problems.append(f"{_where(el)}: {key} is {value!r}, but {why} is {wanted!r}")
    return problems


def _check_product_key(components) -> list[str]:
    setup = _one(components, "windowsPE", "Microsoft-Windows-Setup")
    if setup is None:
        return []
    problems = []
    for pk in setup.findall("u:UserData/u:ProductKey", {"u": NS}):
        key = _text(pk, "u:Key")
        if not key or not PRODUCT_KEY.match(key):
            problems.append(f"{_where(pk)}: ProductKey/Key {key!r} is not a 25-character key; Setup stops on the key page (omit the element instead)")
        if _text(pk, "u:WillShowUI") not in ("OnError", "Never"):
            problems.append(f"{_where(pk)}: ProductKey/WillShowUI should be OnError, so Setup only asks when the key does not fit")
    return problems


def _check_dynamic_update(components) -> list[str]:
    """Setup's Dynamic Update fetches Setup files, drivers and updates from Windows Update during the
    windowsPE pass: unpinned content (the box's patch level is the pinned LCU's or the ISO's, DESIGN
    "Boxes are patched at bake time where a pinned update exists"), through no proxy (WinPE has none
    of ours) and with a timeout only Setup knows. "Unattended Windows Setup Reference",
    Microsoft-Windows-Setup | DynamicUpdate: Enable true/false and WillShowUI Always/OnError/Never,
    valid in windowsPE only. The reference calls false the default, but a default is what Setup decides
    (setupconfig.ini and the media can change it); so the file says Enable=false and WillShowUI=Never."""
    setup = _one(components, "windowsPE", "Microsoft-Windows-Setup")
    if setup is None:
        return ["windowsPE: no Microsoft-Windows-Setup component to switch Dynamic Update off in"]
    updates = setup.findall("u:DynamicUpdate", {"u": NS})
    if len(updates) != 1:
        return [f"{_where(setup)}: {len(updates)} DynamicUpdate elements; one, with Enable false and WillShowUI Never, "
                f"keeps Setup from fetching unpinned updates from Windows Update"]
    problems = []
    if _text(updates[0], "u:Enable") != "false":
        problems.append(f"{_where(updates[0])}: DynamicUpdate/Enable is {_text(updates[0], 'u:Enable')!r}, not 'false': Setup "
                        f"would fetch unpinned updates from Windows Update, past the proxy")
    if _text(updates[0], "u:WillShowUI") != "Never":
        problems.append(f"{_where(updates[0])}: DynamicUpdate/WillShowUI is {_text(updates[0], 'u:WillShowUI')!r}, not 'Never': "
                        f"an unattended Setup must not stop on a Dynamic Update page")
    return problems


def _check_passwords(root) -> list[str]:
    problems = []
    for tag, suffix in (("AdministratorPassword", "AdministratorPassword"), ("Password", "Password")):
        for el in root.iter(_q(tag)):
            value = el.find(_q("Value"))
            if value is None:
                continue  # e.g. Credentials/Password of RunSynchronous has no Value child
            plain = el.find(_q("PlainText"))
            if plain is None or plain.text != "false":
                problems.append(f"{_where(el)}: <{tag}> must have <PlainText>false</PlainText> (an encoded value, not the password in clear)")
                continue
            try:
                decoded = base64.b64decode(value.text or "", validate=True).decode("utf-16-le")
            except (binascii.Error, UnicodeDecodeError):
                problems.append(f"{_where(value)}: <{tag}> value is not the base64 UTF-16LE encoding Setup expects with PlainText=false")
                continue
            if not decoded.endswith(suffix) or decoded == suffix:
                problems.append(f"{_where(value)}: <{tag}> value must encode password + {suffix!r} (Windows SIM convention)")
    return problems


def _check_auto_logon(components) -> list[str]:
    shell = _one(components, "oobeSystem", "Microsoft-Windows-Shell-Setup")
    if shell is None:
        return ["no Microsoft-Windows-Shell-Setup in oobeSystem: no accounts, no first-logon bootstrap"]
    problems = []
    auto = shell.find(_q("AutoLogon"))
    if auto is None:
        return ["no AutoLogon in oobeSystem: nobody logs on, so FirstLogonCommands never run"]
    if _text(auto, "u:Enabled") != "true":
        problems.append(f"{_where(auto)}: AutoLogon must be Enabled for the first-logon bootstrap")
    if _text(auto, "u:LogonCount") != "1":
        problems.append(f"{_where(auto)}: AutoLogon LogonCount must be 1 (log on once, for the bootstrap only)")
    if not _text(auto, "u:Username"):
        problems.append(f"{_where(auto)}: AutoLogon needs a Username")
    return problems


def _first_logon_commands(components) -> list:
    shell = _one(components, "oobeSystem", "Microsoft-Windows-Shell-Setup")
    if shell is None:
        return []
    return shell.findall("u:FirstLogonCommands/u:SynchronousCommand", {"u": NS})


def _check_commands(components) -> list[str]:
    problems = []
    commands = _first_logon_commands(components)
    if len(commands) != 1:
        problems.append(f"expected exactly one FirstLogonCommands/SynchronousCommand (the bootstrap), found {len(commands)}")
    for cmd in commands:
        line = _text(cmd, "u:CommandLine") or ""
        if len(line) > MAX_FIRST_LOGON_COMMAND:
            problems.append(f"{_where(cmd)}: CommandLine is {len(line)} characters; Setup's limit is {MAX_FIRST_LOGON_COMMAND} (shorten no_proxy?)")
        if len(_text(cmd, "u:Description") or "") > MAX_DESCRIPTION:
            problems.append(f"{_where(cmd)}: Description is longer than {MAX_DESCRIPTION} characters")
        if '-Command "' in line and line.count('"') != 2:
            problems.append(f"{_where(cmd)}: CommandLine has a double quote inside its -Command \"...\" argument, which ends it early (a proxy or no_proxy value with '\"'?)")
        if FIXED_MEDIA_DRIVE.search(line):
            problems.append(f"{_where(cmd)}: CommandLine uses a fixed drive letter; the Setup media letter varies, scan for the bootstrap instead")
    for pass_name, comps in components.items():
        for comp in comps.get("Microsoft-Windows-Deployment", []):
            for cmd in comp.findall("u:RunSynchronous/u:RunSynchronousCommand", {"u": NS}):
                path = _text(cmd, "u:Path") or ""
                if len(path) > MAX_RUN_SYNCHRONOUS_PATH:
                    problems.append(f"{_where(cmd)}: RunSynchronousCommand Path is {len(path)} characters; the limit is {MAX_RUN_SYNCHRONOUS_PATH}")
    return problems


def _arguments(command_line: str) -> dict[str, str]:
    """-Name 'value' pairs after the bootstrap call ("& $s ...") in a command line."""
    tail = command_line.split("& $s", 1)[1] if "& $s" in command_line else ""
    # PowerShell single-quoted literals: a doubled quote '' stands for one quote.
    return {m.group(1): m.group(2).replace("''", "'") for m in re.finditer(r"-(\w+)\s+'((?:[^']|'')*)'", tail)}


def bootstrap_arguments(xml_text: str) -> dict[str, str]:
    """The -Name 'value' arguments the FirstLogonCommand passes to k4w-bootstrap.ps1."""
    root = etree.fromstring(xml_text.encode("utf-8"))
    line = root.findtext(f".//{_q('FirstLogonCommands')}/{_q('SynchronousCommand')}/{_q('CommandLine')}") or ""
    return _arguments(line)


def _check_proxy(components, proxy: ExpectedProxy) -> list[str]:
    commands = _first_logon_commands(components)
    if not commands:
        return []
    args = _arguments(_text(commands[0], "u:CommandLine") or "")
    problems = []
    for name, wanted in (("HttpProxy", proxy.http), ("HttpsProxy", proxy.https), ("NoProxy", proxy.no_proxy)):
        got = args.get(name)
        if got == wanted:
            continue
        if name == "HttpsProxy" and got is not None and got == args.get("HttpProxy"):
            problems.append(f"the bootstrap's https proxy {got!r} was copied from the http proxy; the configuration says {wanted!r}")
        elif wanted is None:
            problems.append(f"the bootstrap gets -{name} {got!r}, but no such proxy is configured")
        else:
            problems.append(f"the bootstrap's -{name} is {got!r}, expected {wanted!r}")
    return problems


__all__ = ["check_unattend", "bootstrap_arguments", "expected_proxy", "ExpectedProxy", "COMPONENT_PASSES", "SETTING_PASSES"]


# ------------------------------------------------------------------ the validator (k4w.validate.VALIDATORS)


def _windows_boxes(cluster: Cluster) -> list[str]:
    return [box for box, prof in cluster.profiles.items() if prof.is_windows]


def run(cluster: Cluster, out: Path) -> Result:
    res = Result("Autounattend.xml", "lxml + structural rules")
    for box in _windows_boxes(cluster):
        prof = cluster.profile(box)
        path = out / "http" / box / "Autounattend.xml"
        res.checked.append(rel(path))
        if not path.is_file():
            res.problems.append(f"{rel(path)}: not rendered")
            continue
        build = prof.data.get("build", {})
        problems = check_unattend(
            path.read_text(encoding="utf-8"), int(build.get("generation", 2)), int(prof.data.iso.index), proxy=cluster.proxy,
            image_name=prof.data.iso.get("image_name"),
        )
        res.problems += [f"{rel(path)}: {p}" for p in problems]
    return res


def would_run(cluster: Cluster, out: Path, rendered: Collection[str]) -> list[str]:
    return [f"# in this process: structural rules on {out / 'http' / box / 'Autounattend.xml'}" for box in _windows_boxes(cluster)]

"""The Packer command line: the build command, its environment, and the host preflight."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Iterable

from k4w.infra import packer_hcl, pinned_tools, proc, tools
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact

from k4w.infra.tools import INSTALL

PACKER = "packer"
# The oldest Packer the HCL2 templates are written for and validated with (tools/lock.yml: the
# newest MPL-2.0 release the Go module proxy serves). It reads required_plugins and runs
# `packer init`, which installs exactly the plugin versions a template pins.
MIN_VERSION = (1, 9, 4)

# Which external plugin provides a builder / post-processor type once plugins are unbundled.
BUILDER_PLUGINS = {
    "hyperv-iso": "github.com/hashicorp/hyperv",
    "hyperv-vmcx": "github.com/hashicorp/hyperv",
    "qemu": "github.com/hashicorp/qemu",
}
POST_PROCESSOR_PLUGINS = {"vagrant": "github.com/hashicorp/vagrant"}

# Packer's cd_files/cd_content look these up on PATH ("could not find a supported CD ISO
# creation command (the supported commands are: xorriso, mkisofs, hdiutil, oscdimg)").
ISO_TOOLS = ("xorriso", "mkisofs", "hdiutil", "oscdimg")
# The first of them, as Debian/Ubuntu install it (the preflight and doctor give this fix).
ISO_TOOL_INSTALL = "apt-get install -y xorriso"
# The UEFI firmware of every qemu source (the templates read it from here): OVMF as Debian 12's and Ubuntu's ovmf
# package installs it (2022.11-6+deb12u2: /usr/share/OVMF); the 4M CODE file pairs with the 4M VARS template,
# which packer-plugin-qemu copies per build (step_prepare_efivars.go at v1.0.9).
UEFI_FIRMWARE = {"code": "/usr/share/OVMF/OVMF_CODE_4M.fd", "vars": "/usr/share/OVMF/OVMF_VARS_4M.fd"}
UEFI_FIRMWARE_INSTALL = "apt-get install -y ovmf"
# The qemu source's fields that name firmware files on the host (packer-plugin-qemu v1.0.9 builder/qemu/config.go).
FIRMWARE_FIELDS = ("efi_firmware_code", "efi_firmware_vars", "firmware")
# Where the Windows ADK "Deployment Tools" feature installs oscdimg.exe (not on PATH by default).
ADK_OSCDIMG = Path(r"C:\Program Files (x86)\Windows Kits\10\Assessment and Deployment Kit\Deployment Tools\amd64\Oscdimg")

# PACKER_LOG turns on Packer's debug log on stderr, which we merge into the transcript:
# it floods the progress view and can echo provisioner environment values.
ENV_REMOVED = ("PACKER_LOG", "PACKER_LOG_PATH")
# The proxy variables Packer's downloads read (Go's net/http ProxyFromEnvironment: either case).
# cluster.yml alone decides them, as for every host-side download (k4w/infra/download.py): the
# host's own values are dropped, cluster.yml's set.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
# Packer reaches the build VM over WinRM at the address the management switch's DHCP gave it,
# and its WinRM client (masterzen/winrm) sends requests through the environment's proxy
# (http.ProxyFromEnvironment). That address is private (RFC 1918), and Packer needs the proxy
# only for public downloads (the Ubuntu ISO): private ranges always bypass it.
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


def init_command(template: Path, packer: str = PACKER) -> list[str]:
    """Installs the template's required_plugins; a no-op when they are installed (the pinned cache
    in CI, where it needs no network; a user's ~/.config/packer/plugins after the first build)."""
    return [packer, "init", str(template)]


def build_command(template: Path, packer: str = PACKER, variables: dict[str, str] | None = None) -> list[str]:
    """variables: input variables given as -var name=value, which win over a default and a
    PKR_VAR_ value (packer_hcl.VAR_ENV_PREFIX says where); never a secret (the command line is
    logged and others can read it), those come from the environment."""
    # -force: replace a stale packer-vm/<box> left by an earlier run.
    # -on-error=cleanup: delete the VM on failure; the full log is kept in OUT/logs.
    given = [arg for name, value in (variables or {}).items() for arg in ("-var", f"{name}={value}")]
    return [packer, "build", "-machine-readable", "-force", "-on-error=cleanup", *given, str(template)]


def given_variables(argv: list[str]) -> dict[str, str]:
    """The -var name=value (or -var=name=value) pairs of a Packer command line; the value is all
    after the first "=" (hashicorp/packer@v1.9.4 command/flag-kv/flag.go, the -var flag of command/cli.go)."""
    values: dict[str, str] = {}
    for i, arg in enumerate(argv):
        pair = argv[i + 1] if arg in ("-var", "--var") and i + 1 < len(argv) else \
            arg.split("=", 1)[1] if arg.startswith(("-var=", "--var=")) else None
        if pair is not None and "=" in pair:
            name, value = pair.split("=", 1)
            values[name] = value
    return values



def variable_values(template: dict, environ: dict[str, str]) -> dict[str, str]:
    """A parsed template's input variables as Packer gives them for a build with environ."""
    return packer_hcl.variable_values(template, environ)


def plugin_env(packer: str | None = None) -> dict[str, str]:
    """PACKER_PLUGIN_PATH for the pinned Packer: the cache's plugins, in Packer's installed layout,
    so that `packer init` finds them and reaches no network. A user's own Packer keeps its own."""
    if tools.is_pinned(packer if packer is not None else packer_path(), PACKER):
        return {"PACKER_PLUGIN_PATH": str(pinned_tools.packer_plugin_path())}
    return {}


def build_env(out: Path, secrets: dict[str, str], proxy: dict[str, str] | None = None,
              base: dict[str, str] | None = None) -> dict[str, str]:
    """Packer's whole environment. proxy: packer_proxy_env(cluster.proxy); the host's own proxy
    variables never reach Packer."""
    env = dict(os.environ if base is None else base)
    for name in ENV_REMOVED + PROXY_VARIABLES:
        env.pop(name, None)
    env.update(proxy or {})
    # HashiCorp's checkpoint service phones home for update notices; behind a proxy it only stalls.
    env["CHECKPOINT_DISABLE"] = "1"
    # Keep downloaded ISOs (Ubuntu's remote fallback) under OUT, not in the current directory.
    env["PACKER_CACHE_DIR"] = str(Path(out) / "cache" / "packer")
    env.update(plugin_env())
    env.update(secrets)
    return env


def describe_command(cmd: list[str], out: Path, secret_sources: dict[str, str],
                     proxy: dict[str, str] | None = None, first: list[str] | None = None) -> list[str]:
    """Lines that show exactly what would run (first, e.g. packer init, then cmd), naming secret
    variables but never their values (proxy credentials redacted)."""
    proxy = proxy or {}
    settings = build_env(out, {}, proxy, base={})
    lines = [f"cd {shlex.quote(str(out))}"]
    for name, where in secret_sources.items():
        lines.append(f"export {name}=<secret from {where}>")
    for name in ("CHECKPOINT_DISABLE", "PACKER_CACHE_DIR", *plugin_env(), *proxy):
        lines.append(redact(f"export {name}={shlex.quote(settings[name])}"))
    unset = [name for name in ENV_REMOVED + PROXY_VARIABLES if name not in proxy]
    lines.append("unset " + " ".join(unset))
    if first:
        lines.append(shlex.join(first))
    lines.append(shlex.join(cmd))
    return lines


# ------------------------------------------------------------------ versions and plugins


def packer_path(packer: str = PACKER) -> str | None:
    """The Packer k4w runs: the pinned cache's when built, else PATH's (k4w.infra.tools.find)."""
    return tools.find(packer) if packer == PACKER else shutil.which(packer)


def packer_version(packer: str = PACKER) -> tuple[int, int, int] | None:
    """(major, minor, patch) of the installed Packer, or None when it is not installed."""
    exe = packer_path(packer)
    if not exe:
        return None
    try:
        text = proc.run([exe, "-machine-readable", "version"], timeout=60).output
    except (OSError, K4wError):
        return None
    # machine-readable: "<ts>,,version,1.6.6"; human: "Packer v1.6.6"
    match = re.search(r",version,v?(\d+)\.(\d+)\.(\d+)", text) or re.search(r"Packer v(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def version_str(version: tuple[int, ...] | None) -> str | None:
    return ".".join(map(str, version)) if version else None


def installed_plugins(packer: str = PACKER) -> dict[str, set[str]]:
    """Plugin source -> versions, from `packer plugins installed` (a command since Packer 1.8;
    hashicorp/packer@v1.9.4 (ae9daec1) command/plugins_installed.go), e.g.
    {"github.com/hashicorp/hyperv": {"1.0.4"}}. Run with the same PACKER_PLUGIN_PATH as a build."""
    exe = packer_path(packer)
    if not exe:
        return {}
    try:
        result = proc.run([exe, "plugins", "installed"], env={**os.environ, **plugin_env(exe)}, timeout=60)
    except (OSError, K4wError):
        return {}
    found: dict[str, set[str]] = {}
    for line in result.stdout.splitlines():
        # One binary path per line, e.g. ~/.config/packer/plugins/github.com/hashicorp/hyperv/packer-plugin-hyperv_v1.0.4_x5.0_linux_amd64
        match = re.search(r"(github\.com/[^/]+/[^/]+)/packer-plugin-[^/_]+_v(\d+\.\d+\.\d+)_", line.replace("\\", "/"))
        if match:
            found.setdefault(match.group(1), set()).add(match.group(2))
    return found


_PINNED_VERSION = re.compile(r"^\s*=?\s*v?(\d+\.\d+\.\d+)\s*$")


def required_plugins(template: dict) -> dict[str, str | None]:
    """Source -> the exact version the template's required_plugins pins (None for a range)."""
    found = {}
    for entry in (template.get("required_plugins") or {}).values():
        match = _PINNED_VERSION.match(str(entry.get("version", "")))
        found[str(entry.get("source"))] = match.group(1) if match else None
    return found


def template_needs(template: dict) -> tuple[set[str], bool]:
    """(plugin sources the template's builders/post-processors need, whether it builds a CD)."""
    plugins: set[str] = set(required_plugins(template))
    needs_cd = False
    for builder in template.get("builders", []):
        if builder.get("type") in BUILDER_PLUGINS:
            plugins.add(BUILDER_PLUGINS[builder["type"]])
        if builder.get("cd_files") or builder.get("cd_content"):
            needs_cd = True
    for entry in template.get("post-processors", []):
        for pp in entry if isinstance(entry, list) else [entry]:
            kind = pp if isinstance(pp, str) else pp.get("type")
            if kind in POST_PROCESSOR_PLUGINS:
                plugins.add(POST_PROCESSOR_PLUGINS[kind])
    return plugins, needs_cd


def missing_firmware(templates: Iterable[dict]) -> list[str]:
    """Each firmware file a template's qemu source names that this host lacks (Packer would stop only when the
    VM starts, after the ISO download)."""
    return sorted({f"{builder.get('name', 'qemu')}.{key} = {builder[key]}"
                   for tpl in templates for builder in tpl.get("builders", []) if builder.get("type") == "qemu"
                   for key in FIRMWARE_FIELDS if builder.get(key) and not Path(builder[key]).is_file()})


def iso_tool() -> str | None:
    for tool in ISO_TOOLS:
        if shutil.which(tool):
            return tool
    return None


def packer_preflight(templates: Iterable[dict] = (), packer: str = PACKER) -> list[str]:
    """Problems that would stop a box build on this host; empty when ready.

    templates: rendered Packer templates (k4w.infra.packer_hcl.parse). Without any, assume the default
    Hyper-V boxes: hyperv-iso builder, vagrant post-processor and cd_files, at the pinned versions.
    """
    templates = list(templates)
    wanted: dict[str, str | None] = {}
    needs_cd = False
    for tpl in templates:
        p, cd = template_needs(tpl)
        wanted.update({source: required_plugins(tpl).get(source) for source in p})
        needs_cd |= cd
    if not templates:
        pins = pinned_tools.packer_pins()
        wanted = {BUILDER_PLUGINS["hyperv-iso"]: pins["hyperv"], POST_PROCESSOR_PLUGINS["vagrant"]: pins["vagrant"]}
        needs_cd = True

    problems: list[str] = []
    version = packer_version(packer)
    if not packer_path(packer):
        problems.append(f"packer is not installed (need {version_str(MIN_VERSION)} or later). Install it with: {INSTALL['packer']}")
    elif version is None:
        problems.append(f"could not read the version of {packer_path(packer)} (`packer -machine-readable version`)")
    elif version < MIN_VERSION:
        problems.append(f"packer {version_str(version)} is too old: the HCL2 templates need {version_str(MIN_VERSION)} or "
                        f"later (required_plugins, packer init). Upgrade with: {INSTALL['packer']}")
    else:
        # build-* runs `packer init` first, which would fetch a missing plugin from GitHub; said
        # here so that a host without that access learns it before a build.
        installed = installed_plugins(packer)
        for source, pinned in sorted(wanted.items()):
            have = installed.get(source, set())
            if pinned is None and have or pinned in have:
                continue
            name = source.rsplit("/", 1)[-1]
            found = f"only {', '.join(sorted(have))} is installed" if have else "it is not installed"
            problems.append(
                f"the templates need the Packer plugin {source} {pinned or ''}".rstrip() + f" and {found}."
                f" Install it with: packer plugins install {source}{' ' + pinned if pinned else ''}"
                f" (or packer init OUT/packer/<box>.pkr.hcl; on Linux bash scripts/setup.sh builds the pinned {name} plugin)"
            )
    if missing := missing_firmware(templates):
        problems.append(f"the UEFI firmware the qemu builds boot is not on this host ({'; '.join(missing)}). "
                        f"Install it with: {UEFI_FIRMWARE_INSTALL}")
    if needs_cd and not iso_tool():
        hint = ""
        if ADK_OSCDIMG.joinpath("oscdimg.exe").exists():
            hint = f" oscdimg is installed at {ADK_OSCDIMG}: add that folder to PATH."
        problems.append(
            "Packer's cd_files needs an ISO authoring tool on PATH (one of: "
            + ", ".join(ISO_TOOLS)
            + "). On Windows install the Windows ADK 'Deployment Tools' feature and add its Oscdimg folder"
            f" to PATH; on Debian/Ubuntu: {ISO_TOOL_INSTALL}."
            + hint
        )
    return problems

"""The Packer command line: the build command, its environment, and the host preflight."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Iterable

from .. import proc
from ..derive import Proxy
from ..errors import K4wError
from ..redact import redact
from ..tools import INSTALL

PACKER = "packer"
# The oldest Packer the templates are validated with (Debian's packer package in CI).
MIN_VERSION = (1, 6, 6)
# Packer 1.10.0 stopped bundling plugins: hyperv, vagrant and qemu must be installed
# ("Announcing the removal of bundled plugins in HashiCorp Packer", Packer 1.10.0 release).
PLUGINS_SINCE = (1, 10, 0)

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
# Where the Windows ADK "Deployment Tools" feature installs oscdimg.exe (not on PATH by default).
ADK_OSCDIMG = Path(r"C:\Program Files (x86)\Windows Kits\10\Assessment and Deployment Kit\Deployment Tools\amd64\Oscdimg")

# PACKER_LOG turns on Packer's debug log on stderr, which we merge into the transcript:
# it floods the progress view and can echo provisioner environment values.
ENV_REMOVED = ("PACKER_LOG", "PACKER_LOG_PATH")
# The proxy variables Packer's downloads read (Go's net/http ProxyFromEnvironment: either case).
# cluster.yml alone decides them, as for every host-side download (k4w/bake/download.py): the
# host's own values are dropped, cluster.yml's set.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
# Packer reaches the build VM over WinRM at the address the management switch's DHCP gave it,
# and its WinRM client (masterzen/winrm) sends requests through the environment's proxy
# (http.ProxyFromEnvironment). That address is private (RFC 1918), and Packer needs the proxy
# only for public downloads (the Ubuntu ISO): private ranges always bypass it.
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


def build_command(template: Path, packer: str = PACKER) -> list[str]:
    # -force: replace a stale packer-vm/<box> left by an earlier run.
    # -on-error=cleanup: delete the VM on failure; the full log is kept in OUT/logs.
    return [packer, "build", "-machine-readable", "-force", "-on-error=cleanup", str(template)]


def proxy_env(proxy: Proxy) -> dict[str, str]:
    """cluster.yml's proxy as Packer's environment (empty without one): Packer downloads the
    Ubuntu ISO itself when iso/ has none."""
    env = dict(proxy.env)
    if proxy.enabled:
        no_proxy = ",".join([*PRIVATE_RANGES, *(n for n in proxy.no_proxy if n not in PRIVATE_RANGES)])
        env.update(NO_PROXY=no_proxy, no_proxy=no_proxy)
    return env


_ENV_REF = re.compile(r"\{\{\s*env\s+`([^`]*)`\s*\}\}")


def variable_values(template: dict, environ: dict[str, str]) -> dict[str, str]:
    """A JSON template's user variables as Packer gives them for a build with environ: an
    {{env `X`}} in a default reads environ ("" when unset), as Packer's env function does."""
    return {name: _ENV_REF.sub(lambda m: environ.get(m.group(1), ""), str(value))
            for name, value in (template.get("variables") or {}).items()}


def build_env(out: Path, secrets: dict[str, str], proxy: dict[str, str] | None = None,
              base: dict[str, str] | None = None) -> dict[str, str]:
    """Packer's whole environment. proxy: proxy_env(cluster.proxy); the host's own proxy
    variables never reach Packer."""
    env = dict(os.environ if base is None else base)
    for name in ENV_REMOVED + PROXY_VARIABLES:
        env.pop(name, None)
    env.update(proxy or {})
    # HashiCorp's checkpoint service phones home for update notices; behind a proxy it only stalls.
    env["CHECKPOINT_DISABLE"] = "1"
    # Keep downloaded ISOs (Ubuntu's remote fallback) under OUT, not in the current directory.
    env["PACKER_CACHE_DIR"] = str(Path(out) / "cache" / "packer")
    env.update(secrets)
    return env


def describe_command(cmd: list[str], out: Path, secret_sources: dict[str, str],
                     proxy: dict[str, str] | None = None) -> list[str]:
    """Lines that show exactly what would run, naming secret variables but never their values
    (proxy credentials redacted)."""
    proxy = proxy or {}
    settings = build_env(out, {}, proxy, base={})
    lines = [f"cd {shlex.quote(str(out))}"]
    for name, where in secret_sources.items():
        lines.append(f"export {name}=<secret from {where}>")
    for name in ("CHECKPOINT_DISABLE", "PACKER_CACHE_DIR", *proxy):
        lines.append(redact(f"export {name}={shlex.quote(settings[name])}"))
    unset = [name for name in ENV_REMOVED + PROXY_VARIABLES if name not in proxy]
    lines.append("unset " + " ".join(unset))
    lines.append(shlex.join(cmd))
    return lines


# ------------------------------------------------------------------ versions and plugins


def packer_path(packer: str = PACKER) -> str | None:
    return shutil.which(packer)


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


def installed_plugins(packer: str = PACKER) -> set[str]:
    """Plugin sources found by `packer plugins installed` (1.10+), e.g. github.com/hashicorp/hyperv."""
    exe = packer_path(packer)
    if not exe:
        return set()
    try:
        result = proc.run([exe, "plugins", "installed"], timeout=60)
    except (OSError, K4wError):
        return set()
    found = set()
    for line in result.stdout.splitlines():
        # One binary path per line, e.g. ~/.config/packer/plugins/github.com/hashicorp/hyperv/packer-plugin-hyperv_v1.1.3_x5.0_linux_amd64
        match = re.search(r"(github\.com/[^/]+/[^/]+)/packer-plugin-", line.replace("\\", "/"))
        if match:
            found.add(match.group(1))
    return found


def template_needs(template: dict) -> tuple[set[str], bool]:
    """(plugin sources the template's builders/post-processors need, whether it builds a CD)."""
    plugins: set[str] = set()
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


def iso_tool() -> str | None:
    for tool in ISO_TOOLS:
        if shutil.which(tool):
            return tool
    return None


def packer_preflight(templates: Iterable[dict] = (), packer: str = PACKER) -> list[str]:
    """Problems that would stop a box build on this host; empty when ready.

    templates: rendered Packer templates (parsed JSON). Without any, assume the default
    Hyper-V boxes: hyperv-iso builder, vagrant post-processor and cd_files.
    """
    templates = list(templates)
    if templates:
        plugins: set[str] = set()
        needs_cd = False
        for tpl in templates:
            p, cd = template_needs(tpl)
            plugins |= p
            needs_cd |= cd
    else:
        plugins, needs_cd = {BUILDER_PLUGINS["hyperv-iso"], POST_PROCESSOR_PLUGINS["vagrant"]}, True

    problems: list[str] = []
    version = packer_version(packer)
    if not packer_path(packer):
        problems.append(f"packer is not installed (need {version_str(MIN_VERSION)} or later). Install it with: {INSTALL['packer']}")
    elif version is None:
        problems.append(f"could not read the version of {packer_path(packer)} (`packer -machine-readable version`)")
    elif version < MIN_VERSION:
        problems.append(f"packer {version_str(version)} is too old: need {version_str(MIN_VERSION)} or later. Upgrade with: {INSTALL['packer']}")
    elif version >= PLUGINS_SINCE:
        missing = sorted(plugins - installed_plugins(packer))
        for source in missing:
            problems.append(
                f"packer {version_str(version)} no longer bundles plugins and {source} is not installed."
                f" Install it with: packer plugins install {source}"
            )
    if needs_cd and not iso_tool():
        hint = ""
        if ADK_OSCDIMG.joinpath("oscdimg.exe").exists():
            hint = f" oscdimg is installed at {ADK_OSCDIMG}: add that folder to PATH."
        problems.append(
            "Packer's cd_files needs an ISO authoring tool on PATH (one of: "
            + ", ".join(ISO_TOOLS)
            + "). On Windows install the Windows ADK 'Deployment Tools' feature and add its Oscdimg folder"
            " to PATH; on Debian/Ubuntu: apt-get install -y xorriso."
            + hint
        )
    return problems

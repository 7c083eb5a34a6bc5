"""Turn `vagrant ssh-config` / `vagrant winrm-config` output into testinfra host URLs.

Linux guests are reached with OpenSSH through the very config Vagrant prints (written to a
file and passed as `--ssh-config`), so key paths, ports and host-key settings are used
exactly as Vagrant meant them. Windows guests are reached with testinfra's winrm backend.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from k4w.infra.errors import K4wError

# WinRM's HTTPS listener port (Microsoft: "Installation and configuration for Windows Remote
# Management", default ports 5985 HTTP / 5986 HTTPS). Vagrant prints the port it will use.
WINRM_HTTPS_PORT = 5986


@dataclass(frozen=True)
class SshHost:
    alias: str  # the `Host` name: what ssh is given, resolved through the config file
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()

    def url(self) -> str:
        """testinfra host spec; connection details come from the --ssh-config file."""
        return f"ssh://{self.alias}"


@dataclass(frozen=True)
class WinrmHost:
    alias: str
    hostname: str
    port: int
    user: str
    password: str = field(repr=False)

    def url(self) -> str:
        """testinfra winrm host spec (NTLM). Self-signed HTTPS listeners are not verified."""
        user = urllib.parse.quote(self.user, safe="")
        password = urllib.parse.quote(self.password, safe="")
        options = "no_verify_ssl=true" if self.port == WINRM_HTTPS_PORT else "no_ssl=true"
        return f"winrm://{user}:{password}@{self.hostname}:{self.port}?{options}"


def _blocks(text: str, source: str) -> list[tuple[str, dict[str, list[str]]]]:
    """`Host NAME` blocks of an ssh_config-like text: [(name, {lowercase key: [values]})]."""
    blocks: list[tuple[str, dict[str, list[str]]]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        key, value = key.lower(), value.strip()
        if key == "host":
            blocks.append((value, {}))
            continue
        if not blocks:
            # Vagrant prints nothing before the first Host; anything else is not its output.
            raise K4wError(f"{source}: line {number} comes before any 'Host' line: {raw!r}")
        # ssh_config allows "Key Value", "Key=Value" and a quoted value (a path with spaces).
        # No shell-style unescaping: Windows paths keep their backslashes.
        if "=" in key and not value:
            key, _, value = key.partition("=")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        blocks[-1][1].setdefault(key, []).append(value)
    return blocks


def _one(values: dict[str, list[str]], key: str, host: str, source: str) -> str:
    found = values.get(key)
    if not found or not found[0]:
        raise K4wError(f"{source}: host '{host}' has no {key!r} line")
    return found[0]


def parse_ssh_config(text: str, source: str = "vagrant ssh-config") -> list[SshHost]:
    hosts = []
    for alias, values in _blocks(text, source):
        hosts.append(
            SshHost(
                alias=alias,
                hostname=_one(values, "hostname", alias, source),
                port=int(values.get("port", ["22"])[0]),
                user=_one(values, "user", alias, source),
                identity_files=tuple(values.get("identityfile", [])),
            )
        )
    if not hosts:
        raise K4wError(f"{source}: printed no 'Host' block (is the machine running?)")
    return hosts


def parse_winrm_config(text: str, source: str = "vagrant winrm-config") -> list[WinrmHost]:
    hosts = []
    for alias, values in _blocks(text, source):
        hosts.append(
            WinrmHost(
                alias=alias,
                hostname=_one(values, "hostname", alias, source),
                port=int(_one(values, "port", alias, source)),
                user=_one(values, "user", alias, source),
                password=_one(values, "password", alias, source),
            )
        )
    if not hosts:
        raise K4wError(f"{source}: printed no 'Host' block (is the machine running?)")
    return hosts


def ssh_target_config(alias: str, host: str, port: int, user: str, key_file: Path) -> str:
    """An ssh_config block for an arbitrary target (e.g. the CI QEMU guest).

    A throwaway guest gets a new host key on every boot, so, like Vagrant's own ssh-config,
    host keys are neither checked nor remembered.
    """
    return "\n".join(
        [
            f"Host {alias}",
            f"  HostName {host}",
            f"  Port {int(port)}",
            f"  User {user}",
            # Forward slashes: OpenSSH reads them on Windows too, and never as escapes.
            f'  IdentityFile "{Path(key_file).resolve().as_posix()}"',
            "  IdentitiesOnly yes",
            "  PasswordAuthentication no",
            "  StrictHostKeyChecking no",
            "  UserKnownHostsFile /dev/null",
            "  LogLevel ERROR",
            "",
        ]
    )

"""`invoke network-up`: the cluster switch, its host gateway address and its NetNat, on Hyper-V.

README.md "First cluster on Hyper-V": each VM's cluster NIC sits on an Internal switch; the host's
vNIC on it holds the gateway address (first host of network.node_cidr) and a NetNat gives the
nodes outbound access through it. The PowerShell is generated here (values escaped with the
`ps` filter's function) and is idempotent: every object is created only if absent, and an
existing object that cannot be right (a switch of another type, an overlapping NetNat) stops
the script with a message saying what to do.
"""

from __future__ import annotations

import platform
import subprocess

from .. import ui
from ..render import escape
from ..config import Config
from ..errors import K4wError
from ..derive import derive_network

POWERSHELL = ["powershell.exe", "-NoProfile", "-ExecutionPolicy", "Bypass", "-Command", "-"]


def nat_name(cfg: Config) -> str:
    return f"{cfg.cluster.name}-nat"


def network_up_script(cfg: Config) -> str:
    """Idempotent PowerShell that creates the switch, the gateway address and the NetNat."""
    net = derive_network(cfg)
    values = {
        "SwitchName": cfg.hyperv.cluster_switch,
        "Gateway": net.gateway,
        "PrefixLength": str(net.node_prefixlen),
        "NatName": nat_name(cfg),
        "NatPrefix": net.node_cidr,
    }
    assignments = "\n".join(f"${name} = {escape.ps(value)}" for name, value in values.items())
    return _HEADER + _ADMIN_CHECK + "\n" + assignments + "\n$PrefixLength = [int]$PrefixLength\n" + _BODY


_HEADER = """\
# k4w network-up: Internal switch + host gateway address + NetNat for the cluster NIC of every VM.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Host ('network-up failed: ' + $_.Exception.Message)
    Write-Host $_.InvocationInfo.PositionMessage
    exit 1
}
"""

_ADMIN_CHECK = r"""
# Hyper-V and NetNat cmdlets need an elevated session: say so before touching anything.
$identity = [Security.Principal.WindowsIdentity]::GetCurrent()
$principal = New-Object Security.Principal.WindowsPrincipal($identity)
if (-not $principal.IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)) {
    Write-Host 'network-up needs Administrator rights: start the terminal with "Run as administrator"'
    exit 2
}
"""

_BODY = r"""
function ConvertTo-AddressRange {
    # 'a.b.c.d/n' -> first and last address as integers, to compare prefixes.
    param([string]$Prefix)
    $address, $length = $Prefix.Split('/')
    $bytes = ([System.Net.IPAddress]::Parse($address)).GetAddressBytes()
    [uint64]$value = 0
    foreach ($byte in $bytes) { $value = $value * 256 + $byte }
    [uint64]$size = [math]::Pow(2, 32 - [int]$length)
    $first = $value - ($value % $size)
    return [pscustomobject]@{ First = $first; Last = $first + $size - 1 }
}

# 1. The Internal switch (Internal = the host gets a vNIC on it; VMs reach the outside through the NAT).
$switch = Get-VMSwitch -Name $SwitchName -ErrorAction SilentlyContinue
if ($null -eq $switch) {
    New-VMSwitch -Name $SwitchName -SwitchType Internal | Out-Null
    Write-Host "network-up: created Internal switch '$SwitchName'"
} elseif ($switch.SwitchType -ne 'Internal') {
    throw "switch '$SwitchName' exists but is $($switch.SwitchType), not Internal: rename it or set hyperv.cluster_switch to another name"
} else {
    Write-Host "network-up: switch '$SwitchName' exists"
}

# 2. The host's gateway address on the switch's vNIC ("vEthernet (<switch>)").
$adapter = Get-NetAdapter -Name "vEthernet ($SwitchName)"
$existing = @(Get-NetIPAddress -InterfaceIndex $adapter.ifIndex -AddressFamily IPv4 -ErrorAction SilentlyContinue |
    Where-Object { $_.IPAddress -eq $Gateway })
if ($existing.Count -eq 0) {
    New-NetIPAddress -InterfaceIndex $adapter.ifIndex -IPAddress $Gateway -PrefixLength $PrefixLength | Out-Null
    Write-Host "network-up: host address $Gateway/$PrefixLength set on vEthernet ($SwitchName)"
} elseif ($existing[0].PrefixLength -ne $PrefixLength) {
    throw "vEthernet ($SwitchName) has $Gateway/$($existing[0].PrefixLength), expected /${PrefixLength}: remove it with Remove-NetIPAddress -IPAddress $Gateway"
} else {
    Write-Host "network-up: host address $Gateway/$PrefixLength present"
}

# 3. The NetNat. Windows NAT refuses (or silently breaks on) internal prefixes that overlap
#    another NetNat, e.g. one left by Docker Desktop: detect that and name the culprit.
$wanted = ConvertTo-AddressRange $NatPrefix
$nats = @(Get-NetNat -ErrorAction SilentlyContinue)
$mine = @($nats | Where-Object { $_.Name -eq $NatName })
if ($mine.Count -gt 0) {
    if ($mine[0].InternalIPInterfaceAddressPrefix -ne $NatPrefix) {
        throw "NetNat '$NatName' exists for $($mine[0].InternalIPInterfaceAddressPrefix), not ${NatPrefix}: remove it with Remove-NetNat -Name '$NatName'"
    }
    Write-Host "network-up: NetNat '$NatName' for $NatPrefix exists"
} else {
    foreach ($nat in $nats) {
        $other = ConvertTo-AddressRange $nat.InternalIPInterfaceAddressPrefix
        if ($wanted.First -le $other.Last -and $other.First -le $wanted.Last) {
            throw "NetNat '$($nat.Name)' ($($nat.InternalIPInterfaceAddressPrefix)) overlaps ${NatPrefix}: change network.node_cidr or remove it with Remove-NetNat -Name '$($nat.Name)'"
        }
    }
    New-NetNat -Name $NatName -InternalIPInterfaceAddressPrefix $NatPrefix | Out-Null
    Write-Host "network-up: created NetNat '$NatName' for $NatPrefix"
}
Write-Host 'network-up: ready'
"""


def switch_check_script(cfg: Config) -> str:
    """PowerShell that exits 0 when the cluster switch exists (cluster-up's first step)."""
    return (
        "$ErrorActionPreference = 'Stop'\n"
        f"if ($null -eq (Get-VMSwitch -Name {escape.ps(cfg.hyperv.cluster_switch)} -ErrorAction SilentlyContinue)) {{ exit 3 }}\n"
        "exit 0\n"
    )


def run_powershell(script: str) -> tuple[int, str]:
    """Run a script on this (Windows) host through powershell.exe, script on stdin."""
    if platform.system() != "Windows":
        raise K4wError(
            f"this is {platform.system()}, not a Windows Hyper-V host: network-up creates a Hyper-V switch and "
            "a NetNat and only runs there. Use --dry-run to see the PowerShell it would run."
        )
    try:
        proc = subprocess.run(POWERSHELL, input=script, capture_output=True, text=True, check=False, timeout=300)
    except FileNotFoundError:
        raise K4wError("powershell.exe not found on PATH") from None
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def network_up(cfg: Config, dry_run: bool = False, runner=run_powershell) -> str:
    """Create (or confirm) the cluster switch, gateway address and NetNat. Returns the script."""
    script = network_up_script(cfg)
    if dry_run:
        ui.say("# would run on this host: " + " ".join(POWERSHELL) + "  (script on standard input)")
        ui.say(script)
        return script
    code, output = runner(script)
    for line in output.splitlines():
        ui.say(line)
    if code == 2:
        raise K4wError("network-up needs Administrator rights: run the terminal with 'Run as administrator'")
    if code != 0:
        raise K4wError(f"network-up failed (exit {code}); see the message above")
    return script

"""From where WinRM on a Windows node may be reached: the firewall's remote-address scope of the
k4w-winrm-https rule (guest/windows/node/winrm-scope.ps1), decided once from cluster.yml.

On Hyper-V's "Default Switch" the host is the management NIC's default gateway (the host's own
vEthernet (Default Switch) address, whose subnet changes at every host boot), so the dynamic
firewall keyword DefaultGateway admits the host and nothing else: not the other VMs on that switch,
whose pods are masqueraded to their node's address. On any other management switch (an External
switch on a corporate LAN) the gateway is a router, not the host, and LocalSubnet is the narrowest
scope that still admits the host; docs/security.md "Windows node security" says what that leaves open.
"""

from __future__ import annotations

DEFAULT_SWITCH = "Default Switch"   # the name Hyper-V gives its NAT switch (config.py's default)


def remote_scope(management_switch: str) -> str:
    return "DefaultGateway" if management_switch == DEFAULT_SWITCH else "LocalSubnet"

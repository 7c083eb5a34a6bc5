"""Each node's cluster NIC MAC, derived once from the config's names: render writes it into cluster.json for
the libvirt provider (the NIC is in the domain definition from creation), cluster-up hands it to
host/cluster-nic.ps1 on Hyper-V (the NIC is hot-added) and to the guest's cluster-ip script, which finds the
NIC by it on both."""

from __future__ import annotations

import hashlib

# The first octet of every cluster NIC's MAC: 0x02 sets the IEEE 802 "locally administered" bit (b1)
# and leaves the group bit (b0) clear, so it is a unicast address no vendor OUI (Hyper-V's dynamic pool
# is Microsoft's 00-15-5D, libvirt's 52-54-00) can ever hand out.
LOCALLY_ADMINISTERED_UNICAST = 0x02


def cluster_nic_mac(cluster: str, node: str) -> str:
    """The static MAC k4w gives a node's cluster NIC, as Hyper-V writes it (12 hex digits, no
    separators: Get-VMNetworkAdapter's MacAddress, which Vagrant splits into pairs in
    hashicorp/vagrant@v2.3.4 (986a0173) plugins/providers/hyperv/scripts/get_network_config.ps1).
    Derived from the cluster and node names, so it is the same on every run and the guest can find
    its cluster NIC by it before the NIC has an address."""
    digest = hashlib.sha256(f"{cluster}\0{node}".encode()).digest()
    return bytes([LOCALLY_ADMINISTERED_UNICAST, *digest[:5]]).hex().upper()


def mac_with(mac: str, separator: str) -> str:
    """'02AB..' as '02:ab:..' (Linux sysfs, netplan, libvirt: separator ':') or '02-AB-..' (Windows Get-NetAdapter: '-')."""
    pairs = [mac[i:i + 2] for i in range(0, 12, 2)]
    return ":".join(pairs).lower() if separator == ":" else separator.join(pairs).upper()

# cluster-route.ps1 - the cluster address and its default route through the host's NAT: one
# implementation for the two scripts that need it. Dot-sourced, never run alone:
#   cluster/cluster-ip.ps1 (cluster-up uploads this file beside it), when cluster-up gives it -Gateway;
#   node-containerd/start-node.ps1 (C:\k, from the box), with node.json's cluster_gateway, after
#   Flannel (re)created its HNS network: HNS then moves the cluster NIC's address to a new vEthernet
#   adapter, and a route of the old interface is gone with it (at every node start and boot).
# Only functions here; the caller's header sets ErrorActionPreference, StrictMode and the trap.
#
# Why the route (the containerd era's nodes only; the box profile's cluster_nic_default_route): flanneld
# binds the overlay to the cluster NIC (--iface, flannel-io/flannel@v0.28.10, module zip
# h1:jt+uW6XVV01MBb3YFahG7Ue9UE3W6zlNlJMf3JtdcXI=, pkg/ipmatch/match.go LookupExtIface ->
# GetInterfaceByIP), and the CNI's OutBoundNAT policy
# (templates/nodes/windows-containerd/cni.conf.j2) rewrites a pod's outbound packets to that NIC's
# address. Windows sends by the strong host model: a packet whose source is the cluster address only
# leaves through routes of the interface that holds it, which has none to outside addresses unless
# this one exists. The gateway is the host's NetNat address on the cluster switch (network.node_cidr's
# first host, k4w/derive/values.py derive_network, host/network-up.ps1).

# Route metric of the cluster NIC's default route. Windows ranks routes by route metric plus
# interface metric (lower wins); an automatic interface metric is at most a few dozen and a DHCP
# default route's metric is 0, so 1000 keeps the management NIC first. Checked below, not assumed.
$ClusterDefaultRouteMetric = 1000

function Get-ClusterAddress {
    # The cluster address wherever it lives now: the cluster NIC, or the vEthernet adapter HNS moved
    # its configuration to. $null while it is absent (HNS is moving it, or it was never set).
    param([Parameter(Mandatory = $true)][string]$IPAddress)
    return Get-NetIPAddress -AddressFamily IPv4 -IPAddress $IPAddress -ErrorAction SilentlyContinue | Select-Object -First 1
}

function Test-ClusterAddressPreferred {
    # Tentative (duplicate detection running) or Duplicate addresses cannot carry a route's traffic.
    param([Parameter(Mandatory = $true)][string]$IPAddress)
    $address = Get-ClusterAddress -IPAddress $IPAddress
    return ($null -ne $address -and $address.AddressState -eq 'Preferred')
}

function Set-ClusterDefaultRoute {
    # Idempotent: a route that is already there with the right metric is left alone; one with another
    # metric is corrected. Throws when the management NIC's default route would no longer rank first.
    param(
        [Parameter(Mandatory = $true)][string]$IPAddress,
        [Parameter(Mandatory = $true)][string]$Gateway,
        [Parameter(Mandatory = $true)][string]$LogPrefix
    )
    $address = Get-ClusterAddress -IPAddress $IPAddress
    if ($null -eq $address) { throw "no interface holds the cluster address ${IPAddress}: cannot add its default route via $Gateway" }
    $ifIndex = $address.InterfaceIndex
    $routes = @(Get-NetRoute -AddressFamily IPv4 -DestinationPrefix '0.0.0.0/0' -InterfaceIndex $ifIndex -ErrorAction SilentlyContinue |
            Where-Object { $_.NextHop -eq $Gateway })
    if ($routes.Count -eq 0) {
        Write-Output "${LogPrefix}: default route via $Gateway on '$($address.InterfaceAlias)' (metric $ClusterDefaultRouteMetric)"
        New-NetRoute -AddressFamily IPv4 -DestinationPrefix '0.0.0.0/0' -InterfaceIndex $ifIndex -NextHop $Gateway -RouteMetric $ClusterDefaultRouteMetric | Out-Null
    } elseif (@($routes | Where-Object { $_.RouteMetric -ne $ClusterDefaultRouteMetric }).Count -gt 0) {
        Write-Output "${LogPrefix}: default route via ${Gateway}: metric set to $ClusterDefaultRouteMetric"
        $routes | Set-NetRoute -RouteMetric $ClusterDefaultRouteMetric
    } else {
        Write-Output "${LogPrefix}: default route via $Gateway already present on '$($address.InterfaceAlias)'"
    }
    # The management NIC must stay preferred: compare the effective metrics (route + interface).
    $clusterEffective = $ClusterDefaultRouteMetric + (Get-NetIPInterface -AddressFamily IPv4 -InterfaceIndex $ifIndex).InterfaceMetric
    $preferred = @(Get-NetRoute -AddressFamily IPv4 -DestinationPrefix '0.0.0.0/0' -ErrorAction SilentlyContinue |
            Where-Object { $_.ifIndex -ne $ifIndex } | Where-Object {
                ($_.RouteMetric + (Get-NetIPInterface -AddressFamily IPv4 -InterfaceIndex $_.ifIndex).InterfaceMetric) -lt $clusterEffective
            })
    if ($preferred.Count -eq 0) {
        throw "no default route of another interface ranks before the cluster NIC's (effective metric $clusterEffective): the management NIC must keep the default route"
    }
}

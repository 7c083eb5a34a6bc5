<#
.SYNOPSIS
  Give the cluster NIC its static address (run by cluster-up over WinRM, idempotent).

.DESCRIPTION
  The cluster NIC sits on the Internal switch, which has no DHCP: until this runs it holds an
  APIPA 169.254/16 address. The NIC is the physical adapter whose MAC is -MacAddress, the static
  MAC cluster-up gave it on the host (host/cluster-nic.ps1), never one picked by name or route. Once start-node.ps1 has created the HNS network 'External' on
  that NIC (the vSwitch Flannel's l2bridge network then shares), the address lives on the
  vSwitch's vEthernet adapter instead, so an address that is already present anywhere counts as done.
  Waits until the address is Preferred: Tentative (duplicate detection running) or Duplicate
  addresses cannot be used by kubelet, flanneld or WinRM.

  -Gateway (the containerd era's nodes only; k4w/cluster/steps.py decides): a default route on the
  interface that holds the cluster address, through the host's NetNat address on the cluster switch
  (network.node_cidr's first host, host/network-up.ps1), with a route metric far above the
  management NIC's. Why: flanneld binds the overlay to the cluster NIC (--iface, flannel-io/flannel
  v0.28.9 = 5cd0d526 pkg/ipmatch/match.go LookupExtIface -> GetInterfaceByIP), and the CNI's
  OutBoundNAT policy (templates/nodes/windows-containerd/cni.conf.j2) rewrites a pod's outbound
  packets to that NIC's address. Windows sends by the strong host model: a packet whose source is
  the cluster address only leaves through routes of the cluster interface, which had none to
  outside addresses, so outbound pod traffic had no next hop. The higher metric keeps the
  management NIC's default route the preferred one for everything the node itself sends.
  Idempotent: a route that is already there with the right metric is left alone; one with another
  metric is corrected.
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$IPAddress,
    [Parameter(Mandatory = $true)][ValidateRange(1, 30)][int]$PrefixLength,
    [string]$Gateway = '',
    # As Get-NetAdapter writes it: six pairs of upper-case hex digits joined by '-'.
    [Parameter(Mandatory = $true)][ValidatePattern('^([0-9A-F]{2}-){5}[0-9A-F]{2}$')][string]$MacAddress,
    [int]$TimeoutSeconds = 120
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("cluster-ip.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

$PollSeconds = 1
# Route metric of the cluster NIC's default route. Windows ranks routes by route metric plus
# interface metric (lower wins); an automatic interface metric is at most a few dozen and a DHCP
# default route's metric is 0, so 1000 keeps the management NIC first. Checked below, not assumed.
$ClusterDefaultRouteMetric = 1000

function Get-ClusterAddress {
    return Get-NetIPAddress -AddressFamily IPv4 -IPAddress $IPAddress -ErrorAction SilentlyContinue | Select-Object -First 1
}

$address = Get-ClusterAddress
if ($null -eq $address) {
    # A NIC the host step has just hot-added takes a moment to appear and come Up: wait for it.
    $nicDeadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while ($true) {
        $candidates = @(Get-NetAdapter -Physical | Where-Object { $_.MacAddress -eq $MacAddress })
        if ($candidates.Count -gt 1) { throw "$($candidates.Count) physical adapters have the cluster NIC's MAC $MacAddress" }
        if ($candidates.Count -eq 1 -and $candidates[0].Status -eq 'Up') { break }
        if ((Get-Date) -gt $nicDeadline) {
            $seen = if ($candidates.Count -eq 0) { 'no physical adapter has it' } else { "'$($candidates[0].Name)' is $($candidates[0].Status)" }
            throw "no Up adapter with the cluster NIC's MAC $MacAddress after $TimeoutSeconds s ($seen): host/cluster-nic.ps1 did not attach it; run invoke cluster-up again"
        }
        Start-Sleep -Seconds $PollSeconds
    }
    $nic = $candidates[0]
    Write-Output "cluster-ip: configuring $IPAddress/$PrefixLength on '$($nic.Name)'"
    # A static address also ends DHCP/APIPA on the adapter; no gateway: the management NIC keeps the default route.
    Set-NetIPInterface -InterfaceIndex $nic.ifIndex -Dhcp Disabled
    Get-NetIPAddress -InterfaceIndex $nic.ifIndex -AddressFamily IPv4 -ErrorAction SilentlyContinue |
        Where-Object { $_.IPAddress -ne $IPAddress } |
        Remove-NetIPAddress -Confirm:$false
    New-NetIPAddress -InterfaceIndex $nic.ifIndex -IPAddress $IPAddress -PrefixLength $PrefixLength | Out-Null
}

$deadline = (Get-Date).AddSeconds($TimeoutSeconds)
while ($true) {
    $address = Get-ClusterAddress
    if ($null -ne $address -and $address.AddressState -eq 'Duplicate') {
        throw "$IPAddress is already used by another machine on the cluster switch (duplicate address detected)"
    }
    if ($null -ne $address -and $address.AddressState -eq 'Preferred' -and $address.PrefixLength -eq $PrefixLength) { break }
    if ((Get-Date) -gt $deadline) {
        $state = if ($null -eq $address) { 'absent' } else { "$($address.AddressState)/$($address.PrefixLength)" }
        throw "timed out after $TimeoutSeconds s waiting for $IPAddress/$PrefixLength to become Preferred (it is $state)"
    }
    Start-Sleep -Seconds $PollSeconds
}
Write-Output "cluster-ip: $IPAddress/$PrefixLength is Preferred on interface $($address.InterfaceAlias)"

if ($Gateway) {
    # The interface that holds the address now: the cluster NIC, or the vEthernet adapter HNS moved
    # its configuration to once flanneld created the overlay network on it.
    $ifIndex = $address.InterfaceIndex
    $routes = @(Get-NetRoute -AddressFamily IPv4 -DestinationPrefix '0.0.0.0/0' -InterfaceIndex $ifIndex -ErrorAction SilentlyContinue |
            Where-Object { $_.NextHop -eq $Gateway })
    if ($routes.Count -eq 0) {
        Write-Output "cluster-ip: default route via $Gateway on '$($address.InterfaceAlias)' (metric $ClusterDefaultRouteMetric)"
        New-NetRoute -AddressFamily IPv4 -DestinationPrefix '0.0.0.0/0' -InterfaceIndex $ifIndex -NextHop $Gateway -RouteMetric $ClusterDefaultRouteMetric | Out-Null
    } elseif (@($routes | Where-Object { $_.RouteMetric -ne $ClusterDefaultRouteMetric }).Count -gt 0) {
        Write-Output "cluster-ip: default route via ${Gateway}: metric set to $ClusterDefaultRouteMetric"
        $routes | Set-NetRoute -RouteMetric $ClusterDefaultRouteMetric
    } else {
        Write-Output "cluster-ip: default route via $Gateway already present"
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

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
  interface that holds the cluster address, through the host's NetNat address on the cluster switch,
  ranked below the management NIC's: Set-ClusterDefaultRoute in guest/windows/node/cluster-route.ps1
  (cluster-up uploads it beside this script) says why. The node's own start-node.ps1 restores the
  same route with the same function each time Flannel recreates its HNS network.
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
# Get-ClusterAddress and Set-ClusterDefaultRoute, shared with the node's start-node.ps1.
. (Join-Path $PSScriptRoot 'cluster-route.ps1')

$address = Get-ClusterAddress -IPAddress $IPAddress
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
    $address = Get-ClusterAddress -IPAddress $IPAddress
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
    Set-ClusterDefaultRoute -IPAddress $IPAddress -Gateway $Gateway -LogPrefix 'cluster-ip'
}

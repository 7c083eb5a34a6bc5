<#
.SYNOPSIS
  Give the cluster NIC its static address (run by cluster-up over WinRM, idempotent).

.DESCRIPTION
  The cluster NIC sits on the Internal switch, which has no DHCP: until this runs it holds an
  APIPA 169.254/16 address. The NIC is the up, physical adapter that does not carry the default
  route (the management NIC does). Once start-node.ps1 has created the HNS network 'External' on
  that NIC (the vSwitch Flannel's l2bridge network then shares), the address lives on the
  vSwitch's vEthernet adapter instead, so an address that is already present anywhere counts as done.
  Waits until the address is Preferred: Tentative (duplicate detection running) or Duplicate
  addresses cannot be used by kubelet, flanneld or WinRM.
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$IPAddress,
    [Parameter(Mandatory = $true)][ValidateRange(1, 30)][int]$PrefixLength,
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

function Get-ClusterAddress {
    return Get-NetIPAddress -AddressFamily IPv4 -IPAddress $IPAddress -ErrorAction SilentlyContinue | Select-Object -First 1
}

$address = Get-ClusterAddress
if ($null -eq $address) {
    $defaultRoutes = @(Get-NetRoute -AddressFamily IPv4 -DestinationPrefix '0.0.0.0/0' -ErrorAction SilentlyContinue)
    $managementIndexes = @($defaultRoutes | ForEach-Object { $_.ifIndex })
    $candidates = @(Get-NetAdapter -Physical | Where-Object {
            $_.Status -eq 'Up' -and $managementIndexes -notcontains $_.ifIndex
        })
    if ($candidates.Count -ne 1) {
        $names = ($candidates | ForEach-Object { $_.Name }) -join ', '
        throw "expected exactly one up adapter without the default route (the cluster NIC), found $($candidates.Count): $names"
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

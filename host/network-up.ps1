<#
.SYNOPSIS
  The cluster network on this Hyper-V host: an Internal switch, the host's gateway address on it
  and a NetNat, plus the firewall rule that lets build VMs reach Packer's HTTP server (run by
  `invoke network-up`, elevated, idempotent).

.DESCRIPTION
  Each VM's cluster NIC sits on the Internal switch; the host's vNIC on it holds the gateway
  address (first host of network.node_cidr) and the NetNat gives the nodes outbound access
  through it. With -SwitchType External (hyperv.cluster_switch_type) the switch is bound to the
  host adapter -NetAdapterName instead and the user's network routes the node addresses: no host
  address and no NetNat are made. Every object is created only if absent; an existing object that
  cannot be right (a switch of another type, an overlapping NetNat) stops the script with what to do.
  Exit codes: 0 ready, 1 failed (the message says why), 2 not elevated.
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$SwitchName,
    [Parameter(Mandatory = $true)][string]$Gateway,
    [Parameter(Mandatory = $true)][ValidateRange(1, 30)][int]$PrefixLength,
    [Parameter(Mandatory = $true)][string]$NatName,
    [Parameter(Mandatory = $true)][string]$NatPrefix,
    [Parameter(Mandatory = $true)][string]$PackerRuleName,
    [Parameter(Mandatory = $true)][string]$PackerPorts,
    [Parameter(Mandatory = $true)][string]$PackerInterfaceAlias,
    [Parameter(Mandatory = $true)][ValidateSet('Internal', 'External')][string]$SwitchType,
    [Parameter(Mandatory = $true)][AllowEmptyString()][string]$NetAdapterName
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Host ('network-up failed: ' + $_.Exception.Message)
    Write-Host $_.InvocationInfo.PositionMessage
    exit 1
}

# Hyper-V and NetNat cmdlets need an elevated session: say so before touching anything.
$identity = [Security.Principal.WindowsIdentity]::GetCurrent()
$principal = New-Object Security.Principal.WindowsPrincipal($identity)
if (-not $principal.IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)) {
    Write-Host 'network-up needs Administrator rights: start the terminal with "Run as administrator"'
    exit 2
}

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

# 1. The switch. Internal: the host gets a vNIC on it, VMs reach the outside through the NAT.
#    External: bound to a host adapter; -AllowManagementOS keeps the host's own use of that adapter.
$switch = Get-VMSwitch -Name $SwitchName -ErrorAction SilentlyContinue
if ($null -eq $switch) {
    if ($SwitchType -eq 'External') {
        if (-not $NetAdapterName) { throw 'an External switch needs hyperv.cluster_adapter (Get-NetAdapter -Physical lists them)' }
        New-VMSwitch -Name $SwitchName -NetAdapterName $NetAdapterName -AllowManagementOS $true | Out-Null
        Write-Host "network-up: created External switch '$SwitchName' on adapter '$NetAdapterName'"
    } else {
        New-VMSwitch -Name $SwitchName -SwitchType Internal | Out-Null
        Write-Host "network-up: created Internal switch '$SwitchName'"
    }
} elseif ($switch.SwitchType -ne $SwitchType) {
    throw "switch '$SwitchName' exists but is $($switch.SwitchType), not ${SwitchType}: rename it, set hyperv.cluster_switch to another name or hyperv.cluster_switch_type to $($switch.SwitchType)"
} else {
    Write-Host "network-up: $SwitchType switch '$SwitchName' exists"
}
if ($SwitchType -eq 'External') {
    # The user's network routes network.node_cidr (its router is hyperv.cluster_gateway): no host
    # address and no NetNat, which would hide those addresses from the rest of that network.
    Write-Host "network-up: External switch: no host address and no NetNat; your network routes $NatPrefix via $Gateway"
} else {
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
}
# 4. The inbound rule for Packer's HTTP server: without it Windows Firewall may drop the Ubuntu
#    installer's fetch of preseed.cfg on the Default Switch, and the build waits for SSH for hours.
& (Join-Path $PSScriptRoot 'packer-http-rule.ps1') -RuleName $PackerRuleName -Ports $PackerPorts -InterfaceAlias $PackerInterfaceAlias
if ($LASTEXITCODE -ne 0) { throw "host/packer-http-rule.ps1 failed (exit $LASTEXITCODE)" }
Write-Host 'network-up: ready'

<#
.SYNOPSIS
  Keep WinRM reachable from the Hyper-V host only: HTTPS (5986) on the management NIC, from its
  default gateway; no HTTP listener, no other WinRM firewall rule.

.DESCRIPTION
  Pods are masqueraded to their node's addresses, so anything a node can reach, a pod can reach.
  WinRM therefore must not answer on:
  - the cluster NIC (static nodes[].ip) or the vEthernet adapters HNS creates for Flannel's
    network later: the rule lists the management NIC by InterfaceAlias, and only it;
  - the management NIC from other VMs on the management switch (a Linux node, and so its pods,
    is one of them): with the Default Switch the remote address is limited to the NIC's default
    gateway ("DefaultGateway", a dynamic keyword of the firewall: INetFwRule RemoteAddresses), which
    is the host's own vEthernet (Default Switch) address. Its subnet changes at every host boot,
    which is why no fixed address is written. With another management switch the host is not the
    gateway, and -RemoteScope LocalSubnet is the narrowest that still lets the host in.
  The management NIC is the physical adapter whose IPv4 address came from DHCP: the management
  switch serves DHCP, the cluster NIC has a static address (or, before cluster-up, only an APIPA
  one), and HNS's vEthernet adapters are not physical. That holds at bake time (one NIC), on the
  first boot of a VM made from the box (Windows may name its NIC differently there), after
  cluster-up adds the cluster NIC, and after HNS renames or creates adapters: so the boot task
  k4w-winrm-scope (registered by k4w-bootstrap.ps1) and cluster-up run this script again, and it
  rewrites the rule only when the interface list or scope differs.
  The remote scope is kept in the rule itself: a run without -RemoteScope keeps the current one.
#>
[CmdletBinding()]
param(
    [ValidateSet('', 'DefaultGateway', 'LocalSubnet')][string]$RemoteScope = '',
    [int]$TimeoutSeconds = 300
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("winrm-scope.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

$RuleName = 'k4w-winrm-https'
$HttpsPort = 5986   # WinRM's HTTPS listener port (Microsoft, "Installation and configuration for Windows Remote Management")
$PollSeconds = 2
# The rules Windows (Enable-PSRemoting, the Server default) creates for WinRM over HTTP 5985, for
# the Public profile and the others; the HTTP listener goes, so they go too.
$BuiltinWinRmRules = @('WINRM-HTTP-In-TCP', 'WINRM-HTTP-In-TCP-PUBLIC', 'WINRM-HTTP-In-TCP-NoScope')

function Get-ManagementAliases {
    $physical = @(Get-NetAdapter -Physical | ForEach-Object { $_.InterfaceIndex })
    return @(Get-NetIPAddress -AddressFamily IPv4 -PrefixOrigin Dhcp -ErrorAction SilentlyContinue |
        Where-Object { $physical -contains $_.InterfaceIndex } |
        ForEach-Object { $_.InterfaceAlias } | Sort-Object -Unique)
}

# At boot the DHCP lease may not be there yet: wait for it (a real condition, bounded).
$deadline = (Get-Date).AddSeconds($TimeoutSeconds)
$aliases = @(Get-ManagementAliases)
while ($aliases.Count -eq 0) {
    if ((Get-Date) -gt $deadline) {
        throw "no physical adapter has a DHCP address after $TimeoutSeconds s: cannot tell the management NIC, WinRM stays as it was"
    }
    Start-Sleep -Seconds $PollSeconds
    $aliases = @(Get-ManagementAliases)
}

$rule = Get-NetFirewallRule -Name $RuleName -ErrorAction SilentlyContinue
if (-not $RemoteScope) {
    $RemoteScope = 'DefaultGateway'
    if ($rule) {
        $current = @(($rule | Get-NetFirewallAddressFilter).RemoteAddress)
        if ($current.Count -eq 1 -and @('DefaultGateway', 'LocalSubnet') -contains $current[0]) { $RemoteScope = $current[0] }
    }
}
if (-not $rule) {
    New-NetFirewallRule -Name $RuleName -DisplayName "k4w: WinRM over HTTPS (TCP $HttpsPort) from the Hyper-V host" `
        -Direction Inbound -Action Allow -Protocol TCP -LocalPort $HttpsPort -Profile Any `
        -InterfaceAlias $aliases -RemoteAddress $RemoteScope | Out-Null
    Write-Output "winrm-scope: $RuleName opened on $($aliases -join ', ') from $RemoteScope"
} else {
    $interfaces = @(($rule | Get-NetFirewallInterfaceFilter).InterfaceAlias | Sort-Object)
    $remote = @(($rule | Get-NetFirewallAddressFilter).RemoteAddress)
    $ports = $rule | Get-NetFirewallPortFilter
    $same = (($interfaces -join ',') -eq ($aliases -join ',')) -and (($remote -join ',') -eq $RemoteScope) -and
        ([string]$ports.LocalPort -eq [string]$HttpsPort) -and ([string]$rule.Action -eq 'Allow') -and ([string]$rule.Enabled -eq 'True')
    if (-not $same) {
        Set-NetFirewallRule -Name $RuleName -Direction Inbound -Action Allow -Protocol TCP -LocalPort $HttpsPort -Profile Any `
            -InterfaceAlias $aliases -RemoteAddress $RemoteScope -Enabled True
        Write-Output "winrm-scope: $RuleName now on $($aliases -join ', ') from $RemoteScope (was $($interfaces -join ', ') from $($remote -join ', '))"
    }
}

# No WinRM over HTTP: its listener and Windows' own firewall rules for it.
foreach ($listener in @(Get-ChildItem -Path 'WSMan:\localhost\Listener' | Where-Object { $_.Keys -contains 'Transport=HTTP' })) {
    Remove-Item -Path $listener.PSPath -Recurse -Force
    Write-Output 'winrm-scope: HTTP listener (5985) removed'
}
foreach ($name in $BuiltinWinRmRules) {
    $builtin = Get-NetFirewallRule -Name $name -ErrorAction SilentlyContinue
    if ($builtin -and [string]$builtin.Enabled -eq 'True') {
        Disable-NetFirewallRule -Name $name
        Write-Output "winrm-scope: firewall rule $name disabled"
    }
}
exit 0

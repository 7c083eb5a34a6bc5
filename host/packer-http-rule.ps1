<#
.SYNOPSIS
  The inbound Windows Firewall rule that lets build VMs reach Packer's HTTP server on this host
  (the Ubuntu installer fetches preseed.cfg from it). Run by network-up (create or repair,
  elevated) and by doctor (-Check, any user).

.DESCRIPTION
  Packer listens on a port in -Ports (k4w pins http_port_min/http_port_max to that range). The
  rule allows TCP to those ports on one interface only, -InterfaceAlias: the host's vNIC on the
  management switch the build VMs sit on ('vEthernet (Default Switch)' by default; k4w/render/packer_http.py).
  Not -RemoteAddress LocalSubnet: that admits every subnet the host is on (the office LAN, a
  hotel Wi-Fi), and Packer serves the build's files to whoever connects. An alias rather than an
  address, because the Default Switch's subnet changes at each host boot. An enabled inbound
  Block rule for packer.exe (what a 'Cancel' on the first-run firewall prompt leaves) wins over
  any allow rule, so -Check reports it.
  The create mode runs from network-up.ps1, which has checked for an elevated session first.
  Exit codes: 0 ready, 1 failed, 3 rule missing or different, 4 a Block rule for packer.exe.
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$RuleName,
    [Parameter(Mandatory = $true)][ValidatePattern('^\d+-\d+$')][string]$Ports,
    [Parameter(Mandatory = $true)][string]$InterfaceAlias,
    [switch]$Check
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Host ('packer-http-rule failed: ' + $_.Exception.Message)
    exit 1
}

function Get-RuleProblem {
    # Why the rule is not as wanted, or $null when it is.
    $rule = Get-NetFirewallRule -Name $RuleName -ErrorAction SilentlyContinue
    if ($null -eq $rule) { return "no firewall rule '$RuleName'" }
    if ("$($rule.Enabled)" -ne 'True' -or "$($rule.Action)" -ne 'Allow' -or "$($rule.Direction)" -ne 'Inbound') {
        return "rule '$RuleName' is not an enabled inbound Allow rule"
    }
    $ports = Get-NetFirewallPortFilter -AssociatedNetFirewallRule $rule
    if ("$($ports.Protocol)" -ne 'TCP' -or "$($ports.LocalPort)" -ne $Ports) {
        return "rule '$RuleName' allows $($ports.Protocol) $($ports.LocalPort), not TCP $Ports"
    }
    $interfaces = @((Get-NetFirewallInterfaceFilter -AssociatedNetFirewallRule $rule).InterfaceAlias)
    if ($interfaces.Count -ne 1 -or "$($interfaces[0])" -ne $InterfaceAlias) {
        return "rule '$RuleName' applies to interfaces '$($interfaces -join ', ')', not only '$InterfaceAlias'"
    }
    $addresses = Get-NetFirewallAddressFilter -AssociatedNetFirewallRule $rule
    if ("$($addresses.RemoteAddress)" -ne 'Any') {
        return "rule '$RuleName' admits remote addresses $($addresses.RemoteAddress); this script makes it by interface only"
    }
    return $null
}

function Get-PackerBlockRule {
    @(Get-NetFirewallRule -Direction Inbound -Action Block -Enabled True -ErrorAction SilentlyContinue |
        Where-Object { (Get-NetFirewallApplicationFilter -AssociatedNetFirewallRule $_).Program -like '*\packer.exe' })
}

if ($Check) {
    $blocks = @(Get-PackerBlockRule)
    if ($blocks.Count -gt 0) {
        Write-Host ("inbound Block rule for packer.exe: " + (($blocks | ForEach-Object { $_.DisplayName }) -join ', '))
        exit 4
    }
    $problem = Get-RuleProblem
    if ($null -ne $problem) {
        Write-Host $problem
        exit 3
    }
    Write-Host "rule '$RuleName' allows TCP $Ports on '$InterfaceAlias' only"
    exit 0
}

$problem = Get-RuleProblem
if ($null -eq $problem) {
    Write-Host "network-up: firewall rule '$RuleName' for Packer's HTTP server (TCP $Ports) exists"
} else {
    # Replace rather than patch: a rule with our name but other settings was not made by this script.
    Remove-NetFirewallRule -Name $RuleName -ErrorAction SilentlyContinue
    # The vNIC must exist: a rule for an alias no adapter has admits nothing, and the build would wait for SSH for hours.
    if ($null -eq (Get-NetAdapter -InterfaceAlias $InterfaceAlias -ErrorAction SilentlyContinue)) {
        throw "no network adapter '$InterfaceAlias' on this host: is hyperv.management_switch the switch the build VMs use?"
    }
    New-NetFirewallRule -Name $RuleName -DisplayName "k4w: Packer HTTP server for build VMs (TCP $Ports)" `
        -Direction Inbound -Action Allow -Protocol TCP -LocalPort $Ports -InterfaceAlias $InterfaceAlias -Profile Any | Out-Null
    Write-Host "network-up: created firewall rule '$RuleName' for Packer's HTTP server (TCP $Ports, on '$InterfaceAlias' only)"
}
if (@(Get-PackerBlockRule).Count -gt 0) {
    Write-Host 'network-up: warning: an inbound Block rule for packer.exe exists and wins over this rule; remove it'
}
exit 0

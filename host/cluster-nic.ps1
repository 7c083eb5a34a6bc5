<#
.SYNOPSIS
  Give one cluster VM its cluster NIC: on the cluster switch, with the MAC address k4w assigned it
  and the MAC spoofing its OS needs (run by `invoke cluster-up` for every machine on every run,
  elevated, idempotent).

.DESCRIPTION
  The adapter is found by its name, never by its switch: Vagrant's Hyper-V provider reconnects
  every adapter to the management switch on each cold start (Set-VagrantVMSwitch in its Configure
  step), so after a host reboot or `vagrant halt` + `up` the cluster NIC sits on the wrong switch
  until this runs again. Each setting is changed only where it differs:
  - no adapter of that name: add one, with the static MAC (hot-add needs a Generation 2 VM);
  - more than one (left by the Vagrant trigger of older k4w versions): keep the first;
  - a MAC other than k4w's (a dynamic one from those versions): re-add the adapter with k4w's;
  - another switch: connect it back (same adapter, same MAC: the guest keeps its address);
  - MAC spoofing different from what its OS needs: set it.
  The guest finds its cluster NIC by this MAC (guest/*/cluster/cluster-ip.*), so a static MAC that
  k4w derives from the node is what ties the host's adapter to the guest's interface.
  Exit codes: 0 done, 1 failed (the message says why), 2 not elevated.
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$VMName,
    [Parameter(Mandatory = $true)][string]$SwitchName,
    [Parameter(Mandatory = $true)][string]$AdapterName,
    # 12 hex digits without separators, the form of Get-VMNetworkAdapter's MacAddress.
    [Parameter(Mandatory = $true)][ValidatePattern('^[0-9A-F]{12}$')][string]$MacAddress,
    [Parameter(Mandatory = $true)][ValidateSet('On', 'Off')][string]$MacSpoofing
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Host ("cluster-nic ${VMName} failed: " + $_.Exception.Message)
    Write-Host $_.InvocationInfo.PositionMessage
    exit 1
}

# The rights Vagrant's Hyper-V provider itself needs (Administrator, or the Hyper-V Administrators
# group, well-known SID S-1-5-32-578: hashicorp/vagrant@v2.3.4 (986a0173) lib/vagrant/util/platform.rb,
# windows_hyperv_admin?), checked before anything changes.
$identity = [Security.Principal.WindowsIdentity]::GetCurrent()
$principal = New-Object Security.Principal.WindowsPrincipal($identity)
$hyperVAdmins = New-Object Security.Principal.SecurityIdentifier('S-1-5-32-578')
if (-not ($principal.IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator) -or $principal.IsInRole($hyperVAdmins))) {
    Write-Host 'cluster-nic needs Administrator rights or membership in Hyper-V Administrators, as Vagrant does'
    exit 2
}

$vm = Hyper-V\Get-VM -Name $VMName -ErrorAction SilentlyContinue
if ($null -eq $vm) {
    throw "no Hyper-V VM named '$VMName': vagrant up has not created it"
}

function Add-ClusterAdapter {
    # Hyper-V adds a network adapter to a running VM only if it is Generation 2 (hot add).
    if ($vm.Generation -ne 2 -and $vm.State -ne 'Off') {
        throw "'$VMName' is a Generation $($vm.Generation) VM and is $($vm.State): Hyper-V cannot hot-add a network adapter to it. Stop it (vagrant halt) and run cluster-up again, or rebuild its box as Generation 2"
    }
    Hyper-V\Add-VMNetworkAdapter -VM $vm -Name $AdapterName -SwitchName $SwitchName -StaticMacAddress $MacAddress
    Write-Host "cluster-nic ${VMName}: added '$AdapterName' on '$SwitchName' with MAC $MacAddress"
}

$nics = @(Hyper-V\Get-VMNetworkAdapter -VM $vm | Where-Object { $_.Name -eq $AdapterName })
if ($nics.Count -gt 1) {
    $nics | Select-Object -Skip 1 | Hyper-V\Remove-VMNetworkAdapter
    Write-Host "cluster-nic ${VMName}: removed $($nics.Count - 1) extra '$AdapterName' adapter(s)"
    $nics = @($nics[0])
}
if ($nics.Count -eq 0) {
    Add-ClusterAdapter
} elseif ($nics[0].DynamicMacAddressEnabled -or $nics[0].MacAddress -ne $MacAddress) {
    # A running VM's MAC cannot be changed in place: replace the adapter (hot remove and add, Gen2).
    if ($vm.Generation -ne 2 -and $vm.State -ne 'Off') {
        throw "'$VMName' is a Generation $($vm.Generation) VM and is $($vm.State): its '$AdapterName' adapter has MAC $($nics[0].MacAddress), not $MacAddress, and Hyper-V cannot replace it while it runs. Stop it (vagrant halt) and run cluster-up again"
    }
    Hyper-V\Remove-VMNetworkAdapter -VMNetworkAdapter $nics[0]
    Write-Host "cluster-nic ${VMName}: removed '$AdapterName' with MAC $($nics[0].MacAddress)"
    Add-ClusterAdapter
} elseif ($nics[0].SwitchName -ne $SwitchName) {
    Hyper-V\Connect-VMNetworkAdapter -VMNetworkAdapter $nics[0] -SwitchName $SwitchName
    Write-Host "cluster-nic ${VMName}: reconnected '$AdapterName' from '$($nics[0].SwitchName)' to '$SwitchName'"
}

$nic = Hyper-V\Get-VMNetworkAdapter -VM $vm | Where-Object { $_.Name -eq $AdapterName } | Select-Object -First 1
if ([string]$nic.MacAddressSpoofing -ne $MacSpoofing) {
    Hyper-V\Set-VMNetworkAdapter -VMNetworkAdapter $nic -MacAddressSpoofing $MacSpoofing
    Write-Host "cluster-nic ${VMName}: MAC address spoofing $MacSpoofing"
}
Write-Host "cluster-nic ${VMName}: '$AdapterName' on '$SwitchName', MAC $MacAddress, spoofing $MacSpoofing"

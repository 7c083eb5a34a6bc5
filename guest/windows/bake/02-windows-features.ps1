# 02-windows-features.ps1 - the Windows features a containerd node needs: "Containers" (HCS and
# HNS, which containerd's runhcs shim and Flannel's overlay network use) and Microsoft-Hyper-V
# enabled WITHOUT the hypervisor. Packer reboots the guest right after this step (restart marker).
#
# Why Hyper-V without its hypervisor: the build VM runs with nested virtualization off
# (templates/packer/windows.pkr.hcl.j2, process isolation needs none). Install-WindowsFeature Hyper-V
# first checks the CPU for virtualization support and refuses in such a VM. DISM's
# /Enable-Feature Microsoft-Hyper-V /All skips that check, and disabling Microsoft-Hyper-V-Online
# then keeps the hypervisor itself from starting, so the guest boots as before. What remains is the
# Hyper-V networking stack (the VMSwitch cmdlets some CNI plugins call). Both projects that build
# Windows Kubernetes nodes do exactly this: kubernetes-sigs/sig-windows-tools
# hostprocess/Install-Containerd.ps1 -skipHypervisorSupportCheck (PR #309, commit f3fa3944; issue
# #296) and kubernetes-sigs/image-builder images/capi/ansible/windows/roles/systemprep/tasks/main.yml
# (disable_hypervisor, at 618e97cd; microsoft/Windows-Containers#80).
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

# DISM's exit code 3010: success, a restart is needed (the restart marker follows this step).
$dismOk = @(0, 3010)

$containers = Get-WindowsFeature -Name 'Containers'
if (-not $containers) { throw "this Windows edition has no 'Containers' feature: use the Windows Server ISO of the profile" }
if ($containers.Installed) {
    Write-K4wStep 'Containers feature already installed'
} else {
    $result = Install-WindowsFeature -Name 'Containers'
    if (-not $result.Success) { throw "Install-WindowsFeature Containers failed (exit code $($result.ExitCode))" }
    Write-K4wStep "Containers feature installed (restart needed: $($result.RestartNeeded))"
}

function Get-OptionalFeatureState([string]$Name) {
    $feature = Get-WindowsOptionalFeature -Online -FeatureName $Name
    if (-not $feature) { throw "this Windows edition has no optional feature '$Name'" }
    return "$($feature.State)"
}

if ((Get-OptionalFeatureState 'Microsoft-Hyper-V') -eq 'Enabled') {
    Write-K4wStep 'Microsoft-Hyper-V already enabled'
} else {
    Invoke-K4wExe -FilePath "$env:SystemRoot\System32\dism.exe" -ArgumentList @('/Online', '/Enable-Feature', '/FeatureName:Microsoft-Hyper-V', '/All', '/NoRestart') -AllowedExitCodes $dismOk
    Write-K4wStep 'Microsoft-Hyper-V enabled without the hypervisor check (DISM)'
}

if ((Get-OptionalFeatureState 'Microsoft-Hyper-V-Online') -eq 'Disabled') {
    Write-K4wStep 'Microsoft-Hyper-V-Online (the hypervisor) already disabled'
} else {
    Invoke-K4wExe -FilePath "$env:SystemRoot\System32\dism.exe" -ArgumentList @('/Online', '/Disable-Feature', '/FeatureName:Microsoft-Hyper-V-Online', '/NoRestart') -AllowedExitCodes $dismOk
    Write-K4wStep 'Microsoft-Hyper-V-Online disabled: the hypervisor does not start in this VM'
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

# 02-containers-feature.ps1 - the Windows "Containers" feature (HCS/HNS) Docker needs. Packer
# reboots the guest right after this step (windows-restart in templates/packer/windows.pkr.hcl.j2).
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$feature = Get-WindowsFeature -Name 'Containers'
if (-not $feature) {
    throw "this Windows edition has no 'Containers' feature: use a Windows Server 1803 ISO"
}
if ($feature.Installed) {
    Write-K4wStep 'Containers feature already installed'
} else {
    $result = Install-WindowsFeature -Name 'Containers'
    if (-not $result.Success) { throw "Install-WindowsFeature Containers failed (exit code $($result.ExitCode))" }
    Write-K4wStep "Containers feature installed (restart needed: $($result.RestartNeeded))"
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

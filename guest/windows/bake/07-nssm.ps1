# 07-nssm.ps1 - NSSM (the service wrapper of the node services, K4W_NODE_SERVICES: kubelet, flanneld and
# kube-proxy on the seed era, the kubelet's launcher alone on the containerd era) into C:\k.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
$version = Get-K4wEnv -Name 'K4W_NSSM_VERSION'

$zip = Get-K4wVerifiedFile -Component 'nssm'
$unpack = Join-Path $env:TEMP 'k4w-nssm'
if (Test-Path -LiteralPath $unpack) { Remove-Item -LiteralPath $unpack -Recurse -Force }
Expand-Archive -LiteralPath $zip -DestinationPath $unpack
# The release zip holds nssm-<version>\win32 and \win64; the 64-bit build manages 64-bit programs.
$source = Join-Path $unpack "nssm-$version\win64\nssm.exe"
if (-not (Test-Path -LiteralPath $source)) { throw "nssm-$version\win64\nssm.exe is missing from $zip" }
if (Copy-K4wFileIfChanged -Source $source -Destination (Join-Path $nodeDir 'nssm.exe')) {
    Write-K4wStep "NSSM $version installed in $nodeDir"
} else {
    Write-K4wStep "NSSM $version already installed in $nodeDir"
}
Remove-Item -LiteralPath $unpack -Recurse -Force

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

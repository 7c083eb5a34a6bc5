# 11-box-release.ps1 - the build record C:\k\box-release.json (docs/internals.md, "Profile
# conventions"): {"box": "<name>", "components": {"<component>": "<version>", ...}} with exactly the
# profile's components. k4w computes the record (K4W_RELEASE_JSON, the same for every box family);
# this step writes it in PowerShell's JSON layout, adding the patch level the box reached:
# "os": {"build": <CurrentBuild>, "ubr": <UBR>}. The testinfra box spec compares it with
# boxes/<box>.yml and the running system; the profile's fetch-release marker brings it to the host's
# build record. A profile that pins a cumulative update (K4W_WINDOWS_UPDATE_UBR) fails here when the
# box is below the UBR that update brings: the update did not complete.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
$box = Get-K4wEnv -Name 'K4W_BOX'
$record = (Get-K4wEnv -Name 'K4W_RELEASE_JSON') | ConvertFrom-Json
if ($record.box -ne $box) { throw "K4W_RELEASE_JSON names box '$($record.box)', not '$box' (K4W_BOX)" }
$level = Get-K4wPatchLevel
$minimumUbr = Get-K4wEnv -Name 'K4W_WINDOWS_UPDATE_UBR' -Optional
if ($minimumUbr -and $level.Ubr -lt [int]$minimumUbr) {
    throw "Windows is at $($level.Build).$($level.Ubr), below $($level.Build).$minimumUbr that the profile's windows_update brings: the update did not complete (see 02-windows-update.ps1's output and C:\Windows\Logs\CBS\CBS.log)"
}
$record | Add-Member -NotePropertyName 'os' -NotePropertyValue ([ordered]@{ build = $level.Build; ubr = $level.Ubr }) -Force
Write-K4wStep "patch level $($level.Build).$($level.Ubr)"
$path = Join-Path $nodeDir 'box-release.json'
if (Set-K4wFileContent -Path $path -Content (($record | ConvertTo-Json -Depth 3) + "`n")) {
    Write-K4wStep "wrote $path"
} else {
    Write-K4wStep "$path already up to date"
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

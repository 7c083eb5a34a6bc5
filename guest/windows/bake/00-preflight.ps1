# 00-preflight.ps1 - refuse to build before anything is installed when the box profile is
# incomplete (a missing K4W_* value or a component without any checksum) or when the ISO
# installed another Windows build than the profile expects.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$problems = New-Object System.Collections.Generic.List[string]
$profilePath = Get-K4wEnv -Name 'K4W_PROFILE'

foreach ($name in 'K4W_BOX', 'K4W_NODE_DIR', 'K4W_BUILD_GENERATION', 'K4W_OS_BUILD', 'K4W_IMAGE_SERVERCORE',
               'K4W_IMAGE_NANOSERVER', 'K4W_PAUSE_IMAGE', 'K4W_RELEASE_JSON', 'K4W_PROXY_ENABLED') {
    try { [void](Get-K4wEnv -Name $name) } catch { $problems.Add($_.Exception.Message) }
}

# Every component the box installs needs a version, a URL (build-* fetched it from there and put it
# on the build CD; K4W_<C>_FILE names it) and at least one checksum pinned in the profile (their
# step variables: $script:K4wComponents in common.ps1). The box's components are those of its
# build record (K4W_RELEASE_JSON, exactly the profile's components:).
$components = @((Get-K4wEnv -Name 'K4W_RELEASE_JSON' | ConvertFrom-Json).components.PSObject.Properties | ForEach-Object { $_.Name })
foreach ($component in $components) {
    $variables = Get-K4wComponentVariables -Component $component
    foreach ($key in 'Version', 'File') {
        if (-not (Get-K4wEnv -Name $variables[$key] -Optional)) {
            $profileKey = @{ Version = 'version'; File = 'url' }[$key]
            $problems.Add("components.$component.$profileKey is not set in $profilePath ($($variables[$key]) is missing)")
        }
    }
    try { [void](Get-K4wComponentChecks -Component $component) } catch { $problems.Add($_.Exception.Message) }
}

try { [void](Get-K4wProxySettings) } catch { $problems.Add($_.Exception.Message) }

# Container images must match the host build exactly (process isolation), so an ISO of another
# Windows release would give a box whose images cannot run.
$expectedBuild = [int](Get-K4wEnv -Name 'K4W_OS_BUILD')
$actualBuild = [Environment]::OSVersion.Version.Build
if ($actualBuild -ne $expectedBuild) {
    $problems.Add("the ISO installed Windows build $actualBuild, but $profilePath expects $expectedBuild (guest.os_build); use the matching ISO")
}

if ($problems.Count -gt 0) {
    throw "the Windows box cannot be built:`n  - $($problems -join "`n  - ")"
}
Write-K4wStep "preflight passed: $($components.Count) components, each with a pinned checksum; Windows build $actualBuild"

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

# 04-container-images.ps1 - pre-pull the Windows base images and build the pod infrastructure
# ("pause") image once, so a freshly joined node does not sit NotReady while gigabytes download.
# Images are content-addressed: Docker verifies every layer's digest while pulling.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$docker = Join-Path $env:ProgramFiles 'docker\docker.exe'
$servercore = Get-K4wEnv -Name 'K4W_IMAGE_SERVERCORE'
$nanoserver = Get-K4wEnv -Name 'K4W_IMAGE_NANOSERVER'
$pause = Get-K4wEnv -Name 'K4W_PAUSE_IMAGE'

function Test-Image([string]$Reference) {
    # `docker images -q` prints the image id, or nothing (exit 0) when it is absent.
    $id = & $docker images --quiet $Reference
    if ($LASTEXITCODE -ne 0) { throw "docker images $Reference failed with exit code $LASTEXITCODE" }
    return [bool]("$id".Trim())
}

foreach ($image in $servercore, $nanoserver) {
    if (Test-Image $image) {
        Write-K4wStep "$image already present"
    } else {
        Write-K4wStep "pulling $image"
        Invoke-K4wExe -FilePath $docker -ArgumentList @('pull', $image)
    }
}

# The pause container only has to stay alive and hold the pod's network compartment. Built FROM
# the nanoserver image of this host build (process isolation needs an exact build match), with
# the long-running command of Microsoft's Kubernetes-on-Windows guide of that era.
if (Test-Image $pause) {
    Write-K4wStep "$pause already built"
} else {
    $context = Join-Path $env:TEMP 'k4w-pause'
    New-Item -ItemType Directory -Path $context -Force | Out-Null
    [void](Set-K4wFileContent -Path (Join-Path $context 'Dockerfile') -Content "FROM $nanoserver`nCMD cmd /c ping -t localhost`n")
    Write-K4wStep "building $pause FROM $nanoserver"
    Invoke-K4wExe -FilePath $docker -ArgumentList @('build', '--tag', $pause, $context)
    Remove-Item -LiteralPath $context -Recurse -Force
    if (-not (Test-Image $pause)) { throw "$pause is missing after docker build" }
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

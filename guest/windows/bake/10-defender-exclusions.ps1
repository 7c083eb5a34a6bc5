# 10-defender-exclusions.ps1 - keep Windows Defender's real-time scan away from the container
# store and the node binaries: scanning every layer file makes image pulls and container starts
# several times slower (kubernetes-for-windows "Additional notes about windows performance").
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
$runtimeService = Get-K4wEnv -Name 'K4W_CONTAINER_RUNTIME'
$containerdDir = Join-Path $env:ProgramFiles 'containerd'   # 03-containerd.ps1 installs there
$dockerDir = Join-Path $env:ProgramFiles 'docker'           # 03-docker.ps1 unpacks there
# Each container runtime's layer store and the processes that write it (why: see the header).
# Processes by full path: Defender excludes a process named without a folder wherever a program of
# that name runs, a pod's kubelet.exe too (Microsoft, "Configure exclusions for files opened by
# processes": a file name alone matches it in any folder, a full path only that program).
$runtimes = @{
    docker     = @{ Paths = @((Join-Path $env:ProgramData 'docker')); Processes = @((Join-Path $dockerDir 'dockerd.exe')) }
    containerd = @{ Paths = @((Join-Path $env:ProgramData 'containerd'), $containerdDir)
                    Processes = @((Join-Path $containerdDir 'containerd.exe'), (Join-Path $containerdDir 'containerd-shim-runhcs-v1.exe')) }
}
if (-not $runtimes.ContainsKey($runtimeService)) { throw "K4W_CONTAINER_RUNTIME '$runtimeService' is neither docker nor containerd" }
$paths = @($runtimes[$runtimeService].Paths + $nodeDir)
$processes = @($runtimes[$runtimeService].Processes +
    @((Join-Path $nodeDir 'kubelet.exe'), (Join-Path $nodeDir 'kube-proxy.exe'), (Join-Path $nodeDir 'flanneld.exe')))
foreach ($process in $processes) {
    # Installed by the earlier steps; a path that names nothing would exclude nothing, silently.
    if (-not (Test-Path -LiteralPath $process -PathType Leaf)) { throw "$process does not exist: nothing to exclude by that path" }
}
# What this step excluded before it named full paths: the same programs by name alone.
$bareNames = @($processes | ForEach-Object { Split-Path -Leaf $_ })

if (-not (Get-Command -Name 'Add-MpPreference' -ErrorAction SilentlyContinue)) {
    # Server Core 1803 ships Defender; a trimmed image without it has nothing to exclude from.
    Write-K4wStep 'Windows Defender is not installed: no exclusions needed'
    return
}

$preference = Get-MpPreference
$stale = @(@($preference.ExclusionProcess) | Where-Object { $bareNames -contains $_ })
if ($stale) {
    Remove-MpPreference -ExclusionProcess $stale
    Write-K4wStep "Defender: no longer excludes any process named $($stale -join ', ')"
}
$missingPaths = @($paths | Where-Object { @($preference.ExclusionPath) -notcontains $_ })
$missingProcesses = @($processes | Where-Object { @($preference.ExclusionProcess) -notcontains $_ })
if ($missingPaths) {
    Add-MpPreference -ExclusionPath $missingPaths
    Write-K4wStep "Defender: excluded paths $($missingPaths -join ', ')"
}
if ($missingProcesses) {
    Add-MpPreference -ExclusionProcess $missingProcesses
    Write-K4wStep "Defender: excluded processes $($missingProcesses -join ', ')"
}
if (-not $missingPaths -and -not $missingProcesses -and -not $stale) {
    Write-K4wStep 'Defender exclusions already in place'
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

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
# Each container runtime's layer store and the processes that write it (why: see the header).
$runtimes = @{
    docker     = @{ Paths = @((Join-Path $env:ProgramData 'docker')); Processes = @('dockerd.exe') }
    containerd = @{ Paths = @((Join-Path $env:ProgramData 'containerd'), (Join-Path $env:ProgramFiles 'containerd'))
                    Processes = @('containerd.exe', 'containerd-shim-runhcs-v1.exe') }
}
if (-not $runtimes.ContainsKey($runtimeService)) { throw "K4W_CONTAINER_RUNTIME '$runtimeService' is neither docker nor containerd" }
$paths = @($runtimes[$runtimeService].Paths + $nodeDir)
$processes = @($runtimes[$runtimeService].Processes + @('kubelet.exe', 'kube-proxy.exe', 'flanneld.exe'))

if (-not (Get-Command -Name 'Add-MpPreference' -ErrorAction SilentlyContinue)) {
    # Server Core 1803 ships Defender; a trimmed image without it has nothing to exclude from.
    Write-K4wStep 'Windows Defender is not installed: no exclusions needed'
    return
}

$preference = Get-MpPreference
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
if (-not $missingPaths -and -not $missingProcesses) {
    Write-K4wStep 'Defender exclusions already in place'
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

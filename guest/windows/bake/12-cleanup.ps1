# 12-cleanup.ps1 - shrink the box: drop superseded components and temporary files, then make the
# free space reclaimable, so the VHDX compaction Packer runs after export (Optimize-VHD) gives a
# small box.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$generation = Get-K4wEnv -Name 'K4W_BUILD_GENERATION'

# 1. Component store: remove superseded component versions for good (/ResetBase: updates can no
#    longer be uninstalled, which a throw-away box never needs). 3010 = success, reboot pending.
Write-K4wStep 'component store cleanup (dism /StartComponentCleanup /ResetBase)'
Invoke-K4wExe -FilePath "$env:SystemRoot\System32\dism.exe" -ArgumentList @('/Online', '/Cleanup-Image', '/StartComponentCleanup', '/ResetBase', '/NoRestart') -AllowedExitCodes @(0, 3010)

# 2. Temporary files. Packer's own uploaded scripts (script-*.ps1, packer-*) are left alone: Packer
#    removes them itself after this step.
#    Windows Update's download cache is emptied with its service stopped (files it holds open are
#    not deleted otherwise, and its datastore must not point at half-deleted downloads), then the
#    service is left as it was: running again if it ran, its start type untouched, so a node can
#    still be patched after the bake (the box spec checks it is not disabled).
Write-K4wStep 'removing temporary files and download caches'
$updateService = Get-Service -Name 'wuauserv'
$updateWasRunning = $updateService.Status -eq 'Running'
Stop-Service -Name 'wuauserv' -Force
$keep = @('script-*', 'packer-*', 'k4w-common.ps1')
foreach ($dir in @("$env:SystemRoot\Temp", $env:TEMP, "$env:SystemRoot\SoftwareDistribution\Download") | Select-Object -Unique) {
    if (-not (Test-Path -LiteralPath $dir)) { continue }
    Get-ChildItem -LiteralPath $dir -Force | Where-Object {
        $name = $_.Name
        -not ($keep | Where-Object { $name -like $_ })
    } | ForEach-Object {
        # Files still open by a running service are skipped, not fatal.
        Remove-Item -LiteralPath $_.FullName -Recurse -Force -ErrorAction SilentlyContinue
    }
}
if ($updateWasRunning) { Start-Service -Name 'wuauserv' }

# 3. The build's proxy goes: machine environment, WinHTTP/WinINet and the container runtime
#    service's environment (K4W_CONTAINER_RUNTIME: docker or containerd). A box never keeps the build's proxy or its credentials; cluster-up gives each
#    node the proxy of its own cluster.yml (guest/windows/cluster/cluster-proxy.ps1).
$direct = Get-K4wDirectProxySettings
Set-K4wProxy -Proxy $direct
$runtimeService = Get-K4wEnv -Name 'K4W_CONTAINER_RUNTIME'
if (Set-K4wServiceProxy -Service $runtimeService -Proxy $direct) { Write-K4wStep "$runtimeService service: the build's proxy removed" }
# The build's registry mirror credentials go too (the hosts.toml files and CAs stay: no secret in them).
if (Test-Path -LiteralPath $script:K4wRegistryAuthFile) {
    Remove-Item -LiteralPath $script:K4wRegistryAuthFile -Force
    Write-K4wStep "the build's registry mirror credentials removed"
}

# 4. Free space. How a dynamic VHDX gets its space back depends on the disk controller:
#    - Gen2 boots from virtual SCSI, which passes TRIM/UNMAP through to the VHDX: a re-trim of the
#      volume tells Hyper-V every free cluster is unused, and those blocks are released.
#    - Gen1 boots from virtual IDE, which has no TRIM: overwrite the free space with zeros and
#      delete the file, so Optimize-VHD finds all-zero blocks to drop. Also the fallback when a
#      re-trim is refused.
function Clear-FreeSpace {
    $zeroFile = 'C:\k4w-zero.tmp'
    # Leave headroom so Windows never runs completely out of disk while the file exists.
    $reserve = 512MB
    $chunk = New-Object byte[] (64MB)
    # WriteThrough: the zeros must reach the disk. Through the cache, deleting the file right
    # after writing it could discard the dirty pages without ever writing them.
    $stream = [IO.File]::Create($zeroFile, $chunk.Length, [IO.FileOptions]::WriteThrough)
    try {
        while ((New-Object IO.DriveInfo 'C').AvailableFreeSpace -gt ($reserve + $chunk.Length)) {
            $stream.Write($chunk, 0, $chunk.Length)
        }
    } finally {
        $stream.Dispose()
        Remove-Item -LiteralPath $zeroFile -Force
    }
}

if ($generation -eq '2') {
    Write-K4wStep 'Gen2: re-trimming C: so the VHDX releases free blocks'
    try {
        Optimize-Volume -DriveLetter C -ReTrim
    } catch {
        Write-K4wStep "re-trim refused ($_): zeroing free space instead"
        Clear-FreeSpace
    }
} else {
    Write-K4wStep 'Gen1: zeroing free space on C: so Optimize-VHD can drop it'
    Clear-FreeSpace
}

# 5. Last: the build-time helper module (this process has already loaded it).
Remove-Item -LiteralPath $env:K4W_COMMON -Force
Write-K4wStep 'cleanup done'

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

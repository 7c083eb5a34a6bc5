# 06-cni-flannel.ps1 - the Windows CNI plugins (win-bridge for host-gw/l2bridge, win-overlay for
# vxlan, flannel, host-local) into C:\k\cni, and flanneld.exe into C:\k. Both checksum-verified.
# The CNI and Flannel configuration is per cluster: cluster-up writes it into C:\k\config.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
$cniVersion = Get-K4wEnv -Name 'K4W_CNI_VERSION'
$cniDir = Join-Path $nodeDir 'cni'
$plugins = 'win-bridge.exe', 'win-overlay.exe', 'flannel.exe', 'host-local.exe'
# Records which release is unpacked, so a second run (or a version bump) is detected.
$cniStamp = Join-Path $cniDir 'k4w-cni-version.txt'

New-Item -ItemType Directory -Path $cniDir, (Join-Path $cniDir 'config') -Force | Out-Null

$installed = (Test-Path -LiteralPath $cniStamp) -and ((Get-Content -LiteralPath $cniStamp -Raw).Trim() -eq $cniVersion)
foreach ($plugin in $plugins) {
    if (-not (Test-Path -LiteralPath (Join-Path $cniDir $plugin))) { $installed = $false }
}
if ($installed) {
    Write-K4wStep "CNI plugins $cniVersion already installed in $cniDir"
} else {
    $archive = Get-K4wVerifiedFile -Component 'cni'
    Invoke-K4wExe -FilePath "$env:SystemRoot\System32\tar.exe" -ArgumentList @('-xzf', $archive, '-C', $cniDir)
    foreach ($plugin in $plugins) {
        if (-not (Test-Path -LiteralPath (Join-Path $cniDir $plugin))) { throw "$plugin is missing from $archive" }
    }
    [void](Set-K4wFileContent -Path $cniStamp -Content "$cniVersion`n")
    Write-K4wStep "CNI plugins $cniVersion installed in $cniDir"
}

Install-K4wFlanneld -NodeDir $nodeDir

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

# 06-cni-flannel-overlay.ps1 - the pod network pieces of the containerd era, each checksum-verified:
# - into K4W_CNI_BIN_DIR (containerd's cni bin_dirs): win-overlay.exe, the Windows overlay plugin
#   Flannel's CNI plugin delegates to for vxlan, and host-local.exe, the IPAM plugin that reserves
#   kube-proxy's source VIP (start-node.ps1), both from containernetworking/plugins (component cni);
#   flannel.exe, Flannel's CNI plugin (component flannel_cni, shipped as flannel-amd64.exe);
# - flanneld.exe into the node folder (component flannel).
# The CNI and Flannel configuration is per cluster: cluster-up writes it into C:\k\config.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
$cniBinDir = Get-K4wEnv -Name 'K4W_CNI_BIN_DIR'
# Records which releases are unpacked, so a second run (or a version bump) is detected.
$stamp = Join-Path $cniBinDir 'k4w-cni-versions.txt'
$wanted = "cni $(Get-K4wEnv -Name 'K4W_CNI_VERSION'); flannel_cni $(Get-K4wEnv -Name 'K4W_FLANNEL_CNI_VERSION')`n"
# plugin file in the archive -> installed name
$cniPlugins = @{ 'win-overlay.exe' = 'win-overlay.exe'; 'host-local.exe' = 'host-local.exe' }
# flannel-io/cni-plugin scripts/package.sh packs the Windows build as flannel-amd64.exe; the CNI
# config's "type": "flannel" makes containerd run flannel.exe.
$flannelPlugins = @{ 'flannel-amd64.exe' = 'flannel.exe' }

function Install-Plugins([string]$Archive, [hashtable]$Plugins) {
    $unpack = Join-Path $env:TEMP 'k4w-cni-plugins'
    if (Test-Path -LiteralPath $unpack) { Remove-Item -LiteralPath $unpack -Recurse -Force }
    New-Item -ItemType Directory -Path $unpack | Out-Null
    Invoke-K4wExe -FilePath "$env:SystemRoot\System32\tar.exe" -ArgumentList @('-xzf', $Archive, '-C', $unpack)
    foreach ($file in $Plugins.Keys) {
        $source = Join-Path $unpack $file
        if (-not (Test-Path -LiteralPath $source)) { throw "$file is missing from $Archive" }
        [void](Copy-K4wFileIfChanged -Source $source -Destination (Join-Path $cniBinDir $Plugins[$file]))
    }
    Remove-Item -LiteralPath $unpack -Recurse -Force
}

New-Item -ItemType Directory -Path $cniBinDir -Force | Out-Null
$installed = (Test-Path -LiteralPath $stamp) -and ([IO.File]::ReadAllText($stamp) -ceq $wanted)
foreach ($target in @($cniPlugins.Values) + @($flannelPlugins.Values)) {
    if (-not (Test-Path -LiteralPath (Join-Path $cniBinDir $target))) { $installed = $false }
}
if ($installed) {
    Write-K4wStep "CNI plugins already installed in ${cniBinDir}: $($wanted.Trim())"
} else {
    Install-Plugins -Archive (Get-K4wVerifiedFile -Component 'cni') -Plugins $cniPlugins
    Install-Plugins -Archive (Get-K4wVerifiedFile -Component 'flannel_cni') -Plugins $flannelPlugins
    [void](Set-K4wFileContent -Path $stamp -Content $wanted)
    Write-K4wStep "CNI plugins installed in ${cniBinDir}: $($wanted.Trim())"
}

Install-K4wFlanneld -NodeDir $nodeDir

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

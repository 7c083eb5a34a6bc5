# 05-kubernetes-node.ps1 - kubelet, kube-proxy, kubeadm and kubectl from the official
# kubernetes-node-windows-amd64.tar.gz (checksums from the profile), into C:\k on the machine PATH.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$version = Get-K4wEnv -Name 'K4W_KUBERNETES_VERSION'
$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
$binaries = 'kubelet.exe', 'kube-proxy.exe', 'kubeadm.exe', 'kubectl.exe'
New-Item -ItemType Directory -Path $nodeDir -Force | Out-Null

function Test-KubeletVersion {
    $kubelet = Join-Path $nodeDir 'kubelet.exe'
    if (-not (Test-Path -LiteralPath $kubelet)) { return $false }
    foreach ($binary in $binaries) {
        if (-not (Test-Path -LiteralPath (Join-Path $nodeDir $binary))) { return $false }
    }
    return ((& $kubelet --version) -eq "Kubernetes v$version")
}

if (Test-KubeletVersion) {
    Write-K4wStep "Kubernetes $version node binaries already installed in $nodeDir"
} else {
    $archive = Get-K4wVerifiedFile -Component 'kubernetes'
    $unpack = Join-Path $env:TEMP 'k4w-kubernetes-node'
    if (Test-Path -LiteralPath $unpack) { Remove-Item -LiteralPath $unpack -Recurse -Force }
    New-Item -ItemType Directory -Path $unpack | Out-Null
    # tar.exe (bsdtar) ships with Windows since build 17063, so 1803 (17134) has it.
    Invoke-K4wExe -FilePath "$env:SystemRoot\System32\tar.exe" -ArgumentList @('-xzf', $archive, '-C', $unpack)
    foreach ($binary in $binaries) {
        $source = Join-Path $unpack "kubernetes\node\bin\$binary"
        if (-not (Test-Path -LiteralPath $source)) { throw "$binary is missing from $archive" }
        [void](Copy-K4wFileIfChanged -Source $source -Destination (Join-Path $nodeDir $binary))
    }
    Remove-Item -LiteralPath $unpack -Recurse -Force
    if (-not (Test-KubeletVersion)) { throw "kubelet.exe in $nodeDir does not report Kubernetes v$version" }
    Write-K4wStep "Kubernetes $version node binaries installed in $nodeDir"
}
Add-K4wMachinePath -Directory $nodeDir

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

# 09-node-acls.ps1 - the node's Kubernetes folders (C:\k, C:\k4w, C:\etc, C:\var, C:\run) get an
# ACL of SYSTEM and Administrators only (but for the kubelet's pod folder, which containers must be
# able to use), before the box is exported. C:\k\protect-node-folders.ps1
# (copied by the "upload" step) says why and does it; start-node.ps1 re-applies it on every start,
# after kubeadm join has written its files.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
$protect = Join-Path $nodeDir 'protect-node-folders.ps1'
if (-not (Test-Path -LiteralPath $protect)) {
    throw "$protect is missing: the file provisioner copies guest/windows/node/ into $nodeDir before this step"
}
& $protect
if ($LASTEXITCODE -ne 0) { throw "protect-node-folders.ps1 failed ($LASTEXITCODE)" }
Write-K4wStep 'node folders: SYSTEM and Administrators only; below C:\var\lib\kubelet\pods also ContainerUser (pod volumes)'

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`.
exit 0

<#
.SYNOPSIS
  Undo cluster-join on this Windows node, keeping the VM and the box (idempotent).

.DESCRIPTION
  kubeadm 1.11's reset targets Linux paths and systemd, so this removes exactly what joining
  created: services stopped, HNS state cleaned (C:\k\kube-cleanup.ps1), the node configs, the
  kubelet's kubeconfigs and certificates, Flannel's lease file and kube-proxy's source VIP files
  (which must go for a node to be re-added, REFERENCE).
#>
[CmdletBinding()]
param(
    [string]$NetworkName = ''
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("cluster-reset.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

$K = 'C:\k'
$NodeJson = Join-Path $K 'config\node.json'
if (-not $NetworkName -and (Test-Path -LiteralPath $NodeJson)) {
    $NetworkName = (Get-Content -LiteralPath $NodeJson -Raw | ConvertFrom-Json).network_name
}

foreach ($service in @('flanneld', 'kube-proxy', 'kubelet')) {
    $svc = Get-Service -Name $service -ErrorAction SilentlyContinue
    if ($null -ne $svc -and $svc.Status -ne 'Stopped') {
        Stop-Service -Name $service -Force
        $svc.WaitForStatus('Stopped', [TimeSpan]::FromSeconds(60))
    }
}
if ($NetworkName) {
    $global:LASTEXITCODE = 0
    & (Join-Path $K 'kube-cleanup.ps1') -NetworkName $NetworkName
    if ($LASTEXITCODE -ne 0) { throw "kube-cleanup.ps1 -NetworkName $NetworkName failed ($LASTEXITCODE)" }
}
$paths = @(
    (Join-Path $K 'config'),
    'C:\etc\kubernetes',
    'C:\var\lib\kubelet',
    'C:\run\flannel',
    (Join-Path $K 'cni\config\cni.conf'),
    (Join-Path $K 'SourceVip.json'),
    (Join-Path $K 'SourceVipRequest.json')
)
foreach ($path in $paths) {
    if (Test-Path -LiteralPath $path) {
        Remove-Item -LiteralPath $path -Recurse -Force
        Write-Output "cluster-reset: removed $path"
    }
}
Write-Output 'cluster-reset: node reset'

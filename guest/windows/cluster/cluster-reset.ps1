<#
.SYNOPSIS
  Undo cluster-join on this Windows node, keeping the VM and the box (idempotent).

.DESCRIPTION
  kubeadm 1.11's reset targets Linux paths and systemd, so this removes exactly what joining
  created: services stopped, HNS state cleaned (C:\k\kube-cleanup.ps1), the node configs, the
  kubelet's kubeconfigs and certificates, Flannel's lease file and kube-proxy's source VIP files
  (which must go for a node to be re-added, REFERENCE). The seed recipe's pod containers (Docker's
  k8s_*) go in kube-cleanup.ps1; the containerd recipe's pod sandboxes go through the CRI with
  `kubeadm reset`, before the HNS network they hold is deleted. cluster-reset deletes the Node
  object from the master (k4w/cluster/up.py).
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
$PollSeconds = 2
$RuntimeTimeoutSeconds = 120   # containerd answers within seconds of its start; longer means it is broken
$Node = $null
if (Test-Path -LiteralPath $NodeJson) { $Node = Get-Content -LiteralPath $NodeJson -Raw | ConvertFrom-Json }
if (-not $NetworkName -and $Node) { $NetworkName = $Node.network_name }

function Invoke-K4wKubeadmCriReset($Node) {
    <# Every pod sandbox stopped and removed through the CRI, as kubeadm's reset does it
       (removeContainers: ListPodSandbox, StopPodSandbox, RemovePodSandbox; kubernetes/kubernetes
       v1.35.4 cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go and cmd/kubeadm/app/util/runtime/
       runtime.go). Its cleanup-node phase also stops the kubelet service and empties
       C:\etc\kubernetes and C:\var\lib\kubelet, which the removal below repeats harmlessly. #>
    $ctr = Join-Path $env:ProgramFiles 'containerd\ctr.exe'
    $address = ($Node.runtime_endpoint -replace '^npipe://', '') -replace '/', '\'
    Start-Service -Name $Node.runtime_service
    $deadline = (Get-Date).AddSeconds($RuntimeTimeoutSeconds)
    while ($true) {
        $previous = $ErrorActionPreference
        $ErrorActionPreference = 'Continue'
        & $ctr --address $address version *> $null
        $code = $LASTEXITCODE
        $ErrorActionPreference = $previous
        if ($code -eq 0) { break }
        if ((Get-Date) -gt $deadline) { throw "$($Node.runtime_service) did not answer on $($Node.runtime_endpoint) within $RuntimeTimeoutSeconds s" }
        Start-Sleep -Seconds $PollSeconds
    }
    & (Join-Path $K 'kubeadm.exe') reset --force --cri-socket $Node.runtime_endpoint
    if ($LASTEXITCODE -ne 0) { throw "kubeadm reset --cri-socket $($Node.runtime_endpoint) failed ($LASTEXITCODE)" }
    Write-Output 'cluster-reset: pod sandboxes removed through the CRI (kubeadm reset)'
}

foreach ($service in @('flanneld', 'kube-proxy', 'kubelet')) {
    $svc = Get-Service -Name $service -ErrorAction SilentlyContinue
    if ($null -ne $svc -and $svc.Status -ne 'Stopped') {
        Stop-Service -Name $service -Force
        $svc.WaitForStatus('Stopped', [TimeSpan]::FromSeconds(60))
    }
}
if ($Node -and $Node.PSObject.Properties['runtime_endpoint']) { Invoke-K4wKubeadmCriReset $Node }
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

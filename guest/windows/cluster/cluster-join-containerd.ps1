<#
.SYNOPSIS
  Join this containerd-era Windows node to the cluster with kubeadm, then start its services in
  order (idempotent). The seed recipe's join is cluster-join.ps1.

.DESCRIPTION
  Run by cluster-up over WinRM after it copied the rendered node configs to C:\k\config
  (k4w/cluster/steps.py picks this script for a box whose profile names node_recipe: containerd).
  kubeadm join talks to containerd on the node's CRI endpoint (--cri-socket, node.json's
  runtime_endpoint), writes C:\var\lib\kubelet\config.yaml and kubeadm-flags.env, restarts the
  "kubelet" service (whose program, start-kubelet.ps1, reads both) and waits for its TLS
  bootstrap, so it runs in the foreground here. A node with kubelet.conf has joined: only the
  services start.
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$ApiServer,
    # A file holding the join token, uploaded by cluster-up and deleted here once read: a token
    # on the command line of this script would be visible to every process on the host.
    [Parameter(Mandatory = $true)][string]$TokenFile,
    [Parameter(Mandatory = $true)][string]$CaCertHash,
    [Parameter(Mandatory = $true)][string]$NodeName,
    [int]$TimeoutSeconds = 300
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("cluster-join-containerd.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

if (-not (Test-Path -LiteralPath $TokenFile)) { throw "join token file $TokenFile is missing: cluster-up uploads it before each join" }
try {
    $Token = (Get-Content -LiteralPath $TokenFile -Raw).Trim()
} finally {
    Remove-Item -LiteralPath $TokenFile -Force
}
if (-not $Token) { throw "join token file $TokenFile was empty" }

$K = 'C:\k'
$KubeDir = 'C:\etc\kubernetes'
$KubeletConf = Join-Path $KubeDir 'kubelet.conf'
$JoinLog = Join-Path $K 'logs\kubeadm-join.log'
$NodeJson = Join-Path $K 'config\node.json'
$env:PATH = "$K;$env:PATH"   # kubeadm's KubeletVersion preflight check runs `kubelet --version` from PATH

if (-not (Test-Path -LiteralPath $NodeJson)) { throw "$NodeJson is missing: cluster-up copies the rendered node configs before joining" }
$Node = Get-Content -LiteralPath $NodeJson -Raw | ConvertFrom-Json

function Invoke-StartNode([string[]]$Arguments) {
    $global:LASTEXITCODE = 0
    & (Join-Path $K 'start-node.ps1') @Arguments
    if ($LASTEXITCODE -ne 0) { throw "start-node.ps1 $($Arguments -join ' ') failed ($LASTEXITCODE)" }
}

if (Test-Path -LiteralPath $KubeletConf) {
    Write-Output "cluster-join: $KubeletConf exists, $NodeName has joined; starting its services"
    Invoke-StartNode @('-TimeoutSeconds', "$TimeoutSeconds")
    exit 0
}

# Leftovers of an interrupted join make kubeadm's preflight checks fail: the files (FileAvailable)
# and a kubelet it already started, which holds port 10250 (Port-10250).
if ((Get-Service -Name 'kubelet').Status -ne 'Stopped') { Stop-Service -Name 'kubelet' -Force; Write-Output 'cluster-join: stopped the kubelet of an interrupted join' }
foreach ($stale in @((Join-Path $KubeDir 'bootstrap-kubelet.conf'), (Join-Path $KubeDir 'pki\ca.crt'))) {
    if (Test-Path -LiteralPath $stale) { Remove-Item -LiteralPath $stale -Force; Write-Output "cluster-join: removed stale $stale" }
}
Invoke-StartNode @('-ConfigureOnly')
# kubeadm's CRI preflight check needs containerd answering.
Start-Service -Name $Node.runtime_service

New-Item -ItemType Directory -Force -Path (Split-Path -Parent $JoinLog) | Out-Null
$joinArgs = @('join', $ApiServer, '--token', $Token, '--discovery-token-ca-cert-hash', $CaCertHash, '--node-name', $NodeName, '--cri-socket', $Node.runtime_endpoint)
$join = Start-Process -FilePath (Join-Path $K 'kubeadm.exe') -ArgumentList $joinArgs -NoNewWindow -PassThru `
    -RedirectStandardOutput $JoinLog -RedirectStandardError "$JoinLog.err"
if (-not $join.WaitForExit($TimeoutSeconds * 1000)) {
    $join.Kill()
    throw "kubeadm join still running after $TimeoutSeconds s; see $JoinLog"
}
if ($join.ExitCode -ne 0) {
    $log = (Get-Content -LiteralPath $JoinLog, "$JoinLog.err" -ErrorAction SilentlyContinue | Select-Object -Last 20) -join "`n"
    throw "kubeadm join exited with $($join.ExitCode):`n$log"
}

Invoke-StartNode @('-TimeoutSeconds', "$TimeoutSeconds")
Write-Output "cluster-join: $NodeName joined"

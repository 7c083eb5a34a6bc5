<#
.SYNOPSIS
  Join this containerd-era Windows node to the cluster with kubeadm, then start its services,
  containerd and the kubelet (idempotent); the kubelet then runs the node's flanneld and kube-proxy
  as the pods of their HostProcess DaemonSets. The seed recipe's join is cluster-join.ps1.

.DESCRIPTION
  Run by cluster-up over WinRM after it copied the rendered node configs to C:\k\config
  (k4w/cluster/steps.py picks this script for a box whose profile names node_recipe: containerd).
  kubeadm join reads its JoinConfiguration (v1beta4: API server, token, CA hash, node name, the
  containerd CRI endpoint) from -ConfigFile, talks to containerd on that endpoint, writes C:\var\lib\kubelet\config.yaml and kubeadm-flags.env, restarts the
  "kubelet" service (whose program, start-kubelet.ps1, reads both) and waits for its TLS
  bootstrap, so it runs in the foreground here. A node with kubelet.conf has joined: only the
  services start. No kubeconfig of flanneld or kube-proxy is written here: their pods use their own
  projected ServiceAccount tokens.
#>
[CmdletBinding()]
param(
    # kubeadm's join configuration (k4w/derive/join_config.py), token inside, uploaded by
    # cluster-up: restricted to SYSTEM and Administrators at once and deleted here, failure
    # included. A token on a command line would be visible to every process on the node and host.
    [Parameter(Mandatory = $true)][string]$ConfigFile,
    [Parameter(Mandatory = $true)][string]$NodeName,
    [int]$TimeoutSeconds = 300
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("cluster-join-containerd.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    if (Test-Path -LiteralPath $ConfigFile) { Remove-Item -LiteralPath $ConfigFile -Force }
    exit 1
}

. (Join-Path $PSScriptRoot 'cluster-join-lib.ps1')
Initialize-K4wJoin $ConfigFile
$Node = Get-Content -LiteralPath $NodeJson -Raw | ConvertFrom-Json

if (Test-Path -LiteralPath $KubeletConf) {
    Write-Output "cluster-join: $KubeletConf exists, $NodeName has joined; starting its services"
    Remove-K4wSecretFile $ConfigFile
    Invoke-K4wStartNode @('-TimeoutSeconds', "$TimeoutSeconds")
    exit 0
}

# Leftovers of an interrupted join make kubeadm's preflight checks fail: a kubelet it already
# started, which holds port 10250 (Port-10250), and the files (FileAvailable).
if ((Get-Service -Name 'kubelet').Status -ne 'Stopped') { Stop-Service -Name 'kubelet' -Force; Write-Output 'cluster-join: stopped the kubelet of an interrupted join' }
Remove-K4wStaleJoinFiles
Invoke-K4wStartNode @('-ConfigureOnly')
# kubeadm's CRI preflight check needs containerd answering.
Start-Service -Name $Node.runtime_service

New-Item -ItemType Directory -Force -Path (Split-Path -Parent $JoinLog) | Out-Null
try {
    $join = Start-K4wKubeadmJoin -Kubeadm (Join-Path $K 'kubeadm.exe') -ConfigFile $ConfigFile -Log $JoinLog
    if (-not $join.WaitForExit($TimeoutSeconds * 1000)) {
        $join.Kill()
        throw "kubeadm join still running after $TimeoutSeconds s; see $JoinLog"
    }
} finally {
    Remove-K4wSecretFile $ConfigFile
}
if ($join.ExitCode -ne 0) { throw "kubeadm join exited with $($join.ExitCode):`n$(Get-K4wJoinLog $JoinLog)" }

Invoke-K4wStartNode @('-TimeoutSeconds', "$TimeoutSeconds")
Write-Output "cluster-join: $NodeName joined"

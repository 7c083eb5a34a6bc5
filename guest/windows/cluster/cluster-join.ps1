<#
.SYNOPSIS
  Join this Windows node to the cluster with kubeadm, then start its services (idempotent).

.DESCRIPTION
  Run by cluster-up over WinRM after it copied the rendered node configs to C:\k\config.
  kubeadm 1.11's join writes C:\etc\kubernetes\bootstrap-kubelet.conf and then waits for the
  kubelet's TLS bootstrap to produce kubelet.conf, so the kubelet must be started while kubeadm
  runs: kubeadm goes to the background, and start-node.ps1 starts the services once the
  bootstrap kubeconfig exists. A node with kubelet.conf has joined: only the services start.

  kubeadm reads a v1alpha2 NodeConfiguration (API server, token, CA hash, node name) from
  -ConfigFile: kubeadm 1.11 refuses --node-name and the other join flags beside --config.

  No --ignore-preflight-errors: kubeadm 1.11's Windows preflight (IsPrivilegedUser via the
  elevated WinRM session, the CRI check on its default /var/run/dockershim.sock socket, which
  it answers with `docker info` - hence docker is started first, KubeletVersion from C:\k on
  PATH) passes on this box. SystemVerification too, per k4w/validate/facts/
  kubeadm-1.11-windows-preflight.yml (checked by `invoke validate`): build 17134 reports kernel
  10.0.17134, which the spec's `10\.0\.1[5-9][0-9]{3}` accepts; Docker 17.09.0-ce is past the
  spec's 17.03 and only warns (the graph driver is then not looked at). 1.12 changed
  the Windows default socket to tcp://localhost:2375 (kubernetes#67447, after kubeadm#1079);
  that does not apply to 1.11.
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
    Write-Output ("cluster-join.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    if (Test-Path -LiteralPath $ConfigFile) { Remove-Item -LiteralPath $ConfigFile -Force }
    exit 1
}

. (Join-Path $PSScriptRoot 'cluster-join-lib.ps1')
Initialize-K4wJoin $ConfigFile
$BootstrapConf = Join-Path $KubeDir 'bootstrap-kubelet.conf'
$PollSeconds = 2

if (Test-Path -LiteralPath $KubeletConf) {
    Write-Output "cluster-join: $KubeletConf exists, $NodeName has joined; starting its services"
    Remove-K4wSecretFile $ConfigFile
    Invoke-K4wStartNode @('-TimeoutSeconds', "$TimeoutSeconds")
    exit 0
}

Remove-K4wStaleJoinFiles

Invoke-K4wStartNode @('-ConfigureOnly')

Start-Service -Name 'docker'
$deadline = (Get-Date).AddSeconds($TimeoutSeconds)
while ($true) {
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    & docker version 2>&1 | Out-Null
    $dockerCode = $LASTEXITCODE
    $ErrorActionPreference = $previous
    if ($dockerCode -eq 0) { break }
    if ((Get-Date) -gt $deadline) { throw "timed out after $TimeoutSeconds s waiting for docker to answer" }
    Start-Sleep -Seconds $PollSeconds
}

New-Item -ItemType Directory -Force -Path (Split-Path -Parent $JoinLog) | Out-Null
try {
    $join = Start-K4wKubeadmJoin -Kubeadm (Join-Path $K 'kubeadm.exe') -ConfigFile $ConfigFile -Log $JoinLog
    while (-not (Test-Path -LiteralPath $BootstrapConf)) {
        if ($join.HasExited) {
            throw "kubeadm join exited with $($join.ExitCode) before writing $BootstrapConf`n$(Get-K4wJoinLog $JoinLog)"
        }
        if ((Get-Date) -gt $deadline) { throw "timed out after $TimeoutSeconds s waiting for kubeadm join to write $BootstrapConf" }
        Start-Sleep -Seconds $PollSeconds
    }

    Invoke-K4wStartNode @('-TimeoutSeconds', "$TimeoutSeconds")

    if (-not $join.WaitForExit($TimeoutSeconds * 1000)) { $join.Kill(); throw "kubeadm join still running after $TimeoutSeconds s" }
} finally {
    Remove-K4wSecretFile $ConfigFile
}
$log = Get-K4wJoinLog $JoinLog
if ($join.ExitCode -ne 0) {
    if (Test-Path -LiteralPath $KubeletConf) {
        # The kubelet bootstrapped and registered; only kubeadm's final annotation step failed.
        Write-Output "cluster-join: WARNING kubeadm join exited with $($join.ExitCode) after the TLS bootstrap completed:`n$log"
    } else {
        throw "kubeadm join exited with $($join.ExitCode):`n$log"
    }
}
Write-Output "cluster-join: $NodeName joined"

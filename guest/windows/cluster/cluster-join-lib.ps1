<#
.SYNOPSIS
  What both Windows join scripts (cluster-join.ps1, cluster-join-containerd.ps1) share: the node's
  paths, the checks before a join, the kubeadm join configuration kept from other accounts and
  removed, the leftovers of an interrupted join, kubeadm's real exit code and start-node.ps1.

.DESCRIPTION
  Dot-sourced; cluster-up uploads it and common.ps1 beside the join script (k4w/cluster/steps.py).
#>
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest

# Protect-K4wPrivateFile (SYSTEM and Administrators only, inheritance off) comes from common.ps1, the one
# ACL helper of the Windows guest scripts; cluster-up uploads it beside this file (k4w/cluster/steps.py).
. (Join-Path $PSScriptRoot 'common.ps1')

function Remove-K4wSecretFile([string]$Path) {
    if ($Path -and (Test-Path -LiteralPath $Path)) { Remove-Item -LiteralPath $Path -Force }
}

function Start-K4wKubeadmJoin([string]$Kubeadm, [string]$ConfigFile, [string]$Log) {
    <# kubeadm join with its configuration file (the token never on a command line). The Process's
       Handle is read at once: Windows PowerShell 5.1 leaves ExitCode $null otherwise
       (PowerShell/PowerShell#5421, #20716; fixed in 7.4.1), and a failed join would look fine. #>
    $process = Start-Process -FilePath $Kubeadm -ArgumentList @('join', '--config', $ConfigFile) -NoNewWindow -PassThru `
        -RedirectStandardOutput $Log -RedirectStandardError "$Log.err"
    $null = $process.Handle
    return $process
}

function Get-K4wJoinLog([string]$Log) {
    return (Get-Content -LiteralPath $Log, "$Log.err" -ErrorAction SilentlyContinue | Select-Object -Last 20) -join "`n"
}

# The node's folders, as the box lays them out (C:\k: templates/packer/windows.pkr.hcl.j2) and
# kubeadm writes them (C:\etc\kubernetes: kubeadm's Windows KubernetesDir).
$K = 'C:\k'
$KubeDir = 'C:\etc\kubernetes'
$KubeletConf = Join-Path $KubeDir 'kubelet.conf'
$JoinLog = Join-Path $K 'logs\kubeadm-join.log'
$NodeJson = Join-Path $K 'config\node.json'

function Initialize-K4wJoin([string]$ConfigFile) {
    <# Before anything else: the join configuration locked to SYSTEM and Administrators, the rendered
       node configs present, and C:\k on PATH (kubeadm's KubeletVersion preflight check runs
       `kubelet --version` from PATH). #>
    if (-not (Test-Path -LiteralPath $ConfigFile)) { throw "kubeadm join configuration $ConfigFile is missing: cluster-up uploads it before each join" }
    Protect-K4wPrivateFile -Path $ConfigFile
    if (-not (Test-Path -LiteralPath $NodeJson)) { throw "$NodeJson is missing: cluster-up copies the rendered node configs before joining" }
    $env:PATH = "$K;$env:PATH"
}

function Invoke-K4wStartNode([string[]]$Arguments) {
    # The node's start-node.ps1 (C:\k, the box's recipe), judged by its exit code.
    $global:LASTEXITCODE = 0
    & (Join-Path $K 'start-node.ps1') @Arguments
    if ($LASTEXITCODE -ne 0) { throw "start-node.ps1 $($Arguments -join ' ') failed ($LASTEXITCODE)" }
}

function Remove-K4wStaleJoinFiles {
    # Leftovers of an interrupted join make kubeadm's FileAvailable preflight checks fail.
    foreach ($stale in @((Join-Path $KubeDir 'bootstrap-kubelet.conf'), (Join-Path $KubeDir 'pki\ca.crt'))) {
        if (Test-Path -LiteralPath $stale) { Remove-Item -LiteralPath $stale -Force; Write-Output "cluster-join: removed stale $stale" }
    }
}

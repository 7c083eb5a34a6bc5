<#
.SYNOPSIS
  What both Windows join scripts (cluster-join.ps1, cluster-join-containerd.ps1) need: the kubeadm
  join configuration kept from other accounts and removed, and kubeadm's real exit code.

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

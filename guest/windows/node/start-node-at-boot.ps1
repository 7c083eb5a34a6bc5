<#
.SYNOPSIS
  The k4w-node-start boot task's action: run start-node.ps1 until it succeeds, a bounded number of times.

.DESCRIPTION
  At boot the node often comes up before what start-node.ps1 waits for: after a host reboot the
  master boots at the same time, and Vagrant reconnects this VM's cluster NIC to the cluster switch
  only after the VM has booted (the Vagrantfile's after-up trigger). start-node.ps1 then times out
  on a real condition (e.g. the node's registration) and exits 1. Task Scheduler's RestartOnFailure
  does not help there: it retries a task that failed to START, not one whose action exits non-zero
  (MS-TSCH 2.5.4.2). So each attempt's exit code is judged here; the pause between attempts is a
  back-off, not a readiness wait: every attempt waits on real conditions itself.
  Every attempt's output is appended to the log as UTF-8 (Windows PowerShell 5.1's *>> would write
  UTF-16; -Width keeps Out-File from cutting lines); the exit code is the last attempt's, so the
  task's "Last Run Result" tells success from giving up.
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$StartNode,
    [Parameter(Mandatory = $true)][string]$Log,
    [ValidateRange(1, 100)][int]$Attempts = 10,
    [ValidateRange(0, 3600)][int]$RetrySeconds = 60
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("start-node-at-boot.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

function Write-Log([string]$Message) {
    "start-node-at-boot: $(Get-Date -Format 'yyyy-MM-dd HH:mm:ss') $Message" | Out-File -FilePath $Log -Append -Encoding utf8 -Width 4096
}

$code = 1
for ($attempt = 1; $attempt -le $Attempts; $attempt++) {
    Write-Log "attempt $attempt of $Attempts"
    $global:LASTEXITCODE = 0
    # start-node.ps1 ends with `exit`, which sets $LASTEXITCODE here; its errors are in the log.
    & $StartNode *>&1 | Out-File -FilePath $Log -Append -Encoding utf8 -Width 4096
    $code = $LASTEXITCODE
    if ($code -eq 0) { exit 0 }
    if ($attempt -lt $Attempts) {
        Write-Log "start-node.ps1 exited $code; next attempt in $RetrySeconds s"
        Start-Sleep -Seconds $RetrySeconds
    }
}
Write-Log "start-node.ps1 exited $code on all $Attempts attempts; giving up until the next boot or cluster-up"
exit $code

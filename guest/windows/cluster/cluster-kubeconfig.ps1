<#
.SYNOPSIS
  Put a component's kubeconfig (uploaded by cluster-up as a private file) in its place, readable
  by SYSTEM and Administrators only, and delete the upload.

.DESCRIPTION
  flanneld and kube-proxy run as LocalSystem services with identities of their own
  (k4w/derive/identities.py). Their kubeconfigs hold a ServiceAccount token, so the file gets its own
  protected ACL, whatever its folder's, and the uploaded copy never outlives this script.
  Idempotent: a destination with the same content is left as it is (only its ACL is re-asserted).
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$Source,
    [Parameter(Mandatory = $true)][string]$Destination
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("cluster-kubeconfig.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    if ($Source -and (Test-Path -LiteralPath $Source)) { Remove-Item -LiteralPath $Source -Force }
    exit 1
}

# Well-known SIDs (Microsoft, "Well-known SIDs"): LocalSystem, BUILTIN\Administrators.
$Grants = @('*S-1-5-18:F', '*S-1-5-32-544:F')
# Invoke-K4wIcacls: node-lib.ps1, which cluster-up uploads beside this script (k4w/cluster/steps.py).
. (Join-Path $PSScriptRoot 'node-lib.ps1')

if (-not (Test-Path -LiteralPath $Source)) { throw "$Source does not exist: cluster-up uploads it just before this script" }
$directory = Split-Path -Parent $Destination
if (-not (Test-Path -LiteralPath $directory)) { New-Item -ItemType Directory -Path $directory | Out-Null }

$same = (Test-Path -LiteralPath $Destination) -and
    ((Get-FileHash -LiteralPath $Source).Hash -eq (Get-FileHash -LiteralPath $Destination).Hash)
if ($same) {
    Remove-Item -LiteralPath $Source -Force
} else {
    Move-Item -LiteralPath $Source -Destination $Destination -Force
    Write-Output "cluster-kubeconfig: $Destination written"
}
# Exactly SYSTEM and Administrators with full control: /reset drops any explicit ACE the file
# had, /inheritance:r then drops the inherited ones, /grant:r adds the two.
Invoke-K4wIcacls @($Destination, '/reset', '/Q')
Invoke-K4wIcacls (@($Destination, '/inheritance:r', '/grant:r') + $Grants + @('/Q'))
exit 0

<#
.SYNOPSIS
  Give this node the proxy of the cluster.yml it is brought up with (run by cluster-up over
  WinRM before the node joins, idempotent).

.DESCRIPTION
  A box carries no proxy: 12-cleanup.ps1 removes the build's. This sets the machine-wide proxy
  (environment, WinHTTP, WinINet: Set-K4wProxy) and the container runtime service's environment
  (Set-K4wServiceProxy: containerd on a containerd-era box, else docker), and restarts the running
  runtime whose environment changed. A containerd node also gets the image mirrors
  (K4W_REGISTRY_FILES, K4W_REGISTRY_AUTH: Set-K4wContainerdRegistry).
  The values are the K4W_* proxy variables of the build's steps (k4w.derive.step_env), read from
  -ValuesFile, a JSON object: they may hold the proxy password, so they never appear on a command
  line, and the file is deleted once read. Machine environment variables are readable by every
  local account (Windows has no per-variable access control); a node has only the box's accounts.
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$ValuesFile,
    [Parameter(Mandatory = $true)][string]$Common
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("cluster-proxy.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}
. $Common

try {
    $values = Get-Content -LiteralPath $ValuesFile -Raw | ConvertFrom-Json
} finally {
    Remove-Item -LiteralPath $ValuesFile -Force -ErrorAction SilentlyContinue
}
foreach ($property in $values.PSObject.Properties) {
    [Environment]::SetEnvironmentVariable($property.Name, [string]$property.Value, 'Process')
}

$proxy = Get-K4wProxySettings
Set-K4wProxy -Proxy $proxy
# The box has one runtime service: containerd (containerd-era recipe) or docker (seed).
$runtime = if (Get-Service -Name 'containerd' -ErrorAction SilentlyContinue) { 'containerd' } else { 'docker' }
$changed = Set-K4wServiceProxy -Service $runtime -Proxy $proxy
# A containerd node also gets this cluster.yml's image mirrors and their credentials (SYSTEM and
# Administrators only): the box carries the bake's hosts.toml files, never its credentials.
if ($runtime -eq 'containerd' -and $values.PSObject.Properties['K4W_REGISTRY_FILES']) {
    if (Set-K4wContainerdRegistry -Files ([string]$values.K4W_REGISTRY_FILES) -Auth ([string]$values.K4W_REGISTRY_AUTH)) { $changed = $true }
}
if ($changed -and (Get-Service -Name $runtime).Status -eq 'Running') {
    Write-K4wStep "$runtime service environment changed: restarting $runtime"
    Restart-Service -Name $runtime -Force
}
if ($proxy.Enabled) {
    Write-K4wStep "node proxy configured (http: $([bool]$proxy.Http.HostPort), https: $([bool]$proxy.Https.HostPort))"
} else {
    Write-K4wStep 'no proxy configured: the node has direct access'
}
exit 0

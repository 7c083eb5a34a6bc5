# 01-proxy.ps1 - the machine-wide proxy, for every later step and for the finished box:
# - HTTP_PROXY / HTTPS_PROXY / NO_PROXY as machine environment variables, read by Go programs
#   (docker CLI, kubelet, kube-proxy, flanneld) and curl.exe; they carry the full URLs, credentials
#   included, because those tools need them.
# - WinHTTP and the machine-wide WinINet settings (same helper as k4w-bootstrap.ps1, which set them
#   at first logon): .NET's default proxy reads WinINet, so every PowerShell script uses it.
# Without a configured proxy all of it is removed: the box is direct, nothing stale remains.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.json.j2)' }
. $env:K4W_COMMON

$proxy = Get-K4wProxySettings

# Windows environment names are case-insensitive, so one variable serves http_proxy and HTTP_PROXY.
Set-K4wMachineEnv -Name 'HTTP_PROXY' -Value $proxy.Http
Set-K4wMachineEnv -Name 'HTTPS_PROXY' -Value $proxy.Https
Set-K4wMachineEnv -Name 'NO_PROXY' -Value ($proxy.NoProxy -join ',')

Set-K4wSystemProxy -HttpProxy (ConvertTo-K4wProxyHostPort -Url $proxy.Http) `
    -HttpsProxy (ConvertTo-K4wProxyHostPort -Url $proxy.Https) `
    -NoProxy $proxy.NoProxy

if ($proxy.Enabled) {
    Write-K4wStep "proxy configured (http: $([bool]$proxy.Http), https: $([bool]$proxy.Https), $($proxy.NoProxy.Count) NO_PROXY entries)"
} else {
    Write-K4wStep 'no proxy configured: direct access'
}

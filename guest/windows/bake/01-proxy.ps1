# 01-proxy.ps1 - the machine-wide proxy, for every later step of the build (Set-K4wProxy in
# common.ps1). 12-cleanup.ps1 removes it again, so a box never keeps the build's proxy or its
# credentials; cluster-up gives each node the proxy of its cluster.yml (cluster-proxy.ps1).
# - HTTP_PROXY / HTTPS_PROXY / NO_PROXY as machine environment variables, read by Go programs
#   (docker CLI, kubelet, kube-proxy, flanneld) and curl.exe; they carry the full URLs, credentials
#   included, because those tools need them. The pairs come ready-made from k4w.derive.values
#   (K4W_PROXY_ENV), so this step writes exactly those.
# - WinHTTP and the machine-wide WinINet settings (same helper as k4w-bootstrap.ps1, which set them
#   at first logon), from the proxies' host:port: .NET's default proxy reads WinINet, so every
#   PowerShell script uses it.
# Without a configured proxy all of it is removed.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$proxy = Get-K4wProxySettings
Set-K4wProxy -Proxy $proxy

if ($proxy.Enabled) {
    Write-K4wStep "proxy configured (http: $([bool]$proxy.Http.HostPort), https: $([bool]$proxy.Https.HostPort), $($proxy.NoProxy.Count) NO_PROXY entries)"
} else {
    Write-K4wStep 'no proxy configured: direct access'
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

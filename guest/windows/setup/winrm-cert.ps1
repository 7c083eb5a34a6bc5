<#
.SYNOPSIS
  Give WinRM's HTTPS listener (5986) a key of this machine's own: a self-signed certificate made
  here, never one a box carried in.

.DESCRIPTION
  Packer and Vagrant connect without verifying the certificate (winrm_insecure,
  ssl_peer_verification false), so the key is the only thing that tells one VM's listener from
  another's. A key baked into the box would be shared by every VM made from it, and by anyone who
  has the .box file. So:
  - k4w-bootstrap.ps1 runs this at first logon of the bake: no certificate yet, one is made and the
    listener created with it (Packer connects to that one);
  - the build's shutdown_command deletes that certificate, its private key and the HTTPS listener as
    the last thing the bake does (templates/packer/windows.pkr.hcl.j2), so the box carries neither
    key nor listener, and 5986 refuses connections until this script has run;
  - the boot task k4w-winrm-scope (registered by the bootstrap, SYSTEM, at startup) runs this at
    every start, before winrm-scope.ps1: on a VM's first boot there is no listener, so a new key is
    made here and the listener created with it. It also renews a certificate that names another computer (cluster-up
    renames each node) or expires within 30 days. Otherwise it changes nothing (idempotent).
#>
[CmdletBinding()]
param(
    [int]$TimeoutSeconds = 300
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("winrm-cert.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

# The name the bootstrap, this script and the shutdown_command find the certificate by.
$FriendlyName = 'k4w WinRM HTTPS'
$RenewDays = 30
$PollSeconds = 2

# At boot the WinRM service may not be running yet, and the WSMan: drive needs it (a real condition, bounded).
$deadline = (Get-Date).AddSeconds($TimeoutSeconds)
while ((Get-Service -Name 'WinRM').Status -ne 'Running') {
    if ((Get-Date) -gt $deadline) { throw "the WinRM service is not running after $TimeoutSeconds s" }
    Start-Service -Name 'WinRM' -ErrorAction SilentlyContinue
    Start-Sleep -Seconds $PollSeconds
}

$listeners = @(Get-ChildItem -Path 'WSMan:\localhost\Listener' | Where-Object { $_.Keys -contains 'Transport=HTTPS' })
$bound = ''
if ($listeners.Count -gt 0) {
    $bound = [string](Get-Item -Path (Join-Path $listeners[0].PSPath 'CertificateThumbprint')).Value
}
$cert = $null
if ($bound) {
    $cert = Get-ChildItem -Path 'Cert:\LocalMachine\My' | Where-Object { $_.Thumbprint -eq $bound.Trim() -and $_.HasPrivateKey } | Select-Object -First 1
}
$fresh = $false
if ($cert) {
    $names = @($cert.DnsNameList | ForEach-Object { $_.Unicode })
    $fresh = ($names -contains $env:COMPUTERNAME) -and ($cert.NotAfter -gt (Get-Date).AddDays($RenewDays))
}
if ($fresh -and $listeners.Count -eq 1) {
    Write-Output "winrm-cert: the HTTPS listener keeps its certificate $($cert.Thumbprint) (this machine's, $env:COMPUTERNAME)"
    exit 0
}

# A new key pair, made on this machine; then the listener on it, then the old certificates gone.
$new = New-SelfSignedCertificate -DnsName $env:COMPUTERNAME -CertStoreLocation 'Cert:\LocalMachine\My' `
    -FriendlyName $FriendlyName -NotAfter (Get-Date).AddYears(5)
foreach ($listener in $listeners) {
    Remove-Item -Path $listener.PSPath -Recurse -Force
}
New-Item -Path 'WSMan:\localhost\Listener' -Transport HTTPS -Address * -CertificateThumbPrint $new.Thumbprint -Force | Out-Null
Get-ChildItem -Path 'Cert:\LocalMachine\My' | Where-Object { $_.FriendlyName -eq $FriendlyName -and $_.Thumbprint -ne $new.Thumbprint } |
    ForEach-Object { Remove-Item -Path $_.PSPath -DeleteKey -Force }
Write-Output "winrm-cert: the HTTPS listener now uses $($new.Thumbprint), a key made on $env:COMPUTERNAME"
exit 0

# k4w-bootstrap.ps1 - the one FirstLogonCommand of Autounattend.xml. It runs once, as the
# auto-logged-on Administrator, from the Setup media (CD on Gen2, floppy on Gen1; found by this
# file's name, see templates/http/windows/Autounattend.xml.j2), and prepares exactly what Packer needs to
# take over. WinRM is opened LAST, so Packer only connects to a guest that is ready.
# Values come as parameters from the answer file: the proxy as host:port (never credentials).
param(
    [string]$HttpProxy = '',
    [string]$HttpsProxy = '',
    [string]$NoProxy = ''
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
# Nobody watches this console: keep a transcript for debugging from the Hyper-V console.
Start-Transcript -Path "$env:SystemRoot\Temp\k4w-bootstrap.log" -Append | Out-Null
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; Stop-Transcript | Out-Null; exit 1 }
. (Join-Path $PSScriptRoot 'common.ps1')

# 1. Execution policy for local scripts (the Server default, asserted). This very process runs
#    with -ExecutionPolicy Bypass, which makes Set-ExecutionPolicy report that a more specific
#    scope overrides it; the LocalMachine value is written all the same and checked below.
if ((Get-ExecutionPolicy -Scope LocalMachine) -ne 'RemoteSigned') {
    try {
        Set-ExecutionPolicy -ExecutionPolicy RemoteSigned -Scope LocalMachine -Force
    } catch [System.Security.SecurityException] {
        Write-K4wStep 'execution policy: LocalMachine set (overridden in this process only)'
    }
    if ((Get-ExecutionPolicy -Scope LocalMachine) -ne 'RemoteSigned') { throw 'could not set the LocalMachine execution policy to RemoteSigned' }
}

# 2. Machine proxy (WinHTTP + machine-wide WinINet), before anything might go online.
$noProxyList = @($NoProxy -split ',' | ForEach-Object { $_.Trim() } | Where-Object { $_ })
Set-K4wSystemProxy -HttpProxy $HttpProxy -HttpsProxy $HttpsProxy -NoProxy $noProxyList

# 3. Network profile Private: Windows opens WinRM on Public networks only to the local subnet,
#    and Hyper-V's "Default Switch" is an unidentified (Public) network. Wait for network location
#    awareness to classify the NIC first.
Wait-K4wCondition -Description 'a network connection profile' -TimeoutSeconds 600 -Condition { @(Get-NetConnectionProfile).Count -gt 0 }
Get-NetConnectionProfile | Where-Object { $_.NetworkCategory -ne 'Private' -and $_.NetworkCategory -ne 'DomainAuthenticated' } |
    ForEach-Object { Set-NetConnectionProfile -InterfaceIndex $_.InterfaceIndex -NetworkCategory Private }

# 4. UAC remote restrictions: local administrators other than the built-in Administrator get a
#    filtered (non-admin) token over the network unless LocalAccountTokenFilterPolicy=1 (Microsoft
#    KB 951016, "User Account Control and remote restrictions"). Vagrant logs in as "vagrant".
[void](Set-K4wRegistryValue -Path 'HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Policies\System' -Name 'LocalAccountTokenFilterPolicy' -Value 1 -Type DWord)

# 5. The box's accounts must keep working however long the box sits unused: local passwords
#    expire after 42 days by default, after which WinRM logons fail.
foreach ($user in 'Administrator', 'vagrant') {
    Set-LocalUser -Name $user -PasswordNeverExpires $true
}

# 6. WinRM. Service started automatically; HTTP listener (5985) for Vagrant, which uses NTLM
#    with message encryption (vagrant/box/windows.Vagrantfile); limits raised for long
#    provisioning commands.
Set-Service -Name 'WinRM' -StartupType Automatic
Start-Service -Name 'WinRM'
Enable-PSRemoting -SkipNetworkProfileCheck -Force | Out-Null
Set-Item -Path 'WSMan:\localhost\Shell\MaxMemoryPerShellMB' -Value 2048
Set-Item -Path 'WSMan:\localhost\MaxTimeoutms' -Value 1800000

# 7. HTTPS listener (5986) for Packer, with a self-signed certificate (templates/packer/windows.json.j2 sets
#    winrm_insecure), and its firewall rule. Done last: from here on Packer can connect.
$friendlyName = 'k4w WinRM HTTPS'
$cert = Get-ChildItem -Path 'Cert:\LocalMachine\My' | Where-Object { $_.FriendlyName -eq $friendlyName } | Select-Object -First 1
if (-not $cert) {
    $cert = New-SelfSignedCertificate -DnsName $env:COMPUTERNAME -CertStoreLocation 'Cert:\LocalMachine\My' `
        -FriendlyName $friendlyName -NotAfter (Get-Date).AddYears(5)
}
$https = @(Get-ChildItem -Path 'WSMan:\localhost\Listener' | Where-Object { $_.Keys -contains 'Transport=HTTPS' })
if (-not $https) {
    New-Item -Path 'WSMan:\localhost\Listener' -Transport HTTPS -Address * -CertificateThumbPrint $cert.Thumbprint -Force | Out-Null
}
if (-not (Get-NetFirewallRule -Name 'k4w-winrm-https' -ErrorAction SilentlyContinue)) {
    New-NetFirewallRule -Name 'k4w-winrm-https' -DisplayName 'k4w: WinRM over HTTPS (TCP 5986)' `
        -Direction Inbound -Action Allow -Protocol TCP -LocalPort 5986 -Profile Any | Out-Null
}
Write-K4wStep 'bootstrap done: WinRM HTTPS listening on 5986'
Stop-Transcript | Out-Null

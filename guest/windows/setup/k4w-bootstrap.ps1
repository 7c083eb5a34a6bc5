# k4w-bootstrap.ps1 - the one FirstLogonCommand of Autounattend.xml. It runs once, as the
# auto-logged-on Administrator, from the Setup media (CD on Gen2, floppy on Gen1; found by this
# file's name, see templates/http/windows/Autounattend.xml.j2), and prepares exactly what Packer needs to
# take over. WinRM is opened LAST, so Packer only connects to a guest that is ready.
# Values come as parameters from the answer file: the proxy as host:port (never credentials), and
# from where WinRM may be reached on the management NIC (k4w.derive.values.winrm_remote_scope).
param(
    [string]$HttpProxy = '',
    [string]$HttpsProxy = '',
    [string]$NoProxy = '',
    [ValidateSet('DefaultGateway', 'LocalSubnet')][string]$WinRmRemote = 'DefaultGateway'
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
#    KB 951016, "User Account Control and remote restrictions"). Kept, because it is needed: the
#    built-in Administrator is disabled when the build ends (templates/packer/windows.pkr.hcl.j2,
#    shutdown_command), so "vagrant" is the only account cluster-up administers the node with, and
#    it needs its full token (kubeadm, services, HNS). What limits the exposure is that WinRM
#    answers the Hyper-V host only (step 6) and vagrant's password is random per k4w installation.
[void](Set-K4wRegistryValue -Path 'HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Policies\System' -Name 'LocalAccountTokenFilterPolicy' -Value 1 -Type DWord)

# 5. The box's accounts must keep working however long the box sits unused: local passwords
#    expire after 42 days by default, after which WinRM logons fail.
foreach ($user in 'Administrator', 'vagrant') {
    Set-LocalUser -Name $user -PasswordNeverExpires $true
}

# 6. WinRM. Service started automatically; PowerShell remoting's session configurations (Vagrant's
#    winrm gem speaks PSRP to them); limits raised for long provisioning commands.
Set-Service -Name 'WinRM' -StartupType Automatic
Start-Service -Name 'WinRM'
Enable-PSRemoting -SkipNetworkProfileCheck -Force | Out-Null
Set-Item -Path 'WSMan:\localhost\Shell\MaxMemoryPerShellMB' -Value 2048
Set-Item -Path 'WSMan:\localhost\MaxTimeoutms' -Value 1800000

# 7. HTTPS listener (5986) for Packer and Vagrant, with a self-signed certificate
#    (templates/packer/windows.pkr.hcl.j2 sets winrm_insecure, the Vagrantfiles ssl_peer_verification
#    false). winrm-cert.ps1 makes the key and the listener; the build's shutdown_command deletes that
#    key and the listener, and the boot task k4w-winrm-scope runs winrm-cert.ps1 at every start, so
#    each VM made from the box makes a key of its own at its first boot (winrm-cert.ps1 says why).
#    winrm-scope.ps1 then opens 5986 on the management NIC from the host only and removes the HTTP
#    listener Enable-PSRemoting made; the same boot task runs it again at every start, after
#    winrm-cert.ps1 (the NIC's name may differ in a VM made from the box). Done last: from here on
#    Packer can connect.
$nodeDir = 'C:\k'
New-Item -ItemType Directory -Path $nodeDir -Force | Out-Null
$certScript = Join-Path $nodeDir 'winrm-cert.ps1'
Copy-Item -LiteralPath (Join-Path $PSScriptRoot 'winrm-cert.ps1') -Destination $certScript -Force
& $certScript
if ($LASTEXITCODE -ne 0) { throw "winrm-cert.ps1 failed ($LASTEXITCODE)" }
$scope = Join-Path $nodeDir 'winrm-scope.ps1'
Copy-Item -LiteralPath (Join-Path $PSScriptRoot 'winrm-scope.ps1') -Destination $scope -Force
& $scope -RemoteScope $WinRmRemote
if ($LASTEXITCODE -ne 0) { throw "winrm-scope.ps1 failed ($LASTEXITCODE)" }
# One boot task with two actions, which Task Scheduler runs one after the other (Microsoft, Task
# Scheduler "Task Actions"): winrm-cert.ps1 removes and recreates the HTTPS listener that
# winrm-scope.ps1 reads, so they must not run side by side as two tasks would.
# A Hyper-V VM on a laptop may see the host's battery, and a task's defaults neither start on battery
# nor outlast unplugging: WinRM would stay closed. RestartCount/RestartInterval cover the action
# failing to start (MS-TSCH 2.5.4.2); one minute is Task Scheduler's shortest interval (PT1M).
$bootTask = 'k4w-winrm-scope'
if (-not (Get-ScheduledTask -TaskName $bootTask -ErrorAction SilentlyContinue)) {
    $powershell = "$env:SystemRoot\System32\WindowsPowerShell\v1.0\powershell.exe"
    $actions = @(foreach ($taskScript in @($certScript, $scope)) {
        New-ScheduledTaskAction -Execute $powershell -Argument "-NoProfile -NonInteractive -ExecutionPolicy Bypass -File `"$taskScript`""
    })
    $principal = New-ScheduledTaskPrincipal -UserId 'SYSTEM' -LogonType ServiceAccount -RunLevel Highest
    $settings = New-ScheduledTaskSettingsSet -AllowStartIfOnBatteries -DontStopIfGoingOnBatteries `
        -RestartCount 3 -RestartInterval (New-TimeSpan -Minutes 1)
    Register-ScheduledTask -TaskName $bootTask -Action $actions -Trigger (New-ScheduledTaskTrigger -AtStartup) `
        -Principal $principal -Settings $settings `
        -Description 'k4w: a WinRM HTTPS key of this machine (a VM from the box makes its own at first boot), then WinRM HTTPS from the Hyper-V host only, on the management NIC' | Out-Null
}
Write-K4wStep "bootstrap done: WinRM HTTPS listening on 5986 for the management NIC's $WinRmRemote"
Stop-Transcript | Out-Null

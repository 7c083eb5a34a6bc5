<#
.SYNOPSIS
  Start this Windows node's Kubernetes services in order, each after a real readiness check.

.DESCRIPTION
  Runs at boot (scheduled task k4w-node-start, registered by the box) and from cluster-up.
  1. Applies C:\k\config\<service>.args / .env to the NSSM services kubelet, kube-proxy and
     flanneld (the box registers them with no AppParameters), only where they differ.
  2. Stops the services and runs C:\k\kube-cleanup.ps1 for this node's Flannel network, so
     stale HNS state from before a reboot never reaches the new services.
  3. Starts docker -> kubelet -> kube-proxy -> flanneld, waiting respectively for: docker to
     answer, the node to be registered, kube-proxy to be running, and Flannel's subnet.env plus
     its HNS network. Flanneld is restarted once, and only if its log shows the known first-start
     error "New-NetRoute ... 1168" (REFERENCE: the original project slept 60 s and restarted).
  With no C:\k\config (a box not joined yet) it exits 0 and does nothing.

.PARAMETER ConfigureOnly
  Only step 1 (cluster-join.ps1 uses it before kubeadm join, which may start the kubelet itself).
#>
[CmdletBinding()]
param(
    [switch]$ConfigureOnly,
    [int]$TimeoutSeconds = 300
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
# Messages use Write-Output, not Write-Host: the elevated WinRM runner (cluster-up) and the boot
# task's log capture standard output only.
trap {
    Write-Output ("start-node.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

$K = 'C:\k'
$ConfigDir = Join-Path $K 'config'
$Kubectl = Join-Path $K 'kubectl.exe'
$SubnetEnv = 'C:\run\flannel\subnet.env'           # flanneld --subnet-file default (/run/flannel/subnet.env on drive C:)
$CniConfDir = Join-Path $K 'cni\config'             # kubelet --cni-conf-dir (provision/node-windows/kubelet.args.j2)
$Services = @('kubelet', 'kube-proxy', 'flanneld')  # start order after docker; stopped in reverse
$PollSeconds = 2                                    # how often a readiness condition is re-checked
# flanneld's first start on 1803 fails adding routes with Win32 error 1168 (ERROR_NOT_FOUND).
$FlannelRouteErrorPattern = 'New-NetRoute.*1168|1168.*New-NetRoute'
# Test-HnsNetwork: HNS v1 through vmcompute.dll, shared with kube-cleanup.ps1 (both live in C:\k).
. (Join-Path $PSScriptRoot 'hns.ps1')

if (-not (Test-Path -LiteralPath $ConfigDir)) {
    Write-Output "start-node: $ConfigDir does not exist: this node has not joined a cluster, nothing to start"
    exit 0
}
$Node = Get-Content -LiteralPath (Join-Path $ConfigDir 'node.json') -Raw | ConvertFrom-Json

function Invoke-Native {
    # Windows PowerShell turns a native program's stderr into terminating errors under
    # ErrorActionPreference=Stop; run it with Continue and judge it by its exit code.
    param([string]$FilePath, [string[]]$ArgumentList)
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $output = & $FilePath @ArgumentList 2>&1 | Out-String
        return [pscustomobject]@{ ExitCode = $LASTEXITCODE; Output = $output.Trim() }
    } finally {
        $ErrorActionPreference = $previous
    }
}

function Wait-Condition {
    param([string]$What, [scriptblock]$Condition, [scriptblock]$OnPoll = $null)
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while (-not (& $Condition)) {
        if ($null -ne $OnPoll) { & $OnPoll }
        if ((Get-Date) -gt $deadline) {
            throw "timed out after $TimeoutSeconds s waiting for $What"
        }
        Start-Sleep -Seconds $PollSeconds
    }
    Write-Output "start-node: $What"
}

function Get-NssmParameter {
    param([string]$Service, [string]$Name)
    $item = Get-ItemProperty -LiteralPath (Get-NssmKey $Service) -Name $Name -ErrorAction SilentlyContinue
    if ($null -eq $item) { return $null }
    return $item.$Name
}

function Get-NssmKey {
    # NSSM keeps a service's settings under its Parameters key and reads them at every start
    # (nssm.cc/usage, "Managing services using the registry"). Writing them there directly
    # avoids Windows PowerShell's broken quoting of "" inside native-command arguments
    # (kubelet needs --resolv-conf="") and nssm.exe's UTF-16 console output.
    param([string]$Service)
    $key = "HKLM:\SYSTEM\CurrentControlSet\Services\$Service\Parameters"
    if (-not (Test-Path -LiteralPath $key)) {
        throw "service $Service is not registered with NSSM ($key missing): the box must register kubelet, kube-proxy and flanneld"
    }
    return $key
}

function Read-ConfigLines {
    param([string]$Path)
    if (-not (Test-Path -LiteralPath $Path)) { return @() }
    return @(Get-Content -LiteralPath $Path | ForEach-Object { $_.Trim() } | Where-Object { $_ -ne '' })
}

function Set-ServiceConfig {
    param([string]$Service)
    $key = Get-NssmKey $Service
    $wantedParameters = (Read-ConfigLines (Join-Path $ConfigDir "$Service.args")) -join ' '
    if ((Get-NssmParameter $Service 'AppParameters') -ne $wantedParameters) {
        Set-ItemProperty -LiteralPath $key -Name 'AppParameters' -Value $wantedParameters -Type ExpandString
        Write-Output "start-node: $Service arguments updated"
    }
    [string[]]$environment = Read-ConfigLines (Join-Path $ConfigDir "$Service.env")
    $current = @(Get-NssmParameter $Service 'AppEnvironmentExtra' | Where-Object { $_ })
    if (($current -join "`n") -ne ($environment -join "`n")) {
        if ($environment.Count -gt 0) {
            Set-ItemProperty -LiteralPath $key -Name 'AppEnvironmentExtra' -Value $environment -Type MultiString
        } else {
            Remove-ItemProperty -LiteralPath $key -Name 'AppEnvironmentExtra'
        }
        Write-Output "start-node: $Service environment updated"
    }
}

function Copy-IfChanged {
    param([string]$Source, [string]$Destination)
    $directory = Split-Path -Parent $Destination
    if (-not (Test-Path -LiteralPath $directory)) { New-Item -ItemType Directory -Path $directory | Out-Null }
    if ((Test-Path -LiteralPath $Destination) -and
        ((Get-FileHash -LiteralPath $Source).Hash -eq (Get-FileHash -LiteralPath $Destination).Hash)) { return }
    Copy-Item -LiteralPath $Source -Destination $Destination -Force
    Write-Output "start-node: $Destination updated"
}

function Stop-NodeService {
    param([string]$Service)
    $svc = Get-Service -Name $Service
    if ($svc.Status -ne 'Stopped') {
        Stop-Service -Name $Service -Force
        Wait-Condition "$Service stopped" { (Get-Service -Name $Service).Status -eq 'Stopped' }
    }
}

function Test-NodeRegistered {
    if (-not (Test-Path -LiteralPath $Node.kubeconfig)) { return $false }
    return (Invoke-Native $Kubectl @('--kubeconfig', $Node.kubeconfig, 'get', 'node', $Node.name)).ExitCode -eq 0
}

function Test-FlannelNetwork {
    # Flannel writes subnet.env once it holds a lease, then creates the HNS network (cbr0/vxlan0).
    if (-not (Test-Path -LiteralPath $SubnetEnv)) { return $false }
    if ((Get-Item -LiteralPath $SubnetEnv).LastWriteTime -lt $script:FlannelStartedAt) { return $false }
    return (Test-HnsNetwork $Node.network_name)
}

function Get-FlannelLogSinceStart {
    $path = Get-NssmParameter 'flanneld' 'AppStderr'
    if (-not $path -or -not (Test-Path -LiteralPath $path)) { return '' }
    $text = Get-Content -LiteralPath $path -Raw
    if ($null -eq $text) { return '' }
    # A rotated (shorter) log started after our mark: all of it is new.
    if ($text.Length -lt $script:FlannelLogMark) { return $text }
    return $text.Substring($script:FlannelLogMark)
}

function Start-Flanneld {
    $path = Get-NssmParameter 'flanneld' 'AppStderr'
    $script:FlannelLogMark = 0
    if ($path -and (Test-Path -LiteralPath $path)) { $script:FlannelLogMark = (Get-Content -LiteralPath $path -Raw).Length }
    $script:FlannelStartedAt = Get-Date
    Start-Service -Name 'flanneld'
}

# ---------------------------------------------------------------- 1. configuration
foreach ($service in $Services) { Set-ServiceConfig $service }
Copy-IfChanged (Join-Path $ConfigDir 'cni.conf') (Join-Path $CniConfDir 'cni.conf')
if ($ConfigureOnly) { Write-Output 'start-node: services configured'; exit 0 }

# ---------------------------------------------------------------- 2. clean slate
foreach ($service in $Services[($Services.Count - 1)..0]) { Stop-NodeService $service }
$global:LASTEXITCODE = 0   # a script that ends without `exit` leaves it unset (StrictMode would throw)
& (Join-Path $K 'kube-cleanup.ps1') -NetworkName $Node.network_name
if ($LASTEXITCODE -ne 0) { throw "kube-cleanup.ps1 -NetworkName $($Node.network_name) failed ($LASTEXITCODE)" }

# ---------------------------------------------------------------- 3. start in order
Start-Service -Name 'docker'
Wait-Condition 'docker answers' { (Invoke-Native 'docker' @('version')).ExitCode -eq 0 }

Start-Service -Name 'kubelet'
Wait-Condition "node $($Node.name) registered" { Test-NodeRegistered }

Start-Service -Name 'kube-proxy'
Wait-Condition 'kube-proxy running' { (Get-Service -Name 'kube-proxy').Status -eq 'Running' }

$script:FlannelRetried = $false
Start-Flanneld
Wait-Condition "Flannel network $($Node.network_name) up" { Test-FlannelNetwork } -OnPoll {
    if (Get-FlannelLogSinceStart | Select-String -Pattern $FlannelRouteErrorPattern -Quiet) {
        if ($script:FlannelRetried) {
            throw 'flanneld failed again with New-NetRoute error 1168 after one restart; see its log (nssm get flanneld AppStderr)'
        }
        Write-Output 'start-node: flanneld hit the known first-start error New-NetRoute 1168; restarting it once'
        $script:FlannelRetried = $true
        Stop-NodeService 'flanneld'
        Start-Flanneld
    }
}
Write-Output "start-node: node $($Node.name) started"
exit 0

<#
.SYNOPSIS
  Start this Windows node's Kubernetes services in order, each after a real readiness check.

.DESCRIPTION
  Runs at boot (scheduled task k4w-node-start, registered by the box) and from cluster-up.
  1. Applies C:\k\config\<service>.args / .env to the NSSM services kubelet, flanneld and
     kube-proxy (the box registers them with no AppParameters), only where they differ, puts
     Flannel's net-conf.json where flanneld v0.11.0 reads it, and narrows the box's kubelet
     firewall rule to the node CIDR (the CIDR is cluster config, unknown when the box is baked).
  2. Stops the services and runs C:\k\kube-cleanup.ps1 for this node's Flannel network, so
     stale HNS state from before a reboot never reaches the new services.
  3. host-gw: makes sure the placeholder HNS network 'External' holds the cluster NIC (hns.ps1
     Add-HnsExternalNetwork), then waits until the node IP is usable on its vEthernet vNIC.
  4. Starts docker -> kubelet -> flanneld -> kube-proxy, waiting respectively for: docker to
     answer, the node to be registered, Flannel's subnet.env plus its HNS network, and kube-proxy
     running with an HNS load balancer for the cluster DNS service IP. Flanneld is restarted
     once, and only if its log shows the known first-start error "New-NetRoute ... 1168"
     (the 2018 project this one started from slept 60 s and restarted).
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
# Messages use Write-Output, not Write-Host: the elevated WinRM runner (cluster-up) reads standard
# output. The boot task (k4w-node-start, 08-node-services.ps1) pipes every output stream of this
# script into C:\k\logs\start-node.log.
trap {
    Write-Output ("start-node.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

$K = 'C:\k'
$ConfigDir = Join-Path $K 'config'
$SubnetEnv = 'C:\run\flannel\subnet.env'           # flanneld --subnet-file default (/run/flannel/subnet.env on drive C:)
$CniConfDir = Join-Path $K 'cni\config'             # kubelet --cni-conf-dir (templates/nodes/windows/kubelet.args.j2)
$Services = @('kubelet', 'flanneld', 'kube-proxy')  # start order after docker (see step 4); stopped in reverse
# flanneld v0.11.0 reads its net-conf only from /etc/kube-flannel/net-conf.json (subnet/kube/kube.go,
# netConfPath; no --net-config-path before v0.12.0): on Windows that is this path on the system drive.
$FlannelNetConf = 'C:\etc\kube-flannel\net-conf.json'
# The kubelet API rule 09-firewall.ps1 creates for every address; only the nodes (the API server
# on the master) need to reach it.
$KubeletFirewallRule = 'k4w-kubelet'
$PollSeconds = 2                                    # how often a readiness condition is re-checked
# flanneld's first start on 1803 fails adding routes with Win32 error 1168 (ERROR_NOT_FOUND).
$FlannelRouteErrorPattern = 'New-NetRoute.*1168|1168.*New-NetRoute'
# Test-HnsNetwork, Add-HnsExternalNetwork: HNS v1 through vmcompute.dll, shared with
# kube-cleanup.ps1 (both live in C:\k).
. (Join-Path $PSScriptRoot 'hns.ps1')
# Invoke-Native, Wait-Condition, Stop-NodeService, Test-NodeRegistered, Set-FirewallRuleRemote: shared
# with the containerd recipe's start-node.ps1 (both live in C:\k).
. (Join-Path $PSScriptRoot 'node-lib.ps1')

Write-Output "start-node: run at $(Get-Date -Format 'yyyy-MM-dd HH:mm:ss')"
Protect-K4wNodeFolders

if (-not (Test-Path -LiteralPath $ConfigDir)) {
    Write-Output "start-node: $ConfigDir does not exist: this node has not joined a cluster, nothing to start"
    exit 0
}
$Node = Get-Content -LiteralPath (Join-Path $ConfigDir 'node.json') -Raw | ConvertFrom-Json

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

function Get-NodeAddress {
    return Get-NetIPAddress -AddressFamily IPv4 -IPAddress $Node.ip -ErrorAction SilentlyContinue | Select-Object -First 1
}

function Test-PhysicalAdapter {
    # A Hyper-V guest's NICs are physical adapters to Windows; a vSwitch's host vNIC (vEthernet) is not.
    param([int]$InterfaceIndex)
    return @(Get-NetAdapter -Physical -ErrorAction SilentlyContinue | Where-Object { $_.ifIndex -eq $InterfaceIndex }).Count -gt 0
}

function Test-NodeIpPreferred {
    $address = Get-NodeAddress
    return $null -ne $address -and "$($address.AddressState)" -eq 'Preferred'
}

function Test-NodeIpOnVSwitch {
    # Once the External network exists the node IP lives on its vEthernet vNIC; it blips while HNS
    # moves it there, and is usable again once Preferred (duplicate detection done).
    $address = Get-NodeAddress
    return $null -ne $address -and "$($address.AddressState)" -eq 'Preferred' -and -not (Test-PhysicalAdapter $address.InterfaceIndex)
}

function Get-ClusterAdapterName {
    $address = Get-NodeAddress
    if ($null -eq $address) { throw "node IP $($Node.ip) vanished from every adapter while looking for the cluster NIC" }
    if (-not (Test-PhysicalAdapter $address.InterfaceIndex)) {
        throw "node IP $($Node.ip) is on '$($address.InterfaceAlias)', not on a physical adapter, but HNS network '$HnsExternalNetworkName' does not exist: expected it on the cluster NIC (cluster-ip.ps1 puts it there)"
    }
    return $address.InterfaceAlias
}

function Initialize-ExternalNetwork {
    $adapter = ''
    if (-not (Test-HnsNetwork $HnsExternalNetworkName)) {
        # kube-cleanup.ps1 may just have removed the last network on a vSwitch: the address then
        # moves back to the NIC itself.
        Wait-Condition "node IP $($Node.ip) Preferred on the cluster NIC" { Test-NodeIpPreferred } `
            -Hint 'cluster-up (cluster-ip.ps1) gives the cluster NIC this address; check Get-NetIPAddress'
        $adapter = Get-ClusterAdapterName
    }
    if (Add-HnsExternalNetwork -AdapterName $adapter) {
        Write-Output "start-node: HNS network '$HnsExternalNetworkName' created on '$adapter' (the node IP moves to its vEthernet vNIC)"
    }
    Wait-Condition "node IP $($Node.ip) usable on the cluster vSwitch" { Test-NodeIpOnVSwitch } `
        -Hint "if it stays on a physical adapter, '$HnsExternalNetworkName' is bound to another NIC: remove it and run start-node.ps1 again"
}

function Test-KubeProxyReady {
    if ((Get-Service -Name 'kube-proxy').Status -ne 'Running') { return $false }
    # Kernelspace kube-proxy programs every ClusterIP as an HNS load-balancer policy (type ELB)
    # whose VIPs hold the service IP; the cluster DNS service exists from kubeadm init on.
    foreach ($list in @(Invoke-Hns GET '/policylists')) {
        foreach ($policy in @(Get-Field $list 'Policies')) {
            if (@(Get-Field $policy 'VIPs') -contains $Node.dns_ip) { return $true }
        }
    }
    return $false
}

function Test-FlannelNetwork {
    # Flannel writes subnet.env once it holds a lease, then creates the HNS network (cbr0/vxlan0).
    if (-not (Test-Path -LiteralPath $SubnetEnv)) { return $false }
    if ((Get-Item -LiteralPath $SubnetEnv).LastWriteTime -lt $script:FlannelStartedAt) { return $false }
    if (-not (Test-HnsNetwork $Node.network_name)) { return $false }
    # host-gw: then its host endpoint <network>_ep, the last thing the backend creates.
    if ($Node.backend -ne 'host-gw') { return $true }
    return $null -ne (Get-NetAdapter -Name "vEthernet ($($Node.network_name)_ep)" -ErrorAction SilentlyContinue)
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
Copy-IfChanged (Join-Path $ConfigDir 'net-conf.json') $FlannelNetConf
Set-FirewallRuleRemote -Name $KubeletFirewallRule -Remote @($Node.node_cidr)
if ($ConfigureOnly) { Write-Output 'start-node: services configured'; exit 0 }

# ---------------------------------------------------------------- 2. clean slate
foreach ($service in $Services[($Services.Count - 1)..0]) { Stop-NodeService $service }
$global:LASTEXITCODE = 0   # a script that ends without `exit` leaves it unset (StrictMode would throw)
& (Join-Path $K 'kube-cleanup.ps1') -NetworkName $Node.network_name
if ($LASTEXITCODE -ne 0) { throw "kube-cleanup.ps1 -NetworkName $($Node.network_name) failed ($LASTEXITCODE)" }

# ---------------------------------------------------------------- 3. the cluster NIC's vSwitch
# Before anything that talks over the cluster NIC runs: creating External blips it.
if ($Node.backend -eq 'host-gw') { Initialize-ExternalNetwork }

# ---------------------------------------------------------------- 4. start in order
# docker -> kubelet -> flanneld -> kube-proxy. The 2018 project's notes give docker -> kubelet ->
# kube-proxy -> flanneld, an order found by trial and kept working by fixed sleeps and restarts.
# It cannot hold here: kernelspace kube-proxy programs its load balancers on the HNS network named
# by KUBE_NETWORK (kube-proxy.env.j2) and exits when that network does not exist; flanneld creates
# it, and kube-cleanup.ps1 deletes it at every start. So flanneld must come first; flanneld itself
# needs the kubelet's Node object for its lease (--kube-subnet-mgr). Microsoft SDN's flannel-era
# start.ps1 uses the same order: kubelet (register), flanneld (wait for the network), kube-proxy.
Start-Service -Name 'docker'
Wait-Condition 'docker answers' { (Invoke-Native 'docker' @('version')).ExitCode -eq 0 }

Start-Service -Name 'kubelet'
Wait-Condition "node $($Node.name) registered" { Test-NodeRegistered }

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

Start-Service -Name 'kube-proxy'
Wait-Condition "kube-proxy running with an HNS load balancer for the cluster DNS service IP $($Node.dns_ip)" { Test-KubeProxyReady } `
    -Hint 'kernelspace kube-proxy programs one per ClusterIP on the KUBE_NETWORK network; see C:\k\logs\kube-proxy.log'
Write-Output "start-node: node $($Node.name) started"
exit 0

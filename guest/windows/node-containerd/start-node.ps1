<#
.SYNOPSIS
  Start this containerd-era Windows node's services in order, each after a real readiness check
  (the node recipe "containerd": boxes/windows-2022.yml node_recipe; the seed recipe keeps
  guest/windows/node/start-node.ps1).

.DESCRIPTION
  Runs at boot (scheduled task k4w-node-start, through start-node-at-boot.ps1) and from cluster-up.
  1. Applies C:\k\config\flanneld.args/.env and kube-proxy.env to their NSSM services, puts the
     rendered cni.conf into containerd's CNI conf_dir (removing any other config there: a leftover
     CNI config would be loaded instead of Flannel's), and narrows the box's kubelet firewall rule to
     the node CIDR. The kubelet service needs nothing here: start-kubelet.ps1 reads kubeadm's files
     and C:\k\config\kubelet.args at each start.
  2. Stops kube-proxy, flanneld and the kubelet, starts containerd and waits for it to answer on
     its pipe, and runs C:\k\kube-cleanup.ps1 for Flannel's network (with -CriEndpoint: every pod
     sandbox goes through the CRI first) and for a leftover 'nat' network (either breaks Flannel's
     overlay with containerd), so stale HNS state from before a reboot never reaches the new services.
  3. Starts kubelet -> flanneld -> kube-proxy, waiting respectively for: the node to be registered,
     Flannel's fresh subnet.env plus its HNS overlay network, and kube-proxy running with an HNS
     load balancer for the cluster DNS IP. Once Flannel's network exists it restores the cluster
     NIC's default route (node.json cluster_gateway; C:\k\cluster-route.ps1), which HNS dropped
     with the interface it moved the address from. Between flanneld and kube-proxy it reserves
     kube-proxy's source VIP on the overlay network.
  With no C:\k\config (a box not joined yet) it exits 0 and does nothing.

.PARAMETER ConfigureOnly
  Only step 1 (the join script runs it before kubeadm join starts the kubelet).
#>
[CmdletBinding()]
param(
    [switch]$ConfigureOnly,
    [int]$TimeoutSeconds = 300
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
# Write-Output, not Write-Host: cluster-up's WinRM runner and the boot task's log read standard output.
trap {
    Write-Output ("start-node.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

$K = 'C:\k'
$ConfigDir = Join-Path $K 'config'
$SubnetEnv = 'C:\run\flannel\subnet.env'            # flanneld --subnet-file default (/run/flannel/subnet.env on drive C:)
$SourceVipFile = Join-Path $K 'SourceVip.json'      # host-local's answer; kube-cleanup.ps1 deletes it with the network
$Services = @('kubelet', 'flanneld', 'kube-proxy')  # start order after containerd; stopped in reverse
$KubeletFirewallRule = 'k4w-kubelet'                # created by guest/windows/bake/09-firewall.ps1
$PollSeconds = 2                                    # how often a readiness condition is re-checked
# containerd's Windows default network; its HNS network and a CNI config for it break Flannel.
$StaleNatNetwork = 'nat'
. (Join-Path $K 'hns.ps1')                          # Invoke-Hns, Get-Field, Test-HnsNetwork (shared with kube-cleanup.ps1)
. (Join-Path $K 'cluster-route.ps1')                # Test-ClusterAddressPreferred, Set-ClusterDefaultRoute (shared with cluster-ip.ps1)

Write-Output "start-node: run at $(Get-Date -Format 'yyyy-MM-dd HH:mm:ss')"
# The node folders stay SYSTEM + Administrators only (protect-node-folders.ps1 says why), also
# where kubeadm join or cluster-reset.ps1 recreated them since the last run.
& (Join-Path $K 'protect-node-folders.ps1')
if ($LASTEXITCODE -ne 0) { throw 'protect-node-folders.ps1 failed' }
if (-not (Test-Path -LiteralPath $ConfigDir)) {
    Write-Output "start-node: $ConfigDir does not exist: this node has not joined a cluster, nothing to start"
    exit 0
}
$Node = Get-Content -LiteralPath (Join-Path $ConfigDir 'node.json') -Raw | ConvertFrom-Json
$Ctr = Join-Path $env:ProgramFiles 'containerd\ctr.exe'
$CtrAddress = ($Node.runtime_endpoint -replace '^npipe://', '') -replace '/', '\'

function Invoke-Quiet {
    # A native program judged by its exit code alone (its stderr is no PowerShell error here).
    param([string]$FilePath, [string[]]$ArgumentList)
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try { & $FilePath @ArgumentList *> $null; return $LASTEXITCODE } finally { $ErrorActionPreference = $previous }
}

function Wait-Until {
    param([string]$What, [scriptblock]$Condition, [string]$Hint = '')
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while (-not (& $Condition)) {
        if ((Get-Date) -gt $deadline) {
            throw ("timed out after $TimeoutSeconds s waiting for $What" + $(if ($Hint) { ": $Hint" } else { '' }))
        }
        Start-Sleep -Seconds $PollSeconds
    }
    Write-Output "start-node: $What"
}

function Set-NssmValues {
    # NSSM reads a service's settings from its Parameters key at every start (nssm.cc/usage);
    # written directly, an empty value needs no native-command quoting.
    # $Arguments untyped: a [string] parameter turns $null ("leave the arguments alone") into ''.
    param([string]$Service, $Arguments = $null, [string[]]$Environment)
    $key = "HKLM:\SYSTEM\CurrentControlSet\Services\$Service\Parameters"
    if (-not (Test-Path -LiteralPath $key)) { throw "service $Service is not registered with NSSM ($key missing): rebuild the box" }
    $item = Get-ItemProperty -LiteralPath $key
    $current = if ($item.PSObject.Properties['AppParameters']) { $item.AppParameters } else { $null }
    if ($null -ne $Arguments -and $current -ne $Arguments) {
        Set-ItemProperty -LiteralPath $key -Name 'AppParameters' -Value $Arguments -Type ExpandString
        $script:Reconfigured = $true
        Write-Output "start-node: $Service arguments updated"
    }
    $currentEnv = if ($item.PSObject.Properties['AppEnvironmentExtra']) { @($item.AppEnvironmentExtra) -join "`n" } else { '' }
    if ($currentEnv -ne ($Environment -join "`n")) {
        if ($Environment) { Set-ItemProperty -LiteralPath $key -Name 'AppEnvironmentExtra' -Value $Environment -Type MultiString }
        else { Remove-ItemProperty -LiteralPath $key -Name 'AppEnvironmentExtra' }
        $script:Reconfigured = $true
        Write-Output "start-node: $Service environment updated"
    }
}

function Read-Lines([string]$Name) {
    $path = Join-Path $ConfigDir $Name
    if (-not (Test-Path -LiteralPath $path)) { return @() }
    return @(Get-Content -LiteralPath $path | ForEach-Object { $_.Trim() } | Where-Object { $_ })
}

function Set-CniConfig {
    # Exactly one CNI config in containerd's conf_dir: the rendered one (max_conf_num = 1 loads the
    # first file by name, so any other file there would win or confuse it).
    New-Item -ItemType Directory -Path $Node.cni_conf_dir -Force | Out-Null
    $wanted = Join-Path $Node.cni_conf_dir 'cni.conf'
    foreach ($other in @(Get-ChildItem -LiteralPath $Node.cni_conf_dir -File | Where-Object { $_.FullName -ne $wanted })) {
        Remove-Item -LiteralPath $other.FullName -Force
        $script:Reconfigured = $true
        Write-Output "start-node: removed leftover CNI config $($other.FullName)"
    }
    $source = Join-Path $ConfigDir 'cni.conf'
    if (-not (Test-Path -LiteralPath $wanted) -or (Get-FileHash -LiteralPath $source).Hash -ne (Get-FileHash -LiteralPath $wanted).Hash) {
        Copy-Item -LiteralPath $source -Destination $wanted -Force
        $script:Reconfigured = $true
        Write-Output "start-node: $wanted updated"
    }
}

function ConvertTo-Cidr([string]$Address) {
    # Windows Firewall reports a subnet as a.b.c.d/255.255.0.0 and one host as a bare address.
    $ip, $suffix = $Address.Split('/', 2)
    if (-not $suffix) { return "$ip/32" }
    if ($suffix -match '^\d+$') { return "$ip/$suffix" }
    $bits = ((([Net.IPAddress]::Parse($suffix).GetAddressBytes()) | ForEach-Object { [Convert]::ToString($_, 2).PadLeft(8, '0') }) -join '').TrimEnd('0').Length
    return "$ip/$bits"
}

function Set-KubeletFirewallScope {
    $rule = Get-NetFirewallRule -Name $KubeletFirewallRule -ErrorAction SilentlyContinue
    if ($null -eq $rule) { throw "firewall rule $KubeletFirewallRule is missing: the box creates it (09-firewall.ps1); rebuild the box" }
    $current = @(($rule | Get-NetFirewallAddressFilter).RemoteAddress | ForEach-Object { ConvertTo-Cidr $_ }) -join ','
    if ($current -ne (ConvertTo-Cidr $Node.node_cidr)) {
        Set-NetFirewallRule -Name $KubeletFirewallRule -RemoteAddress $Node.node_cidr
        Write-Output "start-node: firewall rule $KubeletFirewallRule now allows only $($Node.node_cidr)"
    }
}

function Stop-NodeService([string]$Service) {
    if ((Get-Service -Name $Service).Status -ne 'Stopped') {
        Stop-Service -Name $Service -Force
        Wait-Until "$Service stopped" { (Get-Service -Name $Service).Status -eq 'Stopped' }
    }
}

function Test-NodeRegistered {
    if (-not (Test-Path -LiteralPath $Node.kubeconfig)) { return $false }
    return (Invoke-Quiet (Join-Path $K 'kubectl.exe') @('--kubeconfig', $Node.kubeconfig, 'get', 'node', $Node.name)) -eq 0
}

function Test-FlannelNetwork {
    # Flannel writes subnet.env once it holds a lease, then creates the HNS overlay network.
    if (-not (Test-Path -LiteralPath $SubnetEnv)) { return $false }
    if ((Get-Item -LiteralPath $SubnetEnv).LastWriteTime -lt $script:FlannelStartedAt) { return $false }
    return (Test-HnsNetwork $Node.network_name)
}

function Get-SourceVip {
    # kube-proxy's source VIP on the overlay (kubernetes/kubernetes#96996): one address of this
    # node's pod subnet, reserved through host-local IPAM so no pod ever gets it, as the removed
    # sig-windows-tools hostprocess/flannel/kube-proxy/start.ps1 did (at e35b2e16).
    if (-not (Test-Path -LiteralPath $SourceVipFile)) {
        $network = @(Invoke-Hns GET '/networks' | Where-Object { (Get-Field $_ 'Name') -eq $Node.network_name })[0]
        $subnet = (@(Get-Field $network 'Subnets')[0]).AddressPrefix
        $request = @{ cniVersion = '0.3.0'; name = $Node.network_name
                      ipam = @{ type = 'host-local'; ranges = @(, @(@{ subnet = $subnet })); dataDir = 'C:\var\lib\cni\networks' } } |
            ConvertTo-Json -Depth 6 -Compress
        $cni = @{ CNI_COMMAND = 'ADD'; CNI_CONTAINERID = 'k4w-source-vip'; CNI_NETNS = 'none'; CNI_IFNAME = 'none'; CNI_PATH = $Node.cni_bin_dir }
        foreach ($name in $cni.Keys) { Set-Item -Path "env:$name" -Value $cni[$name] }
        try { $answer = $request | & (Join-Path $Node.cni_bin_dir 'host-local.exe') } finally { foreach ($name in $cni.Keys) { Remove-Item -Path "env:$name" } }
        if ($LASTEXITCODE -ne 0) { throw "host-local.exe could not reserve kube-proxy's source VIP in $subnet (exit $LASTEXITCODE): $answer" }
        Set-Content -LiteralPath $SourceVipFile -Value ($answer -join "`n") -Encoding ASCII
    }
    return ((Get-Content -LiteralPath $SourceVipFile -Raw | ConvertFrom-Json).ips[0].address -split '/')[0]
}

function Test-KubeProxyReady {
    if ((Get-Service -Name 'kube-proxy').Status -ne 'Running') { return $false }
    # Kernel-mode kube-proxy programs each ClusterIP that has endpoints as an HNS load-balancer
    # policy whose VIPs hold the service IP. The API server's service has endpoints from kubeadm
    # init on; the DNS service has none until CoreDNS is Ready (node.json explains).
    foreach ($list in @(Invoke-Hns GET '/policylists')) {
        foreach ($policy in @(Get-Field $list 'Policies')) {
            if (@(Get-Field $policy 'VIPs') -contains $Node.kubernetes_service_ip) { return $true }
        }
    }
    return $false
}

function Restore-ClusterDefaultRoute {
    # Flannel's HNS network moves the cluster address to a new vEthernet adapter each time it is
    # created, and the default route cluster-ip.ps1 gave the old interface is gone: the same route
    # again, on whichever interface holds the address now (cluster-route.ps1 says why it exists).
    if (-not $Node.cluster_gateway) { return }
    Wait-Until "$($Node.ip) Preferred" { Test-ClusterAddressPreferred -IPAddress $Node.ip } -Hint 'HNS moves the cluster address to the vEthernet adapter of its network'
    Set-ClusterDefaultRoute -IPAddress $Node.ip -Gateway $Node.cluster_gateway -LogPrefix 'start-node'
}

# ---------------------------------------------------------------- 1. configuration
$script:Reconfigured = $false
Set-NssmValues -Service 'flanneld' -Arguments ((Read-Lines 'flanneld.args') -join ' ') -Environment (Read-Lines 'flanneld.env')
Set-NssmValues -Service 'kube-proxy' -Arguments $null -Environment (Read-Lines 'kube-proxy.env')
Set-CniConfig
Set-KubeletFirewallScope
if ($ConfigureOnly) { Write-Output 'start-node: services configured'; exit 0 }

# A node already running as configured (cluster-up run again) is left alone: the clean slate below
# removes the overlay network and its endpoints, which containerd's running pod sandboxes keep
# using, so their pods would lose their network until recreated.
$running = @($Node.runtime_service) + $Services | Where-Object { (Get-Service -Name $_).Status -ne 'Running' }
if (-not $script:Reconfigured -and -not $running -and (Test-HnsNetwork $Node.network_name) -and (Test-KubeProxyReady)) {
    Restore-ClusterDefaultRoute
    Write-Output "start-node: node $($Node.name) already runs as configured; nothing restarted"
    exit 0
}

# ---------------------------------------------------------------- 2. clean slate
foreach ($service in $Services[($Services.Count - 1)..0]) { Stop-NodeService $service }
# containerd runs through the clean slate: its pod sandboxes go through the CRI (kube-cleanup.ps1
# -CriEndpoint) before the HNS network they hold, once, with Flannel's network.
Start-Service -Name $Node.runtime_service
Wait-Until "$($Node.runtime_service) answers on $($Node.runtime_endpoint)" { (Invoke-Quiet $Ctr @('--address', $CtrAddress, 'version')) -eq 0 }
foreach ($network in $Node.network_name, $StaleNatNetwork) {
    $cleanup = @{ NetworkName = $network }
    if ($network -eq $Node.network_name) { $cleanup.CriEndpoint = $Node.runtime_endpoint }
    $global:LASTEXITCODE = 0   # a script that ends without `exit` leaves it unset (StrictMode would throw)
    & (Join-Path $K 'kube-cleanup.ps1') @cleanup
    if ($LASTEXITCODE -ne 0) { throw "kube-cleanup.ps1 -NetworkName $network failed ($LASTEXITCODE)" }
}

# ---------------------------------------------------------------- 3. start in order
# containerd (running since the clean slate) -> kubelet -> flanneld -> kube-proxy: flanneld needs
# the kubelet's Node object for its lease (--kube-subnet-mgr); kernel-mode kube-proxy programs its
# load balancers on Flannel's HNS network (--network-name) and needs the source VIP reserved on it,
# so it comes last.
Start-Service -Name 'kubelet'
Wait-Until "node $($Node.name) registered" { Test-NodeRegistered } -Hint 'see C:\k\logs\kubelet.log'

$script:FlannelStartedAt = Get-Date
Start-Service -Name 'flanneld'
Wait-Until "Flannel network $($Node.network_name) up" { Test-FlannelNetwork } -Hint 'see C:\k\logs\flanneld.log'
Restore-ClusterDefaultRoute

$sourceVip = Get-SourceVip
Set-NssmValues -Service 'kube-proxy' -Arguments ((@(Read-Lines 'kube-proxy.args') + "--source-vip=$sourceVip") -join ' ') -Environment (Read-Lines 'kube-proxy.env')
Start-Service -Name 'kube-proxy'
Wait-Until "kube-proxy running with an HNS load balancer for the kubernetes service IP $($Node.kubernetes_service_ip)" { Test-KubeProxyReady } `
    -Hint 'kernel-mode kube-proxy programs one per ClusterIP on the overlay network; see C:\k\logs\kube-proxy.log'
Write-Output "start-node: node $($Node.name) started (kube-proxy source VIP $sourceVip)"
exit 0

<#
.SYNOPSIS
  Start this containerd-era Windows node's services, containerd and the kubelet, after a clean slate
  (the node recipe "containerd": boxes/windows-2022.yml node_recipe; the seed recipe keeps
  guest/windows/node/start-node.ps1).

.DESCRIPTION
  Runs at boot (scheduled task k4w-node-start, through start-node-at-boot.ps1) and from cluster-up.
  flanneld and kube-proxy are no services here: they are the HostProcess DaemonSets
  k4w-flannel-windows and k4w-kube-proxy-windows (templates/manifests/windows-containerd/), whose pods
  the kubelet starts. Their start scripts put the CNI config in place, wait for Flannel's HNS network,
  restore the cluster NIC's default route and reserve kube-proxy's source VIP.
  1. Narrows the box's kubelet firewall rule to the node CIDR. The kubelet service needs nothing
     else here: start-kubelet.ps1 reads kubeadm's files and C:\k\config\kubelet.args at each start.
  2. A node already running (containerd and the kubelet up, the node registered) is left alone.
     Otherwise: stops the kubelet, starts containerd and waits for it to answer on its pipe, and runs
     C:\k\kube-cleanup.ps1 for Flannel's network (with -CriEndpoint: every pod sandbox, the
     DaemonSets' included, goes through the CRI first) and for a leftover 'nat' network (either breaks
     Flannel's overlay with containerd), so stale HNS state from before a reboot never reaches the
     new pods.
  3. Starts the kubelet and waits for the node to be registered. The kubelet then starts the
     DaemonSet pods; cluster-up's rollout wait and cluster-test check they run.
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
$KubeletFirewallRule = 'k4w-kubelet'                # created by guest/windows/bake/09-firewall.ps1
$PollSeconds = 2                                    # how often a readiness condition is re-checked
# containerd's Windows default network; its HNS network and a CNI config for it break Flannel.
$StaleNatNetwork = 'nat'

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

# ---------------------------------------------------------------- 1. configuration
Set-KubeletFirewallScope
if ($ConfigureOnly) { Write-Output 'start-node: node configured'; exit 0 }

# A node already running (cluster-up run again) is left alone: the clean slate below removes the
# overlay network and its endpoints, which the running pod sandboxes keep using.
$running = @($Node.runtime_service, 'kubelet') | Where-Object { (Get-Service -Name $_).Status -ne 'Running' }
if (-not $running -and (Test-NodeRegistered)) {
    Write-Output "start-node: node $($Node.name) already runs; nothing restarted"
    exit 0
}

# ---------------------------------------------------------------- 2. clean slate
Stop-NodeService 'kubelet'
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

# ---------------------------------------------------------------- 3. the kubelet
# It starts the DaemonSet pods (flanneld, then kube-proxy once Flannel's network exists).
Start-Service -Name 'kubelet'
Wait-Until "node $($Node.name) registered" { Test-NodeRegistered } -Hint 'see C:\k\logs\kubelet.log'
Write-Output "start-node: node $($Node.name) started; its flanneld and kube-proxy are the pods of the DaemonSets in k4w-windows-node"
exit 0

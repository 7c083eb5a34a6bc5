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
# Invoke-Native, Wait-Condition, Stop-NodeService, Test-NodeRegistered, Set-FirewallRuleRemote: shared
# with the seed recipe's start-node.ps1 (node/node-lib.ps1; the box installs node/ into C:\k too).
. (Join-Path $PSScriptRoot 'node-lib.ps1')

Write-Output "start-node: run at $(Get-Date -Format 'yyyy-MM-dd HH:mm:ss')"
Protect-K4wNodeFolders
if (-not (Test-Path -LiteralPath $ConfigDir)) {
    Write-Output "start-node: $ConfigDir does not exist: this node has not joined a cluster, nothing to start"
    exit 0
}
$Node = Get-Content -LiteralPath (Join-Path $ConfigDir 'node.json') -Raw | ConvertFrom-Json
$Ctr = Join-Path $env:ProgramFiles 'containerd\ctr.exe'
$CtrAddress = ($Node.runtime_endpoint -replace '^npipe://', '') -replace '/', '\'

# ---------------------------------------------------------------- 1. configuration
Set-FirewallRuleRemote -Name $KubeletFirewallRule -Remote @($Node.node_cidr)
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
Wait-Condition "$($Node.runtime_service) answers on $($Node.runtime_endpoint)" { (Invoke-Native $Ctr @('--address', $CtrAddress, 'version')).ExitCode -eq 0 }
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
Wait-Condition "node $($Node.name) registered" { Test-NodeRegistered } -Hint 'see C:\k\logs\kubelet.log'
Write-Output "start-node: node $($Node.name) started; its flanneld and kube-proxy are the pods of the DaemonSets in k4w-windows-node"
exit 0

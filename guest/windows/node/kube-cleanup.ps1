# kube-cleanup.ps1 - remove THIS cluster's stale networking state before the node services start
# (C:\k\start-node.ps1 runs it at boot and at cluster-up). After a reboot HNS keeps networks,
# endpoints and policies whose pods are gone, and they break the node.
#
# Only the cluster's own objects are touched: the HNS network Flannel created (by name: cbr0 for
# host-gw, vxlan0 for vxlan - network.windows_network_name), its endpoints and the policy lists
# that reference them, and a NetNat only when its name is given. Never "every NetNat": that would
# also remove the host's own NAT (the defect of the original kube-cleanup).
# Never the placeholder network 'External' (hns.ps1 Add-HnsExternalNetwork): it keeps the HNS
# vSwitch on the cluster NIC, and deleting it would make the next Flannel start rebuild the vSwitch.
#
# The containerd recipe's node start also passes -CriEndpoint: every pod sandbox goes through the
# CRI (crictl rmp) first, so containerd runs each pod's CNI teardown while the network still exists.
#
#   C:\k\kube-cleanup.ps1 -NetworkName cbr0 [-NatName <name>] [-CriEndpoint npipe:////./pipe/containerd-containerd]
param(
    [Parameter(Mandatory = $true)][ValidatePattern('^[A-Za-z0-9._-]+$')][string]$NetworkName,
    [string]$NatName = '',
    # CNI plugin state (host-local IPAM allocations) and Flannel's per-node lease file.
    [string]$CniStateDir = 'C:\var\lib\cni',
    [string]$FlannelSubnetEnv = 'C:\run\flannel\subnet.env',
    # Where the node keeps SourceVip.json / SourceVipRequest.json (vxlan source VIP); they must go
    # for a node to be re-added.
    [string]$NodeDir = 'C:\k',
    # containerd's CRI endpoint (node.json runtime_endpoint); empty: no CRI runtime (the seed recipe's Docker).
    [string]$CriEndpoint = '',
    # How long the runtime may take to answer, and how long one CRI call may take.
    [ValidateRange(1, 3600)][int]$CriTimeoutSeconds = 120,
    [ValidateRange(1, 600)][int]$CriCallTimeoutSeconds = 60
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "kube-cleanup ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }

# Invoke-Hns and Get-Field: HNS v1 through vmcompute.dll (1803 has no HNS PowerShell module).
. (Join-Path $PSScriptRoot 'hns.ps1')
# Remove-CriPodSandboxes: containerd's pod sandboxes through crictl.
. (Join-Path $PSScriptRoot 'cri-sandboxes.ps1')

if ($NetworkName -eq $HnsExternalNetworkName) {
    throw "-NetworkName '$NetworkName' is the placeholder network that pins the vSwitch to the cluster NIC; kube-cleanup never removes it"
}

# containerd's pods (the containerd recipe): every pod sandbox, whichever network it is on, since
# the node start that runs this is about to recreate the network and the kubelet its pods. Before
# the HNS objects below are even listed: stopping a sandbox through the CRI runs its CNI DEL, which
# needs them and deletes the sandbox's endpoint itself.
if ($CriEndpoint) {
    Remove-CriPodSandboxes -Crictl (Join-Path $NodeDir 'crictl.exe') -Endpoint $CriEndpoint `
        -TimeoutSeconds $CriTimeoutSeconds -CallTimeoutSeconds $CriCallTimeoutSeconds
}

$networks = @(Invoke-Hns GET '/networks' | Where-Object { (Get-Field $_ 'Name') -eq $NetworkName })
$networkIds = @($networks | ForEach-Object { "$($_.ID)".ToLowerInvariant() })
$endpoints = @(Invoke-Hns GET '/endpoints' | Where-Object {
    $networkIds -contains "$(Get-Field $_ 'VirtualNetwork')".ToLowerInvariant() -or
    (Get-Field $_ 'VirtualNetworkName') -eq $NetworkName
})
$endpointPaths = @($endpoints | ForEach-Object { "/endpoints/$($_.ID)".ToLowerInvariant() })
$policyLists = @(Invoke-Hns GET '/policylists' | Where-Object {
    @(Get-Field $_ 'References' | Where-Object { $endpointPaths -contains "$_".ToLowerInvariant() }).Count -gt 0
})

# Pod containers first, as Microsoft's cleanup does (microsoft/SDN Kubernetes/windows/helper.psm1
# CleanupOldNetwork, and reset.ps1): an endpoint deleted under a container that still holds it
# leaves HNS state behind. Only kubelet's containers (named k8s_*, the dockershim convention);
# the kubelet recreates its pods once it starts. Docker is not stopped by start-node.ps1.
if ($networks.Count -gt 0) {
    $docker = Get-Command docker -ErrorAction SilentlyContinue
    if ($docker -and (Get-Service -Name docker -ErrorAction SilentlyContinue).Status -eq 'Running') {
        $ids = @(& $docker.Source ps --all --quiet --filter 'name=^k8s_' 2>$null | Where-Object { $_ })
        foreach ($id in $ids) {
            & $docker.Source rm --force $id 2>&1 | Out-Null
            if ($LASTEXITCODE -ne 0) { throw "docker rm --force $id failed ($LASTEXITCODE)" }
        }
        Write-Host "kube-cleanup: removed $($ids.Count) pod container(s)"
    }
}

# Policies first (they reference endpoints), then endpoints, then the network itself.
foreach ($policyList in $policyLists) { [void](Invoke-Hns DELETE "/policylists/$($policyList.ID)") }
foreach ($endpoint in $endpoints) { [void](Invoke-Hns DELETE "/endpoints/$($endpoint.ID)") }
foreach ($network in $networks) { [void](Invoke-Hns DELETE "/networks/$($network.ID)") }
Write-Host "kube-cleanup: HNS network '$NetworkName': removed $($networks.Count) network(s), $($endpoints.Count) endpoint(s), $($policyLists.Count) policy list(s)"

if ($NatName) {
    $nat = Get-NetNat -Name $NatName -ErrorAction SilentlyContinue
    if ($nat) {
        Remove-NetNat -Name $NatName -Confirm:$false
        Write-Host "kube-cleanup: removed NetNat '$NatName'"
    }
}

# Stale IPAM allocations and the Flannel lease would hand out addresses of the previous run.
if (Test-Path -LiteralPath $CniStateDir) {
    Get-ChildItem -LiteralPath $CniStateDir -Force | Remove-Item -Recurse -Force
    Write-Host "kube-cleanup: emptied $CniStateDir"
}
foreach ($file in $FlannelSubnetEnv, (Join-Path $NodeDir 'SourceVip.json'), (Join-Path $NodeDir 'SourceVipRequest.json')) {
    if (Test-Path -LiteralPath $file) {
        Remove-Item -LiteralPath $file -Force
        Write-Host "kube-cleanup: removed $file"
    }
}

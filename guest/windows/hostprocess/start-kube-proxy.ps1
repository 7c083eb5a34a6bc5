<#
.SYNOPSIS
  The container program of the DaemonSet k4w-kube-proxy-windows: wait for Flannel's HNS overlay
  network, restore the cluster NIC's default route, reserve kube-proxy's source VIP on the overlay,
  and run kube-proxy.exe (kernel mode) in the foreground.

.DESCRIPTION
  A HostProcess container (a process on the node, as SYSTEM) started by the kubelet from the
  ConfigMap k4w-windows-node-scripts. What it runs is the box's own C:\k\kube-proxy.exe, from the
  Kubernetes node tarball checked against the profile's pinned sha512 at bake (05-kubernetes-node.ps1).
  1. Waits (no fixed sleep) until the HNS network K4W_NETWORK_NAME exists: kernel-mode kube-proxy
     programs its load balancers on it (--network-name) and exits without it.
  2. Once the network exists, HNS has moved the cluster address to the network's vEthernet adapter
     and the default route cluster-ip.ps1 gave the old interface is gone: the same route again
     (C:\k\cluster-route.ps1 says why it exists), when the node has a cluster gateway.
  3. The source VIP (kubernetes/kubernetes#96996): one address of this node's pod subnet, reserved
     through host-local IPAM so no pod gets it, as the removed sig-windows-tools
     hostprocess/flannel/kube-proxy/start.ps1 did (kubernetes-sigs/sig-windows-tools v0.1.6). Kept in
     C:\k\SourceVip.json and reused while it lies in the network's subnet; a restart changes nothing.
     kube-cleanup.ps1 deletes the file with the network.
  4. kube-proxy.exe with the flags of kube-proxy.args (this ConfigMap), ${SOURCE_VIP} and
     ${NODE_NAME} filled in. No --kubeconfig: in-cluster configuration from the pod's own projected
     ServiceAccount token (KUBERNETES_SERVICE_HOST/PORT point at the API server's address, see
     start-flanneld.ps1). Its output is this container's log (kubectl logs).
#>
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("start-kube-proxy.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}
. (Join-Path $PSScriptRoot 'hostprocess-lib.ps1')

$NodeDir = Get-K4wSetting 'K4W_NODE_DIR'
$NetworkName = Get-K4wSetting 'K4W_NETWORK_NAME'
$CniBinDir = Get-K4wSetting 'K4W_CNI_BIN_DIR'
$NodeIp = Get-K4wSetting 'NODE_IP'
# '' when the box profile sets no cluster_nic_default_route (the DaemonSet passes the node.json value).
$ClusterGateway = [Environment]::GetEnvironmentVariable('K4W_CLUSTER_GATEWAY')
$TimeoutSeconds = [int](Get-K4wSetting 'K4W_TIMEOUT_SECONDS')
$SourceVipFile = Join-Path $NodeDir 'SourceVip.json'       # kube-cleanup.ps1 deletes it with the network
$IpamDataDir = 'C:\var\lib\cni\networks'                    # host-local's dataDir for the reservation
$SourceVipContainerId = 'k4w-source-vip'                    # the reservation's owner in host-local's store
. (Join-Path $NodeDir 'hns.ps1')            # Invoke-Hns, Get-Field, Test-HnsNetwork (guest/windows/node/)
. (Join-Path $NodeDir 'cluster-route.ps1')  # Test-ClusterAddressPreferred, Set-ClusterDefaultRoute

function Get-NetworkSubnet {
    $network = @(Invoke-Hns GET '/networks' | Where-Object { (Get-Field $_ 'Name') -eq $NetworkName })[0]
    return (@(Get-Field $network 'Subnets')[0]).AddressPrefix
}

function Invoke-HostLocal([string]$Command, [string]$Subnet) {
    # One CNI call to host-local.exe (the CNI spec's environment protocol); returns its output.
    $request = @{ cniVersion = '0.3.0'; name = $NetworkName
                  ipam = @{ type = 'host-local'; ranges = @(, @(@{ subnet = $Subnet })); dataDir = $IpamDataDir } } |
        ConvertTo-Json -Depth 6 -Compress
    $cni = @{ CNI_COMMAND = $Command; CNI_CONTAINERID = $SourceVipContainerId; CNI_NETNS = 'none'; CNI_IFNAME = 'none'; CNI_PATH = $CniBinDir }
    foreach ($name in $cni.Keys) { Set-Item -Path "env:$name" -Value $cni[$name] }
    try { $answer = $request | & (Join-Path $CniBinDir 'host-local.exe') } finally { foreach ($name in $cni.Keys) { Remove-Item -Path "env:$name" } }
    if ($LASTEXITCODE -ne 0) { throw "host-local.exe $Command in $Subnet failed (exit $LASTEXITCODE): $answer" }
    return ($answer -join "`n")
}

function Get-SourceVip {
    $subnet = Get-NetworkSubnet
    if (Test-Path -LiteralPath $SourceVipFile) {
        $kept = ((Get-Content -LiteralPath $SourceVipFile -Raw | ConvertFrom-Json).ips[0].address -split '/')[0]
        if (Test-K4wAddressInSubnet -Address $kept -Cidr $subnet) { return $kept }
        Write-Host "start-kube-proxy: source VIP $kept is not in this node's pod subnet $subnet any more; reserving a new one"
    }
    # DEL first: host-local refuses a second ADD for the same owner, and a reservation may outlive
    # its file (a deleted SourceVip.json, an interrupted start).
    [void](Invoke-HostLocal 'DEL' $subnet)
    $answer = Invoke-HostLocal 'ADD' $subnet
    Set-Content -LiteralPath $SourceVipFile -Value $answer -Encoding ASCII
    return (($answer | ConvertFrom-Json).ips[0].address -split '/')[0]
}

# ---------------------------------------------------------------- 1. Flannel's network
Wait-K4wPodCondition -What "Flannel's HNS network $NetworkName" -Condition { Test-HnsNetwork $NetworkName } -TimeoutSeconds $TimeoutSeconds `
    -Hint 'the DaemonSet k4w-flannel-windows creates it: kubectl -n k4w-windows-node logs of its pod on this node'

# ---------------------------------------------------------------- 2. the cluster NIC's default route
if ($ClusterGateway) {
    Wait-K4wPodCondition -What "$NodeIp Preferred" -Condition { Test-ClusterAddressPreferred -IPAddress $NodeIp } -TimeoutSeconds $TimeoutSeconds `
        -Hint 'HNS moves the cluster address to the vEthernet adapter of its network'
    Set-ClusterDefaultRoute -IPAddress $NodeIp -Gateway $ClusterGateway -LogPrefix 'start-kube-proxy'
}

# ---------------------------------------------------------------- 3. the source VIP
$sourceVip = Get-SourceVip
Write-Output "start-kube-proxy: source VIP $sourceVip"

# ---------------------------------------------------------------- 4. kube-proxy in the foreground
$values = @{ NODE_NAME = (Get-K4wSetting 'NODE_NAME'); SOURCE_VIP = $sourceVip }
[string[]]$arguments = Read-K4wArguments -Path (Join-Path $PSScriptRoot 'kube-proxy.args') -Values $values
Write-Output "start-kube-proxy: kube-proxy.exe $($arguments -join ' ')"
& (Join-Path $NodeDir 'kube-proxy.exe') @arguments
exit $LASTEXITCODE

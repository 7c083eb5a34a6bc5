<#
.SYNOPSIS
  The container program of the DaemonSet k4w-flannel-windows: put this node's CNI config in place
  and run flanneld.exe in the foreground (it creates and keeps Flannel's HNS overlay network).

.DESCRIPTION
  A HostProcess container (a process on the node, as SYSTEM) started by the kubelet from the
  ConfigMap k4w-windows-node-scripts. What it runs is the box's own C:\k\flanneld.exe, installed and
  checked against the profile's pinned checksum at bake (06-cni-flannel-overlay.ps1); no image
  carries a binary.
  1. Exactly one CNI config in containerd's conf_dir: the one cluster-up rendered for this node
     (C:\k\config\cni.conf). containerd loads the first file by name (max_conf_num 1), so any other
     file there would be used instead. Changed only when it differs, so a restart changes nothing.
  2. flanneld.exe with the flags of flanneld.args (this ConfigMap). It finds the API server through
     the pod's in-cluster configuration: the ServiceAccount token the kubelet projects and rotates,
     and KUBERNETES_SERVICE_HOST/PORT, which the DaemonSet points at the API server's own address
     (the service ClusterIP needs kube-proxy, which needs this network first). flanneld creates the
     HNS overlay network (vxlan), or reuses it when it is already there with the same settings
     (flannel-io/flannel v0.28.10 pkg/backend/vxlan/device_windows.go ensureNetwork), so a restart keeps the pods'
     network. Its output is this container's log (kubectl logs).
#>
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("start-flanneld.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}
. (Join-Path $PSScriptRoot 'hostprocess-lib.ps1')

$NodeDir = Get-K4wSetting 'K4W_NODE_DIR'
$CniConfDir = Get-K4wSetting 'K4W_CNI_CONF_DIR'
$RenderedCni = Join-Path $NodeDir 'config\cni.conf'     # cluster-up copies nodes/<node>/cni.conf there

# ---------------------------------------------------------------- 1. the CNI config
if (-not (Test-Path -LiteralPath $RenderedCni)) { throw "$RenderedCni is missing: cluster-up copies the rendered node configs before the join" }
New-Item -ItemType Directory -Path $CniConfDir -Force | Out-Null
$wanted = Join-Path $CniConfDir 'cni.conf'
foreach ($other in @(Get-ChildItem -LiteralPath $CniConfDir -File | Where-Object { $_.FullName -ne $wanted })) {
    Remove-Item -LiteralPath $other.FullName -Force
    Write-Output "start-flanneld: removed the other CNI config $($other.FullName)"
}
if (-not (Test-Path -LiteralPath $wanted) -or (Get-FileHash -LiteralPath $RenderedCni).Hash -ne (Get-FileHash -LiteralPath $wanted).Hash) {
    Copy-Item -LiteralPath $RenderedCni -Destination $wanted -Force
    Write-Output "start-flanneld: $wanted updated"
}

# ---------------------------------------------------------------- 2. flanneld in the foreground
$values = @{ NODE_IP = (Get-K4wSetting 'NODE_IP') }
[string[]]$arguments = Read-K4wArguments -Path (Join-Path $PSScriptRoot 'flanneld.args') -Values $values
Write-Output "start-flanneld: flanneld.exe $($arguments -join ' ')"
& (Join-Path $NodeDir 'flanneld.exe') @arguments
exit $LASTEXITCODE

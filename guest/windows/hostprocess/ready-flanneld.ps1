<#
.SYNOPSIS
  Readiness probe of the DaemonSet k4w-flannel-windows: ready once flanneld holds a lease for this
  node (its subnet file) and its HNS overlay network exists. Exit 0 ready, 1 not yet.
#>
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Output ("ready-flanneld.ps1: " + $_.Exception.Message); exit 1 }
. (Join-Path $PSScriptRoot 'hostprocess-lib.ps1')

$NodeDir = Get-K4wSetting 'K4W_NODE_DIR'
# flanneld --subnet-file default /run/flannel/subnet.env, on drive C: (flannel-io/flannel v0.28.10 main.go).
$SubnetEnv = 'C:\run\flannel\subnet.env'
. (Join-Path $NodeDir 'hns.ps1')   # Test-HnsNetwork: the box's HNS helper (guest/windows/node/hns.ps1)

if ((Test-Path -LiteralPath $SubnetEnv) -and (Test-HnsNetwork (Get-K4wSetting 'K4W_NETWORK_NAME'))) { exit 0 }
Write-Output "ready-flanneld: no lease ($SubnetEnv) or no HNS network yet"
exit 1

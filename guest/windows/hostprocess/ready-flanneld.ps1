<#
.SYNOPSIS
  Readiness probe of the DaemonSet k4w-flannel-windows: ready once the flanneld.exe running now has
  set up this node's network. Exit 0 ready, 1 not yet.

.DESCRIPTION
  flanneld writes its subnet file only after it holds the node's lease and its backend has
  registered the network, which on Windows creates (or adopts) the HNS overlay network
  (flannel-io/flannel v0.28.10, module zip h1:jt+uW6XVV01MBb3YFahG7Ue9UE3W6zlNlJMf3JtdcXI=: main.go
  calls be.RegisterNetwork, whose pkg/backend/vxlan/vxlan_windows.go acquires the lease and creates
  the VXLAN HNS network, before sm.HandleSubnetFile; pkg/subnet/writefile_windows.go writes it with
  os.WriteFile, so every start rewrites it). So a subnet file written after the running flanneld.exe
  started says both, for this run: a file left from an earlier run or boot (C:\run is a folder on
  disk, not a tmpfs) is older than the process.
  The kubelet runs this every periodSeconds in a new powershell.exe, so it stays cheap: two file
  and process lookups. It asks HNS nothing (that needs vmcompute.dll through Add-Type, which
  compiles C# on every load: hostprocess_rules' probe-add-type check keeps probes free of it).
#>
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Output ("ready-flanneld.ps1: " + $_.Exception.Message); exit 1 }
. (Join-Path $PSScriptRoot 'hostprocess-lib.ps1')

$Flanneld = Join-Path (Get-K4wSetting 'K4W_NODE_DIR') 'flanneld.exe'
# flanneld --subnet-file default /run/flannel/subnet.env, on drive C: (flannel-io/flannel v0.28.10 main.go).
$SubnetEnv = 'C:\run\flannel\subnet.env'

# The box's own flanneld.exe (start-flanneld.ps1 runs it), not a process of that name elsewhere.
$started = @(Get-Process -Name 'flanneld' -ErrorAction SilentlyContinue |
    Where-Object { $_.Path -eq $Flanneld } | ForEach-Object { $_.StartTime.ToUniversalTime() } | Sort-Object)
if ($started.Count -eq 0) {
    Write-Output "ready-flanneld: $Flanneld is not running"
    exit 1
}
if (-not (Test-Path -LiteralPath $SubnetEnv)) {
    Write-Output "ready-flanneld: no lease yet ($SubnetEnv)"
    exit 1
}
$written = (Get-Item -LiteralPath $SubnetEnv).LastWriteTimeUtc
if ($written -lt $started[-1]) {
    Write-Output "ready-flanneld: $SubnetEnv is from before flanneld's start at $($started[-1].ToString('o')); no network yet"
    exit 1
}
exit 0

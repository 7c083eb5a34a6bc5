<#
.SYNOPSIS
  Run kubelet.exe in the foreground with kubeadm's flags and this node's: the program of the NSSM
  service "kubelet" in the containerd-era recipe (kubernetes.kubelet_launcher of the box profile).

.DESCRIPTION
  kubeadm join writes C:\var\lib\kubelet\config.yaml (the cluster's KubeletConfiguration) and
  C:\var\lib\kubelet\kubeadm-flags.env (one line: the variable KUBELET_KUBEADM_ARGS holding its
  flags, quoted), then restarts the
  kubelet service; this script reads both at every start, as kubernetes-sigs/sig-windows-tools
  hostprocess/PrepareNode.ps1 (StartKubelet.ps1, at 6308ea8b) does, and appends the per-node flags
  cluster-up rendered into C:\k\config\kubelet.args (templates/nodes/windows-containerd/kubelet.args.j2;
  every flag checked against k4w/validate/facts/kubelet-1.37.yml by invoke validate).
  Why a wrapper under NSSM and not the kubelet's own --windows-service (kubernetes/kubernetes v1.37.2
  cmd/kubelet/app/options/osflags_windows.go; pkg/windows/service/service.go): with it kubelet.exe is
  the service program itself, registered with one fixed command line, while kubeadm join writes the
  flags the kubelet needs (kubeadm-flags.env) only after the box is baked, and rewrites them at each
  join; the service would have to be re-registered with them every time. The wrapper reads them at
  every start instead, and a PowerShell script is no service program, so NSSM runs it (as
  sig-windows-tools PrepareNode.ps1 does). Under NSSM the kubelet is a child process, not started by
  the service control manager, so it must not get --windows-service (svc.Run would fail).
  Arguments are passed as an array, never through Invoke-Expression: an empty value such as
  --resolv-conf= reaches the kubelet as it is written. Before a join (no kubeadm-flags.env) the
  kubelet cannot run: the script says so and exits non-zero, and NSSM retries.
#>
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Output ("start-kubelet.ps1 failed: " + $_.Exception.Message); exit 1 }

$K = 'C:\k'
$KubeadmFlags = 'C:\var\lib\kubelet\kubeadm-flags.env'    # kubeadm's /var/lib/kubelet on drive C:
$NodeArgs = Join-Path $K 'config\kubelet.args'

function Read-KubeadmFlags {
    # The variable's quoted value is a blank-separated list of flags: kubeadm writes none whose
    # value holds a blank.
    param([string]$Path)
    if (-not (Test-Path -LiteralPath $Path)) { throw "$Path is missing: this node has not joined yet (kubeadm join writes it)" }
    foreach ($line in Get-Content -LiteralPath $Path) {
        if ($line -match '^\s*KUBELET_KUBEADM_ARGS\s*=\s*"?(.*?)"?\s*$') {
            return @($Matches[1] -split '\s+' | Where-Object { $_ })
        }
    }
    throw "$Path has no KUBELET_KUBEADM_ARGS line"
}

function Read-NodeArgs {
    param([string]$Path)
    if (-not (Test-Path -LiteralPath $Path)) { throw "$Path is missing: cluster-up copies the rendered node configs before joining" }
    return @(Get-Content -LiteralPath $Path | ForEach-Object { $_.Trim() } | Where-Object { $_ })
}

# kubeadm's flags first, the node's after: for a flag given twice the kubelet keeps the last.
[string[]]$arguments = @(Read-KubeadmFlags $KubeadmFlags) + @(Read-NodeArgs $NodeArgs)
Write-Output "start-kubelet: kubelet.exe $($arguments -join ' ')"
& (Join-Path $K 'kubelet.exe') @arguments
exit $LASTEXITCODE

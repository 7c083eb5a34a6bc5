# 09-firewall.ps1 - open exactly the node ports Kubernetes needs; the firewall stays on.
# The kubelet rule opens 10250 to every address here because the node CIDR is cluster config;
# C:\k\start-node.ps1 narrows it to the node CIDR at cluster-up and at every boot.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$rules = @(
    # kubelet API: logs, exec, metrics from the API server.
    [pscustomobject]@{ Name = 'k4w-kubelet'; Protocol = 'TCP'; Port = '10250'; What = 'kubelet API' },
    # Flannel vxlan (VNI 4096 / UDP 4789 on Windows); unused with host-gw but harmless, and lets
    # the same box join a vxlan cluster on a build that supports it.
    [pscustomobject]@{ Name = 'k4w-flannel-vxlan'; Protocol = 'UDP'; Port = '4789'; What = 'Flannel vxlan' },
    # Kubernetes' default NodePort range (kube-apiserver --service-node-port-range), TCP and UDP.
    [pscustomobject]@{ Name = 'k4w-nodeport-tcp'; Protocol = 'TCP'; Port = '30000-32767'; What = 'NodePort services' },
    [pscustomobject]@{ Name = 'k4w-nodeport-udp'; Protocol = 'UDP'; Port = '30000-32767'; What = 'NodePort services' }
)

foreach ($rule in $rules) {
    $existing = Get-NetFirewallRule -Name $rule.Name -ErrorAction SilentlyContinue
    if ($existing) {
        # Re-assert the definition (no-op when unchanged) in case someone edited it.
        Set-NetFirewallRule -Name $rule.Name -Direction Inbound -Action Allow -Protocol $rule.Protocol -LocalPort $rule.Port -Profile Any -Enabled True
    } else {
        New-NetFirewallRule -Name $rule.Name -DisplayName "k4w: $($rule.What) ($($rule.Protocol) $($rule.Port))" `
            -Direction Inbound -Action Allow -Protocol $rule.Protocol -LocalPort $rule.Port -Profile Any | Out-Null
        Write-K4wStep "firewall: opened $($rule.Protocol) $($rule.Port) for $($rule.What)"
    }
}

# The firewall stays on for every profile; only the rules above are opened.
$disabled = @(Get-NetFirewallProfile | Where-Object { -not $_.Enabled })
if ($disabled) {
    Set-NetFirewallProfile -Name ($disabled | ForEach-Object { $_.Name }) -Enabled True
    Write-K4wStep "firewall: re-enabled profile(s) $(($disabled | ForEach-Object { $_.Name }) -join ', ')"
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

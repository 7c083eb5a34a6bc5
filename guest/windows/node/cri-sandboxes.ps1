# cri-sandboxes.ps1 - remove every pod sandbox of a CRI runtime (containerd) through crictl.exe.
# Dot-sourced by kube-cleanup.ps1; only a function here, the caller's header sets
# ErrorActionPreference, StrictMode and the trap.
#
# Why crictl, and not the alternatives (checked upstream):
# - `crictl rmp --force --all` stops each READY sandbox (StopPodSandbox: containerd tears down its
#   network through the CNI) and removes it (RemovePodSandbox), all through the CRI, so containerd's
#   own store stays consistent (kubernetes-sigs/cri-tools@v1.37.0, the pinned crictl, module zip
#   h1:BmTImEoTX3KPXCLwmIU9mfCC8umUqF4R8WibY9eVU9Y=, cmd/crictl/sandbox.go removePodCommand).
#   `--timeout` bounds every CRI call (cmd/crictl/crictl_config.go getRuntimeService:
#   WithConnectionTimeout -> k8s.io/cri-client@v0.37.0 pkg/remote_runtime.go, context.WithTimeout(ctx,
#   r.timeout) in StopPodSandbox and RemovePodSandbox).
# - `ctr -n k8s.io` removes containers and tasks behind the CRI's back: no CNI teardown, and the CRI
#   plugin keeps its sandbox records.
# - `kubeadm reset phase cleanup-node` does remove the containers through the CRI, but also empties
#   the kubelet's folder and deletes C:\etc\kubernetes\kubelet.conf, and it only logs a warning when
#   the removal fails (kubernetes/kubernetes@v1.37.2, module zip
#   h1:A2VDEiObzkYqFTKhSsn0ZEb0RlLEXpHWj93gi2HqEwE=, cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go
#   runCleanupNode/resetConfigDir; cluster-reset.ps1 uses it where that is wanted).

function Invoke-Crictl {
    # One crictl call, judged by its exit code; its stderr (logrus) is output here, not an error.
    param([string]$Crictl, [string]$Endpoint, [int]$CallTimeoutSeconds, [string[]]$Arguments)
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $output = & $Crictl --runtime-endpoint $Endpoint --timeout "${CallTimeoutSeconds}s" @Arguments 2>&1
        $code = $LASTEXITCODE
    } finally { $ErrorActionPreference = $previous }
    # Standard output (the pod IDs of `pods --quiet`) apart from standard error (logrus messages),
    # which 2>&1 hands over as ErrorRecords.
    $stdout = @($output | Where-Object { $_ -isnot [System.Management.Automation.ErrorRecord] })
    $stderr = @($output | Where-Object { $_ -is [System.Management.Automation.ErrorRecord] })
    return [pscustomobject]@{ Code = $code
                              Lines = @($stdout | ForEach-Object { "$_".Trim() } | Where-Object { $_ })
                              Errors = (@($stderr | ForEach-Object { "$_".Trim() }) -join ' ') }
}

function Remove-CriPodSandboxes {
    # Waits (bounded) for the runtime to answer, removes every sandbox, then checks none is left.
    param(
        [Parameter(Mandatory = $true)][string]$Crictl,
        [Parameter(Mandatory = $true)][string]$Endpoint,
        [Parameter(Mandatory = $true)][int]$TimeoutSeconds,
        [Parameter(Mandatory = $true)][int]$CallTimeoutSeconds,
        [int]$PollSeconds = 2
    )
    if (-not (Test-Path -LiteralPath $Crictl)) {
        throw "$Crictl is missing: the bake installs it (guest/windows/bake/03-crictl.ps1); rebuild the box"
    }
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while ($true) {
        $before = Invoke-Crictl $Crictl $Endpoint $CallTimeoutSeconds @('pods', '--quiet')
        if ($before.Code -eq 0) { break }
        if ((Get-Date) -gt $deadline) {
            throw "the CRI runtime did not answer on $Endpoint within $TimeoutSeconds s (crictl pods exit $($before.Code)): $($before.Errors)"
        }
        Start-Sleep -Seconds $PollSeconds
    }
    if ($before.Lines.Count -eq 0) {
        Write-Host "kube-cleanup: no pod sandboxes on $Endpoint"
        return
    }
    $removal = Invoke-Crictl $Crictl $Endpoint $CallTimeoutSeconds @('rmp', '--force', '--all')
    if ($removal.Code -ne 0) {
        throw "crictl rmp --force --all on $Endpoint failed (exit $($removal.Code)): $($removal.Errors)"
    }
    $after = Invoke-Crictl $Crictl $Endpoint $CallTimeoutSeconds @('pods', '--quiet')
    if ($after.Code -ne 0 -or $after.Lines.Count -gt 0) {
        throw "pod sandboxes remain on $Endpoint after crictl rmp (crictl pods exit $($after.Code)): $($after.Lines -join ' ') $($after.Errors)"
    }
    Write-Host "kube-cleanup: removed $($before.Lines.Count) pod sandbox(es) through the CRI on $Endpoint"
}

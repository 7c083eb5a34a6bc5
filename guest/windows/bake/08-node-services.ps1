# 08-node-services.ps1 - the node's NSSM services (K4W_NODE_SERVICES, from the box profile's
# node_services) and the startup task k4w-node-start, as docs/internals.md ("Windows box <-> cluster-up")
# describes:
# - the seed era registers kubelet, flanneld and kube-proxy; the containerd era the kubelet alone (its
#   flanneld and kube-proxy are HostProcess DaemonSets that cluster-up applies from the master);
# - start order <runtime> -> the services in the order listed, as service dependencies, the runtime
#   being docker or containerd (K4W_CONTAINER_RUNTIME; why flanneld before kube-proxy: see step 4 of
#   node/start-node.ps1);
# - restarted on failure; stdout/stderr in C:\k\logs, rotated;
# - start type Manual and no AppParameters: C:\k\start-node.ps1 applies C:\k\config at cluster-up
#   and starts them in order. Until a node has joined, nothing of Kubernetes runs.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
# The container runtime service the kubelet depends on: docker (seed profile) or containerd.
$runtimeService = Get-K4wEnv -Name 'K4W_CONTAINER_RUNTIME'
# A profile's kubernetes.kubelet_launcher: a script in the node folder the kubelet service runs
# instead of kubelet.exe (the containerd era's start-kubelet.ps1, which reads kubeadm's
# kubeadm-flags.env at every start). Unset: the service runs kubelet.exe with the arguments
# start-node.ps1 applies.
$kubeletLauncher = Get-K4wEnv -Name 'K4W_KUBELET_LAUNCHER' -Optional
$powershell = "$env:SystemRoot\System32\WindowsPowerShell\v1.0\powershell.exe"
$nssm = Join-Path $nodeDir 'nssm.exe'
$logDir = Join-Path $nodeDir 'logs'
$startNode = Join-Path $nodeDir 'start-node.ps1'
$startNodeAtBoot = Join-Path $nodeDir 'start-node-at-boot.ps1'
$startNodeLog = Join-Path $logDir 'start-node.log'
$taskName = 'k4w-node-start'

foreach ($required in $nssm, $startNode, $startNodeAtBoot, (Join-Path $nodeDir 'kube-cleanup.ps1')) {
    if (-not (Test-Path -LiteralPath $required)) {
        throw "$required is missing: 07-nssm.ps1 installs nssm.exe and the file provisioner copies guest/windows/node/ into $nodeDir"
    }
}
New-Item -ItemType Directory -Path $logDir -Force | Out-Null

# Each service depends on the previous one, so the SCM starts (and stops) them in this order:
# flanneld needs the kubelet's Node object, and kernelspace kube-proxy needs the HNS network
# flanneld creates (KUBE_NETWORK). Those two are services of the seed era only.
# Parameters: fixed arguments the box sets (only a launcher has any); $null = none, per cluster.
$kubelet = [pscustomobject]@{ Name = 'kubelet'; Program = (Join-Path $nodeDir 'kubelet.exe'); Parameters = $null; DependsOn = $runtimeService; Description = 'Kubernetes node agent' }
if ($kubeletLauncher) {
    $launcher = Join-Path $nodeDir $kubeletLauncher
    if (-not (Test-Path -LiteralPath $launcher)) { throw "$launcher is missing: the file provisioner copies the node recipe's folder into $nodeDir" }
    $kubelet.Program = $powershell
    $kubelet.Parameters = "-NoProfile -NonInteractive -ExecutionPolicy Bypass -File `"$launcher`""
}
$known = @{
    'kubelet'    = $kubelet
    'flanneld'   = [pscustomobject]@{ Name = 'flanneld'; Program = (Join-Path $nodeDir 'flanneld.exe'); Parameters = $null; DependsOn = ''; Description = 'Flannel pod network' }
    'kube-proxy' = [pscustomobject]@{ Name = 'kube-proxy'; Program = (Join-Path $nodeDir 'kube-proxy.exe'); Parameters = $null; DependsOn = ''; Description = 'Kubernetes service proxy' }
}
$wanted = @((Get-K4wEnv -Name 'K4W_NODE_SERVICES') -split ',' | ForEach-Object { $_.Trim() } | Where-Object { $_ })
if ($wanted.Count -eq 0 -or $wanted[0] -ne 'kubelet') { throw "K4W_NODE_SERVICES '$($wanted -join ',')' must start with kubelet" }
$services = @()
$previous = $runtimeService
foreach ($name in $wanted) {
    if (-not $known.ContainsKey($name)) { throw "K4W_NODE_SERVICES names '$name'; this step knows $($known.Keys -join ', ')" }
    $known[$name].DependsOn = $previous
    $services += $known[$name]
    $previous = $name
}
# A service of another era left on this box (e.g. flanneld on a containerd box) would be started by
# nothing and confuse whoever reads the service list: this step registers exactly the profile's.
foreach ($name in @($known.Keys | Where-Object { $wanted -notcontains $_ })) {
    if (Get-Service -Name $name -ErrorAction SilentlyContinue) {
        Invoke-K4wExe -FilePath $nssm -ArgumentList @('remove', $name, 'confirm') | Out-Null
        Write-K4wStep "service $name removed (not in this box's node_services)"
    }
}

function Set-NssmValue([string]$Service, [string]$Name, [string[]]$Value) {
    Invoke-K4wExe -FilePath $nssm -ArgumentList (@('set', $Service, $Name) + $Value) | Out-Null
}

foreach ($svc in $services) {
    $program = $svc.Program
    if (-not (Test-Path -LiteralPath $program)) { throw "$program is missing (05/06 install it)" }
    if (-not (Get-Service -Name $svc.Name -ErrorAction SilentlyContinue)) {
        Invoke-K4wExe -FilePath $nssm -ArgumentList @('install', $svc.Name, $program) | Out-Null
        Write-K4wStep "service $($svc.Name) created"
    }
    $log = Join-Path $logDir "$($svc.Name).log"
    # Setting a value to what it already is changes nothing, so this block is idempotent.
    Set-NssmValue $svc.Name 'Application' $program
    Set-NssmValue $svc.Name 'AppDirectory' $nodeDir
    Set-NssmValue $svc.Name 'DisplayName' "k4w $($svc.Name)"
    Set-NssmValue $svc.Name 'Description' "$($svc.Description) (k4w; configured by C:\k\start-node.ps1)"
    Set-NssmValue $svc.Name 'ObjectName' 'LocalSystem'
    Set-NssmValue $svc.Name 'Start' 'SERVICE_DEMAND_START'
    Set-NssmValue $svc.Name 'DependOnService' $svc.DependsOn
    # NSSM 2.24 services can stay Paused on Windows 10 1703 (Creators Update) and later builds
    # such as Server 1803; nssm.cc/download's workaround (notice of 2017-04-26) is AppNoConsole=1:
    # no console window for the program. The node programs are console programs that need none.
    Set-NssmValue $svc.Name 'AppNoConsole' '1'
    # Restart the program whenever it exits, after 10 s (e.g. flanneld's first start on 1803 can
    # fail adding routes with "New-NetRoute ... 1168").
    Set-NssmValue $svc.Name 'AppExit' @('Default', 'Restart')
    Set-NssmValue $svc.Name 'AppRestartDelay' '10000'
    Set-NssmValue $svc.Name 'AppStdout' $log
    Set-NssmValue $svc.Name 'AppStderr' $log
    # 4 = OPEN_ALWAYS: append across restarts instead of truncating the evidence.
    Set-NssmValue $svc.Name 'AppStdoutCreationDisposition' '4'
    Set-NssmValue $svc.Name 'AppStderrCreationDisposition' '4'
    # Rotate at start-up and, while running, every day or at 10 MiB.
    Set-NssmValue $svc.Name 'AppRotateFiles' '1'
    Set-NssmValue $svc.Name 'AppRotateOnline' '1'
    Set-NssmValue $svc.Name 'AppRotateSeconds' '86400'
    Set-NssmValue $svc.Name 'AppRotateBytes' '10485760'

    # No arguments (but a launcher's fixed ones) and no extra environment in the box: they are per
    # cluster (C:\k\config).
    $parameters = Get-ItemProperty -LiteralPath "HKLM:\SYSTEM\CurrentControlSet\Services\$($svc.Name)\Parameters"
    $perCluster = @('AppEnvironmentExtra')
    if ($svc.Parameters) { Set-NssmValue $svc.Name 'AppParameters' $svc.Parameters } else { $perCluster += 'AppParameters' }
    foreach ($value in $perCluster) {
        if ($parameters.PSObject.Properties[$value]) {
            Invoke-K4wExe -FilePath $nssm -ArgumentList @('reset', $svc.Name, $value) | Out-Null
        }
    }

    # If nssm.exe itself dies, the service control manager restarts it too.
    Invoke-K4wExe -FilePath "$env:SystemRoot\System32\sc.exe" -ArgumentList @('failure', $svc.Name, 'reset=', '86400', 'actions=', 'restart/10000/restart/10000/restart/10000') | Out-Null

    $service = Get-Service -Name $svc.Name
    if ($service.StartType -ne 'Manual') { throw "$($svc.Name): start type is $($service.StartType), expected Manual" }
    $dependsOn = @($service.ServicesDependedOn | ForEach-Object { $_.Name })
    if ($dependsOn.Count -ne 1 -or $dependsOn[0] -ne $svc.DependsOn) {
        throw "$($svc.Name): depends on '$($dependsOn -join ',')', expected '$($svc.DependsOn)'"
    }
    Write-K4wStep "service $($svc.Name): Manual, after $($svc.DependsOn), log $log"
}

# The startup task: brings a joined node back after every reboot (stale HNS state is cleaned by
# start-node.ps1 before the services start). Does nothing on a box that has not joined yet.
# A task's output goes nowhere, so the action runs start-node-at-boot.ps1, which appends every
# output stream of start-node.ps1 to C:\k\logs\start-node.log as UTF-8 and retries it while
# the master or the cluster NIC is not back yet (a non-zero exit is no "failure" to Task
# Scheduler's RestartOnFailure, see that script); its exit code becomes the task's "Last Run
# Result". Done outside start-node.ps1 rather than by Start-Transcript in it: cluster-up runs the
# same script over WinRM and reads its output directly, so it stays a plain writer to standard output.
$quotedStartNodeAtBoot = "'" + $startNodeAtBoot.Replace("'", "''") + "'"
$quotedStartNode = "'" + $startNode.Replace("'", "''") + "'"
$quotedLog = "'" + $startNodeLog.Replace("'", "''") + "'"
$arguments = "-NoProfile -NonInteractive -ExecutionPolicy Bypass -Command `"& $quotedStartNodeAtBoot -StartNode $quotedStartNode -Log $quotedLog; exit `$LASTEXITCODE`""
# A Hyper-V VM on a laptop may see the host's battery, and a task's defaults neither start on
# battery nor outlast unplugging: the node would not start. RestartOnFailure covers what the
# script cannot: the action failing to start at all (MS-TSCH 2.5.4.2). Task Scheduler's shortest
# interval is one minute (restartType, PT1M).
$restartCount = 3
$restartInterval = New-TimeSpan -Minutes 1
$existing = Get-ScheduledTask -TaskName $taskName -ErrorAction SilentlyContinue
$current = $existing -and
    @($existing.Actions).Count -eq 1 -and $existing.Actions[0].Execute -eq $powershell -and
    $existing.Actions[0].Arguments -eq $arguments -and
    @($existing.Triggers).Count -eq 1 -and $existing.Triggers[0].CimClass.CimClassName -eq 'MSFT_TaskBootTrigger' -and
    $existing.Principal.UserId -eq 'SYSTEM' -and
    $existing.Settings.RestartCount -eq $restartCount -and $existing.Settings.RestartInterval -eq 'PT1M' -and
    -not $existing.Settings.DisallowStartIfOnBatteries -and -not $existing.Settings.StopIfGoingOnBatteries
if ($current) {
    Write-K4wStep "scheduled task $taskName already registered"
} else {
    $task = New-ScheduledTask `
        -Action (New-ScheduledTaskAction -Execute $powershell -Argument $arguments) `
        -Trigger (New-ScheduledTaskTrigger -AtStartup) `
        -Principal (New-ScheduledTaskPrincipal -UserId 'SYSTEM' -LogonType ServiceAccount -RunLevel Highest) `
        -Settings (New-ScheduledTaskSettingsSet -ExecutionTimeLimit (New-TimeSpan -Hours 2) -MultipleInstances IgnoreNew `
            -AllowStartIfOnBatteries -DontStopIfGoingOnBatteries -RestartCount $restartCount -RestartInterval $restartInterval) `
        -Description "k4w: apply C:\k\config and start $runtimeService, $($wanted -join ', ') in order (log: C:\k\logs\start-node.log)"
    Register-ScheduledTask -TaskName $taskName -InputObject $task -Force | Out-Null
    Write-K4wStep "scheduled task $taskName registered (at startup, as SYSTEM, start-node.ps1 retried up to 10 times)"
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

# 03-docker.ps1 - Docker engine from Docker's static Windows zip (pinned in the box profile,
# sha256-checked), registered as the "docker" service, started automatically at boot, with the
# build's proxy in the service environment so the build's image pulls work behind it.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$version = Get-K4wEnv -Name 'K4W_DOCKER_VERSION'
$installDir = Join-Path $env:ProgramFiles 'docker'
$dockerd = Join-Path $installDir 'dockerd.exe'
$docker = Join-Path $installDir 'docker.exe'
$daemonJson = Join-Path $env:ProgramData 'docker\config\daemon.json'

function Test-DockerVersion {
    if (-not (Test-Path -LiteralPath $dockerd)) { return $false }
    $reported = & $dockerd --version   # "Docker version 17.09.0-ce, build afdb6d4"
    return ($reported -like "Docker version $version,*")
}

# 1. Binaries
if (Test-DockerVersion) {
    Write-K4wStep "Docker $version already installed"
} else {
    $zip = Get-K4wVerifiedFile -Component 'docker'
    if (Get-Service -Name 'docker' -ErrorAction SilentlyContinue) { Stop-Service -Name 'docker' -Force }
    # The zip holds a top-level docker\ folder with docker.exe and dockerd.exe.
    Expand-Archive -LiteralPath $zip -DestinationPath $env:ProgramFiles -Force
    if (-not (Test-DockerVersion)) { throw "$dockerd does not report version $version after extraction" }
    Write-K4wStep "Docker $version installed in $installDir"
}
Add-K4wMachinePath -Directory $installDir

# 2. Daemon configuration. Rotated json-file logs keep pod logs from filling the disk; the rest
# stays at Docker's Windows defaults (the kubelet's CNI plugins, not Docker, wire pod networking).
$config = [ordered]@{
    'log-driver' = 'json-file'
    'log-opts'   = [ordered]@{ 'max-size' = '10m'; 'max-file' = '3' }
}
# Docker Hub's mirrors (K4W_DOCKER_REGISTRY_MIRRORS, blank-separated; empty = none): daemon.json's
# registry-mirrors serves docker.io only, so k4w.model.config refuses other registries for this era.
$mirrors = @((Get-K4wEnv -Name 'K4W_DOCKER_REGISTRY_MIRRORS' -Optional) -split ' ' | Where-Object { $_ })
if ($mirrors.Count -gt 0) { $config['registry-mirrors'] = $mirrors }
$configChanged = Set-K4wFileContent -Path $daemonJson -Content (($config | ConvertTo-Json -Depth 4) + "`n")

# 3. Service
if (-not (Get-Service -Name 'docker' -ErrorAction SilentlyContinue)) {
    Invoke-K4wExe -FilePath $dockerd -ArgumentList @('--register-service')
    Write-K4wStep 'docker service registered'
}

# 4. Proxy for the daemon (registry pulls during the build; 12-cleanup.ps1 removes it).
$envChanged = Set-K4wServiceProxy -Service 'docker' -Proxy (Get-K4wProxySettings)

# 5. Start at boot, and now; restart when its configuration changed while it was running.
Set-Service -Name 'docker' -StartupType Automatic
$service = Get-Service -Name 'docker'
if ($service.Status -eq 'Running' -and ($configChanged -or $envChanged)) {
    Write-K4wStep 'docker configuration changed: restarting the service'
    Restart-Service -Name 'docker' -Force
} elseif ($service.Status -ne 'Running') {
    Start-Service -Name 'docker'
}
Wait-K4wCondition -Description 'the Docker engine to answer on its named pipe' -TimeoutSeconds 180 -Condition {
    $serverVersion = & $docker version --format '{{.Server.Version}}'
    ($LASTEXITCODE -eq 0) -and ("$serverVersion".Trim() -eq $version)
}
Write-K4wStep "Docker engine $version is running"

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

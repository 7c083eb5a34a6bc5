# 03-containerd.ps1 - containerd from the release tarball (checksum-verified) into
# C:\Program Files\containerd, its config.toml, and the "containerd" service (automatic start,
# the build's proxy in its environment). The kubelet reaches it on K4W_RUNTIME_ENDPOINT, the named
# pipe containerd serves by default on Windows (defaults/defaults_windows.go at v2.3.7).
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$version = Get-K4wEnv -Name 'K4W_CONTAINERD_VERSION'
$endpoint = Get-K4wEnv -Name 'K4W_RUNTIME_ENDPOINT'
$pauseImage = Get-K4wEnv -Name 'K4W_PAUSE_IMAGE'
# The config schema this containerd reads without migrating it at every start (k4w/derive/containerd_config.py).
$configVersion = Get-K4wEnv -Name 'K4W_CONTAINERD_CONFIG_VERSION'
if ($configVersion -notmatch '^[1-9][0-9]*$') { throw "K4W_CONTAINERD_CONFIG_VERSION must be a config schema number, not '$configVersion'" }
$cniBinDir = Get-K4wEnv -Name 'K4W_CNI_BIN_DIR'
$cniConfDir = Get-K4wEnv -Name 'K4W_CNI_CONF_DIR'
$installDir = Join-Path $env:ProgramFiles 'containerd'
$containerd = Join-Path $installDir 'containerd.exe'
$ctr = Join-Path $installDir 'ctr.exe'
# containerd's default --config on Windows (defaults.DefaultConfigDir\config.toml), so the
# registered service needs no arguments beyond its own.
$configFile = Join-Path $installDir 'config.toml'
# What the release tarball holds under bin\ (Makefile.windows BINARIES + WINDOWS_SHIM at v2.3.7).
$binaries = 'containerd.exe', 'ctr.exe', 'containerd-shim-runhcs-v1.exe'

# The configuration, schema version K4W_CONTAINERD_CONFIG_VERSION (4 for containerd 2.3: the table
# names are those of docs/cri/config.md at v2.3.7, unchanged from version 3). Each key is
# checked against that document by tests/bake/windows/test_windows_containerd.py:
# - pinned_images.sandbox: the pause image the CRI plugin runs every pod sandbox from; since
#   kubelet 1.35 has no --pod-infra-container-image this is its only home. The kubelet's image GC
#   spares it only when the image carries the CRI's "pinned" label, which 04-prepull-images.ps1 sets;
# - cni: where the kubelet-driven pod network setup finds the plugins (bin_dirs, the list that
#   replaces the deprecated bin_dir since v2.1) and the flannel config (conf_dir); max_conf_num 1
#   loads only the first config there, so no leftover file can take over (start-node.ps1 removes any);
# - imports: containerd's conf.d drop-ins, where the image mirrors' credentials go (common.ps1
#   Set-K4wContainerdRegistry; the CRI's registry.configs, k4w/derive/registry.py says why);
# - registry.config_path: the hosts.toml of each mirrored registry (docs/hosts.md at v2.3.7; no
#   default on Windows, plugins/cri/images/plugin.go sets one on Linux only).
$configTemplate = @'
version = {5}
imports = ['{3}\*.toml']

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '{0}'

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = '{4}'

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['{1}']
  conf_dir = '{2}'
  max_conf_num = 1
'@
$config = ($configTemplate -f $pauseImage, $cniBinDir, $cniConfDir, $script:K4wContainerdDropIns, $script:K4wRegistryHostsDir, $configVersion).Replace("`r`n", "`n")

function Test-ContainerdVersion {
    foreach ($binary in $binaries) {
        if (-not (Test-Path -LiteralPath (Join-Path $installDir $binary))) { return $false }
    }
    # "containerd github.com/containerd/containerd/v2 v2.3.7 <commit>"
    return [bool]((& $containerd --version) -match " v$([regex]::Escape($version))( |$)")
}

# 1. Binaries
if (Test-ContainerdVersion) {
    Write-K4wStep "containerd $version already installed in $installDir"
} else {
    $archive = Get-K4wVerifiedFile -Component 'containerd'
    $unpack = Join-Path $env:TEMP 'k4w-containerd'
    if (Test-Path -LiteralPath $unpack) { Remove-Item -LiteralPath $unpack -Recurse -Force }
    New-Item -ItemType Directory -Path $unpack, $installDir -Force | Out-Null
    Invoke-K4wExe -FilePath "$env:SystemRoot\System32\tar.exe" -ArgumentList @('-xzf', $archive, '-C', $unpack)
    if (Get-Service -Name 'containerd' -ErrorAction SilentlyContinue) { Stop-Service -Name 'containerd' -Force }
    foreach ($binary in $binaries) {
        $source = Join-Path $unpack "bin\$binary"
        if (-not (Test-Path -LiteralPath $source)) { throw "bin\$binary is missing from $archive" }
        [void](Copy-K4wFileIfChanged -Source $source -Destination (Join-Path $installDir $binary))
    }
    Remove-Item -LiteralPath $unpack -Recurse -Force
    if (-not (Test-ContainerdVersion)) { throw "$containerd does not report v$version after installing" }
    Write-K4wStep "containerd $version installed in $installDir"
}
Add-K4wMachinePath -Directory $installDir
New-Item -ItemType Directory -Path $cniBinDir, $cniConfDir -Force | Out-Null

# 2. Configuration, the service, and its proxy (on the service's key, so after registering it)
$changed = Set-K4wFileContent -Path $configFile -Content $config
if ($changed) { Write-K4wStep "containerd config written: $configFile" }
# The image mirrors (empty: none). The build's credentials stay until 12-cleanup.ps1 removes them,
# so a box carries none; cluster-up writes the node's (cluster-proxy.ps1).
$registryFiles = Get-K4wEnv -Name 'K4W_REGISTRY_FILES' -Optional
$registryAuth = Get-K4wEnv -Name 'K4W_REGISTRY_AUTH' -Optional
if (Set-K4wContainerdRegistry -Files $registryFiles -Auth $registryAuth) { $changed = $true }
if (-not (Get-Service -Name 'containerd' -ErrorAction SilentlyContinue)) {
    # --log-file beside the other node services' logs; without it containerd logs to the Windows
    # event log only. --register-service keeps every other argument for the service's command line
    # (containerd v2.3.7 cmd/containerd/command/service_windows.go, registerService).
    $logDir = Join-Path (Get-K4wEnv -Name 'K4W_NODE_DIR') 'logs'
    New-Item -ItemType Directory -Path $logDir -Force | Out-Null
    Invoke-K4wExe -FilePath $containerd -ArgumentList @('--register-service', '--log-file', (Join-Path $logDir 'containerd.log'))
    Write-K4wStep 'containerd service registered'
}
if (Set-K4wServiceProxy -Service 'containerd' -Proxy (Get-K4wProxySettings)) {
    Write-K4wStep 'containerd service environment: the build proxy set'
    $changed = $true
}

# 3. Running, with this configuration
Set-Service -Name 'containerd' -StartupType Automatic
if ((Get-Service -Name 'containerd').Status -eq 'Running') {
    if ($changed) { Restart-Service -Name 'containerd' -Force; Write-K4wStep 'containerd restarted for its new configuration' }
} else {
    Start-Service -Name 'containerd'
}
# Ready = the CRI endpoint answers: ctr talks to the same pipe the kubelet will use.
# Two minutes: a first start on a fresh box takes seconds; longer means it is not coming up.
$address = ConvertTo-K4wPipePath -Endpoint $endpoint
Wait-K4wCondition -Description "containerd answering on $endpoint" -TimeoutSeconds 120 -Condition {
    & $ctr --address $address version *> $null
    $LASTEXITCODE -eq 0
}
Write-K4wStep "containerd $version running, answering on $endpoint"

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

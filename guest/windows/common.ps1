# common.ps1 - helpers shared by every k4w Windows guest script. Dot-sourced, never run alone:
#   . $env:K4W_COMMON                     (provisioners; templates/packer/windows.pkr.hcl.j2 uploads this file)
#   . (Join-Path $PSScriptRoot 'common.ps1')   (k4w-bootstrap.ps1, from the Setup media)
# Only functions and process-wide settings here; the caller's header sets ErrorActionPreference,
# StrictMode and the trap.

# The progress bars of Expand-Archive and friends slow them down by an order of magnitude.
$ProgressPreference = 'SilentlyContinue'

# The step variables of every component the box installs from the build CD, as
# k4w/derive/step_env.py names them (PROFILE_VARIABLES and MEDIA_VARIABLES;
# tests/derive/test_step_variables.py checks both lists name the same variables). A value the
# profile leaves null is not set at all.
$script:K4wComponents = [ordered]@{
    kubernetes = @{ Version = 'K4W_KUBERNETES_VERSION'; File = 'K4W_KUBERNETES_FILE'; Sha256 = 'K4W_KUBERNETES_SHA256'; Sha512 = 'K4W_KUBERNETES_SHA512' }
    docker     = @{ Version = 'K4W_DOCKER_VERSION'; File = 'K4W_DOCKER_FILE'; Sha256 = 'K4W_DOCKER_SHA256'; Sha512 = 'K4W_DOCKER_SHA512' }
    cni        = @{ Version = 'K4W_CNI_VERSION'; File = 'K4W_CNI_FILE'; Sha256 = 'K4W_CNI_SHA256'; Sha512 = 'K4W_CNI_SHA512' }
    flannel    = @{ Version = 'K4W_FLANNEL_VERSION'; File = 'K4W_FLANNEL_FILE'; Sha256 = 'K4W_FLANNEL_SHA256'; Sha512 = 'K4W_FLANNEL_SHA512' }
    containerd = @{ Version = 'K4W_CONTAINERD_VERSION'; File = 'K4W_CONTAINERD_FILE'; Sha256 = 'K4W_CONTAINERD_SHA256'; Sha512 = 'K4W_CONTAINERD_SHA512' }
    flannel_cni = @{ Version = 'K4W_FLANNEL_CNI_VERSION'; File = 'K4W_FLANNEL_CNI_FILE'; Sha256 = 'K4W_FLANNEL_CNI_SHA256'; Sha512 = 'K4W_FLANNEL_CNI_SHA512' }
    crictl     = @{ Version = 'K4W_CRICTL_VERSION'; File = 'K4W_CRICTL_FILE'; Sha256 = 'K4W_CRICTL_SHA256'; Sha512 = 'K4W_CRICTL_SHA512' }
    nssm       = @{ Version = 'K4W_NSSM_VERSION'; File = 'K4W_NSSM_FILE'; Sha256 = 'K4W_NSSM_SHA256'; Sha512 = 'K4W_NSSM_SHA512' }
    windows_update = @{ Version = 'K4W_WINDOWS_UPDATE_VERSION'; File = 'K4W_WINDOWS_UPDATE_FILE'; Sha256 = 'K4W_WINDOWS_UPDATE_SHA256'; Sha512 = 'K4W_WINDOWS_UPDATE_SHA512' }
}

function Write-K4wStep {
    param([Parameter(Mandatory = $true)][string]$Message)
    Write-Host "==> k4w: $Message"
}

function ConvertTo-K4wPipePath {
    # A CRI endpoint (npipe:////./pipe/containerd-containerd) as the pipe path ctr.exe --address
    # takes (\\.\pipe\containerd-containerd).
    param([Parameter(Mandatory = $true)][string]$Endpoint)
    if ($Endpoint -notmatch '^npipe://') { throw "'$Endpoint' is not a named-pipe endpoint (npipe://...)" }
    return (($Endpoint -replace '^npipe://', '') -replace '/', '\')
}

function Get-K4wEnv {
    # A K4W_* value from the Packer provisioner. Missing means the script was not started by
    # templates/packer/windows.pkr.hcl.j2, which is a bug, not something to default around.
    # -Optional: for values the profile may leave null (checksums). Windows cannot hold an empty
    # environment variable (setting "" deletes it), so "empty" and "unset" both give ''.
    param(
        [Parameter(Mandatory = $true)][string]$Name,
        [switch]$Optional
    )
    $value = [Environment]::GetEnvironmentVariable($Name, 'Process')
    if ($Optional) {
        if ($null -eq $value) { return '' }
        return $value
    }
    if (-not $value) {
        throw "$Name is not set. Windows guest scripts take every value from the environment_vars of templates/packer/windows.pkr.hcl.j2; run them through 'invoke build-windows'."
    }
    return $value
}

function Invoke-K4wExe {
    # Run a native program and fail on an unexpected exit code (PowerShell does not).
    param(
        [Parameter(Mandatory = $true)][string]$FilePath,
        [string[]]$ArgumentList = @(),
        [int[]]$AllowedExitCodes = @(0)
    )
    & $FilePath @ArgumentList
    if ($AllowedExitCodes -notcontains $LASTEXITCODE) {
        throw "'$FilePath $($ArgumentList -join ' ')' failed with exit code $LASTEXITCODE"
    }
}

function Get-K4wPatchLevel {
    # The running Windows' build and patch level: CurrentBuild (e.g. 20348) and the update build
    # revision UBR (the number after it, 20348.<UBR>), which each cumulative update raises. Both
    # from HKLM:\SOFTWARE\Microsoft\Windows NT\CurrentVersion, as winver and Get-ComputerInfo show them.
    $version = Get-ItemProperty -LiteralPath 'HKLM:\SOFTWARE\Microsoft\Windows NT\CurrentVersion'
    return [pscustomobject]@{ Build = [int]$version.CurrentBuild; Ubr = [int]$version.UBR }
}

function Wait-K4wCondition {
    # Poll a condition until it is true or the timeout expires. Exceptions inside the condition
    # count as "not yet"; the last one is reported on timeout.
    param(
        [Parameter(Mandatory = $true)][string]$Description,
        [Parameter(Mandatory = $true)][scriptblock]$Condition,
        [int]$TimeoutSeconds = 300,
        [int]$IntervalSeconds = 2
    )
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    $lastError = $null
    while ($true) {
        try {
            if (& $Condition) { return }
        } catch {
            $lastError = $_
        }
        if ((Get-Date) -ge $deadline) {
            $detail = if ($lastError) { " (last error: $lastError)" } else { '' }
            throw "Timed out after $TimeoutSeconds s waiting for $Description$detail"
        }
        Start-Sleep -Seconds $IntervalSeconds
    }
}

function Set-K4wRegistryValue {
    # Idempotent: writes only when the value differs. Returns $true when it changed something.
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][string]$Name,
        [Parameter(Mandatory = $true)]$Value,
        [ValidateSet('String', 'DWord', 'MultiString')][string]$Type = 'String'
    )
    if (-not (Test-Path -LiteralPath $Path)) {
        New-Item -Path $Path -Force | Out-Null
    }
    $item = Get-ItemProperty -LiteralPath $Path
    $current = $null
    if ($item.PSObject.Properties[$Name]) { $current = $item.$Name }
    if ($null -ne $current -and ((@($current) -join "`n") -ceq (@($Value) -join "`n"))) {
        return $false
    }
    New-ItemProperty -LiteralPath $Path -Name $Name -Value $Value -PropertyType $Type -Force | Out-Null
    return $true
}

function Remove-K4wRegistryValue {
    # Returns $true when the value existed.
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][string]$Name
    )
    if (-not (Test-Path -LiteralPath $Path)) { return $false }
    $item = Get-ItemProperty -LiteralPath $Path
    if (-not $item.PSObject.Properties[$Name]) { return $false }
    Remove-ItemProperty -LiteralPath $Path -Name $Name
    return $true
}

function Set-K4wMachineEnv {
    # Machine-scope environment variable; an empty value removes it. Also updates this process.
    param(
        [Parameter(Mandatory = $true)][string]$Name,
        [AllowEmptyString()][string]$Value
    )
    $current = [Environment]::GetEnvironmentVariable($Name, 'Machine')
    if ($Value) {
        if ($current -cne $Value) {
            [Environment]::SetEnvironmentVariable($Name, $Value, 'Machine')
            Write-K4wStep "machine environment: $Name set"
        }
    } elseif ($null -ne $current) {
        [Environment]::SetEnvironmentVariable($Name, $null, 'Machine')
        Write-K4wStep "machine environment: $Name removed"
    }
    [Environment]::SetEnvironmentVariable($Name, $Value, 'Process')
}

function Add-K4wMachinePath {
    param([Parameter(Mandatory = $true)][string]$Directory)
    $entries = @([Environment]::GetEnvironmentVariable('Path', 'Machine') -split ';' | Where-Object { $_ })
    if ($entries -notcontains $Directory) {
        [Environment]::SetEnvironmentVariable('Path', (($entries + $Directory) -join ';'), 'Machine')
        Write-K4wStep "machine PATH: added $Directory"
    }
    if (@($env:Path -split ';') -notcontains $Directory) { $env:Path = "$env:Path;$Directory" }
}

# ------------------------------------------------------------------------------------ proxy

function Get-K4wProxyServer {
    # One proxy server as k4w.derive.values split its URL: host:port (what WinHTTP, WinINet and
    # Invoke-WebRequest's -Proxy take) and the credentials, percent-encoded as in cluster.yml.
    # HostPort is '' when there is no such proxy.
    param(
        [Parameter(Mandatory = $true)][string]$HostPortName,
        [Parameter(Mandatory = $true)][string]$UserName,
        [Parameter(Mandatory = $true)][string]$PasswordName
    )
    [pscustomobject]@{
        HostPort = Get-K4wEnv -Name $HostPortName -Optional
        User     = Get-K4wEnv -Name $UserName -Optional
        Password = Get-K4wEnv -Name $PasswordName -Optional
    }
}

function Get-K4wProxySettings {
    # The proxy of this build as k4w/derive/step_env.py passed it: per scheme the server (https is
    # never derived from http), the NO_PROXY list, and the NAME=value pairs of the machine and
    # service environments (blank-separated: cluster.yml allows no blank in a proxy URL or a
    # NO_PROXY entry). Nothing here parses a URL.
    $enabled = (Get-K4wEnv -Name 'K4W_PROXY_ENABLED') -eq '1'
    $http = Get-K4wProxyServer -HostPortName 'K4W_HTTP_PROXY_HOSTPORT' -UserName 'K4W_HTTP_PROXY_USER' -PasswordName 'K4W_HTTP_PROXY_PASSWORD'
    $https = Get-K4wProxyServer -HostPortName 'K4W_HTTPS_PROXY_HOSTPORT' -UserName 'K4W_HTTPS_PROXY_USER' -PasswordName 'K4W_HTTPS_PROXY_PASSWORD'
    $noProxy = Get-K4wEnv -Name 'K4W_NO_PROXY' -Optional
    $environment = Get-K4wEnv -Name 'K4W_PROXY_ENV' -Optional
    if ($enabled -and -not $http.HostPort -and -not $https.HostPort) {
        throw 'K4W_PROXY_ENABLED=1 but neither K4W_HTTP_PROXY_HOSTPORT nor K4W_HTTPS_PROXY_HOSTPORT is set (templates/packer/windows.pkr.hcl.j2)'
    }
    if ($enabled -and -not $environment) {
        throw 'K4W_PROXY_ENABLED=1 but K4W_PROXY_ENV is not set (templates/packer/windows.pkr.hcl.j2)'
    }
    $none = [pscustomobject]@{ HostPort = ''; User = ''; Password = '' }
    [pscustomobject]@{
        Enabled     = $enabled
        Http        = if ($enabled) { $http } else { $none }
        Https       = if ($enabled) { $https } else { $none }
        NoProxy     = if ($enabled -and $noProxy) { @($noProxy -split ',' | ForEach-Object { $_.Trim() } | Where-Object { $_ }) } else { @() }
        Environment = if ($enabled) { @($environment -split ' ' | Where-Object { $_ }) } else { @() }
    }
}

function Get-K4wDirectProxySettings {
    # Get-K4wProxySettings' shape for "no proxy": what a box is left with (12-cleanup.ps1).
    $none = [pscustomobject]@{ HostPort = ''; User = ''; Password = '' }
    [pscustomobject]@{ Enabled = $false; Http = $none; Https = $none; NoProxy = @(); Environment = @() }
}

function Set-K4wProxy {
    # The machine-wide proxy: HTTP_PROXY / HTTPS_PROXY / NO_PROXY as machine environment variables
    # (Go programs - docker CLI, kubelet, kube-proxy, flanneld - and curl.exe read them; they carry
    # the full URLs, credentials included, because those tools need them), plus WinHTTP and the
    # machine-wide WinINet settings from host:port only. Windows environment names ignore case, so
    # k4w.derive.values gives one name per variable; a managed name the settings leave out is removed.
    param([Parameter(Mandatory = $true)]$Proxy)
    $values = [ordered]@{}
    foreach ($pair in $Proxy.Environment) {
        $name, $value = $pair.Split('=', 2)
        $values[$name] = $value
    }
    foreach ($name in 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY') {
        if (-not $values.Contains($name)) { $values[$name] = '' }
    }
    foreach ($name in $values.Keys) {
        Set-K4wMachineEnv -Name $name -Value $values[$name]
    }
    Set-K4wSystemProxy -HttpProxy $Proxy.Http.HostPort -HttpsProxy $Proxy.Https.HostPort -NoProxy $Proxy.NoProxy
}

function Set-K4wServiceProxy {
    # A container runtime service's environment (REG_MULTI_SZ "Environment" of its service key,
    # which the SCM passes to the program: dockerd.exe, containerd.exe): exactly the NAME=value
    # pairs of the proxy settings, or none. Full URLs: both are Go programs and accept
    # user:password@ in them. Returns $true when it changed; a running service sees the change
    # only after a restart.
    param(
        [Parameter(Mandatory = $true)][ValidateSet('docker', 'containerd')][string]$Service,
        [Parameter(Mandatory = $true)]$Proxy
    )
    $serviceKey = "HKLM:\SYSTEM\CurrentControlSet\Services\$Service"
    $environment = @($Proxy.Environment)
    if ($environment) {
        return (Set-K4wRegistryValue -Path $serviceKey -Name 'Environment' -Value ([string[]]$environment) -Type MultiString)
    }
    return (Remove-K4wRegistryValue -Path $serviceKey -Name 'Environment')
}

function ConvertTo-K4wWinHttpBypass {
    # NO_PROXY (comma list, CIDRs allowed) -> WinHTTP/WinINet bypass list: ';'-separated, host
    # wildcards instead of CIDRs (neither understands CIDR), '*.domain' for '.domain', and
    # '<local>' for plain host names.
    param([string[]]$NoProxy = @())
    $out = New-Object System.Collections.Generic.List[string]
    foreach ($entry in $NoProxy) {
        if ($entry -match '^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})/(\d{1,2})$') {
            $octets = @([int]$Matches[1], [int]$Matches[2], [int]$Matches[3], [int]$Matches[4])
            $prefix = [int]$Matches[5]
            if ($prefix -ge 32) { [void]$out.Add(($octets -join '.')); continue }
            # Widen to the enclosing octet boundary and list every value of the partial octet.
            $whole = [math]::Floor($prefix / 8)
            $bits = $prefix - 8 * $whole
            if ($whole -eq 0 -and $bits -eq 0) { [void]$out.Add('*'); continue }
            if ($bits -eq 0) {
                [void]$out.Add((($octets[0..($whole - 1)] + '*') -join '.'))
                continue
            }
            $span = [int][math]::Pow(2, 8 - $bits)
            $first = $octets[$whole] - ($octets[$whole] % $span)
            # @(...) around the if: an if that yields an empty array would otherwise give $null.
            $head = @(if ($whole -gt 0) { $octets[0..($whole - 1)] })
            for ($i = 0; $i -lt $span; $i++) {
                [void]$out.Add((($head + ($first + $i) + '*') -join '.'))
            }
        } elseif ($entry.StartsWith('.')) {
            [void]$out.Add("*$entry")
        } else {
            [void]$out.Add($entry)
        }
    }
    [void]$out.Add('<local>')
    return (@($out | Select-Object -Unique) -join ';')
}

function Set-K4wSystemProxy {
    # The machine proxy that Windows itself and .NET use: WinHTTP (services, Windows Update, CRL
    # fetches) and the machine-wide WinINet settings, which are what .NET's default proxy
    # (System.Net.WebRequest.DefaultWebProxy) reads for every script. Idempotent; no arguments
    # restores direct access.
    param(
        [AllowEmptyString()][string]$HttpProxy = '',
        [AllowEmptyString()][string]$HttpsProxy = '',
        [string[]]$NoProxy = @()
    )
    # Policy value: proxy settings per machine instead of per user, so services and every
    # account see the same proxy (Internet Explorer policy "Make proxy settings per-machine").
    $policy = 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\CurrentVersion\Internet Settings'
    $machine = 'HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Internet Settings'
    if (-not $HttpProxy -and -not $HttpsProxy) {
        Invoke-K4wExe -FilePath 'netsh.exe' -ArgumentList @('winhttp', 'reset', 'proxy')
        [void](Set-K4wRegistryValue -Path $machine -Name 'ProxyEnable' -Value 0 -Type DWord)
        Write-K4wStep 'system proxy: direct access'
        return
    }
    $servers = @()
    if ($HttpProxy) { $servers += "http=$HttpProxy" }
    if ($HttpsProxy) { $servers += "https=$HttpsProxy" }
    $server = $servers -join ';'
    $bypass = ConvertTo-K4wWinHttpBypass -NoProxy $NoProxy
    Invoke-K4wExe -FilePath 'netsh.exe' -ArgumentList @('winhttp', 'set', 'proxy', "proxy-server=$server", "bypass-list=$bypass")
    [void](Set-K4wRegistryValue -Path $policy -Name 'ProxySettingsPerUser' -Value 0 -Type DWord)
    [void](Set-K4wRegistryValue -Path $machine -Name 'ProxyEnable' -Value 1 -Type DWord)
    [void](Set-K4wRegistryValue -Path $machine -Name 'ProxyServer' -Value $server -Type String)
    [void](Set-K4wRegistryValue -Path $machine -Name 'ProxyOverride' -Value $bypass -Type String)
    Write-K4wStep "system proxy: $server (bypass: $bypass)"
}

# ------------------------------------------------------------------ components from the build CD

function Assert-K4wFileHash {
    # Stop the build when a file does not match its pinned checksum, before anything uses it.
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][ValidateSet('SHA256', 'SHA512')][string]$Algorithm,
        [Parameter(Mandatory = $true)][string]$Expected,
        [Parameter(Mandatory = $true)][string]$What
    )
    $actual = (Get-FileHash -LiteralPath $Path -Algorithm $Algorithm).Hash.ToLowerInvariant()
    if ($actual -ne $Expected.ToLowerInvariant()) {
        throw "$Algorithm mismatch for $What ($Path): expected $($Expected.ToLowerInvariant()), got $actual. It is not the file the profile pins; the build stops (run invoke fetch, then build again)."
    }
}

function Get-K4wComponentVariables {
    # The step variable names of one component ($script:K4wComponents).
    param([Parameter(Mandatory = $true)][string]$Component)
    if (-not $script:K4wComponents.Contains($Component)) {
        throw "unknown component '$Component': common.ps1 knows $($script:K4wComponents.Keys -join ', ')"
    }
    return $script:K4wComponents[$Component]
}

function Get-K4wComponentChecks {
    # The checksums of a component as pinned in the profile (a user's `invoke pin` included):
    # [pscustomobject]{Algorithm, Expected, Source}.
    param([Parameter(Mandatory = $true)][string]$Component)
    $variables = Get-K4wComponentVariables -Component $Component
    $checks = @()
    $sha256 = Get-K4wEnv -Name $variables.Sha256 -Optional
    $sha512 = Get-K4wEnv -Name $variables.Sha512 -Optional
    if ($sha256) { $checks += [pscustomobject]@{ Algorithm = 'SHA256'; Expected = $sha256; Source = "components.$Component.sha256" } }
    if ($sha512) { $checks += [pscustomobject]@{ Algorithm = 'SHA512'; Expected = $sha512; Source = "components.$Component.sha512" } }
    if (-not $checks) {
        $profilePath = Get-K4wEnv -Name 'K4W_PROFILE'
        throw "components.$Component has no checksum in $profilePath (sha256 or sha512 is required; invoke pin records one): k4w never installs an unverified file"
    }
    return $checks
}

function Find-K4wBuildMediaFile {
    # The path of a file at the root of the build CD (cd_files put it there). Drive letters are
    # not fixed: Setup's media, the build CD and the disk get theirs in whatever order Windows
    # finds them, so every ready CD-ROM drive is searched.
    param([Parameter(Mandatory = $true)][string]$Name)
    $drives = @([IO.DriveInfo]::GetDrives() | Where-Object { $_.DriveType -eq 'CDRom' -and $_.IsReady })
    foreach ($drive in $drives) {
        $candidate = Join-Path $drive.RootDirectory.FullName $Name
        if (Test-Path -LiteralPath $candidate -PathType Leaf) { return $candidate }
    }
    throw "$Name is on none of the CD drives ($(($drives | ForEach-Object { $_.Name }) -join ', ')): build-* stages it in OUT\http\<box>\components\ for the build CD; build with invoke build-windows, not packer build alone"
}

function Get-K4wVerifiedFile {
    # The path of a profile component on the build CD, after every checksum the profile pins for
    # it matched. build-* verified the file on the host before it made the CD; this second check
    # catches a stale or damaged CD and a profile edited after the fetch. Nothing is downloaded.
    param([Parameter(Mandatory = $true)][string]$Component)
    $name = Get-K4wEnv -Name (Get-K4wComponentVariables -Component $Component).File
    $checks = @(Get-K4wComponentChecks -Component $Component)
    $path = Find-K4wBuildMediaFile -Name $name
    foreach ($check in $checks) {
        Assert-K4wFileHash -Path $path -Algorithm $check.Algorithm -Expected $check.Expected -What $Component
    }
    Write-K4wStep "${Component} ${name}: $(($checks | ForEach-Object { $_.Algorithm }) -join ' and ') verified on the build CD"
    return $path
}

function Install-K4wFlanneld {
    # flanneld.exe (component flannel) into the node folder: the CNI step of every era installs it.
    param([Parameter(Mandatory = $true)][string]$NodeDir)
    $version = Get-K4wEnv -Name 'K4W_FLANNEL_VERSION'
    $flanneld = Get-K4wVerifiedFile -Component 'flannel'
    if (Copy-K4wFileIfChanged -Source $flanneld -Destination (Join-Path $NodeDir 'flanneld.exe')) {
        Write-K4wStep "flanneld $version installed in $NodeDir"
    } else {
        Write-K4wStep "flanneld $version already installed in $NodeDir"
    }
}

function Copy-K4wFileIfChanged {
    # Copy only when the content differs (idempotent installs; running binaries stay untouched).
    param([Parameter(Mandatory = $true)][string]$Source, [Parameter(Mandatory = $true)][string]$Destination)
    if (Test-Path -LiteralPath $Destination) {
        if ((Get-FileHash -LiteralPath $Source).Hash -eq (Get-FileHash -LiteralPath $Destination).Hash) { return $false }
    }
    Copy-Item -LiteralPath $Source -Destination $Destination -Force
    # A file copied off the build CD keeps the CD's read-only attribute; an installed binary
    # must stay replaceable by the next build step or an update.
    (Get-Item -LiteralPath $Destination).IsReadOnly = $false
    return $true
}

function Set-K4wFileContent {
    # Write UTF-8 without BOM (Docker and Python reject a BOM in JSON) only when it differs.
    param([Parameter(Mandatory = $true)][string]$Path, [Parameter(Mandatory = $true)][string]$Content)
    if ((Test-Path -LiteralPath $Path) -and ([IO.File]::ReadAllText($Path) -ceq $Content)) { return $false }
    New-Item -ItemType Directory -Path (Split-Path -Parent $Path) -Force | Out-Null
    [IO.File]::WriteAllText($Path, $Content, (New-Object System.Text.UTF8Encoding $false))
    return $true
}

# containerd's registry hosts folder (config_path; containerd v2.3.7 sets no default on Windows,
# plugins/cri/images/plugin.go): beside its config.toml in its DefaultConfigDir
# (defaults/defaults_windows.go), which Administrators alone may write, unlike ProgramData.
$script:K4wRegistryHostsDir = Join-Path $env:ProgramFiles 'containerd\certs.d'
# The drop-in folder config.toml imports (containerd's own DefaultConfigIncludePattern at v2.3.7).
$script:K4wContainerdDropIns = Join-Path $env:ProgramFiles 'containerd\conf.d'
$script:K4wRegistryAuthFile = Join-Path $script:K4wContainerdDropIns 'k4w-registry-auth.toml'
# The first line of every hosts.toml k4w writes (k4w/derive/registry.py MARKER): folders without it are not k4w's.
$script:K4wRegistryMarker = '# k4w: written from cluster.yml registry.mirrors'

function Protect-K4wPrivateFile {
    # Only LocalSystem and BUILTIN\Administrators (well-known SIDs, MS-DTYP 2.4.2.4: names are
    # localized) may open the file; inheritance off, inherited entries dropped. Windows has no 0600:
    # a file under Program Files inherits read access for BUILTIN\Users.
    param([Parameter(Mandatory = $true)][string]$Path)
    $acl = New-Object System.Security.AccessControl.FileSecurity
    [void]$acl.SetAccessRuleProtection($true, $false)
    foreach ($sid in @('S-1-5-18', 'S-1-5-32-544')) {
        $identity = New-Object System.Security.Principal.SecurityIdentifier $sid
        [void]$acl.AddAccessRule((New-Object System.Security.AccessControl.FileSystemAccessRule $identity, 'FullControl', 'Allow'))
    }
    Set-Acl -LiteralPath $Path -AclObject $acl
}

function Set-K4wContainerdRegistry {
    # The image mirrors of cluster.yml for containerd (k4w/derive/registry.py): -Files is K4W_REGISTRY_FILES,
    # blank-separated "<host folder>/<file>=<base64>" entries of the certs.d tree (hosts.toml and the
    # mirror's ca.crt beside it); -Auth is K4W_REGISTRY_AUTH, the base64 credentials drop-in the CRI
    # plugin imports. Either may be empty. k4w's folders that -Files no longer names are removed.
    # Returns $true when the credentials file changed: containerd reads it at start only, hosts.toml
    # at every pull (docs/hosts.md at v2.3.7).
    param([AllowEmptyString()][string]$Files, [AllowEmptyString()][string]$Auth)
    $wanted = @()
    foreach ($entry in @($Files -split ' ' | Where-Object { $_ })) {
        $path, $encoded = $entry -split '=', 2
        $folder, $name = $path -split '/', 2
        if ($folder -notmatch '^[A-Za-z0-9][A-Za-z0-9._-]*$' -or ($name -ne 'hosts.toml' -and $name -ne 'ca.crt')) {
            throw "K4W_REGISTRY_FILES holds '$path', which is not <registry host>/hosts.toml or ca.crt"
        }
        $text = [Text.Encoding]::UTF8.GetString([Convert]::FromBase64String($encoded))
        if (Set-K4wFileContent -Path (Join-Path $script:K4wRegistryHostsDir "$folder\$name") -Content $text) {
            Write-K4wStep "registry mirror file written: $folder\$name"
        }
        $wanted += $folder
    }
    if (Test-Path -LiteralPath $script:K4wRegistryHostsDir) {
        foreach ($dir in @(Get-ChildItem -LiteralPath $script:K4wRegistryHostsDir -Directory)) {
            $hostsFile = Join-Path $dir.FullName 'hosts.toml'
            if ($wanted -contains $dir.Name -or -not (Test-Path -LiteralPath $hostsFile)) { continue }
            if ((Get-Content -LiteralPath $hostsFile -TotalCount 1) -ceq $script:K4wRegistryMarker) {
                Remove-Item -LiteralPath $dir.FullName -Recurse -Force
                Write-K4wStep "removed the mirror of $($dir.Name) (no longer in cluster.yml)"
            }
        }
    }
    if (-not $Auth) {
        if (-not (Test-Path -LiteralPath $script:K4wRegistryAuthFile)) { return $false }
        Remove-Item -LiteralPath $script:K4wRegistryAuthFile -Force
        Write-K4wStep 'registry mirror credentials removed'
        return $true
    }
    # The ACL first, on an empty file, then the content: the credentials are never readable by others.
    if (-not (Test-Path -LiteralPath $script:K4wRegistryAuthFile)) {
        New-Item -ItemType Directory -Path $script:K4wContainerdDropIns -Force | Out-Null
        New-Item -ItemType File -Path $script:K4wRegistryAuthFile | Out-Null
    }
    Protect-K4wPrivateFile -Path $script:K4wRegistryAuthFile
    $text = [Text.Encoding]::UTF8.GetString([Convert]::FromBase64String($Auth))
    $changed = Set-K4wFileContent -Path $script:K4wRegistryAuthFile -Content $text
    if ($changed) { Write-K4wStep 'registry mirror credentials written (SYSTEM and Administrators only)' }
    return $changed
}

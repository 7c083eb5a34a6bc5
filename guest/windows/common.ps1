# common.ps1 - helpers shared by every k4w Windows guest script. Dot-sourced, never run alone:
#   . $env:K4W_COMMON                     (provisioners; templates/packer/windows.json.j2 uploads this file)
#   . (Join-Path $PSScriptRoot 'common.ps1')   (k4w-bootstrap.ps1, from the Setup media)
# Only functions and process-wide settings here; the caller's header sets ErrorActionPreference,
# StrictMode and the trap.

# Windows PowerShell 5.1 on 1803 offers only SSL3/TLS 1.0 by default; dl.k8s.io, GitHub and
# download.docker.com require TLS 1.2.
[Net.ServicePointManager]::SecurityProtocol = [Net.SecurityProtocolType]::Tls12
# The progress bar of Invoke-WebRequest slows large downloads down by an order of magnitude.
$ProgressPreference = 'SilentlyContinue'

# Where verified downloads are kept during the build; 12-cleanup.ps1 removes it.
$script:K4wDownloadDir = 'C:\Windows\Temp\k4w-downloads'

# The step variables of every component the box downloads, as k4w/derive_steps.py names them
# (PROFILE_VARIABLES; tests/render/test_step_variables.py checks both lists name the same
# variables). A value the profile leaves null is not set at all.
$script:K4wComponents = [ordered]@{
    kubernetes = @{ Version = 'K4W_KUBERNETES_VERSION'; Url = 'K4W_KUBERNETES_URL'; Sha256 = 'K4W_KUBERNETES_SHA256'; Sha256Url = 'K4W_KUBERNETES_SHA256_URL'; Sha512 = 'K4W_KUBERNETES_SHA512' }
    docker     = @{ Version = 'K4W_DOCKER_VERSION'; Url = 'K4W_DOCKER_URL'; Sha256 = 'K4W_DOCKER_SHA256'; Sha256Url = 'K4W_DOCKER_SHA256_URL'; Sha512 = 'K4W_DOCKER_SHA512' }
    cni        = @{ Version = 'K4W_CNI_VERSION'; Url = 'K4W_CNI_URL'; Sha256 = 'K4W_CNI_SHA256'; Sha256Url = 'K4W_CNI_SHA256_URL'; Sha512 = 'K4W_CNI_SHA512' }
    flannel    = @{ Version = 'K4W_FLANNEL_VERSION'; Url = 'K4W_FLANNEL_URL'; Sha256 = 'K4W_FLANNEL_SHA256'; Sha256Url = 'K4W_FLANNEL_SHA256_URL'; Sha512 = 'K4W_FLANNEL_SHA512' }
    containerd = @{ Version = 'K4W_CONTAINERD_VERSION'; Url = 'K4W_CONTAINERD_URL'; Sha256 = 'K4W_CONTAINERD_SHA256'; Sha256Url = 'K4W_CONTAINERD_SHA256_URL'; Sha512 = 'K4W_CONTAINERD_SHA512' }
    flannel_cni = @{ Version = 'K4W_FLANNEL_CNI_VERSION'; Url = 'K4W_FLANNEL_CNI_URL'; Sha256 = 'K4W_FLANNEL_CNI_SHA256'; Sha256Url = 'K4W_FLANNEL_CNI_SHA256_URL'; Sha512 = 'K4W_FLANNEL_CNI_SHA512' }
    nssm       = @{ Version = 'K4W_NSSM_VERSION'; Url = 'K4W_NSSM_URL'; Sha256 = 'K4W_NSSM_SHA256'; Sha256Url = 'K4W_NSSM_SHA256_URL'; Sha512 = 'K4W_NSSM_SHA512' }
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
    # templates/packer/windows.json.j2, which is a bug, not something to default around.
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
        throw "$Name is not set. Windows guest scripts take every value from the environment_vars of templates/packer/windows.json.j2; run them through 'invoke build-windows'."
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
    # One proxy server as k4w.derive split its URL: host:port (what WinHTTP, WinINet and
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
    # The proxy of this build as k4w/derive_steps.py passed it: per scheme the server (https is
    # never derived from http), the NO_PROXY list, and the NAME=value pairs of the machine and
    # service environments (blank-separated: cluster.yml allows no blank in a proxy URL or a
    # NO_PROXY entry). Nothing here parses a URL.
    $enabled = (Get-K4wEnv -Name 'K4W_PROXY_ENABLED') -eq '1'
    $http = Get-K4wProxyServer -HostPortName 'K4W_HTTP_PROXY_HOSTPORT' -UserName 'K4W_HTTP_PROXY_USER' -PasswordName 'K4W_HTTP_PROXY_PASSWORD'
    $https = Get-K4wProxyServer -HostPortName 'K4W_HTTPS_PROXY_HOSTPORT' -UserName 'K4W_HTTPS_PROXY_USER' -PasswordName 'K4W_HTTPS_PROXY_PASSWORD'
    $noProxy = Get-K4wEnv -Name 'K4W_NO_PROXY' -Optional
    $environment = Get-K4wEnv -Name 'K4W_PROXY_ENV' -Optional
    if ($enabled -and -not $http.HostPort -and -not $https.HostPort) {
        throw 'K4W_PROXY_ENABLED=1 but neither K4W_HTTP_PROXY_HOSTPORT nor K4W_HTTPS_PROXY_HOSTPORT is set (templates/packer/windows.json.j2)'
    }
    if ($enabled -and -not $environment) {
        throw 'K4W_PROXY_ENABLED=1 but K4W_PROXY_ENV is not set (templates/packer/windows.json.j2)'
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
    # k4w.derive gives one name per variable; a managed name the settings leave out is removed.
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
            if ($prefix -ge 32) { $out.Add(($octets -join '.')); continue }
            # Widen to the enclosing octet boundary and list every value of the partial octet.
            $whole = [math]::Floor($prefix / 8)
            $bits = $prefix - 8 * $whole
            if ($whole -eq 0 -and $bits -eq 0) { $out.Add('*'); continue }
            if ($bits -eq 0) {
                $out.Add((($octets[0..($whole - 1)] + '*') -join '.'))
                continue
            }
            $span = [int][math]::Pow(2, 8 - $bits)
            $first = $octets[$whole] - ($octets[$whole] % $span)
            # @(...) around the if: an if that yields an empty array would otherwise give $null.
            $head = @(if ($whole -gt 0) { $octets[0..($whole - 1)] })
            for ($i = 0; $i -lt $span; $i++) {
                $out.Add((($head + ($first + $i) + '*') -join '.'))
            }
        } elseif ($entry.StartsWith('.')) {
            $out.Add("*$entry")
        } else {
            $out.Add($entry)
        }
    }
    $out.Add('<local>')
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

function ConvertTo-K4wIPv4Number {
    param([Parameter(Mandatory = $true)][Net.IPAddress]$Address)
    $b = $Address.GetAddressBytes()
    return [double]$b[0] * 16777216 + [double]$b[1] * 65536 + [double]$b[2] * 256 + [double]$b[3]
}

function Test-K4wProxyBypass {
    # Does NO_PROXY exempt this host? Same rules as Go/curl: exact name, domain suffix
    # (with or without a leading dot) and IPv4 CIDR.
    param([Parameter(Mandatory = $true)][string]$HostName, [string[]]$NoProxy = @())
    foreach ($entry in $NoProxy) {
        if ($entry -eq '*' -or $HostName -eq $entry) { return $true }
        $suffix = $entry.TrimStart('*').TrimStart('.')
        if ($suffix -and $HostName.EndsWith(".$suffix", [StringComparison]::OrdinalIgnoreCase)) { return $true }
        if ($entry -match '^(\d{1,3}(\.\d{1,3}){3})/(\d{1,2})$') {
            $ip = $null
            if ([Net.IPAddress]::TryParse($HostName, [ref]$ip)) {
                # Compare the network parts as numbers: no bit operators, no sign overflow.
                $block = [math]::Pow(2, 32 - [int]$Matches[3])
                $hostNet = [math]::Floor((ConvertTo-K4wIPv4Number -Address $ip) / $block)
                $entryNet = [math]::Floor((ConvertTo-K4wIPv4Number -Address ([Net.IPAddress]::Parse($Matches[1]))) / $block)
                if ($hostNet -eq $entryNet) { return $true }
            }
        }
    }
    return $false
}

function Get-K4wWebRequestProxyArgs {
    # Invoke-WebRequest parameters for the proxy of this URL's scheme, credentials included
    # (WinINet cannot hold them, so the scripts pass them explicitly). Empty = go direct.
    param([Parameter(Mandatory = $true)][Uri]$Uri)
    $proxy = Get-K4wProxySettings
    if (-not $proxy.Enabled -or (Test-K4wProxyBypass -HostName $Uri.Host -NoProxy $proxy.NoProxy)) {
        return @{}
    }
    $server = if ($Uri.Scheme -eq 'https') { $proxy.Https } else { $proxy.Http }
    if (-not $server.HostPort) {
        # Only the other scheme goes through a proxy: go direct rather than reuse it.
        return @{}
    }
    # .NET Framework talks plain HTTP (CONNECT) to a proxy, whatever scheme its URL has.
    $result = @{ Proxy = [Uri]('http://{0}' -f $server.HostPort) }
    if ($server.User) {
        $secure = ConvertTo-SecureString -String ([Uri]::UnescapeDataString($server.Password)) -AsPlainText -Force
        $result.ProxyCredential = New-Object System.Management.Automation.PSCredential ([Uri]::UnescapeDataString($server.User), $secure)
    }
    return $result
}

function Invoke-K4wWebRequest {
    # The one place that talks HTTP. Retries transient failures with a growing pause (a retry
    # back-off, not a readiness wait). Returns the response; callers never use it on files
    # without checking a hash first (see Get-K4wVerifiedFile).
    param(
        [Parameter(Mandatory = $true)][string]$Url,
        [string]$OutFile,
        [int]$Attempts = 4
    )
    $params = Get-K4wWebRequestProxyArgs -Uri $Url
    if (-not $params.ContainsKey('Proxy')) {
        # Direct: Windows PowerShell 5.1 has no -NoProxy, and without this it would use the
        # system proxy, whose bypass list may differ from NO_PROXY. An empty WebProxy is direct.
        [Net.WebRequest]::DefaultWebProxy = New-Object System.Net.WebProxy
    }
    $params.Uri = $Url
    $params.UseBasicParsing = $true
    if ($OutFile) { $params.OutFile = $OutFile }
    for ($attempt = 1; ; $attempt++) {
        try {
            return Invoke-WebRequest @params
        } catch {
            if ($attempt -ge $Attempts) { throw "download of $Url failed after $Attempts attempts: $_" }
            Write-K4wStep "download of $Url failed ($_); retry $attempt of $($Attempts - 1)"
            Start-Sleep -Seconds (5 * $attempt)
        }
    }
}

# ------------------------------------------------------------------------- verified downloads

function Get-K4wPublishedChecksum {
    # The checksum file published beside a download (e.g. dl.k8s.io's .sha256). It is the
    # reference value, never executed, so it is the one fetch that is not itself hash-checked.
    param([Parameter(Mandatory = $true)][string]$Url, [int]$Length = 64)
    $content = (Invoke-K4wWebRequest -Url $Url).Content
    if ($content -is [byte[]]) { $content = [Text.Encoding]::ASCII.GetString($content) }
    $value = ([string]$content).Trim() -split '\s+' | Select-Object -First 1
    if ($value -notmatch "^[0-9a-fA-F]{$Length}$") {
        throw "$Url does not contain a checksum (got '$value')"
    }
    return $value.ToLowerInvariant()
}

function Assert-K4wFileHash {
    # Stop the build when a file does not match its published checksum; the file is deleted so
    # no later step can pick it up.
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][ValidateSet('SHA256', 'SHA512')][string]$Algorithm,
        [Parameter(Mandatory = $true)][string]$Expected,
        [Parameter(Mandatory = $true)][string]$What
    )
    $actual = (Get-FileHash -LiteralPath $Path -Algorithm $Algorithm).Hash.ToLowerInvariant()
    if ($actual -ne $Expected.ToLowerInvariant()) {
        Remove-Item -LiteralPath $Path -Force
        throw "$Algorithm mismatch for $What ($Path): expected $($Expected.ToLowerInvariant()), got $actual. The download is corrupt or not the pinned file; the build stops."
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
    # The checksums of a component as pinned in the profile: [pscustomobject]{Algorithm, Expected, Source}.
    param([Parameter(Mandatory = $true)][string]$Component)
    $variables = Get-K4wComponentVariables -Component $Component
    $checks = @()
    $sha256 = Get-K4wEnv -Name $variables.Sha256 -Optional
    $sha256Url = Get-K4wEnv -Name $variables.Sha256Url -Optional
    $sha512 = Get-K4wEnv -Name $variables.Sha512 -Optional
    if ($sha256) { $checks += [pscustomobject]@{ Algorithm = 'SHA256'; Expected = $sha256; Source = "components.$Component.sha256" } }
    if ($sha256Url) { $checks += [pscustomobject]@{ Algorithm = 'SHA256'; Expected = $null; Source = $sha256Url } }
    if ($sha512) { $checks += [pscustomobject]@{ Algorithm = 'SHA512'; Expected = $sha512; Source = "components.$Component.sha512" } }
    if (-not $checks) {
        $profilePath = Get-K4wEnv -Name 'K4W_PROFILE'
        throw "components.$Component has no checksum in $profilePath (sha256, sha256_url or sha512 is required): k4w never installs an unverified download"
    }
    return $checks
}

function Get-K4wVerifiedFile {
    # Download a profile component (its Url variable) and check every checksum the profile pins
    # for it before returning its path. A verified copy from an earlier run is reused.
    param([Parameter(Mandatory = $true)][string]$Component)
    $url = Get-K4wEnv -Name (Get-K4wComponentVariables -Component $Component).Url
    $checks = @(Get-K4wComponentChecks -Component $Component)
    $pinned = @($checks | Where-Object { $_.Expected })
    foreach ($check in @($checks | Where-Object { -not $_.Expected })) {
        try {
            $check.Expected = Get-K4wPublishedChecksum -Url $check.Source
        } catch {
            # A pinned checksum is already the stronger check; a published file that moved
            # must not stop the build then. Without one, nothing would be verified: stop.
            if (-not $pinned) { throw }
            Write-K4wStep "WARNING: $($check.Source) is unavailable ($_); relying on the pinned $(($pinned | ForEach-Object { $_.Algorithm }) -join ' and ')"
        }
    }
    $checks = @($checks | Where-Object { $_.Expected })
    New-Item -ItemType Directory -Path $script:K4wDownloadDir -Force | Out-Null
    $name = [IO.Path]::GetFileName(([Uri]$url).AbsolutePath)
    $target = Join-Path $script:K4wDownloadDir "$Component-$name"
    if (Test-Path -LiteralPath $target) {
        try {
            foreach ($check in $checks) {
                Assert-K4wFileHash -Path $target -Algorithm $check.Algorithm -Expected $check.Expected -What "$Component (cached)"
            }
            Write-K4wStep "${Component} ${name}: verified copy already present"
            return $target
        } catch {
            Write-K4wStep "${Component} ${name}: cached copy rejected, downloading again"
        }
    }
    $partial = "$target.partial"
    Write-K4wStep "downloading $Component from $url"
    Invoke-K4wWebRequest -Url $url -OutFile $partial | Out-Null
    foreach ($check in $checks) {
        Assert-K4wFileHash -Path $partial -Algorithm $check.Algorithm -Expected $check.Expected -What $Component
    }
    Move-Item -LiteralPath $partial -Destination $target -Force
    Write-K4wStep "${Component} ${name}: $(($checks | ForEach-Object { $_.Algorithm }) -join ' and ') verified"
    return $target
}

function Copy-K4wFileIfChanged {
    # Copy only when the content differs (idempotent installs; running binaries stay untouched).
    param([Parameter(Mandatory = $true)][string]$Source, [Parameter(Mandatory = $true)][string]$Destination)
    if (Test-Path -LiteralPath $Destination) {
        if ((Get-FileHash -LiteralPath $Source).Hash -eq (Get-FileHash -LiteralPath $Destination).Hash) { return $false }
    }
    Copy-Item -LiteralPath $Source -Destination $Destination -Force
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

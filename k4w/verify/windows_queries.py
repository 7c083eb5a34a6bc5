"""PowerShell queries the Windows box spec runs (bodies for k4w.verify.winps.query).

Each returns plain data (strings, numbers, lists) so the Python side compares values, not
localised console text. Enums are turned into strings ([string]$x.Status), since
ConvertTo-Json would otherwise emit their numbers. Kept here, not in the spec, so the unit
tests can parse every query with tree-sitter-powershell.
"""

from __future__ import annotations

from ..render.escape import ps

# Native programs write to stderr freely (flanneld prints its version there); under
# $ErrorActionPreference='Stop' Windows PowerShell 5.1 would turn that into a terminating
# error, so native calls run with 'Continue' and report their exit code instead.
# A program that is not there is reported as exit code -1 (also keeps $LASTEXITCODE, unset
# until a native program ran, away from Set-StrictMode).
_NATIVE = """function Invoke-Native([string]$Exe, [string[]]$Arguments) {
  if (-not (Get-Command -Name $Exe -ErrorAction SilentlyContinue)) {
    return [pscustomobject]@{ rc = -1; output = "not found: $Exe" }
  }
  $ErrorActionPreference = 'Continue'
  $lines = & $Exe @Arguments 2>&1 | ForEach-Object { [string]$_ }
  [pscustomobject]@{ rc = $LASTEXITCODE; output = ($lines -join "`n") }
}
"""

# Reads a property that may be absent without tripping Set-StrictMode.
_PROPERTY = """function Get-Prop($Object, [string]$Name) {
  if ($null -eq $Object) { return $null }
  $p = $Object.PSObject.Properties[$Name]
  if ($p) { $p.Value } else { $null }
}
"""


def _list(values) -> str:
    return "@(" + ", ".join(ps(v) for v in values) + ")"


def windows_feature(name: str) -> str:
    return f"[string](Get-WindowsFeature -Name {ps(name)}).InstallState"


def services(names: list[str]) -> str:
    """Service Control Manager view: status, start type, dependencies, binary path."""
    return _PROPERTY + f"""foreach ($name in {_list(names)}) {{
  $s = Get-Service -Name $name -ErrorAction SilentlyContinue
  if (-not $s) {{ [pscustomobject]@{{ name = $name; exists = $false }}; continue }}
  $reg = Get-ItemProperty -Path ('HKLM:\\SYSTEM\\CurrentControlSet\\Services\\' + $name)
  [pscustomobject]@{{
    name = $name; exists = $true
    status = [string]$s.Status; start_type = [string]$s.StartType
    depends_on = @($s.ServicesDependedOn | ForEach-Object {{ $_.Name }})
    image_path = [string](Get-Prop $reg 'ImagePath')
  }}
}}"""


def nssm_parameters(names: list[str]) -> str:
    """NSSM's settings as NSSM stores them (HKLM\\...\\Services\\<svc>\\Parameters)."""
    return _PROPERTY + f"""foreach ($name in {_list(names)}) {{
  $key = 'HKLM:\\SYSTEM\\CurrentControlSet\\Services\\' + $name + '\\Parameters'
  $p = Get-ItemProperty -Path $key -ErrorAction SilentlyContinue
  $exit = Get-Item -Path ($key + '\\AppExit') -ErrorAction SilentlyContinue
  [pscustomobject]@{{
    name = $name; exists = [bool]$p
    application = Get-Prop $p 'Application'
    parameters = Get-Prop $p 'AppParameters'
    stdout = Get-Prop $p 'AppStdout'; stderr = Get-Prop $p 'AppStderr'
    rotate_files = Get-Prop $p 'AppRotateFiles'; rotate_bytes = Get-Prop $p 'AppRotateBytes'
    no_console = Get-Prop $p 'AppNoConsole'
    exit_default = $(if ($exit) {{ $exit.GetValue('') }} else {{ $null }})
  }}
}}"""


def scheduled_task(name: str) -> str:
    return f"""$t = Get-ScheduledTask -TaskName {ps(name)} -ErrorAction SilentlyContinue
if (-not $t) {{ return [pscustomobject]@{{ exists = $false }} }}
[pscustomobject]@{{
  exists = $true; state = [string]$t.State
  triggers = @($t.Triggers | ForEach-Object {{ $_.CimClass.CimClassName }})
  actions = @($t.Actions | ForEach-Object {{ [string]$_.Execute + ' ' + [string]$_.Arguments }})
  user = [string]$t.Principal.UserId
}}"""


def native(exe: str, arguments: list[str]) -> str:
    return _NATIVE + f"Invoke-Native {ps(exe)} {_list(arguments)}"


def files_exist(paths: list[str]) -> str:
    return f"""$r = @{{}}
foreach ($path in {_list(paths)}) {{ $r[$path] = Test-Path -LiteralPath $path -PathType Leaf }}
$r"""


def file_text(path: str) -> str:
    return f"Get-Content -LiteralPath {ps(path)} -Raw"


def firewall_port_rules(ports: list[str]) -> str:
    """Inbound allow rules opening any of the given LocalPort values (e.g. '10250', '30000-32767')."""
    return f"""$wanted = {_list(ports)}
foreach ($f in (Get-NetFirewallPortFilter -PolicyStore ActiveStore)) {{
  $local = @($f.LocalPort | ForEach-Object {{ [string]$_ }})
  if (-not ($local | Where-Object {{ $wanted -contains $_ }})) {{ continue }}
  $rule = $f | Get-NetFirewallRule
  [pscustomobject]@{{
    name = [string]$rule.Name; enabled = [string]$rule.Enabled; direction = [string]$rule.Direction
    action = [string]$rule.Action; profile = [string]$rule.Profile
    protocol = [string]$f.Protocol; ports = $local
  }}
}}"""


def firewall_profiles() -> str:
    return """Get-NetFirewallProfile -PolicyStore ActiveStore | ForEach-Object {
  [pscustomobject]@{ name = [string]$_.Name; enabled = [string]$_.Enabled }
}"""


def defender_exclusions() -> str:
    return """if (-not (Get-Command -Name 'Get-MpPreference' -ErrorAction SilentlyContinue)) {
  return [pscustomobject]@{ installed = $false; paths = @(); processes = @() }
}
$p = Get-MpPreference
[pscustomobject]@{
  installed = $true
  paths = @($p.ExclusionPath | Where-Object { $_ }); processes = @($p.ExclusionProcess | Where-Object { $_ })
}"""


def machine_proxy() -> str:
    """WinHTTP proxy (netsh text: English on the Server ISO), machine env, Docker service env."""
    return _NATIVE + """$env_names = @('HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'no_proxy')
$machine = @{}
foreach ($n in $env_names) {
  $v = [Environment]::GetEnvironmentVariable($n, 'Machine')
  if ($v) { $machine[$n] = $v }
}
$docker = Get-ItemProperty -Path 'HKLM:\\SYSTEM\\CurrentControlSet\\Services\\docker' -ErrorAction SilentlyContinue
$docker_env = @()
if ($docker -and $docker.PSObject.Properties['Environment']) { $docker_env = @($docker.Environment) }
[pscustomobject]@{
  winhttp = (Invoke-Native 'netsh.exe' @('winhttp', 'show', 'proxy')).output
  machine = $machine
  docker_service = $docker_env
}"""


def patch_level() -> str:
    """The running Windows' build and update build revision (UBR), from the registry values
    11-box-release.ps1 records (HKLM:\\SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion)."""
    return """$v = Get-ItemProperty -LiteralPath 'HKLM:\\SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion'
[pscustomobject]@{ build = [int]$v.CurrentBuild; ubr = [int]$v.UBR }"""


def folder_acls(paths: list[str]) -> str:
    """Each path's DACL by SID (names are localised): protected from inheritance, owner, and every
    ACE with its rights, inheritance flags and whether it was inherited."""
    return f"""foreach ($path in {_list(paths)}) {{
  if (-not (Test-Path -LiteralPath $path)) {{ [pscustomobject]@{{ path = $path; exists = $false }}; continue }}
  $acl = Get-Acl -LiteralPath $path
  $sid = [System.Security.Principal.SecurityIdentifier]
  [pscustomobject]@{{
    path = $path; exists = $true
    protected = [bool]$acl.AreAccessRulesProtected
    owner = [string]$acl.GetOwner($sid).Value
    rules = @($acl.GetAccessRules($true, $true, $sid) | ForEach-Object {{
      [pscustomobject]@{{
        sid = [string]$_.IdentityReference.Value; type = [string]$_.AccessControlType
        rights = [string]$_.FileSystemRights; inheritance = [string]$_.InheritanceFlags
        propagation = [string]$_.PropagationFlags; inherited = [bool]$_.IsInherited
      }}
    }})
  }}
}}"""


def winrm_exposure() -> str:
    """What WinRM offers: its listeners, every enabled inbound allow rule for 5985/5986 with the
    interfaces and remote addresses it admits, whether the built-in Administrator (RID 500,
    by SID: its name is localised) is enabled, and the HTTPS listener's certificate (is it in the
    machine store with its private key, which names does it carry; guest/windows/setup/winrm-cert.ps1)."""
    return """$listeners = @(Get-ChildItem -Path 'WSMan:\\localhost\\Listener' | ForEach-Object {
  [string](@($_.Keys | Where-Object { $_ -like 'Transport=*' }) -join '')
})
$rules = foreach ($f in (Get-NetFirewallPortFilter -PolicyStore ActiveStore)) {
  $local = @($f.LocalPort | ForEach-Object { [string]$_ })
  if (-not ($local | Where-Object { @('5985', '5986') -contains $_ })) { continue }
  $rule = $f | Get-NetFirewallRule
  if ([string]$rule.Enabled -ne 'True' -or [string]$rule.Direction -ne 'Inbound' -or [string]$rule.Action -ne 'Allow') { continue }
  [pscustomobject]@{
    name = [string]$rule.Name; ports = $local
    interfaces = @(($rule | Get-NetFirewallInterfaceFilter).InterfaceAlias | ForEach-Object { [string]$_ })
    remote = @(($rule | Get-NetFirewallAddressFilter).RemoteAddress | ForEach-Object { [string]$_ })
  }
}
$admin = Get-LocalUser | Where-Object { $_.SID.Value -like 'S-1-5-21-*-500' }
$https = @(Get-ChildItem -Path 'WSMan:\\localhost\\Listener' | Where-Object { $_.Keys -contains 'Transport=HTTPS' })
$cert = $null
if ($https) {
  $thumb = [string](Get-Item -Path (Join-Path $https[0].PSPath 'CertificateThumbprint')).Value
  $found = Get-ChildItem -Path 'Cert:\\LocalMachine\\My' | Where-Object { $_.Thumbprint -eq $thumb.Trim() } | Select-Object -First 1
  $cert = [pscustomobject]@{
    thumbprint = $thumb.Trim(); in_store = [bool]$found; private_key = [bool]($found -and $found.HasPrivateKey)
    names = @(if ($found) { $found.DnsNameList | ForEach-Object { [string]$_.Unicode } })
    friendly_name = [string]$(if ($found) { $found.FriendlyName })
  }
}
# The one WinRM boot task (k4w-bootstrap.ps1): winrm-cert.ps1, then winrm-scope.ps1, in that order.
$bootActions = @(Get-ScheduledTask -TaskName 'k4w-winrm-scope' -ErrorAction SilentlyContinue |
  ForEach-Object { $_.Actions } | ForEach-Object { [string]$_.Arguments })
[pscustomobject]@{
  listeners = $listeners
  rules = @($rules)
  administrator_enabled = [bool]$admin.Enabled
  scope_task = [bool]($bootActions | Where-Object { $_ -like '*winrm-scope.ps1*' })
  cert_task = [bool]($bootActions.Count -ge 2 -and $bootActions[0] -like '*winrm-cert.ps1*')
  computer = $env:COMPUTERNAME
  cert = $cert
}"""

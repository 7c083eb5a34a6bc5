# node-lib.ps1 - what the Windows node scripts share, one copy. Dot-sourced, never run alone:
#   node/start-node.ps1 and node-containerd/start-node.ps1 (the box installs node/ and then
#   node-<recipe>/ into C:\k, templates/packer/windows.pkr.hcl.j2), which set $K, $Node,
#   $TimeoutSeconds and $PollSeconds before they call these;
#   node/protect-node-folders.ps1 (C:\k) and cluster/cluster-kubeconfig.ps1 (cluster-up uploads this
#   file beside it, k4w/cluster/steps.py install_component_kubeconfigs): Invoke-K4wIcacls.
# Only functions here; the caller's header sets ErrorActionPreference, StrictMode and the trap.

function Invoke-K4wIcacls {
    # Windows PowerShell 5.1 turns a native program's stderr into a terminating error under
    # ErrorActionPreference=Stop: run icacls with Continue and judge it by its exit code.
    param([string[]]$Arguments)
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $output = & "$env:SystemRoot\System32\icacls.exe" @Arguments 2>&1 | Out-String
        $code = $LASTEXITCODE
    } finally {
        $ErrorActionPreference = $previous
    }
    if ($code -ne 0) { throw "icacls $($Arguments -join ' ') failed ($code): $($output.Trim())" }
}

function Protect-K4wNodeFolders {
    # The node folders stay SYSTEM + Administrators only (protect-node-folders.ps1 says why), also
    # where kubeadm join or cluster-reset.ps1 recreated them since the last run.
    $global:LASTEXITCODE = 0
    & (Join-Path $K 'protect-node-folders.ps1')
    if ($LASTEXITCODE -ne 0) { throw 'protect-node-folders.ps1 failed' }
}

function Invoke-Native {
    # Windows PowerShell turns a native program's stderr into terminating errors under
    # ErrorActionPreference=Stop; run it with Continue and judge it by its exit code.
    param([string]$FilePath, [string[]]$ArgumentList)
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'
    try {
        $output = & $FilePath @ArgumentList 2>&1 | Out-String
        return [pscustomobject]@{ ExitCode = $LASTEXITCODE; Output = $output.Trim() }
    } finally {
        $ErrorActionPreference = $previous
    }
}

function Wait-Condition {
    # Polls Condition every $PollSeconds until it holds or the caller's $TimeoutSeconds pass.
    # OnPoll: run at each poll (start-node.ps1 restarts flanneld there); Hint: what to look at when
    # it times out.
    param([string]$What, [scriptblock]$Condition, [scriptblock]$OnPoll = $null, [string]$Hint = '')
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while (-not (& $Condition)) {
        if ($null -ne $OnPoll) { & $OnPoll }
        if ((Get-Date) -gt $deadline) {
            $message = "timed out after $TimeoutSeconds s waiting for $What"
            if ($Hint) { $message += ": $Hint" }
            throw $message
        }
        Start-Sleep -Seconds $PollSeconds
    }
    Write-Output "start-node: $What"
}

function Stop-NodeService {
    param([string]$Service)
    if ((Get-Service -Name $Service).Status -ne 'Stopped') {
        Stop-Service -Name $Service -Force
        Wait-Condition "$Service stopped" { (Get-Service -Name $Service).Status -eq 'Stopped' }
    }
}

function Test-NodeRegistered {
    if (-not (Test-Path -LiteralPath $Node.kubeconfig)) { return $false }
    return (Invoke-Native (Join-Path $K 'kubectl.exe') @('--kubeconfig', $Node.kubeconfig, 'get', 'node', $Node.name)).ExitCode -eq 0
}

function ConvertTo-CanonicalCidr {
    # Windows Firewall reports a subnet as 10.244.0.0/255.255.0.0 and one host as a bare address;
    # compare addresses in a single form, a.b.c.d/nn.
    param([string]$Address)
    $ip, $suffix = $Address.Split('/', 2)
    if ($null -eq $suffix) { return "$ip/32" }
    if ($suffix -match '^\d+$') { return "$ip/$suffix" }
    $bits = 0
    foreach ($byte in [System.Net.IPAddress]::Parse($suffix).GetAddressBytes()) {
        $bits += ([Convert]::ToString($byte, 2) -replace '0', '').Length
    }
    return "$ip/$bits"
}

function Set-FirewallRuleRemote {
    # Scope a rule the box created to the given remote addresses; a no-op when already so.
    param([string]$Name, [string[]]$Remote)
    $rule = Get-NetFirewallRule -Name $Name -ErrorAction SilentlyContinue
    if ($null -eq $rule) { throw "firewall rule $Name is missing: the box creates it (09-firewall.ps1); rebuild the box" }
    $wanted = @($Remote | ForEach-Object { ConvertTo-CanonicalCidr $_ } | Sort-Object) -join ','
    $current = @(($rule | Get-NetFirewallAddressFilter).RemoteAddress | ForEach-Object { ConvertTo-CanonicalCidr $_ } | Sort-Object) -join ','
    if ($current -ne $wanted) {
        Set-NetFirewallRule -Name $Name -RemoteAddress $Remote
        Write-Output "start-node: firewall rule $Name now allows only $($Remote -join ', ') (was $current)"
    }
}

# hostprocess-lib.ps1 - what the start scripts of the Windows node DaemonSets share. They travel in
# the ConfigMap k4w-windows-node-scripts (templates/manifests/windows-containerd/) and run in
# HostProcess containers: processes on the node itself, as SYSTEM, with the node's file system and
# network. Dot-sourced, never run alone; the caller's header sets ErrorActionPreference, StrictMode
# and the trap. Only functions here.

# How often a readiness condition is re-checked while waiting for it.
$K4wPollSeconds = 2

function Get-K4wSetting {
    # A value the DaemonSet gives its container as an environment variable (its env: list names each).
    param([Parameter(Mandatory = $true)][string]$Name)
    $value = [Environment]::GetEnvironmentVariable($Name)
    if (-not $value) { throw "environment variable $Name is not set: the DaemonSet's container sets it (templates/manifests/windows-containerd/)" }
    return $value
}

function Wait-K4wPodCondition {
    # Polls Condition until it holds; throws naming What (and where to look) when TimeoutSeconds pass.
    param(
        [Parameter(Mandatory = $true)][string]$What,
        [Parameter(Mandatory = $true)][scriptblock]$Condition,
        [Parameter(Mandatory = $true)][int]$TimeoutSeconds,
        [string]$Hint = ''
    )
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while (-not (& $Condition)) {
        if ((Get-Date) -gt $deadline) {
            throw ("timed out after $TimeoutSeconds s waiting for $What" + $(if ($Hint) { ": $Hint" } else { '' }))
        }
        Start-Sleep -Seconds $K4wPollSeconds
    }
    Write-Output "k4w: $What"
}

function Read-K4wArguments {
    # The binary's flags from the ConfigMap file (one per line, as rendered and checked against the
    # pinned version's flag table by invoke validate). ${NAME} stands for a value known only on the
    # node; Values maps each allowed NAME to it. An unknown ${NAME} is an error, never left as text.
    param(
        [Parameter(Mandatory = $true)][string]$Path,
        [Parameter(Mandatory = $true)][hashtable]$Values
    )
    $arguments = @()
    foreach ($line in Get-Content -LiteralPath $Path) {
        $line = $line.Trim()
        if (-not $line) { continue }
        foreach ($name in @([regex]::Matches($line, '\$\{([A-Z_]+)\}') | ForEach-Object { $_.Groups[1].Value })) {
            if (-not $Values.ContainsKey($name)) { throw "$Path uses `${$name}, which this script does not fill (it fills: $($Values.Keys -join ', '))" }
            $line = $line.Replace('${' + $name + '}', [string]$Values[$name])
        }
        $arguments += $line
    }
    return , $arguments
}

function Test-K4wAddressInSubnet {
    # Whether an IPv4 address lies in a.b.c.d/n.
    param([Parameter(Mandatory = $true)][string]$Address, [Parameter(Mandatory = $true)][string]$Cidr)
    $network, $bits = $Cidr.Split('/', 2)
    $toNumber = { param($ip) $b = [Net.IPAddress]::Parse($ip).GetAddressBytes(); [Array]::Reverse($b); [BitConverter]::ToUInt32($b, 0) }
    # The prefix's mask as a number: 2^32 - 2^(32-n), exact in a double. (A hex literal such as
    # 0xFFFFFFFF is Int32 -1 in Windows PowerShell 5.1, so no shift of one is used here.)
    $mask = [uint32]([math]::Pow(2, 32) - [math]::Pow(2, 32 - [int]$bits))
    return ((& $toNumber $Address) -band $mask) -eq ((& $toNumber $network) -band $mask)
}

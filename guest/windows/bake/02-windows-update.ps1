# 02-windows-update.ps1 - install the profile's pinned cumulative update (components.windows_update)
# from the build CD, so the box leaves the bake at a known patch level (docs/modern-stack.md "Patching"). The
# restart marker that follows in the profile lets Windows finish the install; 11-box-release.ps1
# then records the UBR reached and fails a box below K4W_WINDOWS_UPDATE_UBR.
#
# Why the .msu is expanded and its cabinets added one by one, servicing stack first: since 2021 a
# Server 2022 LCU .msu holds the servicing stack update (SSU-<build>.<n>-x64.cab) beside the LCU
# cabinet (Windows10.0-KB<n>-x64.cab) and WSUSSCAN.cab, and an LCU cabinet refuses an older
# servicing stack with CBS_E_NEW_SERVICING_STACK_REQUIRED (0x800f0823), as the public record of
# applying KB5122882 to a 20348.169 image shows (the source named in boxes/windows-2022.yml).
# Why DISM and not wusa.exe: Packer runs this over WinRM, and the Windows Update standalone
# installer does not run in a remote session.
#
# Build 26100 (Server 2025) and later are serviced with checkpoint cumulative updates: DISM takes
# the .msu itself (/Add-Package accepts .cab or .msu), applies its servicing stack and any checkpoint
# .msu it finds in the same folder, then the target ("Checkpoint cumulative updates and Microsoft
# Update Catalog usage", MicrosoftDocs/windows-itpro-docs windows/deployment/update/
# catalog-checkpoint-cumulative-updates.md, as stored at 3db8e0bb). An image already on the latest
# checkpoint (26100.1742 = KB5043080 and later; the windows-2025 ISO is 26100.32230) needs the target
# .msu alone. DISM reads every .msu in that folder, so the file is copied into an empty one first.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$kb = Get-K4wEnv -Name 'K4W_WINDOWS_UPDATE_VERSION'
$targetUbr = [int](Get-K4wEnv -Name 'K4W_WINDOWS_UPDATE_UBR')
$osBuild = Get-K4wEnv -Name 'K4W_OS_BUILD'
# DISM's exit code 3010: success, a restart is needed (the restart marker follows this step).
$dismOk = @(0, 3010)

$level = Get-K4wPatchLevel
if ($level.Ubr -ge $targetUbr) {
    Write-K4wStep "already at $($level.Build).$($level.Ubr), at or above $kb ($osBuild.$targetUbr): nothing to install"
    exit 0
}

# Installed but not yet completed: the LCU's package is "Package_for_RollupFix~...~<build>.<ubr>.<n>.<n>"
# in InstallPending state until the restart. Adding it again would only fail or repeat the work.
$pending = @(Get-WindowsPackage -Online | Where-Object {
        $_.PackageName -like "Package_for_RollupFix~*~$osBuild.$targetUbr.*" -and "$($_.PackageState)" -eq 'InstallPending'
    })
if ($pending.Count -gt 0) {
    Write-K4wStep "$kb is installed and waits for the restart that follows this step"
    exit 0
}

$msu = Get-K4wVerifiedFile -Component 'windows_update'
$work = Join-Path $env:SystemRoot 'Temp\k4w-windows-update'
if (Test-Path -LiteralPath $work) { Remove-Item -LiteralPath $work -Recurse -Force }
New-Item -ItemType Directory -Path $work | Out-Null
# The first build serviced with checkpoint cumulative updates (Windows 11 24H2 / Server 2025).
$checkpointServicingBuild = 26100
try {
    if ([int]$osBuild -ge $checkpointServicingBuild) {
        $alone = Join-Path $work (Split-Path -Leaf $msu)
        Copy-Item -LiteralPath $msu -Destination $alone
        Write-K4wStep "adding $kb as one .msu (dism /Add-Package; checkpoint servicing, 10-40 min)"
        Invoke-K4wExe -FilePath "$env:SystemRoot\System32\dism.exe" -ArgumentList @('/Online', '/Add-Package', "/PackagePath:$alone", '/NoRestart', '/Quiet') -AllowedExitCodes $dismOk
    } else {
        Write-K4wStep "expanding $kb ($msu)"
        # System32's expand.exe by full path: another expand on PATH (coreutils) would be found first.
        Invoke-K4wExe -FilePath "$env:SystemRoot\System32\expand.exe" -ArgumentList @('-F:*', $msu, $work)
        $cabinets = @(Get-ChildItem -LiteralPath $work -Filter '*.cab')
        $stack = @($cabinets | Where-Object { $_.Name -like 'SSU-*' } | Sort-Object Name)
        $rollup = @($cabinets | Where-Object { $_.Name -like "*$kb*" })
        if ($rollup.Count -ne 1) {
            throw "$msu holds $($rollup.Count) cabinets named after $kb (found: $(($cabinets | ForEach-Object { $_.Name }) -join ', ')): is components.windows_update.version the file's KB?"
        }
        foreach ($cabinet in @($stack) + @($rollup)) {
            Write-K4wStep "adding $($cabinet.Name) (dism /Add-Package; the LCU takes 10-40 min)"
            Invoke-K4wExe -FilePath "$env:SystemRoot\System32\dism.exe" -ArgumentList @('/Online', '/Add-Package', "/PackagePath:$($cabinet.FullName)", '/NoRestart', '/Quiet') -AllowedExitCodes $dismOk
        }
    }
} finally {
    Remove-Item -LiteralPath $work -Recurse -Force -ErrorAction SilentlyContinue
}
Write-K4wStep "$kb added; the restart that follows completes it (expected UBR $osBuild.$targetUbr)"

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so DISM's 3010
# "reboot required" would otherwise fail this step.
exit 0

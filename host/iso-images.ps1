<#
.SYNOPSIS
  Print, as JSON, the Windows images an installation ISO holds and the media facts that decide
  whether Setup needs a product key. Run by k4w (k4w/iso_images.py) before a Windows build, by
  `invoke iso-add` and by `invoke doctor`, on the Hyper-V host.

.DESCRIPTION
  Mounts the ISO read-only, lists sources\install.wim (or install.esd) with Get-WindowsImage, asks
  each index for its EditionId and InstallationType (only Get-WindowsImage -Index gives those),
  reads the volume label and sources\ei.cfg, and dismounts the ISO again, also on failure.
  Mount-DiskImage and the DISM cmdlets need an elevated shell.
  Output (one JSON object on stdout):
    {"label": "...", "image_file": "sources\\install.wim", "ei_cfg": "..." or null,
     "images": [{"index": 1, "name": "...", "description": "...", "edition_id": "...",
                 "installation_type": "...", "version": "..."}]}
  Exit codes: 0 listed, 1 failed (the message says why).
#>
[CmdletBinding()]
param(
    [Parameter(Mandatory = $true)][string]$IsoPath
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Host ('iso-images failed at line ' + $_.InvocationInfo.ScriptLineNumber + ': ' + $_.Exception.Message)
    exit 1
}

$iso = (Resolve-Path -LiteralPath $IsoPath).ProviderPath
$mounted = $false
$code = 0
try {
    $image = Get-DiskImage -ImagePath $iso
    # An ISO the user already mounted stays mounted afterwards; only our own mount is undone.
    if (-not $image.Attached) {
        $image = Mount-DiskImage -ImagePath $iso -Access ReadOnly -StorageType ISO -PassThru
        $mounted = $true
    }
    $volume = $image | Get-Volume
    if ($null -eq $volume -or -not $volume.DriveLetter) { throw "$iso is mounted but has no drive letter" }
    $root = "$($volume.DriveLetter):\"

    $imageFile = $null
    foreach ($candidate in @('sources\install.wim', 'sources\install.esd')) {
        if (Test-Path -LiteralPath (Join-Path $root $candidate)) { $imageFile = $candidate; break }
    }
    if ($null -eq $imageFile) { throw "$iso has neither sources\install.wim nor sources\install.esd: not Windows installation media" }
    $imagePath = Join-Path $root $imageFile

    $images = @()
    foreach ($entry in @(Get-WindowsImage -ImagePath $imagePath)) {
        $detail = Get-WindowsImage -ImagePath $imagePath -Index $entry.ImageIndex
        $images += [ordered]@{
            index             = [int]$entry.ImageIndex
            name              = [string]$entry.ImageName
            description       = [string]$entry.ImageDescription
            edition_id        = [string]$detail.EditionId
            installation_type = [string]$detail.InstallationType
            version           = [string]$detail.Version
        }
    }

    # sources\ei.cfg marks the media's channel ([Channel], [VL]); retail media often carry none.
    $eiPath = Join-Path $root 'sources\ei.cfg'
    $eiCfg = $null
    if (Test-Path -LiteralPath $eiPath) { $eiCfg = Get-Content -LiteralPath $eiPath -Raw }

    $listing = [ordered]@{
        label      = [string]$volume.FileSystemLabel
        image_file = $imageFile
        ei_cfg     = $eiCfg
        images     = $images
    }
    Write-Output (ConvertTo-Json -InputObject $listing -Depth 4 -Compress)
} catch {
    # Caught here rather than by the trap, so that the finally below still dismounts the ISO.
    Write-Host ('iso-images failed at line ' + $_.InvocationInfo.ScriptLineNumber + ': ' + $_.Exception.Message)
    $code = 1
} finally {
    if ($mounted) { Dismount-DiskImage -ImagePath $iso | Out-Null }
}
exit $code

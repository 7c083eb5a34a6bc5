<#
.SYNOPSIS
  Print, as JSON, the Windows images an installation ISO holds and the media facts that decide
  whether Setup needs a product key. Run by k4w (k4w/media/iso_images.py) before a Windows build, by
  `invoke iso-add` and by `invoke doctor`, on the Hyper-V host.

.DESCRIPTION
  Mounts the ISO read-only, lists sources\install.wim (or install.esd) with Get-WindowsImage, asks
  each index for its EditionId and InstallationType (only Get-WindowsImage -Index gives those),
  reads each image's NAME from the image file's own XML data (the name Setup's /IMAGE/NAME
  matches, which Get-WindowsImage hides behind the display name), reads the volume label and
  sources\ei.cfg, and dismounts the ISO again, also on failure.
  Mount-DiskImage and the DISM cmdlets need an elevated shell.
  Output (one JSON object on stdout):
    {"label": "...", "image_file": "sources\\install.wim", "ei_cfg": "..." or null,
     "wim_names_error": null or why the NAMEs could not be read,
     "images": [{"index": 1, "name": "...", "wim_name": "..." or null, "description": "...",
                 "edition_id": "...", "installation_type": "...", "version": "..."}]}
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

# Setup's /IMAGE/NAME is compared with the <NAME> in the image file's XML data. Get-WindowsImage
# shows the <DISPLAYNAME> instead when the media carry one: on the Windows Server 2022 evaluation
# media, image 3 is NAME "Windows Server 2022 SERVERDATACENTERCORE" but ImageName "Windows Server
# 2022 Datacenter Evaluation". The layout is wimlib's (ebiggers/wimlib v1.14.5, cd5e231c,
# include/wimlib/header.h and resource.h): the 208-byte header starts with "MSWIM\0\0\0"; at 0x48
# is the XML data's resource header (7-byte stored size, a flag byte with 0x04 = compressed, the
# 8-byte file offset at 0x50); the XML is UTF-16LE, <WIM> holding one <IMAGE INDEX="n"> with a
# <NAME> per image (src/xml.c). wimlib writes it uncompressed because other WIM software cannot
# read it compressed (src/xml.c, write_wim_xml_data), so a compressed one is reported, not read.
function Get-WimImageName {
    param([Parameter(Mandatory = $true)][string]$Path)
    $names = @{}
    $stream = [System.IO.File]::OpenRead($Path)
    try {
        $reader = New-Object System.IO.BinaryReader($stream)
        $header = $reader.ReadBytes(208)
        if ($header.Length -lt 208 -or [System.Text.Encoding]::ASCII.GetString($header, 0, 8) -ne "MSWIM`0`0`0") {
            throw "$Path has no WIM header"
        }
        [long]$size = 0
        for ($i = 6; $i -ge 0; $i--) { $size = $size * 256 + $header[0x48 + $i] }
        if ($header[0x4F] -band 0x04) { throw "$Path keeps its XML data compressed" }
        $stream.Position = [BitConverter]::ToInt64($header, 0x50)
        $text = [System.Text.Encoding]::Unicode.GetString($reader.ReadBytes([int]$size)).TrimStart([char]0xFEFF)
        foreach ($node in @(([xml]$text).WIM.IMAGE)) { $names[[int]$node.INDEX] = [string]$node.NAME }
    } finally {
        $stream.Dispose()
    }
    return $names
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

    # Without the NAMEs the preflight compares the display names and says why (wim_names_error).
    $wimNames = @{}
    $wimNamesError = $null
    try { $wimNames = Get-WimImageName -Path $imagePath } catch { $wimNamesError = $_.Exception.Message }

    $images = @()
    foreach ($entry in @(Get-WindowsImage -ImagePath $imagePath)) {
        $detail = Get-WindowsImage -ImagePath $imagePath -Index $entry.ImageIndex
        $images += [ordered]@{
            index             = [int]$entry.ImageIndex
            name              = [string]$entry.ImageName
            wim_name          = $wimNames[[int]$entry.ImageIndex]
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
        wim_names_error = $wimNamesError
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

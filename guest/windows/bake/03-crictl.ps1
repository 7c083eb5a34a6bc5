# 03-crictl.ps1 - crictl.exe, the CRI client, from the cri-tools release tarball (checksum-verified)
# into the node folder. kube-cleanup.ps1 removes containerd's pod sandboxes with it at every node
# start, through the CRI, so containerd runs each pod's network teardown before the HNS network goes.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$version = Get-K4wEnv -Name 'K4W_CRICTL_VERSION'
$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'
$crictl = Join-Path $nodeDir 'crictl.exe'
New-Item -ItemType Directory -Path $nodeDir -Force | Out-Null

function Test-CrictlVersion {
    if (-not (Test-Path -LiteralPath $crictl)) { return $false }
    # "crictl version v1.37.0": hack/release.sh links pkg/version.Version to the tag, printed by
    # github.com/urfave/cli/v2 v2.27.7 help.go ("%v version %v"), the version cri-tools v1.37.0 requires.
    return [bool]((& $crictl --version) -match " v$([regex]::Escape($version))$")
}

if (Test-CrictlVersion) {
    Write-K4wStep "crictl $version already installed in $nodeDir"
} else {
    $archive = Get-K4wVerifiedFile -Component 'crictl'
    $unpack = Join-Path $env:TEMP 'k4w-crictl'
    if (Test-Path -LiteralPath $unpack) { Remove-Item -LiteralPath $unpack -Recurse -Force }
    New-Item -ItemType Directory -Path $unpack | Out-Null
    # The archive holds crictl.exe alone, at its root (hack/release.sh: tar -C <bin dir> crictl.exe).
    Invoke-K4wExe -FilePath "$env:SystemRoot\System32\tar.exe" -ArgumentList @('-xzf', $archive, '-C', $unpack)
    $source = Join-Path $unpack 'crictl.exe'
    if (-not (Test-Path -LiteralPath $source)) { throw "crictl.exe is missing from $archive" }
    [void](Copy-K4wFileIfChanged -Source $source -Destination $crictl)
    Remove-Item -LiteralPath $unpack -Recurse -Force
    if (-not (Test-CrictlVersion)) { throw "$crictl does not report v$version after installing" }
    Write-K4wStep "crictl $version installed in $nodeDir"
}

exit 0

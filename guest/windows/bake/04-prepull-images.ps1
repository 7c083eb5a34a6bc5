# 04-prepull-images.ps1 - import (downloads.images: cache: from the build CD, below) or pull the Windows
# base images, the pause image and the HostProcess base image of the node DaemonSets into containerd's
# k8s.io namespace (the one the CRI plugin, and so
# the kubelet, sees), so a freshly joined node is Ready without first pulling gigabytes, and without
# the registry at all: its Flannel pod, which gives the node its pod network, runs from the
# HostProcess image (tests/bake/windows/test_windows_prepull.py holds every image a rendered
# manifest runs on a Windows node against this list). Images are content-addressed: containerd verifies every
# layer's digest while pulling. The pulls go through the CRI (crictl pull, as the kubelet pulls), so
# they take what containerd's config gives the CRI: the registry mirrors of cluster.yml (hosts.toml
# under config_path, with their CAs, and their credentials from the drop-in; k4w/derive/registry.py), the
# CRI's labels ("managed" on every image; "pinned" on the configured sandbox image, which the
# kubelet's image GC then spares: containerd v2.3.7 internal/cri/server/images/image_pull.go
# getLabels), and the build proxy in containerd's service environment (03-containerd.ps1).
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.pkr.hcl.j2)' }
. $env:K4W_COMMON

$ctr = Join-Path $env:ProgramFiles 'containerd\ctr.exe'
$crictl = Join-Path (Get-K4wEnv -Name 'K4W_NODE_DIR') 'crictl.exe'
$endpoint = Get-K4wEnv -Name 'K4W_RUNTIME_ENDPOINT'
$address = ConvertTo-K4wPipePath -Endpoint $endpoint
# The CRI plugin's namespace (containerd's internal/cri/constants, k8s.io).
$namespace = 'k8s.io'
$images = @(
    (Get-K4wEnv -Name 'K4W_IMAGE_SERVERCORE'),
    (Get-K4wEnv -Name 'K4W_IMAGE_NANOSERVER'),
    (Get-K4wEnv -Name 'K4W_PAUSE_IMAGE'),
    (Get-K4wEnv -Name 'K4W_IMAGE_HOSTPROCESS')
)

function Get-ImageNames {
    # `ctr images ls --quiet` prints one reference per line, nothing when there are none.
    $names = & $ctr --address $address --namespace $namespace images ls --quiet
    if ($LASTEXITCODE -ne 0) { throw "ctr images ls failed with exit code $LASTEXITCODE" }
    return @($names | ForEach-Object { "$_".Trim() } | Where-Object { $_ })
}

function ConvertTo-FullReference([string]$Image) {
    # The name ctr lists for what the CRI pulled. A reference with a tag and a digest is stored by
    # its digest alone (name@sha256:...: the CRI normalises it with ParseDockerRef,
    # github.com/distribution/reference normalize.go, "both tagged and digested, only return
    # digested"); one without a tag is :latest.
    if ($Image -match '^(.+?)(:[^/@]+)?(@sha256:[0-9a-f]{64})$') { return $Matches[1] + $Matches[3] }
    if ($Image -match ':[^/]+$') { return $Image }
    return "${Image}:latest"
}

function Get-ImageDigest([string]$Name) {
    # `ctr images ls` prints REF TYPE DIGEST SIZE PLATFORMS LABELS (containerd v2.3.7
    # cmd/ctr/commands/images/images.go); the filter name==NAME matches the one image of that name.
    $rows = & $ctr --address $address --namespace $namespace images ls "name==$Name"
    if ($LASTEXITCODE -ne 0) { throw "ctr images ls failed with exit code $LASTEXITCODE" }
    foreach ($row in @($rows | Select-Object -Skip 1)) {
        $fields = @("$row".Trim() -split '\s+')
        if ($fields.Count -ge 3 -and $fields[0] -eq $Name) { return $fields[2] }
    }
    return ''
}

# downloads.images: cache (K4W_IMAGE_IMPORTS, k4w/derive/step_env.py image_imports): each image as
# <name>@<pinned manifest digest>, its archive (one image's OCI layout, k4w/bake/image_cache.py) on the
# build CD as image-<first 48 hex digits of the digest>.tar. Imported unless containerd has the name at
# that digest already; then the name must point at exactly the pinned digest, else it is removed and the
# build stops. containerd checks every blob against its digest as it stores it (core/content/helpers.go
# WriteBlob), and the manifest digest names them all. No --platform: ctr then unpacks for this host's
# own platform, windows/amd64 with its build (containerd/platforms v1.0.0-rc.5 defaults_windows.go
# DefaultSpec), as the CRI's pull does. The CRI sees the import (its ImageCreate event handler labels the
# image managed, and the sandbox image pinned: internal/cri/server/images/image_pull.go UpdateImage), so
# the pull loop below finds each imported image present and pulls nothing.
$imports = @((Get-K4wEnv -Name 'K4W_IMAGE_IMPORTS' -Optional) -split '\s+' | Where-Object { $_ })
foreach ($entry in $imports) {
    if ($entry -notmatch '^(?<name>\S+)@(?<digest>sha256:[0-9a-f]{64})$') {
        throw "K4W_IMAGE_IMPORTS entry '$entry' is not <image name>@sha256:<64 hex digits>"
    }
    $name = $Matches['name']
    $digest = $Matches['digest']
    if ((Get-ImageDigest $name) -eq $digest) {
        Write-K4wStep "$name already present at $digest"
        continue
    }
    Write-K4wStep "importing $name from the build CD"
    $archive = Find-K4wBuildMediaFile -Name "image-$($digest.Substring(7, 48)).tar"
    Invoke-K4wExe -FilePath $ctr -ArgumentList @('--address', $address, '--namespace', $namespace, 'images', 'import', $archive)
    $got = Get-ImageDigest $name
    if ($got -ne $digest) {
        # Best effort, and its stderr is not an error here: with 'Stop', Windows PowerShell 5.1 turns a
        # redirected native stderr line into a terminating error, which would hide the message below.
        $ErrorActionPreference = 'Continue'
        & $ctr --address $address --namespace $namespace images rm $name 2>&1 | Out-Null
        $ErrorActionPreference = 'Stop'
        throw "image $name from the build CD is $(if ($got) { $got } else { 'missing' }) after the import, not the pinned ${digest}: removed"
    }
    Write-K4wStep "$name imported from the build CD at $digest"
}

foreach ($image in $images) {
    $reference = ConvertTo-FullReference $image
    if ((Get-ImageNames) -contains $reference) {
        Write-K4wStep "$reference already present"
        continue
    }
    # The platform of this host (windows/amd64 with its build): the Windows variant of each
    # multi-arch image that runs process-isolated here, unpacked for the CRI's snapshotter. crictl
    # bounds no pull in time unless asked (--pull-timeout 0: kubernetes-sigs/cri-tools v1.37.0
    # cmd/crictl/image.go); a multi-GB Server Core pull takes as long as the link needs.
    Write-K4wStep "pulling $reference"
    Invoke-K4wExe -FilePath $crictl -ArgumentList @('--runtime-endpoint', $endpoint, 'pull', $reference)
    if ((Get-ImageNames) -notcontains $reference) { throw "$reference is not listed after crictl pull" }
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

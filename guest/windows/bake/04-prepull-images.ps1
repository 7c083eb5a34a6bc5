# 04-prepull-images.ps1 - pull the Windows base images and the pause image into containerd's
# k8s.io namespace (the one the CRI plugin, and so the kubelet, sees), so a freshly joined node is
# Ready without first pulling gigabytes. Images are content-addressed: containerd verifies every
# layer's digest while pulling. The pulls go through the build proxy: containerd's service
# environment (03-containerd.ps1) and ctr's own, the machine environment (01-proxy.ps1).
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap { Write-Host "k4w ERROR: $_"; Write-Host $_.InvocationInfo.PositionMessage; Write-Host $_.ScriptStackTrace; exit 1 }
if (-not $env:K4W_COMMON) { throw 'K4W_COMMON is not set: this script runs inside the Packer build (templates/packer/windows.json.j2)' }
. $env:K4W_COMMON

$ctr = Join-Path $env:ProgramFiles 'containerd\ctr.exe'
$address = ConvertTo-K4wPipePath -Endpoint (Get-K4wEnv -Name 'K4W_RUNTIME_ENDPOINT')
# The CRI plugin's namespace (containerd's internal/cri/constants, k8s.io).
$namespace = 'k8s.io'
$images = @(
    (Get-K4wEnv -Name 'K4W_IMAGE_SERVERCORE'),
    (Get-K4wEnv -Name 'K4W_IMAGE_NANOSERVER'),
    (Get-K4wEnv -Name 'K4W_PAUSE_IMAGE')
)

function Get-ImageNames {
    # `ctr images ls --quiet` prints one reference per line, nothing when there are none.
    $names = & $ctr --address $address --namespace $namespace images ls --quiet
    if ($LASTEXITCODE -ne 0) { throw "ctr images ls failed with exit code $LASTEXITCODE" }
    return @($names | ForEach-Object { "$_".Trim() } | Where-Object { $_ })
}

function ConvertTo-FullReference([string]$Image) {
    # ctr lists fully qualified names: a reference without a tag is :latest.
    if ($Image -match ':[^/]+$' -or $Image -match '@sha256:') { return $Image }
    return "${Image}:latest"
}

foreach ($image in $images) {
    $reference = ConvertTo-FullReference $image
    if ((Get-ImageNames) -contains $reference) {
        Write-K4wStep "$reference already present"
        continue
    }
    # The platform of this host (windows/amd64 with its build): the Windows variant of each
    # multi-arch image that runs process-isolated here, unpacked for the CRI's snapshotter.
    Write-K4wStep "pulling $reference"
    # The labels a pull through the CRI sets (containerd v2.3.7 internal/cri/labels/labels.go,
    # images/image_pull.go getLabels): "managed" for every image, "pinned" for the sandbox image,
    # which the CRI's image store reports as pinned so the kubelet's image GC never removes it.
    $labels = @('--label', 'io.cri-containerd.image=managed')
    if ($image -eq (Get-K4wEnv -Name 'K4W_PAUSE_IMAGE')) { $labels += @('--label', 'io.cri-containerd.pinned=pinned') }
    Invoke-K4wExe -FilePath $ctr -ArgumentList (@('--address', $address, '--namespace', $namespace, 'images', 'pull') + $labels + @($reference))
    if ((Get-ImageNames) -notcontains $reference) { throw "$reference is not listed after ctr images pull" }
}

# Success is explicit: Packer's powershell wrapper ends with `exit $LastExitCode`, so a native
# tool's last exit code (DISM's 3010 "reboot required") would otherwise fail this step.
exit 0

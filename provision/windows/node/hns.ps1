# Host Networking Service (HNS) v1 access for the node scripts in C:\k, dot-sourced by
# kube-cleanup.ps1 and start-node.ps1. Windows Server 1803 has no HostNetworkingService
# PowerShell module (it arrived with 2019), so we call vmcompute.dll's HNSCall directly,
# as Microsoft's hns.psm1 of that era did.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest

if (-not ('K4w.Hns' -as [type])) {
    Add-Type -Namespace 'K4w' -Name 'Hns' -MemberDefinition @'
[DllImport("vmcompute.dll")]
public static extern void HNSCall(
    [MarshalAs(UnmanagedType.LPWStr)] string method,
    [MarshalAs(UnmanagedType.LPWStr)] string path,
    [MarshalAs(UnmanagedType.LPWStr)] string request,
    [MarshalAs(UnmanagedType.LPWStr)] out string response);
'@
}

function Get-Field($Object, [string]$Name) {
    if ($Object.PSObject.Properties[$Name]) { return $Object.$Name }
    return $null
}

# GET returns the objects under Path; DELETE removes one. A failed call throws with HNS's message.
function Invoke-Hns([ValidateSet('GET', 'DELETE')][string]$Method, [string]$Path) {
    $response = ''
    [K4w.Hns]::HNSCall($Method, $Path, '', [ref]$response)
    $result = $response | ConvertFrom-Json
    if (-not (Get-Field $result 'Success')) {
        $message = if ($result.PSObject.Properties['Error']) { $result.Error } else { $response }
        throw "HNS $Method $Path failed: $message"
    }
    if ($result.PSObject.Properties['Output']) { return @($result.Output) }
    return @()
}

function Test-HnsNetwork([string]$Name) {
    return @(Invoke-Hns GET '/networks' | Where-Object { (Get-Field $_ 'Name') -eq $Name }).Count -gt 0
}

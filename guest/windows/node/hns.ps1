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

# The placeholder L2Bridge network that pins the node's HNS vSwitch to the cluster NIC (see
# Add-HnsExternalNetwork). Its name is what Microsoft's scripts use; kube-cleanup.ps1 refuses it.
$HnsExternalNetworkName = 'External'

function Get-Field($Object, [string]$Name) {
    if ($Object.PSObject.Properties[$Name]) { return $Object.$Name }
    return $null
}

# GET returns the objects under Path; POST sends Request (JSON) and returns what HNS created;
# DELETE removes one. A failed call throws with HNS's message.
function Invoke-Hns([ValidateSet('GET', 'POST', 'DELETE')][string]$Method, [string]$Path, [string]$Request = '') {
    $response = ''
    [void][K4w.Hns]::HNSCall($Method, $Path, $Request, [ref]$response)
    $result = $response | ConvertFrom-Json
    if (-not (Get-Field $result 'Success')) {
        $message = if ($result.PSObject.Properties['Error']) { $result.Error } else { $response }
        throw "HNS $Method $Path failed: $message"
    }
    if ($result.PSObject.Properties['Output']) { return @($result.Output) }
    return @()
}

function Get-HnsNetworkByName([string]$Name) {
    return @(Invoke-Hns GET '/networks' | Where-Object { (Get-Field $_ 'Name') -eq $Name })
}

function Test-HnsNetwork([string]$Name) {
    return @(Get-HnsNetworkByName $Name).Count -gt 0
}

function Add-HnsExternalNetwork {
    <#
      Make sure the placeholder L2Bridge network 'External' exists; returns $true when it had to be
      created (the adapter's IP configuration then moves to a new 'vEthernet (<adapter>)' vNIC, a
      short blip), $false when it was already there.

      Why: Flannel's Windows host-gw backend (v0.11, backend/hostgw/hostgw_windows.go) creates its
      L2Bridge network (cbr0) without NetworkAdapterName (--iface only picks the advertised IP), so
      HNS may put it on the management NIC. An L2Bridge network that already sits on the cluster NIC
      makes HNS reuse that vSwitch for cbr0, and because it stays when kube-cleanup.ps1 deletes
      cbr0, later starts do not rebuild the vSwitch (no blip). Same approach and values as
      Microsoft SDN's flannel-era scripts (Kubernetes/flannel/l2bridge/start.ps1 and helper.psm1
      CreateExternalNetwork): 192.168.255.0/30 with gateway 192.168.255.1 is a dummy subnet no pod
      or node uses; nothing is ever attached to this network.

      AdapterName is needed only to create it; once External exists the adapter is not looked at
      (its address then lives on the vEthernet vNIC).
    #>
    param([string]$AdapterName = '')
    if (Test-HnsNetwork $HnsExternalNetworkName) { return $false }
    if (-not $AdapterName) { throw "HNS network '$HnsExternalNetworkName' does not exist and no adapter was given to create it on" }
    $request = [ordered]@{
        Name               = $HnsExternalNetworkName
        Type               = 'L2Bridge'
        NetworkAdapterName = $AdapterName
        Subnets            = @(@{ AddressPrefix = '192.168.255.0/30'; GatewayAddress = '192.168.255.1' })
    } | ConvertTo-Json -Depth 4 -Compress
    [void](Invoke-Hns POST '/networks' $request)
    return $true
}

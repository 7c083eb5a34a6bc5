<#
.SYNOPSIS
  Make the node's Kubernetes folders writable and readable by SYSTEM and Administrators only.

.DESCRIPTION
  A folder made under C:\ inherits C:\'s ACL, which on Windows Server lets every authenticated
  user create and modify files below it (Authenticated Users: (OI)(CI)(IO)(M)). Under these
  folders live binaries that run as LocalSystem (C:\k\kubelet.exe, the CNI plugins, NSSM), the
  kubelet's key and kubeconfig (C:\etc\kubernetes, C:\var\lib\kubelet\pki), the component
  kubeconfigs cluster-up writes (C:\etc\kubernetes), pod secret volumes (C:\var\lib\kubelet\pods),
  pod logs (C:\var\log) and the file Flannel's CNI plugin trusts for the pod subnet
  (C:\run\flannel\subnet.env).
  Each folder in $Folders gets inheritance removed and exactly two inheritable ACEs, SYSTEM and
  Administrators with full control, and Administrators as owner. The top folders are protected,
  not only the leaves, so what kubeadm join, the kubelet and flanneld create later (and what
  cluster-reset.ps1 deletes and kubeadm recreates) inherits the same ACL from the start.
  Existing children whose ACEs are all inherited pick the new ACL up by propagation; a child with
  explicit ACEs of its own is reset to inherit only.
  Run by the bake (09-node-acls.ps1) and by start-node.ps1 on every start; idempotent: a folder
  that already has exactly that ACL is not touched.

  One folder below them is opened, and only for what pods need: the kubelet's pod folder
  (C:\var\lib\kubelet\pods, its --root-dir and DefaultKubeletPodsDirName "pods",
  kubernetes/kubernetes pkg/kubelet/config/defaults.go). The kubelet writes every pod's volumes
  there: the projected service-account token, ConfigMaps, Secrets, emptyDirs. A process-isolated
  container opens its mounts with its own process identity, and the host checks that identity
  against the folder's ACL (Microsoft, "Persistent storage in containers", Bind mounts:
  Permissions). On Nano Server images that identity is ContainerUser, whose token carries the
  well-known SID S-1-5-93-2-2 (moby/moby@4be37b15 pkg/idtools/idtools_windows.go
  ContainerUserSidString; `whoami /user` in such a container, moby/buildkit#5791). The folder gets
  one explicit ACE besides what it inherits from C:\var: that SID allowed modify, inherit-only, so
  the pod folders the kubelet creates below it (and emptyDirs in them) are usable by ContainerUser
  and the pods folder itself stays writable by SYSTEM and Administrators alone.
  Not a broad group (Authenticated Users, Users, Everyone), though Microsoft's page suggests one:
  every account on the node is in those (LocalService, NetworkService, NT SERVICE\*, a
  non-administrator HostProcess pod), and the folder holds every pod's Secrets, tokens and
  ConfigMaps, among them the scripts DaemonSets run as SYSTEM; a container's read-only mount does
  not make the host file read-only. Only a container process carries S-1-5-93-2-2, and it reaches
  only the volumes mounted into it.
  ContainerAdministrator (S-1-5-93-2-1, Server Core's default) needs no grant: its token holds
  BUILTIN\Administrators, which the inherited ACL already allows.
  Secret, ConfigMap and projected volumes stay read-only in the container: the kubelet mounts them
  read-only. The rest of C:\var\lib\kubelet (pki: the kubelet's key; config.yaml;
  kubeadm-flags.env) keeps SYSTEM and Administrators only. The parents need no grant: traversing
  them is the "Bypass traverse checking" right, which Windows gives Everyone.

  containerd's own root and state (C:\ProgramData\containerd\root, \state) are not listed:
  containerd creates them with the same two ACEs, protected ("D:P(A;OICI;GA;;;BA)(A;OICI;GA;;;SY)",
  containerd/containerd@v2.3.7 pkg/sys/filesys_windows.go SddlAdministratorsLocalSystem, used by
  cmd/containerd/server/server.go MkdirAllWithACL; commit c2be8504). The box spec checks them.
#>
[CmdletBinding()]
param(
    # C:\opt is not listed: nothing on these nodes uses it (the CNI plugins live in C:\k\cni,
    # boxes/windows-*.yml runtime.cni_bin_dir).
    [string[]]$Folders = @('C:\k', 'C:\k4w', 'C:\etc', 'C:\var', 'C:\run'),
    # Opened to containers (see .DESCRIPTION); each lies below one of $Folders.
    [string[]]$ContainerFolders = @('C:\var\lib\kubelet\pods')
)
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest
trap {
    Write-Output ("protect-node-folders.ps1 failed: " + $_.Exception.Message)
    Write-Output $_.InvocationInfo.PositionMessage
    exit 1
}

# Well-known SIDs (Microsoft, "Well-known SIDs"): LocalSystem and the BUILTIN\Administrators group.
# By SID, not by name: names are localised ("Administratoren" on a German image).
$SystemSid = 'S-1-5-18'
$AdministratorsSid = 'S-1-5-32-544'
# User Manager\ContainerUser, Nano Server's process identity in a container (moby/moby@4be37b15
# pkg/idtools/idtools_windows.go ContainerUserSidString). Never a group every host account is in.
$ContainerSid = 'S-1-5-93-2-2'
# Invoke-K4wIcacls: node-lib.ps1, beside this script in C:\k.
. (Join-Path $PSScriptRoot 'node-lib.ps1')

function Test-AdminOnlyAcl {
    # True when the folder's DACL is protected and holds exactly SYSTEM and Administrators, each
    # allowed full control, inherited by subfolders and files, and Administrators own it.
    param([string]$Path)
    $acl = Get-Acl -LiteralPath $Path
    if (-not $acl.AreAccessRulesProtected) { return $false }
    $owner = $acl.GetOwner([System.Security.Principal.SecurityIdentifier]).Value
    if ($owner -ne $AdministratorsSid -and $owner -ne $SystemSid) { return $false }
    $rules = @($acl.GetAccessRules($true, $true, [System.Security.Principal.SecurityIdentifier]))
    $wantedInheritance = [System.Security.AccessControl.InheritanceFlags]'ContainerInherit, ObjectInherit'
    $good = @($rules | Where-Object {
        $_.AccessControlType -eq 'Allow' -and
        $_.FileSystemRights -eq [System.Security.AccessControl.FileSystemRights]::FullControl -and
        $_.InheritanceFlags -eq $wantedInheritance -and
        $_.PropagationFlags -eq [System.Security.AccessControl.PropagationFlags]::None -and
        @($SystemSid, $AdministratorsSid) -contains $_.IdentityReference.Value
    })
    $sids = @($good | ForEach-Object { $_.IdentityReference.Value } | Sort-Object -Unique)
    return ($rules.Count -eq 2 -and $good.Count -eq 2 -and $sids.Count -eq 2)
}

function Test-ContainerAcl {
    # True when the folder inherits its parent's ACL and has exactly one explicit ACE: ContainerUser
    # allowed modify, inherited by subfolders and files and not applying to the folder itself.
    param([string]$Path)
    $acl = Get-Acl -LiteralPath $Path
    if ($acl.AreAccessRulesProtected) { return $false }
    $explicit = @($acl.GetAccessRules($true, $false, [System.Security.Principal.SecurityIdentifier]))
    if ($explicit.Count -ne 1) { return $false }
    $rule = $explicit[0]
    $modify = [System.Security.AccessControl.FileSystemRights]'Modify, Synchronize'
    return ($rule.IdentityReference.Value -eq $ContainerSid -and $rule.AccessControlType -eq 'Allow' -and
        $rule.FileSystemRights -eq $modify -and
        $rule.InheritanceFlags -eq [System.Security.AccessControl.InheritanceFlags]'ContainerInherit, ObjectInherit' -and
        $rule.PropagationFlags -eq [System.Security.AccessControl.PropagationFlags]::InheritOnly)
}

foreach ($folder in $Folders) {
    if (-not (Test-Path -LiteralPath $folder)) {
        # Created now, so everything a later step or kubeadm puts there inherits the ACL.
        New-Item -ItemType Directory -Path $folder | Out-Null
    }
    if (Test-AdminOnlyAcl -Path $folder) { continue }
    # /inheritance:r drops the ACEs inherited from C:\; /grant:r replaces any explicit ACE of these
    # two SIDs; (OI)(CI)F = full control inherited by files and subfolders (icacls syntax, "*SID").
    Invoke-K4wIcacls @($folder, '/inheritance:r', '/grant:r', "*${SystemSid}:(OI)(CI)F", "*${AdministratorsSid}:(OI)(CI)F", '/Q')
    Invoke-K4wIcacls @($folder, '/setowner', "*$AdministratorsSid", '/Q')
    # Any other explicit ACE on the folder itself (an old grant to Users, CREATOR OWNER) goes.
    $acl = Get-Acl -LiteralPath $folder
    $others = @($acl.GetAccessRules($true, $false, [System.Security.Principal.SecurityIdentifier]) |
        Where-Object { @($SystemSid, $AdministratorsSid) -notcontains $_.IdentityReference.Value } |
        ForEach-Object { $_.IdentityReference.Value } | Sort-Object -Unique)
    foreach ($sid in $others) { Invoke-K4wIcacls @($folder, '/remove:g', "*$sid", '/Q') }
    # Children with explicit ACEs of their own would keep them: make every child inherit only.
    # /C goes on past a file in use; /T recurses; /L acts on links, not on what they point to.
    if (@(Get-ChildItem -LiteralPath $folder -Force).Count -gt 0) {
        Invoke-K4wIcacls @((Join-Path $folder '*'), '/reset', '/T', '/C', '/L', '/Q')
    }
    if (-not (Test-AdminOnlyAcl -Path $folder)) { throw "$folder still does not have the SYSTEM + Administrators only ACL" }
    Write-Output "protect-node-folders: $folder is now SYSTEM and Administrators only"
}

# After the loop above: resetting a locked folder's children (/reset /T) drops this grant, and
# this puts it back.
foreach ($folder in $ContainerFolders) {
    if (-not @($Folders | Where-Object { $folder.StartsWith($_ + '\', [StringComparison]::OrdinalIgnoreCase) })) {
        throw "$folder is not below one of the locked folders ($($Folders -join ', '))"
    }
    if (-not (Test-Path -LiteralPath $folder)) {
        New-Item -ItemType Directory -Path $folder | Out-Null
    }
    if (Test-ContainerAcl -Path $folder) { continue }
    # /inheritance:e: inherit SYSTEM and Administrators from the locked folder above; any other
    # explicit ACE goes (an older k4w's grant to Authenticated Users among them); (OI)(CI)(IO)M =
    # modify, inherited by the pod folders the kubelet creates later and by those that exist already
    # (icacls propagates an inheritable grant to them), not by the pods folder itself.
    Invoke-K4wIcacls @($folder, '/inheritance:e', '/Q')
    $acl = Get-Acl -LiteralPath $folder
    $others = @($acl.GetAccessRules($true, $false, [System.Security.Principal.SecurityIdentifier]) |
        ForEach-Object { $_.IdentityReference.Value } | Sort-Object -Unique)
    foreach ($sid in $others) { Invoke-K4wIcacls @($folder, '/remove:g', "*$sid", '/Q') }
    Invoke-K4wIcacls @($folder, '/grant:r', "*${ContainerSid}:(OI)(CI)(IO)M", '/Q')
    if (-not (Test-ContainerAcl -Path $folder)) { throw "$folder still does not have its container ACL" }
    Write-Output "protect-node-folders: containers may now use their volumes in $folder"
}
exit 0

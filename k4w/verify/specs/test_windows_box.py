"""Spec of a Windows node box (testinfra winrm backend over pywinrm), driven by boxes/<box>.yml.

Every query is PowerShell returning JSON (k4w.verify.windows_queries); the assertions compare
data with the profile, cluster.yml and the box <-> cluster-up contract of docs/internals.md.
"""

from __future__ import annotations

import json

import pytest

from k4w.derive import step_env as derive_steps
from k4w.model import profiles
from k4w.model import patch_level as levels
from k4w.verify import expect, reachability, winps, windows_queries as q
from k4w.infra.redact import redact

pytestmark = [pytest.mark.infra, pytest.mark.k4w_spec("windows")]

K_DIR = "C:\\k"  # docs/internals.md: the box installs guest/windows/node/ into C:\k (K4W_NODE_DIR)
RELEASE_FILE = K_DIR + "\\box-release.json"
# Every service a box of some era registers; the profile's node_services says which this box has
# (k4w.derive.step_env.node_services: all three on the seed era, the kubelet alone on the containerd
# era, whose flanneld and kube-proxy are HostProcess DaemonSets).
NODE_SERVICES = derive_steps.SEED_NODE_SERVICES
# Start order <runtime> -> kubelet -> flanneld -> kube-proxy (docs/internals.md; not the 2018 order of
# ptylenda/kubernetes-for-windows@71843a4 README.md: kernelspace kube-proxy needs the HNS network
# flanneld creates, see start-node.ps1 step 4): each service depends on the one before it.


def pytest_generate_tests(metafunc):
    # One test per service the box's profile registers (without --k4w-box the collection hook stops
    # the run with a usage error first).
    if "name" in metafunc.fixturenames and metafunc.definition.get_closest_marker("k4w_node_services"):
        box = metafunc.config.getoption("--k4w-box")
        wanted = derive_steps.node_services(profiles.load(box)) if box else list(NODE_SERVICES)
        metafunc.parametrize("name", wanted)
    if "imported_image" in metafunc.fixturenames:
        expect.parametrize_imported_images(metafunc)
NODE_START_TASK = "k4w-node-start"
NODE_START_LOG = K_DIR + "\\logs\\start-node.log"  # where the boot task appends start-node.ps1's output
# node-lib.ps1: start-node.ps1 and protect-node-folders.ps1 dot-source it from beside them.
NODE_SCRIPTS = (K_DIR + "\\start-node.ps1", K_DIR + "\\kube-cleanup.ps1", K_DIR + "\\node-lib.ps1")
# Inbound ports: kubelet API (kubelet --port default 10250), Flannel vxlan (UDP 4789, VXLAN_PORT in
# k4w/derive/values.py), NodePort range for TCP and UDP services
# (kube-apiserver --service-node-port-range default 30000-32767).
FIREWALL_PORTS = (("TCP", "10250"), ("UDP", "4789"), ("TCP", "30000-32767"), ("UDP", "30000-32767"))
FIREWALL_PROFILES = ("Domain", "Private", "Public")
# Defender exclusions (ptylenda/kubernetes-for-windows@71843a4 README.md, "Additional notes about
# windows performance"): the runtime's data root, C:\k and the node processes, so real-time scanning
# does not stall image extraction. Processes by full path (10-defender-exclusions.ps1 says why): a
# name alone would exclude a program of that name in any folder, a pod's too.
DEFENDER_PATHS = {"docker": ("C:\\ProgramData\\docker", K_DIR),
                  "containerd": ("C:\\ProgramData\\containerd", "C:\\Program Files\\containerd", K_DIR)}
_NODE_PROCESSES = tuple(f"{K_DIR}\\{name}" for name in ("kubelet.exe", "kube-proxy.exe", "flanneld.exe"))
DEFENDER_PROCESSES = {"docker": ("C:\\Program Files\\docker\\dockerd.exe", *_NODE_PROCESSES),
                      "containerd": ("C:\\Program Files\\containerd\\containerd.exe",
                                     "C:\\Program Files\\containerd\\containerd-shim-runhcs-v1.exe", *_NODE_PROCESSES)}
# Kubernetes node binaries in C:\k (kubernetes-node-windows-amd64.tar.gz) and how each reports
# its version; all must be kubernetes.version.
KUBE_BINARIES = {
    "kubelet.exe": ["--version"],
    "kube-proxy.exe": ["--version"],
    "kubeadm.exe": ["version", "-o", "short"],
    "kubectl.exe": ["version", "--client"],
}
# Windows CNI plugins Flannel host-gw/vxlan use (cni-plugins-windows-amd64), in C:\k\cni.
CNI_PLUGINS = ("win-bridge.exe", "win-overlay.exe", "flannel.exe", "host-local.exe")


@pytest.fixture(scope="module", autouse=True)
def _reachable(host):
    # Module scope + autouse: runs before every other fixture of this host, once per host.
    reachability.require(host)


def _fail(message: str):
    pytest.fail(redact(message), pytrace=False)


def _query(host, body: str, what: str):
    return winps.query(host, body, what)


@pytest.fixture(scope="module")
def services(host) -> dict:
    rows = winps.as_list(_query(host, q.services(["docker", *NODE_SERVICES]), "services"))
    return {row["name"]: row for row in rows}


@pytest.fixture(scope="module")
def nssm(host) -> dict:
    rows = winps.as_list(_query(host, q.nssm_parameters(list(NODE_SERVICES)), "NSSM parameters"))
    return {row["name"]: row for row in rows}


# ------------------------------------------------------------------ containers and docker


@pytest.mark.k4w_check("containers_feature")
def test_containers_feature_installed(host):
    state = _query(host, q.windows_feature("Containers"), "Containers feature")
    assert state == "Installed", f"Windows feature Containers is {state}"


@pytest.mark.k4w_check("docker")
def test_docker_service_running_and_automatic(services):
    docker = services["docker"]
    assert docker["exists"], "service docker is not installed"
    assert docker["start_type"] == "Automatic", f"docker starts {docker['start_type']}, not Automatic"
    assert docker["status"] == "Running", f"docker is {docker['status']}"


@pytest.mark.k4w_check("docker")
def test_docker_version_is_the_profiles(host, profile):
    pinned = expect.component(profile, "docker")
    res = _query(host, q.native("docker.exe", ["version", "--format", "{{.Server.Version}}"]), "docker version")
    assert res["rc"] == 0, f"docker version failed: {res['output']}"
    assert expect.version_matches(res["output"].strip(), pinned), f"docker server is {res['output'].strip()}, profile pins {pinned}"


@pytest.mark.k4w_check("base_images")
def test_base_and_pause_images_present(host, profile):
    wanted = sorted({*profile.data.images.values(), profile.data.kubernetes.pause_image})
    res = _query(host, q.native("docker.exe", ["images", "--format", "{{.Repository}}:{{.Tag}}"]), "docker images")
    assert res["rc"] == 0, f"docker images failed: {res['output']}"
    present = set(res["output"].split())
    missing = [image for image in wanted if image not in present]
    assert not missing, f"images missing from the box: {missing} (present: {sorted(present)})"


# containerd's ctr, where 03-containerd.ps1 installs it (Join-Path $env:ProgramFiles 'containerd').
CTR = "C:\\Program Files\\containerd\\ctr.exe"


@pytest.mark.k4w_check("imported_images", component="containerd")
def test_an_imported_image_is_in_containerd_at_its_pinned_digest(host, imported_image):
    name, digest = imported_image.rsplit("@", 1)
    # `ctr images ls` prints REF TYPE DIGEST ... (containerd v2.3.7 cmd/ctr/commands/images/images.go); ctr's
    # default address is containerd's default pipe, the profile's runtime.endpoint (defaults_windows.go).
    res = _query(host, q.native(CTR, ["--namespace", "k8s.io", "images", "ls", f"name=={name}"]), "ctr images ls")
    assert res["rc"] == 0, f"ctr images ls failed: {res['output']}"
    found = [line.split()[2] for line in res["output"].splitlines()[1:] if line.split() and line.split()[0] == name]
    assert found == [digest], f"{name}: containerd has {found or 'no such image'}, not the pinned {digest}"


# ------------------------------------------------------------------ node services (NSSM) and start-up


@pytest.mark.k4w_check("node_services")
@pytest.mark.k4w_node_services
def test_node_service_installed_after_its_dependency(services, profile, name):
    svc = services[name]
    wanted = derive_steps.node_service_dependencies(profile)[name]
    assert svc["exists"], f"service {name} is not installed"
    assert svc["depends_on"] == [wanted], f"{name} depends on {svc['depends_on']}, expected [{wanted}]"


@pytest.mark.k4w_check("node_services")
def test_no_service_the_profile_does_not_register(services, profile):
    # The containerd era runs flanneld and kube-proxy as HostProcess DaemonSets: a service of theirs
    # would run a second copy beside the pod (or a stale one the bake left).
    extra = [n for n in NODE_SERVICES if n not in derive_steps.node_services(profile) and services[n]["exists"]]
    assert not extra, f"services {extra} are installed, but box {profile.name} registers only {derive_steps.node_services(profile)}"


@pytest.mark.k4w_check("node_services")
@pytest.mark.k4w_node_services
def test_node_service_is_nssm_and_restarts_on_failure(host, services, nssm, name):
    assert services[name]["exists"], f"service {name} is not installed"
    assert services[name]["image_path"].lower().rstrip('"').endswith("nssm.exe"), f"{name} is not an NSSM service: {services[name]['image_path']}"
    params = nssm[name]
    # NSSM restarts the program when it exits (AppExit Default Restart; NSSM's own default when
    # unset, nssm.cc/usage "Exit actions"); the SCM restarts NSSM itself if it dies.
    action = params["exit_default"] or "Restart"
    assert action == "Restart", f"{name}: NSSM exit action is {action}, not Restart"
    scm = _query(host, q.native("sc.exe", ["qfailure", name]), f"sc.exe qfailure {name}")
    assert scm["rc"] == 0 and "RESTART" in scm["output"], f"{name}: no SCM restart-on-failure action: {scm['output']}"


@pytest.mark.k4w_check("node_services")
@pytest.mark.k4w_node_services
def test_node_service_gets_no_console(nssm, name):
    # NSSM 2.24 services can stay Paused on Windows 10 1703+ / Server 1803 unless AppNoConsole=1
    # (nssm.cc/download, "Windows 10 Creators Update").
    assert nssm[name]["no_console"] == 1, f"{name}: NSSM AppNoConsole is {nssm[name]['no_console']!r}, not 1 (service may hang Paused)"


@pytest.mark.k4w_check("node_services")
@pytest.mark.k4w_node_services
def test_node_service_logs_rotate_into_k_logs(nssm, name):
    params = nssm[name]
    for stream in ("stdout", "stderr"):
        path = params[stream] or ""
        assert path.lower().startswith(K_DIR.lower() + "\\logs\\"), f"{name} {stream} goes to {path!r}, not C:\\k\\logs"
    assert params["rotate_files"] == 1, f"{name}: NSSM log rotation (AppRotateFiles) is off"


@pytest.mark.k4w_check("node_services")
@pytest.mark.k4w_node_services
def test_node_service_starts_manually(services, name):
    # start-node.ps1 (the k4w-node-start task) starts them in order, each after a real check;
    # an Automatic start would race the HNS cleanup and the dependency order.
    svc = services[name]
    assert svc["exists"], f"service {name} is not installed"
    assert svc["start_type"] == "Manual", f"{name} starts {svc['start_type']}, not Manual"


@pytest.mark.k4w_check("node_services_unjoined", stage="box")
@pytest.mark.k4w_node_services
def test_node_service_idle_until_joined(services, nssm, name):
    svc = services[name]
    assert svc["exists"], f"service {name} is not installed"
    assert svc["status"] == "Stopped", f"{name} is {svc['status']} on a box that is not joined"
    assert not nssm[name]["parameters"], f"{name} has AppParameters {nssm[name]['parameters']!r}; start-node.ps1 sets them"


@pytest.mark.k4w_check("node_services_joined", stage="node")
@pytest.mark.k4w_node_services
def test_node_service_running_when_joined(services, name):
    assert services[name]["status"] == "Running", f"{name} is {services[name]['status']} on a joined node"


@pytest.mark.k4w_check("node_start_task")
def test_node_start_task_runs_start_node_at_boot(host):
    task = _query(host, q.scheduled_task(NODE_START_TASK), "scheduled task")
    assert task["exists"], f"scheduled task {NODE_START_TASK} is missing"
    assert "MSFT_TaskBootTrigger" in task["triggers"], f"{NODE_START_TASK} has no at-startup trigger: {task['triggers']}"
    assert any("start-node.ps1" in action.lower() for action in task["actions"]), f"{NODE_START_TASK} does not run start-node.ps1: {task['actions']}"
    assert any(NODE_START_LOG.lower() in action.lower() for action in task["actions"]), \
        f"{NODE_START_TASK} does not keep start-node.ps1's output in {NODE_START_LOG}: {task['actions']}"
    assert task["user"] == "SYSTEM", f"{NODE_START_TASK} runs as {task['user']!r}, not SYSTEM (it configures services)"


@pytest.mark.k4w_check("node_start_task")
def test_node_scripts_present(host):
    found = _query(host, q.files_exist(list(NODE_SCRIPTS)), "node scripts")
    missing = [path for path in NODE_SCRIPTS if not found.get(path)]
    assert not missing, f"missing in C:\\k: {missing}"


# ------------------------------------------------------------------ kubernetes and flannel binaries


def _version_of(host, exe: str, arguments: list[str]) -> str:
    res = _query(host, q.native(exe, arguments), f"{exe} {' '.join(arguments)}")
    assert res["rc"] == 0, f"{exe} {' '.join(arguments)} failed (exit {res['rc']}): {res['output']}"
    return res["output"]


@pytest.mark.k4w_check("kubernetes_binaries")
@pytest.mark.parametrize("binary", sorted(KUBE_BINARIES))
def test_kubernetes_binary_version(host, profile, binary):
    wanted = profile.kubernetes_version
    output = _version_of(host, f"{K_DIR}\\{binary}", KUBE_BINARIES[binary])
    assert expect.reported_version(output) == wanted, f"{binary} reports {output.strip()!r}, profile pins {wanted}"


@pytest.mark.k4w_check("cni_flannel")
def test_flanneld_version(host, profile):
    wanted = expect.component(profile, "flannel").lstrip("v")
    output = _version_of(host, f"{K_DIR}\\flanneld.exe", ["--version"])
    assert expect.reported_version(output) == wanted, f"flanneld reports {output.strip()!r}, profile pins {wanted}"


@pytest.mark.k4w_check("crictl", component="crictl")
def test_crictl_version(host, profile):
    # kube-cleanup.ps1 removes containerd's pod sandboxes with it at every node start.
    wanted = expect.component(profile, "crictl")
    output = _version_of(host, f"{K_DIR}\\crictl.exe", ["--version"])
    assert expect.reported_version(output) == wanted, f"crictl reports {output.strip()!r}, profile pins {wanted}"


@pytest.mark.k4w_check("cni_flannel")
def test_cni_plugins_present(host):
    paths = [f"{K_DIR}\\cni\\{plugin}" for plugin in CNI_PLUGINS]
    found = _query(host, q.files_exist(paths), "CNI plugins")
    missing = [path for path in paths if not found.get(path)]
    assert not missing, f"CNI plugins missing: {missing}"


# ------------------------------------------------------------------ firewall and Defender


@pytest.mark.k4w_check("firewall")
@pytest.mark.parametrize("protocol,port", FIREWALL_PORTS, ids=[f"{p}-{n}" for p, n in FIREWALL_PORTS])
def test_firewall_allows_port(host, protocol, port):
    rules = winps.as_list(_query(host, q.firewall_port_rules([port]), f"firewall rules for {port}"))
    usable = [
        r for r in rules
        if r["enabled"] == "True" and r["direction"] == "Inbound" and r["action"] == "Allow"
        and r["protocol"].upper() == protocol and port in r["ports"]
        # The cluster NIC sits on an Internal switch: an unidentified network, so Public.
        and (r["profile"] == "Any" or "Public" in r["profile"])
    ]
    assert usable, f"no enabled inbound allow rule for {protocol} {port} on the Public profile (found: {rules})"


@pytest.mark.k4w_check("firewall")
def test_firewall_profiles_enabled(host):
    profiles = {p["name"]: p["enabled"] for p in winps.as_list(_query(host, q.firewall_profiles(), "firewall profiles"))}
    off = {name: profiles.get(name) for name in FIREWALL_PROFILES if profiles.get(name) != "True"}
    assert not off, f"firewall profiles not enabled (open ports, do not disable the firewall): {off}"


@pytest.mark.k4w_check("defender")
def test_defender_exclusions(host, profile):
    runtime = profile.container_runtime
    found = _query(host, q.defender_exclusions(), "Defender preferences")
    if not found["installed"]:
        # 10-defender-exclusions.ps1: no Defender means no real-time scan to exclude from; that
        # is the property this check is about, and it holds.
        return
    paths = {p.lower().rstrip("\\") for p in winps.as_list(found["paths"])}
    processes = {p.lower() for p in winps.as_list(found["processes"])}
    missing = [p for p in DEFENDER_PATHS[runtime] if p.lower() not in paths] + [p for p in DEFENDER_PROCESSES[runtime] if p.lower() not in processes]
    assert not missing, f"Defender exclusions missing: {missing}"
    bare = sorted(p for p in processes if "\\" not in p)
    assert not bare, f"Defender excludes processes by name alone, in any folder (a pod's too): {bare}"


# ------------------------------------------------------------------ WinRM and accounts

# WinRM over HTTPS only (Microsoft, "Installation and configuration for Windows Remote Management":
# HTTP 5985, HTTPS 5986), on the management NIC, from the host (guest/windows/node/winrm-scope.ps1).
WINRM_HTTPS_PORT = "5986"
WINRM_REMOTE_SCOPES = {"DefaultGateway", "LocalSubnet"}


@pytest.fixture(scope="module")
def winrm(host) -> dict:
    return _query(host, q.winrm_exposure(), "WinRM listeners, firewall rules and the Administrator account")


@pytest.mark.k4w_check("winrm")
def test_winrm_listens_over_https_only(winrm):
    listeners = sorted(winps.as_list(winrm["listeners"]))
    assert listeners == ["Transport=HTTPS"], f"WinRM listeners: {listeners} (HTTP 5985 must be gone; Vagrant and Packer use 5986)"


@pytest.mark.k4w_check("winrm")
def test_winrm_is_open_on_the_management_nic_to_the_host_only(winrm):
    rules = winps.as_list(winrm["rules"])
    assert rules, "no enabled inbound rule admits WinRM on 5986: Vagrant cannot reach the box"
    wide = []
    for rule in rules:
        ports = winps.as_list(rule["ports"])
        interfaces = winps.as_list(rule["interfaces"])
        remote = winps.as_list(rule["remote"])
        if ports != [WINRM_HTTPS_PORT]:
            wide.append(f"{rule['name']} opens {ports}")
        if not interfaces or "Any" in interfaces:
            wide.append(f"{rule['name']} applies to every interface (the cluster NIC and HNS's vEthernet adapters too)")
        if len(remote) != 1 or remote[0] not in WINRM_REMOTE_SCOPES:
            wide.append(f"{rule['name']} admits remote addresses {remote}, not only the host side")
    assert not wide, "WinRM is reachable from more than the Hyper-V host: " + "; ".join(wide)
    assert winrm["scope_task"], "boot task k4w-winrm-scope does not run winrm-scope.ps1: a VM whose NIC got another name stays unreachable"


@pytest.mark.k4w_check("winrm")
def test_winrm_https_uses_a_key_made_on_this_machine(winrm):
    # The build's shutdown_command deletes the bake's key, so a listener that works here runs on a key this
    # VM made at its first boot (boot task k4w-winrm-scope runs guest/windows/setup/winrm-cert.ps1 first), not one every
    # VM from the box would share while Vagrant and Packer skip peer verification.
    assert winrm["cert_task"], ("boot task k4w-winrm-scope does not run winrm-cert.ps1 first: "
                                "a VM from the box never makes its own WinRM key")
    cert = winrm["cert"]
    assert cert, "no HTTPS listener, so no WinRM certificate"
    assert cert["in_store"] and cert["private_key"], (
        f"the HTTPS listener is bound to {cert['thumbprint']}, which is not in LocalMachine\\My with its private key: "
        "the box's key was deleted at the end of the build and no new one was made")
    names = [str(n).upper() for n in winps.as_list(cert["names"])]
    assert str(winrm["computer"]).upper() in names, (
        f"the WinRM certificate names {names}, not this computer ({winrm['computer']}): it was not made here")


@pytest.mark.k4w_check("accounts")
def test_builtin_administrator_is_disabled(winrm):
    assert not winrm["administrator_enabled"], "the built-in Administrator (RID 500) is enabled: the build's shutdown_command disables it"


# ------------------------------------------------------------------ folder ACLs

# Well-known SIDs (Microsoft, "Well-known SIDs"): LocalSystem and BUILTIN\Administrators.
SYSTEM_SID, ADMINISTRATORS_SID = "S-1-5-18", "S-1-5-32-544"
ADMIN_ONLY = {SYSTEM_SID, ADMINISTRATORS_SID}
# The folders guest/windows/node/protect-node-folders.ps1 protects: node binaries run as
# LocalSystem, the kubelet's key and kubeconfigs, pod secret volumes and logs, Flannel's subnet.env.
PROTECTED_FOLDERS = ("C:\\k", "C:\\k4w", "C:\\etc", "C:\\var", "C:\\run")
# Below them, what must inherit that ACL and nothing else: what kubeadm join and the kubelet write,
# and a binary the kubelet service runs as LocalSystem.
ADMIN_ONLY_CHILDREN = ("C:\\etc\\kubernetes", "C:\\var\\lib\\kubelet", K_DIR + "\\kubelet.exe", K_DIR + "\\nssm.exe")
# Opened to pods, and only to them (protect-node-folders.ps1 says why): the kubelet's pod folder
# inherits C:\var's ACL and adds ContainerUser modify, inherit-only, so a process-isolated container
# (ContainerUser on Nano Server) can use its token, ConfigMap, Secret and emptyDir volumes.
CONTAINER_FOLDERS = ("C:\\var\\lib\\kubelet\\pods",)
# User Manager\ContainerUser (moby/moby@4be37b15 pkg/idtools/idtools_windows.go ContainerUserSidString).
CONTAINER_USER_SID = "S-1-5-93-2-2"
# Groups every account on the node is in (Microsoft, "Well-known SIDs"): Everyone, Authenticated
# Users, BUILTIN\Users. Any of them on the pod folder hands every pod's Secrets and tokens to
# LocalService, NetworkService, NT SERVICE\* and non-administrator HostProcess pods.
BROAD_SIDS = ("S-1-1-0", "S-1-5-11", "S-1-5-32-545")
# containerd creates its root and state itself with SYSTEM + Administrators only
# (containerd/containerd@v2.3.7 pkg/sys/filesys_windows.go SddlAdministratorsLocalSystem, used by
# cmd/containerd/server/server.go; defaults/defaults_windows.go puts them under %ProgramData%).
CONTAINERD_FOLDERS = ("C:\\ProgramData\\containerd\\root", "C:\\ProgramData\\containerd\\state")


def _acl_problems(row: dict, protected: bool) -> list[str]:
    """What keeps one folder or file from being SYSTEM and Administrators only."""
    if not row["exists"]:
        return [f"{row['path']} does not exist"]
    problems = []
    if protected and not row["protected"]:
        problems.append("inherits its parent's ACL")
    if row["owner"] not in ADMIN_ONLY:
        problems.append(f"is owned by {row['owner']}")
    rules = winps.as_list(row["rules"])
    others = sorted({r["sid"] for r in rules if r["sid"] not in ADMIN_ONLY and r["type"] == "Allow"})
    if others:
        problems.append(f"grants access to {', '.join(others)}")
    if protected:
        full = {r["sid"] for r in rules if r["sid"] in ADMIN_ONLY and r["type"] == "Allow" and r["rights"] == "FullControl"
                and "ContainerInherit" in r["inheritance"] and "ObjectInherit" in r["inheritance"]}
        if full != ADMIN_ONLY:
            problems.append(f"does not give SYSTEM and Administrators inheritable full control (only {sorted(full)})")
    return [f"{row['path']} {p}" for p in problems]


@pytest.mark.k4w_check("folder_acls")
def test_node_folders_are_system_and_administrators_only(host, profile):
    containerd = profile.container_runtime == "containerd"
    paths = [*PROTECTED_FOLDERS, *ADMIN_ONLY_CHILDREN, *(CONTAINERD_FOLDERS if containerd else ())]
    rows = {r["path"]: r for r in winps.as_list(_query(host, q.folder_acls(paths), "folder ACLs"))}
    problems = [p for path in paths for p in _acl_problems(rows[path], protected=path in PROTECTED_FOLDERS + CONTAINERD_FOLDERS)]
    assert not problems, "node folders another local account can read or write: " + "; ".join(problems)


def _container_acl_problems(row: dict) -> list[str]:
    """What keeps a pod folder from inheriting the locked ACL plus exactly the containers' grant."""
    if not row["exists"]:
        return [f"{row['path']} does not exist"]
    problems = [] if not row["protected"] else ["does not inherit C:\\var's ACL"]
    if row["owner"] not in ADMIN_ONLY:
        problems.append(f"is owned by {row['owner']}")
    rules = winps.as_list(row["rules"])
    broad = sorted({r["sid"] for r in rules if r["type"] == "Allow"} & set(BROAD_SIDS))
    if broad:
        problems.append(f"grants {', '.join(broad)}, a group every account on the node is in: "
                        "any local service or non-administrator HostProcess pod reads every pod's Secrets and tokens")
    inherited = sorted({r["sid"] for r in rules if r["inherited"] and r["type"] == "Allow"} - ADMIN_ONLY)
    if inherited:
        problems.append(f"inherits access for {', '.join(inherited)}")
    explicit = [(r["sid"], r["type"], r["rights"], r["inheritance"], r["propagation"]) for r in rules if not r["inherited"]]
    wanted = [(CONTAINER_USER_SID, "Allow", "Modify, Synchronize", "ContainerInherit, ObjectInherit", "InheritOnly")]
    if explicit != wanted:
        problems.append(f"has the explicit ACEs {explicit}, not only ContainerUser's inherit-only modify "
                        "(a Nano Server pod, ContainerUser, could not read its token or write its emptyDir)")
    return [f"{row['path']} {p}" for p in problems]


@pytest.mark.k4w_check("folder_acls")
def test_pod_volumes_are_open_to_containers_and_nothing_else_is(host):
    rows = winps.as_list(_query(host, q.folder_acls(list(CONTAINER_FOLDERS)), "pod folder ACLs"))
    problems = [p for row in rows for p in _container_acl_problems(row)]
    assert not problems, "pod volume folders containers cannot use: " + "; ".join(problems)


# ------------------------------------------------------------------ proxy


@pytest.fixture(scope="module")
def machine_proxy(host) -> dict:
    return _query(host, q.machine_proxy(), "machine proxy settings")


@pytest.mark.k4w_check("proxy")
def test_winhttp_proxy(machine_proxy, proxy, network):
    text = machine_proxy["winhttp"]
    if not proxy.enabled:
        if "Direct access" not in text:
            _fail(f"WinHTTP uses a proxy although cluster.yml configures none: {text.strip()}")
        return
    for url in filter(None, (proxy.http, proxy.https)):
        hostport = url.split("://", 1)[1].rsplit("@", 1)[-1].rstrip("/")
        if hostport not in text:
            _fail(f"WinHTTP proxy does not name {hostport}: {text.strip()}")
    if network.api_ip not in text:
        _fail(f"WinHTTP bypass list lacks the API server {network.api_ip}: {text.strip()}")


@pytest.mark.k4w_check("proxy")
@pytest.mark.parametrize("where", ["machine", "docker_service"])
def test_proxy_environment(machine_proxy, proxy, where):
    raw = machine_proxy[where]
    found = raw if isinstance(raw, dict) else expect.parse_env_assignments("\n".join(winps.as_list(raw)))
    present = {k: v for k, v in found.items() if k in expect.PROXY_KEYS}
    if not proxy.enabled:
        if present:
            _fail(f"{where} environment sets {sorted(present)} although no proxy is configured")
        return
    expected = {k: v for k, v in proxy.env.items() if k.isupper()}
    # Windows environment names are case-insensitive: compare by upper-case name.
    upper = {k.upper(): v for k, v in present.items()}
    wrong = {k: upper.get(k) for k, v in expected.items() if upper.get(k) != v}
    if wrong:
        _fail(f"{where} environment differs from cluster.yml: found {wrong}, expected {expected}")


# ------------------------------------------------------------------ build record


@pytest.fixture(scope="module")
def release(host) -> dict:
    text = _query(host, q.file_text(RELEASE_FILE), RELEASE_FILE)
    assert text, f"{RELEASE_FILE} is missing or empty"
    return json.loads(text.lstrip("\ufeff"))


@pytest.fixture(scope="module")
def patch_level(host) -> dict:
    return _query(host, q.patch_level(), "build and UBR")


@pytest.mark.k4w_check("release_file")
def test_release_file_matches_profile(release, profile):
    assert {k: v for k, v in release.items() if k != "os"} == expect.release_document(profile)


@pytest.mark.k4w_check("release_file")
def test_release_file_records_the_running_patch_level(release, patch_level):
    assert release.get("os") == patch_level, f"{RELEASE_FILE} records {release.get('os')}, the system runs {patch_level}"


# ------------------------------------------------------------------ patch level


@pytest.mark.k4w_check("patch_level")
def test_patch_level_reaches_the_profiles_cumulative_update(patch_level, profile):
    assert patch_level["build"] == int(profile.data.guest.os_build)
    minimum = expect.minimum_ubr(profile)
    if minimum is not None:  # windows-1803 records no patch level (docs/modern-stack.md "Patching") and refuses none
        assert patch_level["ubr"] >= minimum, (
            f"Windows is at {patch_level['build']}.{patch_level['ubr']}, below {patch_level['build']}.{minimum} "
            f"that the profile's patch level ({levels.level(profile).origin}) brings")


@pytest.mark.k4w_check("patch_level")
def test_windows_update_service_is_not_disabled(host):
    # Cleanup empties Windows Update's download cache but leaves the service able to run, so a
    # node can still be patched after the bake (12-cleanup.ps1).
    [row] = winps.as_list(_query(host, q.services(["wuauserv"]), "the Windows Update service"))
    assert row["exists"] and row["start_type"] != "Disabled", f"wuauserv: {row}"

"""Spec of an Ubuntu node box (testinfra, SSH backend), driven by its profile boxes/<box>.yml.

Connect as the box user (vagrant); privileged reads go through passwordless sudo, which is
itself one of the checks. On a freshly booted VM, runtime state (swap off, modules loaded,
sysctls) also proves the settings survive a reboot.
"""

from __future__ import annotations

import json
import shlex

import pytest

from k4w.derive import containerd_config
from k4w.verify import expect, reachability
from k4w.infra.redact import redact

pytestmark = [pytest.mark.infra, pytest.mark.k4w_spec("ubuntu")]

KERNEL_MODULES = ("br_netfilter", "overlay")  # kubeadm preflight / Docker overlay2, containerd's overlayfs
SYSCTLS = {  # kubeadm preflight (FileContent--proc-sys-net-bridge-bridge-nf-call-iptables, ip_forward)
    "net.bridge.bridge-nf-call-iptables": 1,
    "net.ipv4.ip_forward": 1,
}
# systemd drop-in holding a service's proxy variables (Docker docs "Configure the daemon with
# systemd"; guest/ubuntu/bake/01-proxy.sh writes one for each of these services).
PROXY_DROPIN = "/etc/systemd/system/{service}.service.d/http-proxy.conf"
PROXY_ENV_FILE = "/etc/k4w/proxy.env"  # guest/ubuntu/lib.sh: /etc + K4W_PROXY_SERVICE_ENV
RELEASE_FILE = "/etc/k4w-release.json"  # docs/internals.md, Profile conventions
# Ubuntu's KVP daemon: the unit linux-cloud-tools-common ships (ConditionVirtualization=microsoft,
# ExecStart=/usr/sbin/hv_kvp_daemon -n), whose wrapper runs the daemon built for the running kernel,
# packaged as linux-cloud-tools-$(uname -r). Without it Hyper-V never learns the guest's IP.
KVP_UNIT = "hv-kvp-daemon.service"
KVP_PACKAGE = "linux-cloud-tools-{release}"
# guest/ubuntu/bake/07-cleanup.sh: the box ships no SSH host keys; this unit makes them at first boot.
HOST_KEY_UNIT = "k4w-ssh-host-keys.service"
BOX_USER = "vagrant"  # Vagrant's box convention (vagrant/vagrant, insecure key)


@pytest.fixture(scope="module", autouse=True)
def _reachable(host):
    # Module scope + autouse: runs before every other fixture of this host, once per host.
    reachability.require(host)


def _fail(message: str):
    pytest.fail(redact(message), pytrace=False)


@pytest.fixture(scope="module")
def as_root(host):
    """Run a command as root: directly when connected as root, else through `sudo -n`."""
    is_root = host.run("id -u").stdout.strip() == "0"

    def run(command: str):
        if is_root:
            return host.run(command)
        return host.run("sudo -n /bin/sh -c %s", command)

    return run


def _ok(result, what: str) -> str:
    if result.rc != 0:
        _fail(f"{what}: exit {result.rc}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


# ------------------------------------------------------------------ swap (kubelet refuses to run with swap on)


@pytest.mark.k4w_check("swap")
def test_no_active_swap(host):
    lines = host.file("/proc/swaps").content_string.strip().splitlines()
    assert lines[1:] == [], f"swap is active: {lines[1:]}"


@pytest.mark.k4w_check("swap")
def test_no_swap_in_fstab(host):
    entries = [line.split() for line in host.file("/etc/fstab").content_string.splitlines()]
    swap = [" ".join(e) for e in entries if len(e) >= 3 and not e[0].startswith("#") and e[2] == "swap"]
    assert swap == [], f"/etc/fstab still mounts swap: {swap}"


@pytest.mark.k4w_check("swap")
def test_no_swap_partition(host):
    out = _ok(host.run("lsblk --raw --noheadings --output NAME,FSTYPE"), "lsblk")
    swap = [line for line in out.splitlines() if line.split()[1:] == ["swap"]]
    assert swap == [], f"a swap partition exists (the installer's recipe must not create one): {swap}"


# ------------------------------------------------------------------ kernel modules and sysctls


@pytest.mark.k4w_check("kernel_modules")
@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_module_loaded(host, module):
    # /sys/module/<name> exists for a loaded module and for one built into the kernel.
    assert host.file(f"/sys/module/{module}").is_directory, f"kernel module {module} is not loaded"


@pytest.mark.k4w_check("kernel_modules")
@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_module_loaded_at_boot(host, module):
    out = host.run("cat /etc/modules-load.d/*.conf").stdout
    names = {line.strip() for line in out.splitlines() if line.strip() and not line.lstrip().startswith(("#", ";"))}
    assert module in names, f"{module} is not listed in /etc/modules-load.d/*.conf (found {sorted(names)})"


@pytest.mark.k4w_check("sysctl")
@pytest.mark.parametrize("key", sorted(SYSCTLS))
def test_sysctl(host, key):
    assert host.sysctl(key) == SYSCTLS[key], f"sysctl {key} is {host.sysctl(key)!r}, expected {SYSCTLS[key]}"


# ------------------------------------------------------------------ docker


@pytest.mark.k4w_check("docker", component="docker")
def test_docker_running_and_enabled(host):
    docker = host.service("docker")
    assert docker.is_enabled, "docker.service is not enabled"
    assert docker.is_running, "docker.service is not running"


@pytest.mark.k4w_check("docker", component="docker")
def test_docker_version_is_the_profiles(as_root, profile):
    pinned = expect.component(profile, "docker")
    actual = _ok(as_root("docker version --format '{{.Server.Version}}'"), "docker version").strip()
    assert expect.version_matches(actual, pinned), f"docker server is {actual}, profile pins {pinned}"


@pytest.mark.k4w_check("docker", component="docker")
def test_docker_package_is_pinned_and_held(host, profile):
    # 03-docker.sh pins the package at components.docker.package_version and holds it.
    package = expect.component(profile, "docker", "package")
    pinned = expect.component(profile, "docker", "package_version")
    installed = _ok(host.run("dpkg-query -W -f '${Version}' %s", package), f"dpkg-query {package}").strip()
    assert installed == pinned, f"{package} {installed} is installed, the profile pins {pinned}"
    held = _ok(host.run("apt-mark showhold"), "apt-mark showhold").split()
    assert package in held, f"{package} is not held: an apt upgrade would replace the pinned Docker"


@pytest.mark.k4w_check("docker", component="docker")
def test_docker_cgroup_driver_is_the_profiles(as_root, profile):
    wanted = expect.component(profile, "docker", "cgroup_driver")
    actual = _ok(as_root("docker info --format '{{.CgroupDriver}}'"), "docker info").strip()
    assert actual == wanted, f"docker uses cgroup driver {actual}, the kubelet is configured for {wanted}"


# ------------------------------------------------------------------ kubernetes
# Check "kubernetes_binaries" is everything guest/ubuntu/bake/04-kubernetes.sh installs: the
# binaries, the CNI plugins, the kubelet unit and kubeadm's drop-in.


@pytest.mark.k4w_check("kubernetes_binaries")
def test_kubelet_enabled(host):
    assert host.service("kubelet").is_enabled, "kubelet.service is not enabled (it must start on boot once joined)"


@pytest.mark.k4w_check("kubernetes_binaries")
def test_kubelet_unit_runs_the_installed_binary_with_kubeadms_drop_in(host):
    unit = host.file("/etc/systemd/system/kubelet.service")
    assert unit.exists, "/etc/systemd/system/kubelet.service is missing"
    assert "ExecStart=/usr/local/bin/kubelet" in unit.content_string, "kubelet.service does not run /usr/local/bin/kubelet"
    drop_in = host.file("/etc/systemd/system/kubelet.service.d/10-kubeadm.conf")
    assert drop_in.exists, "kubeadm's kubelet drop-in 10-kubeadm.conf is missing"
    text = drop_in.content_string
    # What kubeadm init/join write and the kubelet must read (kubeadm's own drop-in, 1.11+).
    for needed in ("EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env", "--config=/var/lib/kubelet/config.yaml",
                   "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf"):
        assert needed in text, f"10-kubeadm.conf lacks {needed}"
    # What systemd really runs: the drop-in's ExecStart replaces the unit's.
    shown = _ok(host.run("systemctl show --property=ExecStart kubelet"), "systemctl show kubelet")
    assert "$KUBELET_KUBEADM_ARGS" in text and "path=/usr/local/bin/kubelet" in shown, shown


@pytest.mark.k4w_check("kubelet", stage="node")
def test_kubelet_running(host):
    assert host.service("kubelet").is_running, "kubelet is not running on a joined node"


KUBE_VERSION_COMMANDS = {
    "kubeadm": "kubeadm version -o short",
    "kubelet": "kubelet --version",
    "kubectl": "kubectl version --client",  # --short is gone from newer kubectl; the first x.y.z is GitVersion
}


@pytest.mark.k4w_check("kubernetes_binaries")
@pytest.mark.parametrize("binary", sorted(KUBE_VERSION_COMMANDS))
def test_kubernetes_binary_version(host, profile, binary):
    wanted = profile.kubernetes_version
    out = _ok(host.run(KUBE_VERSION_COMMANDS[binary]), f"{binary} version")
    assert expect.reported_version(out) == wanted, f"{binary} reports {out.strip()!r}, profile pins {wanted}"


@pytest.mark.k4w_check("kubernetes_release")
def test_kubeadm_reports_the_pinned_release_in_full(host, profile):
    # The build record kubeadm compares versions with (kubeadm version -o json: clientVersion, the
    # version.Info of k8s.io/component-base set at link time): a real build of the release, not a
    # program that only prints a version line.
    out = _ok(host.run("kubeadm version -o json"), "kubeadm version -o json")
    problems = expect.kubeadm_version_problems(out, profile.kubernetes_version)
    assert not problems, "kubeadm version -o json: " + "; ".join(problems)


@pytest.mark.k4w_check("kubernetes_binaries")
def test_cni_plugins_present(host, profile):
    missing = [plugin for plugin in expect.linux_cni_plugins(profile)
               if not (host.file(f"/opt/cni/bin/{plugin}").is_file and host.file(f"/opt/cni/bin/{plugin}").mode & 0o111)]
    assert not missing, f"CNI plugins missing or not executable in /opt/cni/bin: {missing}"


# ------------------------------------------------------------------ containerd (the containerd era: 03-containerd.sh)
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# Where guest/ubuntu/bake/03-containerd.sh installs them. By path, not by name: runc lives in
# /usr/local/sbin, which systemd's PATH (containerd's) has and a login user's PATH may lack.
RUNTIME_BINARIES = {"containerd": "/usr/local/bin/containerd", "runc": "/usr/local/sbin/runc"}


@pytest.mark.k4w_check("containerd", component="containerd")
def test_containerd_unit_runs_the_installed_binary(host):
    unit = host.file("/etc/systemd/system/containerd.service")
    assert unit.exists and "ExecStart=/usr/local/bin/containerd" in unit.content_string, \
        "/etc/systemd/system/containerd.service does not run /usr/local/bin/containerd"


@pytest.mark.k4w_check("containerd_running", component="containerd")
def test_containerd_enabled_running_and_answering(host, as_root):
    assert host.service("containerd").is_enabled, "containerd.service is not enabled"
    _ok(as_root("systemctl is-active containerd"), "containerd.service is not active")
    _ok(as_root("ctr --address /run/containerd/containerd.sock version"), "containerd does not answer on its socket")


@pytest.mark.k4w_check("containerd_running", component="containerd")
def test_containerd_loaded_its_cri_plugins(as_root):
    # The kubelet talks to the CRI: a containerd that answers but did not load it runs no pod.
    listing = _ok(as_root("ctr --address /run/containerd/containerd.sock plugins ls"), "ctr plugins ls")
    problems = expect.cri_plugin_problems(listing)
    assert not problems, "containerd's CRI: " + "; ".join(problems)


@pytest.mark.k4w_check("containerd", component="containerd")
def test_containerd_effective_config_has_the_pinned_sandbox_cni_dirs_and_cgroup_driver(as_root, profile):
    # What containerd itself makes of its configuration (its defaults, our file and every file it
    # imports, e.g. /etc/containerd/conf.d/*.toml, merged), not what the file says.
    res = as_root(f"{RUNTIME_BINARIES['containerd']} --config {CONTAINERD_CONFIG} config dump")
    dump = _ok(res, "containerd config dump")
    problems = expect.containerd_config_problems(dump, profile, effective=True)
    # A file of an older schema is migrated again at every start (k4w/derive/containerd_config.py).
    problems += containerd_config.migration_warnings(res.stderr)
    assert not problems, "containerd config dump: " + "; ".join(problems)


@pytest.mark.k4w_check("containerd", component="containerd")
@pytest.mark.parametrize("binary", sorted(RUNTIME_BINARIES))
def test_runtime_version_is_the_profiles(host, profile, binary):
    pinned = expect.component(profile, binary)
    out = _ok(host.run(f"{RUNTIME_BINARIES[binary]} --version"), f"{binary} version")
    assert expect.version_matches(expect.reported_version(out) or "", pinned), f"{binary} reports {out.strip()!r}, profile pins {pinned}"


@pytest.mark.k4w_check("containerd", component="containerd")
def test_containerd_config_has_containerds_own_version_the_pinned_sandbox_and_cgroup_driver(host, profile):
    config = host.file(CONTAINERD_CONFIG)
    assert config.exists, f"{CONTAINERD_CONFIG} is missing"
    problems = expect.containerd_config_problems(config.content_string, profile)
    assert not problems, f"{CONTAINERD_CONFIG}: " + "; ".join(problems)


@pytest.mark.k4w_check("proxy", component="containerd")
def test_containerd_service_has_the_proxy(host, proxy, as_root):
    # What the unit really gets (drop-ins merged), whether or not it runs yet.
    _assert_service_proxy(host, proxy, as_root, "containerd")


# ------------------------------------------------------------------ proxy: present with cluster.yml's values, or absent


def _assert_proxy_env(found: dict[str, str], proxy, where: str):
    """Present with cluster.yml's values (both cases, as every downloader reads), or absent."""
    present = {k: v for k, v in found.items() if k in expect.PROXY_KEYS}
    if proxy.enabled:
        wrong = {k: found.get(k) for k, v in proxy.env.items() if found.get(k) != v}
        if wrong:
            _fail(f"{where}: proxy variables differ from cluster.yml: found {wrong}, expected {proxy.env}")
    elif present:
        _fail(f"{where}: no proxy is configured, but it sets {sorted(present)}")


@pytest.mark.k4w_check("proxy")
def test_service_proxy_dropins(host, proxy, profile):
    # The box's own runtime (docker or containerd, by era) and the kubelet.
    for service in (profile.container_runtime, "kubelet"):
        _check_proxy_dropin(host, proxy, PROXY_DROPIN.format(service=service))


def _check_proxy_dropin(host, proxy, path: str):
    dropin = host.file(path)
    if not proxy.enabled:
        assert not dropin.exists, f"{path} exists although no proxy is configured"
        return
    assert dropin.exists, f"{path} is missing although a proxy is configured"
    # The values live in a root-only EnvironmentFile (guest/ubuntu/lib.sh, k4w_configure_proxy): a
    # unit's Environment= is readable by every local user over D-Bus.
    lines = dropin.content_string.splitlines()
    assert f"EnvironmentFile={PROXY_ENV_FILE}" in lines, f"{path} does not name {PROXY_ENV_FILE}"
    assert not [line for line in lines if line.startswith("Environment=")], f"{path} sets Environment= itself"


def _assert_service_proxy(host, proxy, as_root, service: str):
    """What systemd gives the unit (drop-ins merged): nothing in its D-Bus-readable Environment, the
    proxy in its EnvironmentFiles, each of them mode 0600 root."""
    out = _ok(host.run(f"systemctl show --property=Environment {service}"), f"systemctl show {service}")
    public = expect.parse_env_assignments("\n".join(shlex.split(out.strip().partition("=")[2])))
    leaked = sorted(k for k in public if k in expect.PROXY_KEYS)
    assert not leaked, f"{service}.service Environment (readable by every user) sets {leaked}"
    out = _ok(host.run(f"systemctl show --property=EnvironmentFiles {service}"), f"systemctl show {service}")
    # One line per file: EnvironmentFiles=PATH (ignore_errors=no)
    files = [line.partition("=")[2].split(" (")[0] for line in out.splitlines() if line.startswith("EnvironmentFiles=")]
    found = {}
    for path in files:
        listing = as_root(f"test -e {shlex.quote(path)} && stat -c '%a %U:%G' {shlex.quote(path)} && cat {shlex.quote(path)}")
        if listing.rc != 0:
            continue  # an optional (-) file that is absent, such as the kubelet's /etc/default/kubelet
        mode_owner, _, text = listing.stdout.partition("\n")
        values = {k: v for k, v in expect.parse_env_assignments(text).items() if k in expect.PROXY_KEYS}
        if values:
            assert mode_owner.strip() == "600 root:root", f"{path} holds the proxy and is {mode_owner.strip()}"
        found.update(values)
    _assert_proxy_env(found, proxy, f"{service}.service EnvironmentFiles")


@pytest.mark.k4w_check("proxy", component="docker")
def test_docker_daemon_runs_with_the_proxy(host, proxy, as_root):
    # What the unit really gets (drop-ins merged), not just what the file says.
    _assert_service_proxy(host, proxy, as_root, "docker")


@pytest.mark.k4w_check("proxy")
def test_apt_proxy(host, proxy):
    out = _ok(host.run("apt-config dump"), "apt-config dump")
    found = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key.lower() in ("acquire::http::proxy", "acquire::https::proxy"):
            found[key.lower()] = value.strip().rstrip(";").strip('"')
    expected = {}
    if proxy.http:
        expected["acquire::http::proxy"] = proxy.http
    if proxy.https:
        expected["acquire::https::proxy"] = proxy.https
    if found != expected:
        _fail(f"apt proxy settings are {found or 'none'}, cluster.yml wants {expected or 'none'}")


@pytest.mark.k4w_check("proxy")
def test_etc_environment_proxy(host, proxy):
    # An absent file sets nothing: a box built without other settings may have none.
    env_file = host.file("/etc/environment")
    found = expect.parse_env_assignments(env_file.content_string) if env_file.exists else {}
    _assert_proxy_env(found, proxy, "/etc/environment")


# ------------------------------------------------------------------ the box user


@pytest.mark.k4w_check("vagrant_user")
def test_box_user_exists(host):
    assert host.user(BOX_USER).exists, f"user {BOX_USER} does not exist"


@pytest.mark.k4w_check("vagrant_user")
def test_box_user_has_passwordless_sudo(host):
    # As the box user: the outer sudo is itself the check; as root: the inner one is.
    res = host.run("sudo -n -u %s sudo -n true", BOX_USER)
    assert res.rc == 0, f"{BOX_USER} cannot sudo without a password: {res.stderr.strip()}"


@pytest.mark.k4w_check("vagrant_insecure_key", stage="box")
def test_box_user_accepts_vagrant_insecure_key(as_root):
    # Vagrant replaces this key on first `vagrant up` (config.ssh.insert_key), so it is only
    # meaningful on a box booted with insert_key = false, as `invoke test-box` does.
    text = _ok(as_root(f"cat ~{BOX_USER}/.ssh/authorized_keys"), "authorized_keys")
    assert expect.authorized_keys_have(text), f"~{BOX_USER}/.ssh/authorized_keys lacks the Vagrant insecure public key"


# ------------------------------------------------------------------ build record


@pytest.mark.k4w_check("release_file")
def test_release_file_matches_profile(host, profile):
    record = host.file(RELEASE_FILE)
    assert record.exists, f"{RELEASE_FILE} is missing"
    assert json.loads(record.content_string) == expect.release_document(profile)


# ------------------------------------------------------------------ Hyper-V KVP (issue 21.2)


@pytest.mark.k4w_check("hyperv_kvp_tools")
def test_the_kvp_daemon_is_installed_for_the_running_kernel(host):
    # The installer pins the kernel to the flavour of the linux-cloud-tools-* it installs; had it
    # booted another kernel (the ISO's HWE one), no daemon exists for it.
    release = _ok(host.run("uname -r"), "uname -r").strip()
    package = KVP_PACKAGE.format(release=release)
    status = host.run("dpkg-query --show --showformat='${db:Status-Status}' %s", package)
    assert status.rc == 0 and status.stdout.strip() == "installed", (
        f"the running kernel {release} has no {package}: the KVP daemon cannot run (installed kernels: "
        f"{host.run('ls /lib/modules').stdout.split()})")
    assert host.file(f"/usr/lib/linux-tools/{release}/hv_kvp_daemon").exists, f"{package} lacks hv_kvp_daemon"
    assert host.service(KVP_UNIT).is_enabled, f"{KVP_UNIT} is not enabled"


@pytest.mark.k4w_check("hyperv_kvp_active")
def test_the_kvp_daemon_runs_on_hyper_v(host):
    virt = host.run("systemd-detect-virt").stdout.strip()
    # Its unit has ConditionVirtualization=microsoft: elsewhere it never starts, so this check
    # means something on Hyper-V only. A profile for another hypervisor deselects it in skip_checks.
    assert virt == "microsoft", (f"this guest runs on {virt!r}, not Hyper-V: {KVP_UNIT} cannot be active here; "
                                 f"deselect hyperv_kvp_active in the profile's skip_checks with the reason")
    assert host.service(KVP_UNIT).is_running, f"{KVP_UNIT} is not active: Hyper-V cannot learn this VM's IP"


# ------------------------------------------------------------------ SSH host keys (issue 21.8)


@pytest.mark.k4w_check("ssh_host_keys", stage="box")
def test_ssh_host_keys_were_made_at_this_first_boot(host, as_root):
    # A box that shipped its build VM's keys would give every VM made from it the same identity.
    unit = host.service(HOST_KEY_UNIT)
    assert unit.is_enabled, f"{HOST_KEY_UNIT} is not enabled"
    shown = dict(line.split("=", 1) for line in _ok(host.run(
        "systemctl show --property=ConditionResult,ActiveState,Result %s", HOST_KEY_UNIT), HOST_KEY_UNIT).splitlines()
        if "=" in line)
    assert shown.get("ConditionResult") == "yes", (
        f"{HOST_KEY_UNIT} did not run at this boot (ConditionResult={shown.get('ConditionResult')}): "
        "the box came with SSH host keys")
    assert (shown.get("ActiveState"), shown.get("Result")) == ("active", "success"), f"{HOST_KEY_UNIT}: {shown}"
    boot = int(_ok(host.run("awk '/^btime/ {print $2}' /proc/stat"), "boot time").strip())
    listing = _ok(as_root("stat -c '%Y %n' /etc/ssh/ssh_host_*_key"), "host keys").split()
    keys = dict(zip(listing[1::2], (int(t) for t in listing[0::2])))
    assert "/etc/ssh/ssh_host_ed25519_key" in keys, f"no ed25519 host key: {sorted(keys)}"
    older = [path for path, mtime in keys.items() if mtime < boot]
    assert not older, f"host keys older than this boot (made during the build?): {older}"


@pytest.mark.k4w_check("ssh_keys_only", stage="box")
def test_sshd_refuses_password_logins(host, as_root):
    # Pods reach their node's addresses, and the box user's password is Vagrant's well-known one:
    # sshd's effective configuration (sshd -T, what it applies to a new connection) takes keys only.
    shown = _ok(as_root("sshd -T"), "sshd -T")
    settings = dict(line.split(" ", 1) for line in shown.splitlines() if " " in line)
    assert settings.get("passwordauthentication") == "no", "sshd accepts password logins"
    # OpenSSH 8.7 renamed challengeresponseauthentication; sshd -T prints the name it knows.
    keyboard = settings.get("kbdinteractiveauthentication", settings.get("challengeresponseauthentication"))
    assert keyboard == "no", f"sshd accepts keyboard-interactive logins ({keyboard})"


# ------------------------------------------------------------------ images from the build host's image cache


def pytest_generate_tests(metafunc):
    if "imported_image" in metafunc.fixturenames:
        expect.parametrize_imported_images(metafunc)


@pytest.mark.k4w_check("imported_images", component="containerd")
def test_an_imported_image_is_in_containerd_at_its_pinned_digest(as_root, imported_image):
    name, digest = imported_image.rsplit("@", 1)
    # `ctr images ls` prints REF TYPE DIGEST ... (containerd v2.3.7 cmd/ctr/commands/images/images.go).
    listing = _ok(as_root(f"ctr --address /run/containerd/containerd.sock --namespace k8s.io images ls {shlex.quote('name==' + name)}"),
                  "ctr images ls")
    found = [line.split()[2] for line in listing.splitlines()[1:] if line.split() and line.split()[0] == name]
    assert found == [digest], f"{name}: containerd has {found or 'no such image'}, not the pinned {digest}"


@pytest.mark.k4w_check("imported_images", component="docker")
def test_a_loaded_image_is_in_docker_as_the_config_of_its_pinned_manifest(as_root, imported_image, request):
    name, digest = imported_image.rsplit("@", 1)
    wanted = expect.imported_image_id(request.config.getoption("--k4w-config"), digest)
    found = as_root(f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(name)}")
    assert found.rc == 0 and found.stdout.strip() == wanted, \
        f"{name}: docker has {found.stdout.strip() or 'no such image'}, not {wanted} (the config of the pinned {digest})"

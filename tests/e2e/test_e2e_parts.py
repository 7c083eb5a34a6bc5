"""The cheap parts of the e2e run, checked without booting anything: the base-image cache key,
the squid configuration (parsed by squid itself), the access-log reading, the idempotence
snapshot diff, the re-run of the rendered provisioners, and the e2e box profile."""

from __future__ import annotations

import configparser
import dataclasses
import fnmatch
import hashlib
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from k4w.model import config
from k4w.infra import packer_hcl
from k4w import render
from k4w.derive.cluster import Cluster
from ci.e2e import base_image, cluster_file, idempotence, mirror, phases, procs, report, rerun, seed_stand_ins, squid
from tests.helpers import packer_validate, system_tool

ROOT = Path(__file__).resolve().parents[2]
E2E_PROFILE = yaml.safe_load((ROOT / "ci" / "e2e" / "boxes" / "debian-12-e2e.yml").read_text())
UBUNTU_PROFILE = yaml.safe_load((ROOT / "boxes" / "ubuntu-1604.yml").read_text())
UBUNTU_SPEC = ROOT / "k4w" / "verify" / "specs" / "test_ubuntu_box.py"


# ------------------------------------------------------------------ base image cache key


def test_cache_key_is_stable_for_the_same_recipe_and_differs_between_recipes():
    assert base_image.cache_key() == base_image.cache_key()
    assert re.fullmatch(r"[0-9a-f]{16}", base_image.cache_key())
    assert base_image.cache_key(base_image.UBUNTU_2604) != base_image.cache_key(base_image.DEBIAN_12)


def test_cache_key_changes_with_the_package_list():
    before = base_image.cache_key()
    more = dataclasses.replace(base_image.DEBIAN_12, packages=base_image.DEBIAN_12.packages + ("htop",))
    assert base_image.cache_key(more) != before


def test_cache_key_changes_with_the_build_script():
    source = (Path(base_image.__file__)).read_bytes()
    assert base_image.cache_key(source=source) == base_image.cache_key()
    assert base_image.cache_key(source=source + b"\n# edited\n") != base_image.cache_key()


def test_debootstrap_installs_every_listed_package_and_nothing_implicit():
    cmd = base_image.debootstrap_command(Path("/x/rootfs"))
    assert cmd[:2] == ["debootstrap", "--variant=minbase"]
    included = cmd[2].removeprefix("--include=").split(",")
    assert set(included) == set(base_image.DEBIAN_12.packages)
    # What the box steps and the spec rely on being in the "installed system".
    assert {"openssh-server", "sudo", "linux-image-amd64", "procps", "kmod", "dbus"} <= set(included)
    assert cmd[-3:] == ["bookworm", "/x/rootfs", "http://deb.debian.org/debian"]


def test_the_ubuntu_image_is_26_04_checked_against_the_archive_key_alone():
    keyring = Path("/x/ubuntu-archive-2018.gpg")
    cmd = base_image.debootstrap_command(Path("/x/rootfs"), base_image.UBUNTU_2604, keyring)
    assert f"--keyring={keyring}" in cmd  # never --no-check-gpg
    assert cmd[-4:] == ["resolute", "/x/rootfs", "http://archive.ubuntu.com/ubuntu", "/usr/share/debootstrap/scripts/gutsy"]
    included = set(cmd[2].removeprefix("--include=").split(","))
    # The ubuntu-2604 autoinstall seed's packages: the guest gets the Hyper-V tools of its own kernel.
    seed = yaml.safe_load((ROOT / "boxes" / "ubuntu-2604.yml").read_text())["installer"]["packages"]
    assert set(seed) <= included
    assert {"ubuntu-minimal", "systemd-resolved", "dracut"} <= included


def test_the_committed_ubuntu_key_is_the_archive_key_by_fingerprint(tmp_path):
    system_tool("gpg")  # scripts/setup.sh installs gnupg
    recipe = base_image.UBUNTU_2604
    log = phases.Log(tmp_path / "log", lambda _: None)
    keyring = base_image._dearmored_keyring(recipe, tmp_path, phases.Phase("base image", 60), log)
    assert keyring.is_file() and recipe.key_fingerprint == "F6ECB3762474EDA9D21B7022871920D1991BC93C"
    # Another key (or a second one) in its place is refused before debootstrap runs.
    other = dataclasses.replace(recipe, key_fingerprint="0" * 40)
    with pytest.raises(phases.E2EError, match="must hold the one key"):
        base_image._dearmored_keyring(other, tmp_path, phases.Phase("base image", 60), log)


def test_the_kernel_is_found_where_debian_and_ubuntu_link_it(tmp_path):
    debian, ubuntu = tmp_path / "debian", tmp_path / "ubuntu"
    (debian / "boot").mkdir(parents=True)
    (debian / "boot" / "vmlinuz-6.1.0-1-amd64").write_text("k")
    (debian / "vmlinuz").symlink_to("boot/vmlinuz-6.1.0-1-amd64")
    (ubuntu / "boot").mkdir(parents=True)
    (ubuntu / "boot" / "vmlinuz-7.0.0-14-generic").write_text("k")
    (ubuntu / "boot" / "vmlinuz").symlink_to("vmlinuz-7.0.0-14-generic")
    assert base_image._installed(debian, "vmlinuz").name == "vmlinuz-6.1.0-1-amd64"
    assert base_image._installed(ubuntu, "vmlinuz").name == "vmlinuz-7.0.0-14-generic"
    with pytest.raises(phases.E2EError, match="initramfs generator"):
        base_image._installed(ubuntu, "initrd.img")


def test_each_recipe_prunes_only_its_own_old_images(tmp_path):
    log = phases.Log(tmp_path / "log", lambda _: None)
    cache = tmp_path / "cache"
    for key, recipe in (("old-debian", None), ("old-ubuntu", "ubuntu-2604"), ("new-ubuntu", "ubuntu-2604")):
        (cache / key).mkdir(parents=True)
        (cache / key / base_image.MANIFEST).write_text(json.dumps({"recipe": recipe} if recipe else {}))
    (cache / "current").symlink_to("old-debian")  # the single recipe's link, before there were two
    base_image._prune(cache, base_image.UBUNTU_2604, "new-ubuntu", phases.Phase("base image", 60), log)
    assert sorted(e.name for e in cache.iterdir()) == ["new-ubuntu", "old-debian"]


def test_reused_image_is_recognised_only_when_complete(tmp_path):
    folder = tmp_path / "k"
    folder.mkdir()
    for name in (base_image.DISK, base_image.KERNEL):
        (folder / name).write_text("x")
    (folder / base_image.MANIFEST).write_text('{"disk_sha256": "0"}')
    assert base_image._complete(folder) is None  # no initrd: an interrupted build
    (folder / base_image.INITRD).write_text("x")
    assert base_image._complete(folder) == {"disk_sha256": "0"}


def test_the_base_image_gives_the_box_user_what_the_preseed_gives_it():
    files = {path: (mode, text) for path, mode, text in base_image.DEBIAN_12.files}
    assert base_image.COMMON_FILES == base_image.UBUNTU_2604.files[:len(base_image.COMMON_FILES)]
    mode, sudoers = files["etc/sudoers.d/vagrant"]
    assert sudoers == "vagrant ALL=(ALL) NOPASSWD: ALL\n" and mode == 0o440
    assert "/dev/vda\t/\text4" in files["etc/fstab"][1]
    assert files["etc/machine-id"][1] == ""  # each guest makes its own at first boot


def _networkd_matches(match: dict[str, str], name: str, iftype: str, kind: str | None) -> bool:
    """systemd-networkd's [Match] test for Name=/Type=/Kind=: each key a list of globs, a leading
    "!" inverts the list; a link with no kind passes an inverted-only list
    (systemd-stable@v252.31 src/shared/net-condition.c net_condition_test_strv)."""
    def test(globs: str, value: str | None) -> bool:
        invert = globs.startswith("!")
        hit = value is not None and any(fnmatch.fnmatchcase(value, g) for g in globs.lstrip("!").split())
        return not hit if invert else hit
    unknown = set(match) - {"Name", "Type", "Kind"}
    assert not unknown, f"extend this test for {unknown}"
    values = {"Name": name, "Type": iftype, "Kind": kind}
    return all(test(globs, values[key]) for key, globs in match.items())


def test_the_base_image_runs_dhcp_on_the_nic_and_leaves_the_pod_network_alone():
    # networkd takes every link it manages off its bridge: a match on a pod's veth cut pods off the node.
    mode, text = {p: (m, t) for p, m, t in base_image.DEBIAN_12.files}[base_image.NIC_NETWORK_FILE]
    parser = configparser.ConfigParser()
    parser.optionxform = str
    parser.read_string(text)
    match = dict(parser["Match"])
    for nic in ("ens3", "enp0s3", "eth0"):
        assert _networkd_matches(match, nic, "ether", None), nic
    for link, kind in (("veth3f2a91c0", "veth"), ("cni0", "bridge"), ("flannel.1", "vxlan")):
        assert not _networkd_matches(match, link, "ether", kind), link
    assert parser["Network"]["DHCP"] == "ipv4" and mode == 0o644


# ------------------------------------------------------------------ squid


def test_squid_config_is_private_and_logs_in_our_format(tmp_path):
    text = squid.config_text(40123, tmp_path, "proxy")
    assert "http_port 127.0.0.1:40123\n" in text
    for path_line in ("pid_filename", "cache_log", "access_log stdio:", "cache_dir ufs", "coredump_dir"):
        line = next(l for l in text.splitlines() if l.startswith(path_line))
        assert str(tmp_path) in line, line
    assert f"logformat {squid.LOGFORMAT}" in text and text.splitlines()[-2] == "http_access deny all"
    assert "cache_effective_user proxy" in text
    assert "cache_effective_user" not in squid.config_text(40123, tmp_path, None)


@pytest.mark.tools
def test_squid_with_credentials_refuses_anonymous_clients_and_admits_the_account(tmp_path):
    import os
    import tempfile

    credentials = squid.Credentials.fresh()
    # As root squid drops to user proxy, which must reach its folder: pytest's are 0700.
    base = Path(tempfile.mkdtemp(prefix="k4w-squid-", dir="/tmp"))
    os.chmod(base, 0o755)
    work = base / "squid"
    log = phases.Log(tmp_path / "e2e.log", lambda text: None)
    # Port 80 (squid's Safe_ports) where nothing listens: past the auth gate squid answers 503.
    target = "http://127.0.0.1/"
    try:
        _check_squid_auth(work, log, credentials, target)
    finally:
        shutil.rmtree(base)
    assert credentials.password not in (tmp_path / "e2e.log").read_text()


def _check_squid_auth(work, log, credentials, target) -> None:
    import urllib.error
    import urllib.request

    with squid.running(work, phases.Phase("proxy", 60), log, credentials) as proxy:
        assert credentials.password not in (work / "passwd").read_text()  # a hash, not the password

        def status(userinfo: str) -> int:
            handler = urllib.request.ProxyHandler({"http": f"http://{userinfo}127.0.0.1:{proxy.port}"})
            try:
                return urllib.request.build_opener(handler).open(target, timeout=30).status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert status("") == 407
        assert status(f"{credentials.user}:wrong@") == 407
        assert status(f"{credentials.userinfo}@") not in (403, 407)
        assert proxy.url_for_guests == f"http://{credentials.userinfo}@10.0.2.2:{proxy.port}"


@pytest.mark.tools
def test_squid_itself_accepts_the_config(tmp_path):
    exe = system_tool("squid")
    conf = tmp_path / "squid.conf"
    conf.write_text(squid.config_text(40123, tmp_path, None))
    res = subprocess.run([exe, "-k", "parse", "-f", str(conf)], capture_output=True, text=True, timeout=60)
    output = res.stdout + res.stderr
    assert res.returncode == 0, output
    assert not re.search(r"FATAL|ERROR|Bungled", output), output


ACCESS_LOG = """\
1795291070.161 127.0.0.1 NONE_NONE/000 0 - error:transaction-end-before-headers "-"
1795291070.210 127.0.0.1 TCP_MISS/200 151322 GET http://deb.debian.org/debian/dists/bookworm/InRelease "Debian APT-HTTP/1.3 (2.6.1)"
1795291071.002 127.0.0.1 TCP_MISS/200 6107000 GET http://deb.debian.org/debian/dists/bookworm/main/i18n/by-hash/SHA256/1f0c5b6a30c4c8c2d3b4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a "Debian APT-HTTP/1.3 (2.6.1)"
1795291071.500 127.0.0.1 TCP_MISS/200 8790012 GET http://deb.debian.org/debian/dists/bookworm/main/binary-amd64/Packages.xz "Debian APT-HTTP/1.3 (2.6.1)"
1795291080.900 127.0.0.1 TCP_MISS/200 25000000 GET http://deb.debian.org/debian/pool/main/d/docker.io/docker.io_20.10.24%2bdfsg1-1%2bdeb12u1%2bb6_amd64.deb "Debian APT-HTTP/1.3 (2.6.1)"
1795291081.000 127.0.0.1 TCP_MISS/404 300 GET http://deb.debian.org/debian/pool/main/x/gone_1_amd64.deb "Debian APT-HTTP/1.3 (2.6.1)"
1795291082.000 127.0.0.1 TCP_MISS/200 1000 GET http://deb.debian.org/debian/pool/main/c/curl/curl_1_amd64.deb "curl/7.88.1"
not a squid line
"""


def test_access_log_parser_reads_every_field_and_reports_foreign_lines():
    lines, bad = squid.parse_access_log(ACCESS_LOG)
    assert bad == ["not a squid line"]
    assert len(lines) == 7
    first_apt = lines[1]
    assert (first_apt.client, first_apt.code, first_apt.status, first_apt.bytes, first_apt.method) == (
        "127.0.0.1", "TCP_MISS", 200, 151322, "GET")
    assert first_apt.host == "deb.debian.org" and first_apt.agent.startswith("Debian APT-HTTP")


def test_apt_requests_are_apt_fetching_indexes_and_packages():
    lines, _ = squid.parse_access_log(ACCESS_LOG)
    apt = squid.apt_requests(lines)
    # Indexes (also by hash) and packages; not the readiness probe, not curl's .deb.
    assert [l.url.rsplit("/", 1)[1][:12] for l in apt] == [
        "InRelease", "1f0c5b6a30c4", "Packages.xz", "docker.io_20", "gone_1_amd64"]
    found = squid.summary(lines)
    assert (found["apt_requests"], found["debs"], found["indexes"]) == (5, 2, 3)
    assert found["hosts"] == ["deb.debian.org"] and found["clients"] == ["127.0.0.1"]
    assert found["failed"] == ["404 http://deb.debian.org/debian/pool/main/x/gone_1_amd64.deb"]


def test_proxy_proof_fails_when_nothing_used_the_proxy():
    from ci.e2e.run import _proxy_proof

    with pytest.raises(phases.E2EError, match="not used"):
        _proxy_proof("", [])
    with pytest.raises(phases.E2EError, match="errors for packages"):
        _proxy_proof(ACCESS_LOG.replace("not a squid line\n", ""), [])
    good = "".join(l + "\n" for l in ACCESS_LOG.splitlines()[:5])
    found = _proxy_proof(good, ["kubernetes-node-linux-amd64.tar.gz"])
    assert found["debs"] == 1 and found["component_requests"] == 0


def test_proxy_proof_fails_when_the_guest_downloaded_a_component_itself():
    from ci.e2e.run import _proxy_proof

    good = "".join(l + "\n" for l in ACCESS_LOG.splitlines()[:5])
    component = ("1795291090.000 127.0.0.1 TCP_TUNNEL/200 480 CONNECT "
                 "https://dl.k8s.io/v1.11.10/kubernetes-node-linux-amd64.tar.gz \"curl/7.88.1\"\n")
    with pytest.raises(phases.E2EError, match="downloaded box components itself: https://dl.k8s.io/v1.11.10/"):
        _proxy_proof(good + component, ["kubernetes-node-linux-amd64.tar.gz"])


# ------------------------------------------------------------------ idempotence diff


def snapshot_text(machine_id_size="33", docker_invocation="aaa", status_mtime="100.0", extra_file=""):
    return f"""\
### files
d\t755\troot:root\t50.0\t4096\t/etc\t
f\t444\troot:root\t60.0\t{machine_id_size}\t/etc/machine-id\t
f\t644\troot:root\t70.0\t120\t/etc/docker/daemon.json\t
l\t777\troot:root\t70.0\t19\t/etc/mtab\t../proc/self/mounts
{extra_file}f\t644\troot:root\t{status_mtime}\t999\t/var/lib/dpkg/status\t
absent\t/opt/cni/bin
### sha256
{'e3b0' if machine_id_size == '0' else '1111'}  /etc/machine-id
2222  /etc/docker/daemon.json
3333  /var/lib/dpkg/status
### services
Id=docker.service
LoadState=loaded
ActiveState=active
InvocationID={docker_invocation}
ActiveEnterTimestampMonotonic=123
NRestarts=0
MainPID=321

Id=kubelet.service
LoadState=not-found
ActiveState=inactive
InvocationID=
ActiveEnterTimestampMonotonic=0
NRestarts=0
MainPID=0
### packages
docker.io\t20.10.24+dfsg1-1+deb12u1+b6\tii 
"""


def test_snapshot_parser_reads_files_checksums_services_and_packages():
    snap = idempotence.parse(snapshot_text())
    assert snap.files["/etc/machine-id"]["sha256"] == "1111"
    assert snap.files["/etc/mtab"]["link"] == "../proc/self/mounts"
    assert snap.absent == {"/opt/cni/bin"}
    assert snap.services["docker.service"]["InvocationID"] == "aaa"
    assert snap.services["kubelet.service"]["LoadState"] == "not-found"
    assert snap.packages == {"docker.io": "20.10.24+dfsg1-1+deb12u1+b6 ii "}
    assert snap.counts() == {"paths": 5, "checksums": 3, "services": 2, "packages": 1}


def test_identical_snapshots_have_no_difference():
    before, after = idempotence.parse(snapshot_text()), idempotence.parse(snapshot_text())
    assert idempotence.diff(before, after) == []


def test_a_restart_a_rewrite_and_a_new_file_are_all_found():
    before = idempotence.parse(snapshot_text())
    after = idempotence.parse(snapshot_text(docker_invocation="bbb", status_mtime="200.0",
                                            extra_file="f\t644\troot:root\t1.0\t1\t/etc/new\t\n"))
    changes = {(c.kind, c.name): c.what for c in idempotence.diff(before, after)}
    assert changes == {
        ("service", "docker.service"): "InvocationID",
        ("file", "/var/lib/dpkg/status"): "mtime",
        ("file", "/etc/new"): "added",
    }
    expected, unexpected = idempotence.classify(idempotence.diff(before, after), before, after)
    # docker's one restart is expected (the build proxy's runtime drop-in); the rest is not.
    assert [(c.name, "01-proxy.sh" in reason) for c, reason in expected] == [("docker.service", True)]
    assert sorted(c.name for c in unexpected) == ["/etc/new", "/var/lib/dpkg/status"]


def test_a_docker_restart_is_expected_but_a_stop_or_another_unit_restarting_is_not():
    before = idempotence.parse(snapshot_text())
    stopped = idempotence.parse(snapshot_text(docker_invocation="bbb").replace("ActiveState=active", "ActiveState=inactive", 1))
    _, unexpected = idempotence.classify(idempotence.diff(before, stopped), before, stopped)
    assert [c.name for c in unexpected] == ["docker.service"]
    reloaded = idempotence.parse(snapshot_text().replace("LoadState=loaded", "LoadState=masked", 1))
    _, unexpected = idempotence.classify(idempotence.diff(before, reloaded), before, reloaded)
    assert [c.name for c in unexpected] == ["docker.service"]


def test_only_an_emptied_machine_id_is_expected():
    before = idempotence.parse(snapshot_text())
    emptied = idempotence.parse(snapshot_text(machine_id_size="0"))
    changes = idempotence.diff(before, emptied)
    expected, unexpected = idempotence.classify(changes, before, emptied)
    assert [c.name for c, _ in expected] == ["/etc/machine-id"] and unexpected == []
    assert "07-cleanup" in expected[0][1]
    # Another id instead of an empty file is a real change.
    rewritten = idempotence.parse(snapshot_text().replace("1111  /etc/machine-id", "9999  /etc/machine-id"))
    _, unexpected = idempotence.classify(idempotence.diff(before, rewritten), before, rewritten)
    assert [c.name for c in unexpected] == ["/etc/machine-id"]


def test_report_says_what_was_compared():
    before = idempotence.parse(snapshot_text())
    after = idempotence.parse(snapshot_text(machine_id_size="0"))
    lines = idempotence.report(before, after, idempotence.diff(before, after))
    assert lines[0].startswith("compared 5 paths under /etc, /usr/local/bin, /var/lib/dpkg, /var/lib/apt/lists")
    assert "sha256 of 3 files" in lines[0] and "absent before and after: /opt/cni/bin" in lines[0]
    assert "differences: 1 (1 expected, 0 unexpected)" in lines
    assert not idempotence.parse(snapshot_text()).absent ^ {"/opt/cni/bin"}


def test_snapshot_without_sections_is_refused():
    with pytest.raises(ValueError, match="not a snapshot"):
        idempotence.parse("bash: sudo: command not found\n")


@pytest.mark.tools
def test_snapshot_script_is_clean_bash():
    shellcheck = system_tool("shellcheck")
    res = subprocess.run([shellcheck, "--shell=bash", "-"], input=idempotence.SNAPSHOT_SCRIPT, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout


# ------------------------------------------------------------------ the e2e profile and its render


def e2e_cluster() -> config.Config:
    return config.parse(cluster_file.text("http://10.0.2.2:40123", "http://127.0.0.1:40124", "/tmp/k4w-e2e-cache"))


def test_e2e_cluster_file_is_a_valid_config_with_both_proxies():
    cfg = e2e_cluster()
    assert cfg.proxy.http == cfg.proxy.https == "http://10.0.2.2:40123"
    assert cfg.boxes() == ["debian-12-e2e"] and cfg.master.box == "debian-12-e2e"
    assert (cfg.downloads.mirror, cfg.downloads.cache) == ("http://127.0.0.1:40124", "/tmp/k4w-e2e-cache")


def test_e2e_profile_runs_the_ubuntu_box_steps_through_the_ubuntu_template():
    assert E2E_PROFILE["os_family"] == UBUNTU_PROFILE["os_family"] == "ubuntu"
    assert E2E_PROFILE["provision"] == UBUNTU_PROFILE["provision"]
    assert E2E_PROFILE["build"]["builder"] == "qemu" and E2E_PROFILE["build"]["qemu"]["accelerator"] == "tcg"
    assert f"{E2E_PROFILE['build']['disk_gb']}G" == base_image.DEBIAN_12.disk_size


def test_e2e_profile_has_the_cluster_era_of_the_ubuntu_box():
    ours = dict(E2E_PROFILE["kubernetes"])
    theirs = dict(UBUNTU_PROFILE["kubernetes"])
    assert ours.pop("prepull_images") is False  # the stand-in kubeadm lists no images, CI reaches no registry
    theirs.pop("prepull_images", None)
    assert ours == theirs


# What QEMU and a Debian 12 image cannot have: the Hyper-V KVP daemon's checks (issue 21.2).
HYPERV_ONLY_CHECKS = ["hyperv_kvp_tools", "hyperv_kvp_active"]
# The one check a stand-in cannot pass, deselected with its reason (the containerd era has no stand-in).
SEED_STAND_IN_CHECKS = ["kubernetes_release"]


def test_e2e_profile_runs_every_step_and_every_box_check_but_the_hyperv_ones_and_the_stand_ins():
    assert "provision_env" not in E2E_PROFILE
    assert list(E2E_PROFILE["skip_checks"]) == SEED_STAND_IN_CHECKS + HYPERV_ONLY_CHECKS
    assert "stand-ins" in E2E_PROFILE["skip_checks"]["kubernetes_release"]
    assert "QEMU" in E2E_PROFILE["skip_checks"]["hyperv_kvp_active"] and "Debian" in E2E_PROFILE["skip_checks"]["hyperv_kvp_tools"]


def test_the_ci_stand_ins_are_the_files_the_e2e_profile_pins():
    """The profile pins the stand-ins' digests like real downloads; seed_stand_ins.py must build exactly
    those bytes (reproducibly), in the layout step 04 unpacks."""
    components = E2E_PROFILE["components"]
    built = seed_stand_ins.for_profile(components)
    assert set(built) == {components["kubernetes"]["url"], components["cni"]["url"]}
    assert hashlib.sha512(built[components["kubernetes"]["url"]]).hexdigest() == components["kubernetes"]["sha512"]
    assert hashlib.sha256(built[components["cni"]["url"]]).hexdigest() == components["cni"]["sha256"]
    assert seed_stand_ins.for_profile(components) == built
    assert all("STAND-IN" in components[name]["checksum_source"] for name in ("kubernetes", "cni"))
    with tarfile.open(fileobj=io.BytesIO(built[components["kubernetes"]["url"]])) as tar:
        names = set(tar.getnames())
    assert {f"kubernetes/node/bin/{b}" for b in ("kubeadm", "kubelet", "kubectl", "kube-proxy")} <= names
    assert mirror.mirror_paths({"https://dl.k8s.io/v1/x.tgz": b"x"}) == {"/dl.k8s.io/v1/x.tgz": b"x"}


@pytest.mark.parametrize("binary,args,answer", [
    ("kubeadm", "version -o short", "v1.11.10"),
    ("kubelet", "--version", "Kubernetes v1.11.10"),
    ("kubectl", "version --client --short", "Client Version: v1.11.10"),
])
def test_the_stand_in_binaries_answer_what_step_04_asks(tmp_path, binary, args, answer):
    with tarfile.open(fileobj=io.BytesIO(seed_stand_ins.node_tarball("1.11.10"))) as tar:
        member = tar.getmember(f"kubernetes/node/bin/{binary}")
        program = tmp_path / binary
        program.write_bytes(tar.extractfile(member).read())
    program.chmod(member.mode)
    res = subprocess.run([str(program), *args.split()], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == answer
    other = subprocess.run([str(program), "init"], capture_output=True, text=True)
    assert other.returncode == 3 and "stand-in" in other.stderr


def test_report_reads_each_step_from_the_build_log():
    log = "\n".join([
        "100,,ui,say,==> qemu: Provisioning with shell script: /r/guest/ubuntu/bake/01-proxy.sh",
        "110,,ui,say,==> qemu: Provisioning with shell script: /r/guest/ubuntu/bake/04-kubernetes.sh",
        "111,,ui,message,    qemu: k4w 04-kubernetes: SKIPPED: off%!(PACKER_COMMA) for a reason",
        "115,,ui,say,==> qemu: Provisioning with shell script: /r/guest/ubuntu/bake/07-cleanup.sh",
        "140,,ui,say,==> qemu: Running post-processor: vagrant",
    ])
    steps = report.box_steps(["01-proxy.sh", "04-kubernetes.sh", "05-vagrant-key.sh", "07-cleanup.sh"], log)
    assert [(s["step"], s["status"], s["seconds"]) for s in steps] == [
        ("01-proxy.sh", "ran", 10), ("04-kubernetes.sh", "skipped", 5), ("05-vagrant-key.sh", "not run", None),
        ("07-cleanup.sh", "failed", 25)]
    assert steps[1]["reason"] == "off, for a reason"
    finished = report.box_steps(["07-cleanup.sh"], log + "\n150,,artifact,0,id,x")
    assert finished[0]["status"] == "ran"


@pytest.mark.parametrize("box", ["debian-12-e2e", "ubuntu-2404-e2e", "ubuntu-2604-e2e"])
def test_base_image_paths_in_the_profile_are_the_cache_layout_of_its_recipe(box):
    profile = yaml.safe_load((ROOT / "ci" / "e2e" / "boxes" / f"{box}.yml").read_text())
    recipe = base_image.recipe_named(profile["ci_base_image"])
    q = profile["build"]["qemu"]
    link = f"base-image/{recipe.name}"
    assert (q["image"], q["kernel"], q["initrd"]) == (
        f"{link}/{base_image.DISK}", f"{link}/{base_image.KERNEL}", f"{link}/{base_image.INITRD}")
    assert f"{profile['build']['disk_gb']}G" == recipe.disk_size


def rendered_template(tmp_path) -> dict:
    from k4w.infra import packer_cli
    from k4w.derive.step_env import step_env

    cluster = Cluster.resolve(e2e_cluster())
    template = packer_hcl.parse(render.render_files(cluster, tmp_path / "out")["packer/debian-12-e2e.pkr.hcl"])
    # As the harness does: the variables' values as Packer's build gets them from the environment.
    template["variables"] = packer_cli.variable_values(
        template, step_env(cluster.profile("debian-12-e2e"), cluster).secret_environment)
    return template


def test_rerun_repeats_the_rendered_provisioners_in_order(tmp_path):
    template = rendered_template(tmp_path)
    found = rerun.steps(template)
    assert found[0].kind == "file" and found[0].destination == "/tmp/k4w-lib.sh"
    assert [s.source.name for s in found[1:]] == E2E_PROFILE["provision"]
    step = found[1]
    # The environment travels in Packer's env-var file; the command names only the two files.
    env_file = f"{rerun.REMOTE_DIR}/02-varfile.sh"
    assert step.env_file == env_file
    assert step.command == f"echo 'vagrant' | sudo -S -H bash -c '. {env_file} && exec bash {rerun.REMOTE_DIR}/02-01-proxy.sh'"
    # Every variable Packer passes, with the same value, as `export NAME='value'` lines sorted by name.
    variables = template.get("variables") or {}
    expected = dict(item.split("=", 1) for item in
                    ["PACKER_BUILD_NAME=qemu", "PACKER_BUILDER_TYPE=qemu",
                     *(rerun.interpolate(i, variables) for i in template["provisioners"][1]["environment_vars"])])
    names = re.findall(r"^export ([A-Za-z_][A-Za-z0-9_]*)='", step.env_file_content, re.M)
    assert names == sorted(expected)  # a value may span lines (K4W_APT_PROXY_CONF)
    sourced = subprocess.run(["bash", "-c", step.env_file_content + "env -0"], capture_output=True, check=True).stdout
    env = dict(item.split("=", 1) for item in sourced.decode().split("\0") if item)
    assert {k: env[k] for k in expected} == expected  # a quote or a blank in a value survives
    assert "{{" not in step.env_file_content
    assert env["HTTPS_PROXY"] == "http://10.0.2.2:40123" and env["K4W_CNI_FILE"] == "cni-cni-plugins-amd64-v0.6.0.tgz"
    assert env["K4W_RELEASE_JSON"].startswith('{"box": "debian-12-e2e", ')


def test_rerun_env_file_escapes_quotes_as_packer_does():
    text = rerun.packer_env_file(["B=it's", "A=$HOME x"], "qemu")
    assert text.splitlines() == ["export A='$HOME x'", "export B='it'\"'\"'s'",
                                 "export PACKER_BUILDER_TYPE='qemu'", "export PACKER_BUILD_NAME='qemu'"]


def test_rerun_resolves_packer_variables_and_refuses_other_expressions():
    variables = {"http_proxy": "http://10.0.2.2:40123"}
    assert rerun.interpolate("K4W_HTTP_PROXY=${var.http_proxy}", variables) == "K4W_HTTP_PROXY=http://10.0.2.2:40123"
    assert rerun.interpolate("X=$${var.http_proxy} %%{ y }", variables) == "X=${var.http_proxy} %{ y }"
    with pytest.raises(phases.E2EError, match="names no variable"):
        rerun.interpolate("X=${var.nope}", variables)
    for other in ('X=${env("HOME")}', "X=%{ if true }y%{ endif }"):
        with pytest.raises(phases.E2EError, match="cannot resolve"):
            rerun.interpolate(other, variables)


def test_rerun_refuses_what_it_cannot_repeat():
    with pytest.raises(phases.E2EError, match="'shell-local'; the re-run knows file and shell"):
        rerun.steps({"provisioners": [{"type": "shell-local", "inline": ["x"]}]})
    with pytest.raises(phases.E2EError, match="without 'script'"):
        rerun.steps({"provisioners": [{"type": "shell", "inline": ["x"]}]})


@pytest.mark.tools
def test_packer_validates_the_rendered_e2e_template(tmp_path):
    out = tmp_path / "out"
    render.render(Cluster.resolve(e2e_cluster()), out)
    res = packer_validate(out / "packer" / "debian-12-e2e.pkr.hcl", cwd=out)
    assert res.returncode == 0, res.stdout + res.stderr


# ------------------------------------------------------------------ phases and processes


def test_an_expired_budget_stops_the_command_and_names_the_phase(tmp_path):
    log = phases.Log(tmp_path / "e2e.log", lambda text: None)
    phase = phases.Phase("slow", 0.5)
    started = time.monotonic()
    with pytest.raises(phases.PhaseTimeout, match="phase 'slow' exceeded its 0 s budget while sleeping"):
        phases.run(["sh", "-c", "sleep 30 & sleep 30"], phase, log, "sleeping")
    assert time.monotonic() - started < 5


def test_a_failing_command_is_quoted_with_its_log(tmp_path):
    log = phases.Log(tmp_path / "e2e.log", lambda text: None)
    with pytest.raises(phases.E2EError, match=r"(?s)listing failed \(exit 2\):.*no-such-file.*full log: "):
        phases.run(["ls", "/no-such-file"], phases.Phase("p", 30), log, "listing")
    assert "no-such-file" in (tmp_path / "e2e.log").read_text()


def test_the_run_total_caps_each_phase():
    table = phases.Phases(lambda text: None, total_budget_s=0.0)
    with pytest.raises(phases.PhaseTimeout, match="total budget"):
        with table.phase("late", 60):
            pass
    with table.phase("cleanup", 60, capped=False) as phase:
        assert phase.budget_s == 60
    assert [r.status for r in table.records] == ["ok"]


def test_leftover_processes_are_found_by_pid_and_by_folder(tmp_path):
    marker = str(tmp_path / "work")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        # Until the child has exec'd, its command line is still ours: wait for that, bounded.
        deadline = time.monotonic() + 10
        while marker not in procs._cmdline(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(line.startswith(f"{proc.pid} ") for line in procs.leftovers([], [marker]))
        assert any(line.startswith(f"{proc.pid} ") for line in procs.leftovers([proc.pid], []))
    finally:
        proc.kill()
        proc.wait()
    assert procs.leftovers([proc.pid], [marker]) == []


def test_watchdog_stops_a_phase_whose_child_overruns(tmp_path):
    log = phases.Log(tmp_path / "e2e.log", lambda text: None)
    phase = phases.Phase("spec", 0.5)
    started = time.monotonic()
    with pytest.raises(phases.PhaseTimeout, match="phase 'spec' exceeded its 0 s budget"):
        with procs.watchdog(phase, log, protect=set()):
            subprocess.run(["sleep", "30"], check=True)  # stopped by SIGTERM -> CalledProcessError
    assert time.monotonic() - started < 10
    assert "stopping sleep" in (tmp_path / "e2e.log").read_text()


def test_dry_run_says_every_command_and_writes_nothing(tmp_path):
    from ci.e2e import run_e2e

    said: list[str] = []
    result = run_e2e(tmp_path / "out", dry_run=True, say=said.append)
    text = "\n".join(said)
    assert result.dry_run and not (tmp_path / "out").exists()
    for expected in ("debootstrap --variant=minbase", "squid -N -f", "proxy:\n  http: http://10.0.2.2:<port>",
                     "packer build -machine-readable -force -on-error=cleanup", "qemu-system-x86_64 -machine pc,accel=tcg",
                     "test_ssh_target(debian-12-e2e", "re-run every provisioner"):
        assert expected in text, expected


def _kubelet(invocation: str, restarts: int) -> str:
    """snapshot_text with an enabled, not yet joined kubelet in systemd's restart loop."""
    return snapshot_text().replace(
        "Id=kubelet.service\nLoadState=not-found\nActiveState=inactive\nInvocationID=\nActiveEnterTimestampMonotonic=0\nNRestarts=0",
        f"Id=kubelet.service\nLoadState=loaded\nActiveState=activating\nInvocationID={invocation}\n"
        f"ActiveEnterTimestampMonotonic={restarts * 10}\nNRestarts={restarts}")


def test_an_unjoined_kubelet_restarting_by_itself_is_expected_but_a_step_restarting_it_is_not():
    before = idempotence.parse(_kubelet("aaa", 49))
    looping = idempotence.parse(_kubelet("bbb", 70))
    expected, unexpected = idempotence.classify(idempotence.diff(before, looping), before, looping)
    assert [c.name for c, _ in expected] == ["kubelet.service"] and unexpected == []
    assert "crash loop" in expected[0][1]
    # A new invocation without systemd's own restart count rising: something restarted it.
    restarted = idempotence.parse(_kubelet("bbb", 49).replace("ActiveEnterTimestampMonotonic=490", "ActiveEnterTimestampMonotonic=999"))
    _, unexpected = idempotence.classify(idempotence.diff(before, restarted), before, restarted)
    assert [c.name for c in unexpected] == ["kubelet.service"]


def test_the_containerd_era_dry_run_names_its_own_box_folder_and_the_shared_base_image(tmp_path):
    from ci.e2e import run_e2e

    said: list[str] = []
    shared = tmp_path / "e2e" / "base-image"
    result = run_e2e(tmp_path / "e2e-ubuntu-2404", box="ubuntu-2404-e2e", base_images=shared, dry_run=True, say=said.append)
    text = "\n".join(said)
    assert result.dry_run and result.box == "ubuntu-2404-e2e" and not tmp_path.joinpath("e2e-ubuntu-2404").exists()
    assert "packer/ubuntu-2404-e2e.pkr.hcl" in text and "test_ssh_target(ubuntu-2404-e2e" in text
    assert "    box: ubuntu-2404-e2e\n" in text  # the rendered cluster.yml's node uses it
    assert f"base image debian-12 {shared}/" in text and f"-kernel {shared}/debian-12/vmlinuz" in text
    assert "containerd-2.3.7-linux-amd64.tar.gz" in text and "kubernetes-node-linux-amd64.tar.gz" in text


def test_an_unknown_ci_box_is_refused_naming_the_ones_there_are(tmp_path):
    from ci.e2e import run_e2e

    with pytest.raises(phases.E2EError, match="no CI box named 'ubuntu-2404'; the e2e boxes are: debian-12-e2e, ubuntu-2404-e2e, ubuntu-2604-e2e"):
        run_e2e(tmp_path / "out", box="ubuntu-2404", dry_run=True, say=lambda text: None)


def test_each_ci_box_has_its_own_output_folder_and_shares_one_base_image(tmp_path):
    from ci.e2e import BOXES, default_out
    from ci.e2e.run import _base_image_folder

    assert [default_out(tmp_path, b) for b in BOXES] == [tmp_path / "e2e", tmp_path / "e2e-ubuntu-2404", tmp_path / "e2e-ubuntu-2604"]
    shared = tmp_path / "e2e" / "base-image"
    shared.mkdir(parents=True)
    second = tmp_path / "e2e-ubuntu-2404"
    assert _base_image_folder(second, shared) == shared
    # The profile's qemu paths are relative to OUT (base-image/debian-12/disk.raw): reached through a link.
    assert (second / "base-image").is_symlink() and (second / "base-image").resolve() == shared
    assert _base_image_folder(second, shared) == shared  # again: the link is replaced, not refused
    assert _base_image_folder(tmp_path / "e2e", shared) == shared  # the default box's own folder
    own = tmp_path / "third"
    (own / "base-image").mkdir(parents=True)
    with pytest.raises(phases.E2EError, match="is a folder of its own"):
        _base_image_folder(own, shared)


class _FakeSsh:
    """The guest's ssh at the process boundary: answers each scan with canned output."""

    def __init__(self, journal_matches: int, journal_control: int):
        self.journal_matches, self.journal_control = journal_matches, journal_control
        self.marker = None

    def run(self, command, phase, what, *, input=None, check=True, quiet=False):
        from k4w.infra import proc

        if command.startswith("logger"):
            self.marker = input.strip()
            return proc.Result([], 0, "", "")
        if "journalctl" in command:
            found = self.journal_control if input == self.marker else self.journal_matches
            return proc.Result([], 0, f"entries 4321\nmatches {found}\n", "")
        files = "files 40000\n" + ("/etc/passwd\n" if input.endswith(":x:") else "")
        return proc.Result([], 0, files, "")


class _FakeGuest:
    def __init__(self, ssh):
        self.ssh = ssh


@pytest.mark.parametrize("matches, control, error", [
    (0, 1, None),
    (2, 1, "the box's journal holds the build proxy's password in 2 entries"),
    (0, 0, "the journal scan does not work"),
])
def test_the_secret_scan_reads_the_journal_and_proves_it_can(matches, control, error):
    from ci.e2e import run as run_mod

    guest = _FakeGuest(_FakeSsh(matches, control))
    credentials = squid.Credentials("k4w", "k4w!0123$e2e")
    if error is None:
        found = run_mod._secret_scan(guest, credentials, None)
        assert (found["journal_entries"], found["journal_matches"], found["journal_control"]) == (4321, 0, 1)
    else:
        with pytest.raises(phases.E2EError, match=re.escape(error)):
            run_mod._secret_scan(guest, credentials, None)


# ------------------------------------------------------------------ the guest's clock


def test_a_guest_on_an_emulated_clock_is_refused_with_the_fix():
    from ci.e2e import guest
    with pytest.raises(phases.E2EError, match=r"clock source is hpet.*tsc=reliable clocksource=tsc"):
        guest.require_fast_clock("hpet\n", "root=/dev/vda ro console=ttyS0")
    guest.require_fast_clock("tsc\n", "root=/dev/vda ro console=ttyS0 tsc=reliable clocksource=tsc")


def test_a_guest_cpu_without_aes_ni_is_refused_and_the_default_model_has_it():
    from ci.e2e import guest
    qemu64 = "flags\t\t: fpu de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 syscall nx lm nopl pni cx16 hypervisor lahf_lm svm"
    with pytest.raises(phases.E2EError, match=r"lacks aes, pclmulqdq, sse4_1.*-cpu qemu64,"):
        guest.require_cpu_features(qemu64)
    argv = guest.qemu_command(Path("d"), Path("k"), Path("i"), "a", memory_mb=1, cpus=1, ssh_port=1,
                              serial_log=Path("s"), pidfile=Path("p"))
    model = argv[argv.index("-cpu") + 1]
    assert all(f"+{flag.replace('_', '.')}" in model.split(",") for flag in guest.GO_CRYPTO_FLAGS)
    # Ubuntu 26.04's kernel under TCG: BMI1+BMI2 never boots, BMI2 alone panics in the BPF JIT's SHLX.
    assert not {"+bmi1", "+bmi2"} & set(model.split(","))


def test_a_guest_whose_kernel_prints_nothing_is_reported_at_once_not_after_the_boot_budget(tmp_path, monkeypatch):
    # Ubuntu 26.04's kernel stopped before its console under -cpu ...,+bmi1,+bmi2: QEMU kept running
    # silently and the run waited out the whole boot budget for SSH.
    from ci.e2e import guest as guest_mod
    from k4w.infra import proc as proc_mod

    class NoSsh:
        def run(self, *args, **kwargs):
            return subprocess.CompletedProcess([], 255, "", "Connection refused")

    monkeypatch.setattr(guest_mod, "FIRST_OUTPUT_S", 0.5)
    sleeper = proc_mod.start(["sleep", "30"], group=True, capture=False)
    try:
        silent = guest_mod.Guest(sleeper, NoSsh(), tmp_path / "serial.log", ["qemu-system-x86_64", "-cpu", "x"])
        began = time.monotonic()
        with pytest.raises(phases.E2EError, match=r"printed nothing on its serial console in 0.5 s.*-cpu x"):
            guest_mod._wait_for_ssh(silent, phases.Phase("boot guest", 60))
        assert time.monotonic() - began < 10
        # A kernel that printed its banner is waited for, up to the phase's own deadline.
        (tmp_path / "serial.log").write_text("[    0.000000] Linux version 7.0.0-14-generic\n")
        with pytest.raises(phases.E2EError, match="did not answer within phase"):
            guest_mod._wait_for_ssh(silent, phases.Phase("boot guest", 2))
    finally:
        sleeper.stop()


@pytest.mark.parametrize("profile", sorted((ROOT / "ci" / "e2e" / "boxes").glob("*.yml")), ids=lambda p: p.stem)
def test_every_e2e_box_boots_its_kernel_on_the_tsc(profile):
    # With two TCG vCPUs the kernel finds the TSCs "unsynchronized" and falls back to the HPET unless told.
    append = yaml.safe_load(profile.read_text())["build"]["qemu"]["append"].split()
    assert {"tsc=reliable", "clocksource=tsc"} <= set(append)


def test_the_default_suite_bakes_the_two_ci_boxes_and_ubuntu_2604_e2e_runs_on_request():
    from ci.e2e import BOXES, CI_BOXES

    assert CI_BOXES == ("debian-12-e2e", "ubuntu-2404-e2e")
    assert set(BOXES) - set(CI_BOXES) == {"ubuntu-2604-e2e"}

"""`invoke network-up` against the real libvirtd of this machine (qemu:///system): it defines the two
networks, a second run changes nothing, a stopped network is started again, and a network that differs
from cluster.yml is refused by name. Only networks named k4wtest-<random> on 10.250.x.y/29 ranges are
made and removed; the test never looks at others beyond reading their addresses to avoid a clash.
scripts/setup.sh installs libvirt; where its libvirtd is not running (a machine without systemd, as CI's),
the test starts one for itself as root and stops it by PID afterwards. Skipped, with the reason, only where
libvirt is not installed or libvirtd cannot be started (not root)."""

from __future__ import annotations

import ipaddress
import os
import random
import secrets
import shutil
import subprocess

import pytest
import yaml

from k4w.cluster import libvirt_network
from k4w.infra.errors import K4wError
from k4w.model import config as config_mod
from tests.helpers import modern_config, running_daemon

URI = "qemu:///system"


def virsh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=120, check=check)


# How long a libvirtd this test starts may take to answer (it probes QEMU's capabilities first; 2 cores under load).
LIBVIRTD_START_TIMEOUT_S = 120


def _reached() -> subprocess.CompletedProcess | None:
    try:
        return virsh("uri", check=False)
    except subprocess.TimeoutExpired:
        return None


@pytest.fixture
def libvirtd(tmp_path):
    if not shutil.which("virsh"):
        pytest.skip("virsh is not installed (apt-get install libvirt-clients libvirt-daemon-system): no real libvirt to test against")
    reached = _reached()
    if reached is not None and reached.returncode == 0:
        yield
        return
    daemon = shutil.which("libvirtd") or "/usr/sbin/libvirtd"
    if not os.path.exists(daemon) or os.geteuid() != 0:
        why = reached.stderr.strip() if reached is not None else "no answer within 120 s"
        pytest.skip(f"libvirtd is not reachable at {URI} (`virsh -c {URI} uri`: {why}) and this test cannot start one "
                    f"({'not installed: apt-get install libvirt-daemon-system' if not os.path.exists(daemon) else 'not root'})")
    # In the foreground (no --daemon), so the PID is this child's and stopping it stops libvirtd.
    with running_daemon([daemon], answers=lambda: (answer := _reached()) is not None and answer.returncode == 0,
                        timeout=LIBVIRTD_START_TIMEOUT_S, log=tmp_path / "libvirtd.log", what="libvirtd started by this test",
                        poll=1):
        yield


def free_subnets() -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Network]:
    """Two adjacent /29s in 10.250.0.0/16 that no libvirt network and no host route touches."""
    used = []
    for name in virsh("net-list", "--all", "--name").stdout.split():
        root = libvirt_network._parse(virsh("net-dumpxml", "--inactive", name).stdout)
        used += [ipaddress.IPv4Interface(f"{ip.get('address')}/{ip.get('netmask') or ip.get('prefix') or 32}").network
                 for ip in root.findall("ip") if ip.get("family", "ipv4") == "ipv4" and ip.get("address")]
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=False).stdout if shutil.which("ip") else ""
    used += [ipaddress.IPv4Network(word, strict=False) for word in routes.split() if "/" in word and word[0].isdigit()]
    for _ in range(100):
        block = ipaddress.IPv4Network(f"10.250.{random.randrange(256)}.{random.randrange(0, 256, 16)}/28")
        if not any(block.overlaps(u) for u in used):
            return tuple(block.subnets(new_prefix=29))  # type: ignore[return-value]
    pytest.fail("no free /28 in 10.250.0.0/16 after 100 tries")


def cfg_for(tag: str, management: ipaddress.IPv4Network, cluster: ipaddress.IPv4Network, **overrides):
    nodes = list(cluster.hosts())   # [0] is the host's gateway address
    data = modern_config(**{
        "host.provider": "libvirt", "libvirt.management_network": f"k4wtest-{tag}-m", "libvirt.cluster_network": f"k4wtest-{tag}-c",
        "libvirt.management_cidr": str(management), "libvirt.management_forward": "none",
        "network.node_cidr": str(cluster), "nodes.0.ip": str(nodes[1]), "nodes.1.ip": str(nodes[2]), "nodes.2.ip": str(nodes[3]),
        **overrides})
    data.pop("hyperv")
    return config_mod.parse(yaml.safe_dump(data), "test.yml")


def test_network_up_defines_keeps_restarts_and_refuses_on_the_real_libvirtd(libvirtd, capsys):
    tag = secrets.token_hex(3)
    management, cluster = free_subnets()
    cfg = cfg_for(tag, management, cluster)
    names = [cfg.libvirt.management_network, cfg.libvirt.cluster_network]
    assert all(n.startswith("k4wtest-") for n in names)
    try:
        first = libvirt_network.network_up(cfg)
        assert [line.split(":")[1].strip() for line in first] == ["defined, started, set to autostart (isolated, host address "
                                                                   f"{management[1]}/29, DHCP {management[2]}-{management[6]})",
                                                                   f"defined, started, set to autostart (isolated, host address {cluster[1]}/29, no DHCP)"]
        active = set(virsh("net-list", "--name").stdout.split())
        autostart = set(virsh("net-list", "--autostart", "--name").stdout.split())
        assert set(names) <= active and set(names) <= autostart
        live = libvirt_network._parse(virsh("net-dumpxml", names[1]).stdout)
        assert live.find("forward") is None and live.find("ip").get("address") == str(cluster[1])
        assert live.find("ip/dhcp") is None and live.find("bridge").get("name").startswith("virbr")   # libvirt's choice
        before = [virsh("net-dumpxml", "--inactive", n).stdout for n in names]

        again = libvirt_network.network_up(cfg)
        assert all("nothing changed" in line for line in again), again
        assert [virsh("net-dumpxml", "--inactive", n).stdout for n in names] == before

        virsh("net-destroy", names[1])
        restarted = libvirt_network.network_up(cfg)
        assert "nothing changed" in restarted[0] and f"'{names[1]}': started (" in restarted[1]

        with pytest.raises(K4wError) as refused:
            libvirt_network.network_up(cfg_for(tag, management, cluster, **{"libvirt.management_forward": "nat"}))
        assert (f"libvirt network '{names[0]}' (libvirt.management_network) exists but differs from cluster.yml: "
                "forward mode none (isolated), cluster.yml wants nat") in str(refused.value)
        assert [virsh("net-dumpxml", "--inactive", n).stdout for n in names] == before   # the refusal changed nothing
    finally:
        for name in names:
            assert name.startswith("k4wtest-")
            virsh("net-destroy", name, check=False)
            virsh("net-undefine", name, check=False)
    assert not set(names) & set(virsh("net-list", "--all", "--name").stdout.split())

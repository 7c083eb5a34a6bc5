"""`invoke network-up` on a libvirt host: the two networks' XML, and the idempotent define / start /
autostart / refuse logic against a fake `virsh` at the process boundary (tests/fakes/virsh.py). The same
against the real libvirtd: test_network_libvirt_real.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lxml import etree

from k4w.cluster import libvirt_network as lvnet
from k4w.infra.errors import K4wError
from k4w.model import config as config_mod
from tests.fakes.virsh import VirshOnPath
from tests.helpers import config_dict, modern_config

# libvirt's own schema of network XML, shipped with the library (Debian: libvirt0, here 9.0.0).
NETWORK_RNG = Path("/usr/share/libvirt/schemas/network.rng")


def libvirt_cfg(**overrides):
    data = modern_config(**{"host.provider": "libvirt", **overrides})
    data.pop("hyperv")
    return config_mod.parse(yaml.safe_dump(data), "test.yml")


def xml_of(cfg, role: str) -> etree._Element:
    want = next(w for w in lvnet.wanted(cfg) if w.role == role)
    return etree.fromstring(lvnet.network_xml(want).encode())


@pytest.fixture
def virsh(tmp_path, monkeypatch):
    return VirshOnPath(tmp_path, monkeypatch)


# ------------------------------------------------------------------ the XML


def test_management_network_nats_holds_the_first_address_and_leases_the_rest():
    root = xml_of(libvirt_cfg(), "management")
    assert root.findtext("name") == "k4w-management"
    assert root.find("forward").get("mode") == "nat"
    ip = root.find("ip")
    # netmask, as vagrant-libvirt 0.11.2 reads it (util/network_util.rb); a prefix= would hide the network from it.
    assert (ip.get("address"), ip.get("netmask"), ip.get("prefix")) == ("192.168.123.1", "255.255.255.0", None)
    assert [(r.get("start"), r.get("end")) for r in ip.findall("dhcp/range")] == [("192.168.123.2", "192.168.123.254")]
    assert root.find("bridge") is None   # libvirt picks a free virbrN


def test_management_forward_none_is_an_isolated_network_with_dhcp():
    root = xml_of(libvirt_cfg(**{"libvirt.management_forward": "none", "libvirt.management_cidr": "10.20.30.0/29"}), "management")
    assert root.find("forward") is None
    assert [(r.get("start"), r.get("end")) for r in root.findall("ip/dhcp/range")] == [("10.20.30.2", "10.20.30.6")]


def test_cluster_network_is_isolated_without_dhcp_with_the_host_gateway_of_node_cidr():
    cfg = libvirt_cfg(**{"network.node_cidr": "172.30.8.0/22", "nodes.0.ip": "172.30.8.10", "nodes.1.ip": "172.30.8.11",
                         "nodes.2.ip": "172.30.8.21", "libvirt.cluster_network": "lab-cluster"})
    root = xml_of(cfg, "cluster")
    assert root.findtext("name") == "lab-cluster" and root.find("forward") is None
    assert root.find("ip").attrib == {"address": "172.30.8.1", "netmask": "255.255.252.0"}
    assert root.find("ip/dhcp") is None and root.find("dns").get("enable") == "no"
    # the same gateway as Hyper-V's Internal switch (derive_network)
    from k4w.derive.values import derive_network
    assert derive_network(cfg).gateway == "172.30.8.1"


@pytest.mark.parametrize("forward", ["nat", "none"])
def test_both_networks_are_valid_for_libvirts_own_schema(forward):
    if not NETWORK_RNG.is_file():
        pytest.skip(f"{NETWORK_RNG} is missing (apt-get install libvirt0): libvirt's network schema is not on this machine")
    schema = etree.RelaxNG(etree.parse(str(NETWORK_RNG)))
    for role in ("management", "cluster"):
        root = xml_of(libvirt_cfg(**{"libvirt.management_forward": forward}), role)
        assert schema.validate(root), (role, schema.error_log.last_error)


# ------------------------------------------------------------------ define, keep, start, refuse


def test_first_run_defines_starts_and_autostarts_both(virsh, capsys):
    lines = lvnet.network_up(libvirt_cfg())
    assert [c[0] for c in virsh.changes()] == ["net-define", "net-start", "net-autostart"] * 2
    assert [c[1] for c in virsh.changes() if c[0] != "net-define"] == ["k4w-management"] * 2 + ["k4w-cluster"] * 2
    assert lines == ["management network 'k4w-management': defined, started, set to autostart "
                     "(forward nat, host address 192.168.123.1/24, DHCP 192.168.123.2-192.168.123.254)",
                     "cluster network 'k4w-cluster': defined, started, set to autostart "
                     "(isolated, host address 192.168.250.1/24, no DHCP)"]
    assert all(c[1] == "qemu:///system" for c in virsh.calls())
    assert "defined, started" in capsys.readouterr().out


def test_second_run_changes_nothing_and_says_so(virsh):
    lvnet.network_up(libvirt_cfg())
    before = len(virsh.changes())
    lines = lvnet.network_up(libvirt_cfg())
    assert len(virsh.changes()) == before   # libvirt's uuid, bridge and mac in the stored XML are not differences
    assert all("already defined and active as cluster.yml says" in line and "nothing changed" in line for line in lines)


def test_an_inactive_network_is_started_not_redefined(virsh):
    lvnet.network_up(libvirt_cfg())
    state = virsh.state
    state["networks"]["k4w-cluster"]["active"] = False
    virsh.state = state
    before = len(virsh.changes())
    lines = lvnet.network_up(libvirt_cfg())
    assert virsh.changes()[before:] == [["net-start", "k4w-cluster"]]
    assert lines[1].startswith("cluster network 'k4w-cluster': started (")


def test_a_transient_network_of_the_same_definition_is_made_persistent(virsh):
    cfg = libvirt_cfg()
    want = lvnet.wanted(cfg)[1]
    virsh.network(want.name, lvnet.network_xml(want), persistent=False, autostart=False)
    lines = lvnet.network_up(cfg)
    cluster_changes = [c for c in virsh.changes() if c[1] == "k4w-cluster" or c[1].endswith("/k4w-cluster.xml")]
    assert [c[0] for c in cluster_changes] == ["net-define", "net-autostart"]   # already running: no net-start
    assert lines[1].startswith("cluster network 'k4w-cluster': defined, set to autostart (")


@pytest.mark.parametrize("existing, expected", [
    ("<network><name>k4w-management</name><forward mode='route'/><ip address='192.168.123.1' netmask='255.255.255.0'>"
     "<dhcp><range start='192.168.123.2' end='192.168.123.254'/></dhcp></ip></network>",
     "forward mode route, cluster.yml wants nat"),
    ("<network><name>k4w-management</name><ip address='192.168.123.1' netmask='255.255.255.0'>"
     "<dhcp><range start='192.168.123.2' end='192.168.123.254'/></dhcp></ip></network>",
     "forward mode none (isolated), cluster.yml wants nat"),
    ("<network><name>k4w-management</name><forward/><ip address='192.168.123.1' prefix='25'>"
     "<dhcp><range start='192.168.123.2' end='192.168.123.126'/></dhcp></ip></network>",
     "host address 192.168.123.1/25, cluster.yml wants 192.168.123.1/24"),
    ("<network><name>k4w-management</name><forward mode='nat'/><ip address='192.168.123.1' netmask='255.255.255.0'>"
     "<dhcp><range start='192.168.123.100' end='192.168.123.200'/></dhcp></ip></network>",
     "DHCP range 192.168.123.100-192.168.123.200, cluster.yml wants 192.168.123.2-192.168.123.254"),
    ("<network><name>k4w-management</name><forward mode='nat'/><ip address='192.168.123.1' netmask='255.255.255.0'/></network>",
     "DHCP range none, cluster.yml wants 192.168.123.2-192.168.123.254"),
])
def test_an_existing_network_that_differs_is_refused_by_name_and_nothing_changes(virsh, existing, expected):
    virsh.network("k4w-management", existing)
    with pytest.raises(K4wError) as refused:
        lvnet.network_up(libvirt_cfg())
    message = str(refused.value)
    assert f"libvirt network 'k4w-management' (libvirt.management_network) exists but differs from cluster.yml: {expected}" in message
    assert "set libvirt.management_network to a new name" in message
    assert "virsh -c qemu:///system net-destroy k4w-management; virsh -c qemu:///system net-undefine k4w-management" in message
    assert virsh.changes() == []   # neither network touched, not even the absent cluster one


def test_a_cluster_network_with_dhcp_is_refused(virsh):
    virsh.network("k4w-cluster", "<network><name>k4w-cluster</name><ip address='192.168.250.1' netmask='255.255.255.0'>"
                                 "<dhcp><range start='192.168.250.2' end='192.168.250.254'/></dhcp></ip></network>")
    with pytest.raises(K4wError, match=r"'k4w-cluster' \(libvirt.cluster_network\) exists but differs from cluster.yml: "
                                       r"DHCP range 192.168.250.2-192.168.250.254, cluster.yml wants none"):
        lvnet.network_up(libvirt_cfg())


def test_a_running_network_whose_definition_was_edited_is_refused_too(virsh):
    cfg = libvirt_cfg()
    want = lvnet.wanted(cfg)[1]
    edited = lvnet.network_xml(want).replace("192.168.250.1", "192.168.250.254")
    virsh.network(want.name, lvnet.network_xml(want), live_xml=edited)
    with pytest.raises(K4wError, match=r"host address 192.168.250.254/24, cluster.yml wants 192.168.250.1/24 \(running now"):
        lvnet.network_up(cfg)


def test_a_new_network_that_overlaps_another_libvirt_network_is_refused_naming_it(virsh):
    virsh.network("default", "<network><name>default</name><forward mode='nat'/>"
                             "<ip address='192.168.250.1' netmask='255.255.255.0'/></network>", active=False)
    with pytest.raises(K4wError) as refused:
        lvnet.network_up(libvirt_cfg())
    assert ("libvirt network 'k4w-cluster' would hold 192.168.250.1/24, which overlaps libvirt network 'default' "
            "(192.168.250.1/24): choose another network.node_cidr") in str(refused.value)
    assert virsh.changes() == []


def test_unreachable_libvirt_fails_before_any_change_with_libvirts_reason(virsh):
    virsh.state = {"down": True}
    with pytest.raises(K4wError, match=r"(?s)virsh -c qemu:///system uri failed \(exit 1\).*Failed to connect socket"):
        lvnet.network_up(libvirt_cfg())
    assert virsh.changes() == []


def test_a_start_that_libvirt_refuses_names_the_command_and_libvirts_message(virsh):
    virsh.state = {"start_fails": {"k4w-management": "internal error: Network is already in use by interface eth1"}}
    with pytest.raises(K4wError, match=r"(?s)net-start k4w-management failed \(exit 1\).*already in use by interface eth1"):
        lvnet.network_up(libvirt_cfg())


def test_require_names_network_up_until_both_networks_are_ready_and_changes_nothing(virsh):
    with pytest.raises(K4wError, match=r"the libvirt management network 'k4w-management' \(libvirt.management_network\) "
                                       r"is not defined: run `invoke network-up` first"):
        lvnet.require(libvirt_cfg())
    lvnet.network_up(libvirt_cfg())
    made = len(virsh.changes())
    lvnet.require(libvirt_cfg())
    state = virsh.state
    state["networks"]["k4w-cluster"]["active"] = False
    virsh.state = state
    with pytest.raises(K4wError, match=r"'k4w-cluster' \(libvirt.cluster_network\) is not active: run `invoke network-up`"):
        lvnet.require(libvirt_cfg())
    with pytest.raises(K4wError, match="exists but differs from cluster.yml: forward mode nat, cluster.yml wants none"):
        lvnet.require(libvirt_cfg(**{"libvirt.management_forward": "none"}))
    assert len(virsh.changes()) == made


def test_another_uri_reaches_virsh(virsh):
    lvnet.network_up(libvirt_cfg(**{"libvirt.uri": "qemu+ssh://lab/system"}))
    assert {c[1] for c in virsh.calls()} == {"qemu+ssh://lab/system"}


def test_dry_run_prints_the_xml_and_the_commands_and_runs_nothing(virsh, capsys):
    assert lvnet.network_up(libvirt_cfg(), dry_run=True) == []
    out = capsys.readouterr().out
    assert virsh.calls() == []
    for name in ("k4w-management", "k4w-cluster"):
        assert f"virsh -c qemu:///system net-define {name}.xml" in out
        assert f"virsh -c qemu:///system net-start {name}" in out and f"virsh -c qemu:///system net-autostart {name}" in out
    assert '<forward mode="nat"/>' in out and '<range start="192.168.123.2" end="192.168.123.254"/>' in out
    assert '<ip address="192.168.250.1" netmask="255.255.255.0"/>' in out


def test_missing_virsh_names_its_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(K4wError, match="virsh is not installed: apt-get install -y libvirt-clients"):
        lvnet.network_up(libvirt_cfg())


def test_plan_lines_name_each_network_its_mode_and_the_host_address():
    assert lvnet.plan_lines(libvirt_cfg(**{"libvirt.management_forward": "none"})) == [
        "network-up: libvirt network 'k4w-management' (management, qemu:///system): isolated, host address 192.168.123.1/24, "
        "DHCP 192.168.123.2-192.168.123.254",
        "network-up: libvirt network 'k4w-cluster' (cluster, qemu:///system): isolated, host address 192.168.250.1/24, no DHCP",
    ]


def test_plan_shows_the_libvirt_networks_in_place_of_the_hyperv_switch():
    from k4w.commands import plan
    from k4w.derive.cluster import Cluster

    libvirt = plan.network_up_lines(Cluster.resolve(libvirt_cfg()))
    assert libvirt == lvnet.plan_lines(libvirt_cfg()) and len(libvirt) == 2
    hyperv = plan.network_up_lines(Cluster.resolve(config_mod.parse(yaml.safe_dump(config_dict()), "t.yml")))
    assert hyperv == ["network-up: Internal switch 'k4w-cluster', host address 192.168.250.1/24, NetNat for 192.168.250.0/24"]


def test_the_cli_network_up_dry_run_of_a_libvirt_cluster_yml(tmp_path, virsh):
    """The real CLI: network-up --dry-run of a libvirt cluster.yml prints virsh, not PowerShell, and runs no
    virsh (the fake records every call)."""
    from tests.helpers import invoke, write_config

    data = modern_config(**{"host.provider": "libvirt"})
    data.pop("hyperv")
    dry = invoke("network-up", "--config", str(write_config(tmp_path / "cluster.yml", data)), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "virsh -c qemu:///system net-define k4w-cluster.xml" in dry.stdout and "powershell" not in dry.stdout
    assert virsh.calls() == []

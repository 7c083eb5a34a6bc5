"""cluster-up, -reset and -down on a libvirt host (host.provider libvirt, issue 35), against the recorded fakes.

What differs from Hyper-V (tests/cluster/test_up.py): the networks are checked with virsh, not PowerShell;
no host script attaches a cluster NIC (it is in the domain from `vagrant up`, with the MAC cluster.json
names); one `vagrant up --parallel` boots every machine; Vagrant keeps the domain's id under libvirt/.
What does not: the static IP is set in the guest by MAC, re-applied on every run, kept by cluster-reset.
"""

from __future__ import annotations

import json
import re

import pytest

from k4w.cluster import libvirt_network as lvnet, up as up_mod
from k4w.cluster.machines import load_cluster, vagrant_env
from k4w.derive.cluster_nic import cluster_nic_mac, mac_with
from k4w.infra import proc
from k4w.infra.errors import K4wError
from k4w.infra.vagrant import Vagrant
from tests.cluster.conftest import libvirt_config, machines_of, render_to, run_up
from tests.fakes.cluster_world import FakeClock, FakeWorld
from tests.fakes.virsh import VirshOnPath

NODES = ("master", "worker-linux", "worker-win")


@pytest.fixture
def lv_render(tmp_path):
    out = tmp_path / "build"
    cluster = render_to(out, libvirt_config(**{"cluster.name": "k4wlv", "libvirt.accelerator": "tcg"}))
    return cluster, out


@pytest.fixture
def fake_virsh(tmp_path, monkeypatch):
    return VirshOnPath(tmp_path, monkeypatch)


@pytest.fixture
def world(lv_render, fake_virsh):
    """The fake world on a libvirt host whose networks `invoke network-up` made (the fake virsh process)."""
    cluster, out = lv_render
    lvnet.network_up(cluster.config)
    w = FakeWorld(machines_of(out), provider="libvirt")
    w.cluster, w.out, w.clock = cluster, out, FakeClock()
    w.virsh, w.fake_virsh = lvnet.Virsh(cluster.config.libvirt.uri), fake_virsh
    return w


def virsh_queries(world) -> list[str]:
    """What cluster-up asked virsh, without -c URI (network-up's own calls before it are left out)."""
    return [" ".join(c[2:]) for c in world.fake_virsh.calls()]


def state(world) -> dict:
    return json.loads((world.out / "cluster-state.json").read_text())


def test_cluster_json_carries_what_the_vagrantfile_needs_for_libvirt(lv_render):
    cluster, out = lv_render
    data = json.loads((out / "vagrant" / "cluster.json").read_text())
    assert data["provider"] == "libvirt"
    assert data["libvirt"] == {"uri": "qemu:///system", "storage_pool": "default", "driver": "qemu",
                               "management_network": "k4w-management", "management_cidr": "192.168.123.0/24",
                               "management_forward": "nat", "cluster_network": "k4w-cluster",
                               # tcg: the one emulated CPU (control_plane.qemu_cpu), by libvirt's feature names
                               "cpu_model": "qemu64", "cpu_features": ["ssse3", "sse4.1", "sse4.2", "popcnt", "aes", "pclmuldq"]}
    # No Hyper-V switch a reader could take for the libvirt networks.
    assert "management_switch" not in data and "cluster_switch" not in data
    # Each machine's static cluster MAC, the very one the guest's cluster-ip step looks for.
    info = load_cluster(out)
    assert info.on_libvirt and info.libvirt == data["libvirt"]
    for m in info.machines:
        machine = next(x for x in data["machines"] if x["name"] == m.name)
        assert machine["cluster_mac"] == mac_with(info.cluster_mac(m), ":") == mac_with(cluster_nic_mac("k4wlv", m.name), ":")
    assert len({m["cluster_mac"] for m in data["machines"]}) == len(NODES)


def test_kvm_is_the_kvm_domain_type(tmp_path):
    render_to(tmp_path / "out", libvirt_config(**{"libvirt.accelerator": "kvm"}))
    assert json.loads((tmp_path / "out" / "vagrant" / "cluster.json").read_text())["libvirt"]["driver"] == "kvm"


def test_a_hyperv_cluster_json_reads_as_hyperv(tmp_path):
    from tests.helpers import config_dict

    render_to(tmp_path / "out", config_dict())
    info = load_cluster(tmp_path / "out")
    assert info.provider == "hyperv" and not info.on_libvirt and info.libvirt == {}


def test_full_run_checks_both_networks_boots_all_at_once_and_runs_no_powershell(world, capsys):
    before, made = len(world.fake_virsh.calls()), len(world.fake_virsh.changes())
    run_up(world)
    log = world.log
    asked = virsh_queries(world)[before:]
    assert asked[0] == "net-list --all --name" and "net-dumpxml --inactive k4w-management" in asked
    assert "net-dumpxml --inactive k4w-cluster" in asked
    assert world.fake_virsh.changes()[made:] == [], "cluster-up changed a network"
    assert "vagrant up master worker-linux worker-win" in log
    assert not any(line.startswith("host:") for line in log), "Hyper-V's PowerShell ran on a libvirt host"
    macs = {m["name"]: m["cluster_mac"] for m in machines_of(world.out)}
    ip_runs = [line for line in log if "cluster-ip" in line and ("bash" in line or "& " in line)]
    assert any(f"K4W_CLUSTER_MAC={macs['master']}" in line for line in ip_runs)
    assert any(f"-MacAddress '{macs['worker-win'].replace(':', '-').upper()}'" in line for line in ip_runs)
    assert "nothing to attach" in capsys.readouterr().out
    assert list(state(world)["steps"])[:3] == ["up", "cluster-nic", "cluster-ip"]
    # Vagrant keeps a libvirt machine's id (the domain UUID) under machines/<name>/libvirt/.
    assert all(state(world)["vms"][name] == world.id_file(name).read_text() for name in NODES)
    assert "/libvirt/" in world.id_file("master").as_posix()


def _edit_network(world, name: str, **state) -> None:
    data = world.fake_virsh.state
    if state.pop("gone", False):
        del data["networks"][name]
    data["networks"].get(name, {}).update(state)
    world.fake_virsh.state = data


@pytest.mark.parametrize("edit, said", [
    ({"name": "k4w-cluster", "gone": True},
     "the libvirt cluster network 'k4w-cluster' (libvirt.cluster_network) is not defined: run `invoke network-up` first"),
    ({"name": "k4w-cluster", "active": False},
     "the libvirt cluster network 'k4w-cluster' (libvirt.cluster_network) is not active: run `invoke network-up` first"),
    ({"name": "k4w-management", "gone": True},
     "the libvirt management network 'k4w-management' (libvirt.management_network) is not defined"),
])
def test_a_missing_or_inactive_network_stops_before_any_vm_work(world, edit, said):
    _edit_network(world, **edit)
    with pytest.raises(K4wError) as err:
        run_up(world)
    assert said in str(err.value)
    assert not any(line.startswith("vagrant") for line in world.log)


def test_a_network_that_differs_from_cluster_yml_stops_cluster_up_as_network_up_refuses_it(world):
    """The same reading as network-up's: a cluster network with DHCP (edited by hand) would hand the VMs'
    cluster NICs addresses of its own; cluster-up names it before any VM gets a NIC there."""
    data = world.fake_virsh.state
    xml = data["networks"]["k4w-cluster"]["xml"]
    planted = xml.replace('netmask="255.255.255.0"/>', 'netmask="255.255.255.0"><dhcp><range start="192.168.250.100" '
                                                            'end="192.168.250.200"/></dhcp></ip>')
    assert planted != xml
    data["networks"]["k4w-cluster"]["xml"] = planted
    world.fake_virsh.state = data
    with pytest.raises(K4wError, match="libvirt network 'k4w-cluster' .libvirt.cluster_network. exists but differs from "
                                       "cluster.yml: .*DHCP"):
        run_up(world)
    assert not any(line.startswith("vagrant") for line in world.log)


def test_second_run_reapplies_every_static_ip_and_attaches_nothing(world):
    run_up(world)
    world.log.clear()
    run_up(world)
    assert world.log[0] == "vagrant status"
    assert sum("cluster-ip" in line and ("bash" in line or "& " in line) for line in world.log) == len(NODES)
    assert not any("vagrant up" in line or "kubeadm" in line or line.startswith("host:") for line in world.log)


def test_reset_keeps_the_domains_and_their_ips_and_the_next_up_rebuilds_on_them(world):
    run_up(world)
    world.log.clear()
    up_mod.cluster_reset(world.cluster, world.out, vagrant=world.vagrant, remote=world.remote, host=world.host,
                         clock=world.clock, virsh=world.virsh)
    assert list(state(world)["steps"]) == ["up", "cluster-nic", "cluster-ip"]
    assert not any(line.startswith("host:") for line in world.log)
    world.log.clear()
    run_up(world)
    assert not any("vagrant up" in line for line in world.log)
    assert any("cluster-init.sh" in line for line in world.log)


def test_a_domain_destroyed_outside_cluster_up_is_named_as_a_libvirt_domain(world):
    run_up(world)
    was = state(world)["vms"]["worker-linux"]
    world.destroy_out_of_band("worker-linux")
    with pytest.raises(K4wError, match=re.escape(f"worker-linux: its libvirt domain k4wlv-worker-linux (Id {was}) no longer exists")):
        run_up(world)


def test_a_box_for_another_provider_is_not_taken_for_the_libvirt_one(world, tmp_path):
    """The same box name for Hyper-V only: the libvirt box is still missing, and cluster-up says how to build it."""
    world.boxes = {("k4w/ubuntu-2404", "hyperv", "0"), ("k4w/windows-2022", "hyperv", "0")}
    with pytest.raises(K4wError, match="box ubuntu-2404 is not built"):
        run_up(world)


def test_dry_run_prints_the_exact_commands_and_changes_nothing(lv_render, capsys):
    cluster, out = lv_render
    up_mod.cluster_up(cluster, out, dry_run=True, validate=False, clock=FakeClock())
    printed = capsys.readouterr().out
    assert "$ virsh -c qemu:///system net-list --all --name" in printed
    assert "$ virsh -c qemu:///system net-dumpxml --inactive k4w-management" in printed
    assert "$ virsh -c qemu:///system net-dumpxml --inactive k4w-cluster" in printed
    ups = [line for line in printed.splitlines() if " up --provider=" in line]
    assert len(ups) == 1 and ups[0].endswith(" vagrant up --provider=libvirt --parallel master worker-linux worker-win")
    assert "VAGRANT_DEFAULT_PROVIDER=libvirt " in ups[0]
    assert "powershell" not in printed.lower() and "cluster-nic.ps1" not in printed
    assert "nothing to attach" in printed
    assert not (out / "cluster-state.json").exists() and not (out / "kubeconfig").exists()


def test_the_real_cli_dry_run_on_the_libvirt_example(tmp_path):
    from tests.helpers import ROOT, invoke

    out = tmp_path / "build"
    result = invoke("cluster-up", "--config", str(ROOT / "examples" / "libvirt" / "cluster.yml"), "--out", str(out), "--dry-run")
    printed = result.stdout + result.stderr
    assert result.returncode == 0, printed
    assert "virsh -c qemu:///system net-dumpxml --inactive k4w-cluster" in printed
    assert re.search(r"vagrant up --provider=libvirt --parallel master worker-linux worker-win$", printed, re.M), printed
    assert not out.exists()


def test_the_driver_boots_libvirt_machines_in_one_parallel_vagrant_up(tmp_path, capsys):
    vagrant = Vagrant(tmp_path, vagrant_env(tmp_path, "libvirt"), proc.Runner(dry_run=True), provider="libvirt")
    vagrant.up(["a", "b"])
    vagrant.up(["a"])
    vagrant.destroy()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    assert [line.split(" vagrant ", 1)[1] for line in lines] == [
        "up --provider=libvirt --parallel a b", "up --provider=libvirt a", "destroy --force"]
    assert all("VAGRANT_DEFAULT_PROVIDER=libvirt" in line for line in lines)


def test_the_plan_names_the_libvirt_networks_not_hyperv_switches(lv_render):
    """The lines `invoke plan` prints for network-up and vagrant up (k4w/commands/plan.py) on libvirt."""
    from k4w.commands import plan

    cfg = lv_render[0].config
    network_up, nics = "\n".join(plan.network_up_lines(lv_render[0])), lvnet.nics_plan(cfg)
    assert "'k4w-management'" in network_up and "192.168.123.1/24" in network_up and "'k4w-cluster'" in network_up
    assert "192.168.250.1/24" in network_up and "no DHCP" in network_up
    assert "'k4w-management'" in nics and "'k4w-cluster'" in nics and "--parallel" in nics
    assert not re.search("switch|Hyper-V|NetNat", network_up + nics)


def test_after_a_host_reboot_the_domains_start_again_and_get_their_ips_back(world):
    """libvirt leaves domains shut off after a host reboot (no autostart); cluster-up starts them in one
    parallel up and sets each static IP again, with no NIC to put back."""
    run_up(world)
    for name in NODES:
        world.states[name] = "shutoff"
    world.log.clear()
    run_up(world)
    up_at = world.log.index("vagrant up master worker-linux worker-win")
    ips = [i for i, line in enumerate(world.log) if "cluster-ip" in line and ("bash" in line or "& " in line)]
    assert len(ips) == len(NODES) and min(ips) > up_at
    assert not any(line.startswith("host:") or "kubeadm" in line for line in world.log)

"""`invoke network-up` on a Linux host (host.provider libvirt): the management and cluster networks.

docs/linux-host.md "The networks". Each VM has a NIC on two libvirt networks, as on Hyper-V it has one
on two switches:
- the management network (libvirt.management_network on libvirt.management_cidr): the host holds the first
  address and libvirt's dnsmasq leases the rest by DHCP, because vagrant-libvirt's management NIC takes its
  address by DHCP and Vagrant reads the lease to reach the VM; forward mode nat (outbound through the host,
  like Hyper-V's Default Switch) or, with management_forward none, no <forward> (isolated);
- the cluster network (libvirt.cluster_network): isolated (no <forward>) and without DHCP, the host holds
  the gateway of network.node_cidr (derive_network's, the address Hyper-V's Internal switch gets), and each
  node's cluster NIC has its static nodes[].ip.

The XML follows https://libvirt.org/formatnetwork.html (libvirt/libvirt docs/formatnetwork.rst, read at
commit 206b59a2; <forward mode>, <ip address netmask>, <dhcp><range start end> all date from libvirt
0.3.0-0.8.7 by its "since" notes, so 9.0 has them; the real-libvirtd test in
tests/cluster/test_network_libvirt_real.py defines them on libvirt 9.0.0). No <bridge name>: libvirt picks a
free virbrN for a nat or isolated network and keeps it in the definition (formatnetwork.rst, "bridge"); a
name of k4w's own would have to avoid every existing interface and fit IFNAMSIZ (15 characters), and
nothing in k4w needs it: vagrant-libvirt attaches NICs by network name.

Idempotent: a network that exists with the same forward mode, host address/prefix and DHCP range is left as
it is (started and set to autostart when it is not); one that differs is refused by name with what differs,
never redefined under VMs that may be attached to it. Every virsh runs through k4w.infra.proc with a timeout.
"""

from __future__ import annotations

import ipaddress
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from k4w.derive.values import derive_network
from k4w.infra import proc, ui
from k4w.infra.errors import K4wError, ToolMissing
from k4w.model.config import Config

VIRSH_INSTALL = "apt-get install -y libvirt-clients (or libvirt-daemon-system for the daemon too)"
VIRSH_TIMEOUT = 60   # seconds: a query or a definition
START_TIMEOUT = 120  # seconds: net-start brings up the bridge and its dnsmasq


@dataclass(frozen=True)
class Wanted:
    """One network as k4w defines it: the parts it owns and compares."""

    role: str                    # "management" or "cluster"
    name: str
    setting: str                 # the cluster.yml key that names it
    forward: str | None          # "nat", or None: isolated (no <forward>)
    host: ipaddress.IPv4Interface  # the bridge's address and prefix
    dhcp: tuple[ipaddress.IPv4Address, ipaddress.IPv4Address] | None

    @property
    def mode(self) -> str:
        return f"forward {self.forward}" if self.forward else "isolated"

    def describe(self) -> str:
        dhcp = f"DHCP {self.dhcp[0]}-{self.dhcp[1]}" if self.dhcp else "no DHCP"
        return f"{self.mode}, host address {self.host.with_prefixlen}, {dhcp}"


@dataclass(frozen=True)
class Seen:
    """The same parts, read from a definition virsh printed."""

    forward: str | None
    addresses: tuple[ipaddress.IPv4Interface, ...]   # every IPv4 <ip> of the network
    dhcp: tuple[tuple[str, str], ...]                # the <range>s of the <ip> that holds k4w's address


def wanted(cfg: Config) -> list[Wanted]:
    """The management network, then the cluster network, from cluster.yml."""
    lv = cfg.libvirt
    mgmt = lv.management_cidr
    hosts = list(mgmt.hosts())
    net = derive_network(cfg)
    return [
        Wanted("management", lv.management_network, "libvirt.management_network",
               "nat" if lv.management_forward == "nat" else None,
               ipaddress.IPv4Interface(f"{hosts[0]}/{mgmt.prefixlen}"), (hosts[1], hosts[-1])),
        Wanted("cluster", lv.cluster_network, "libvirt.cluster_network", None,
               ipaddress.IPv4Interface(f"{net.gateway}/{net.node_prefixlen}"), None),
    ]


def network_xml(want: Wanted) -> str:
    """The definition net-define reads (https://libvirt.org/formatnetwork.html)."""
    root = etree.Element("network")
    etree.SubElement(root, "name").text = want.name
    if want.forward:
        etree.SubElement(root, "forward", mode=want.forward)
    if want.role == "cluster":
        # No DNS server on the cluster network: nodes resolve through the management network's (or the
        # cluster's CoreDNS), and with neither DHCP nor DNS libvirt starts no dnsmasq there at all.
        etree.SubElement(root, "dns", enable="no")
    # netmask, not prefix: vagrant-libvirt 0.11.2 finds a network by the address it computes from
    # /network/ip/@address and @netmask only (lib/vagrant-libvirt/util/network_util.rb, libvirt_networks);
    # with prefix= it would not recognise the network and try to create another of the same name.
    ip = etree.SubElement(root, "ip", address=str(want.host.ip), netmask=str(want.host.netmask))
    if want.dhcp:
        dhcp = etree.SubElement(ip, "dhcp")
        etree.SubElement(dhcp, "range", start=str(want.dhcp[0]), end=str(want.dhcp[1]))
    return etree.tostring(root, pretty_print=True, encoding="unicode")


def _parse(xml: str) -> etree._Element:
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    return etree.fromstring(xml.encode("utf-8"), parser)


def read(xml: str, want: Wanted) -> Seen:
    """The parts k4w owns, from `virsh net-dumpxml` output."""
    root = _parse(xml)
    forward = root.find("forward")
    # formatnetwork.rst: a <forward> without mode means nat.
    mode = None if forward is None else (forward.get("mode") or "nat")
    addresses, dhcp = [], ()
    for ip in root.findall("ip"):
        if ip.get("family", "ipv4") != "ipv4" or not ip.get("address"):
            continue
        mask = ip.get("netmask") or ip.get("prefix") or "32"
        try:
            iface = ipaddress.IPv4Interface(f"{ip.get('address')}/{mask}")
        except ValueError:
            continue
        addresses.append(iface)
        if iface == want.host:
            dhcp = tuple((r.get("start", "?"), r.get("end", "?")) for r in ip.findall("dhcp/range"))
    return Seen(mode, tuple(addresses), dhcp)


def differences(want: Wanted, seen: Seen) -> list[str]:
    """What differs between the network k4w wants and the one that exists, one phrase each."""
    found = []
    if seen.forward != want.forward:
        found.append(f"forward mode {seen.forward or 'none (isolated)'}, cluster.yml wants {want.forward or 'none (isolated)'}")
    shown = ", ".join(a.with_prefixlen for a in seen.addresses) or "none"
    if seen.addresses != (want.host,):
        found.append(f"host address {shown}, cluster.yml wants {want.host.with_prefixlen}")
    else:
        expected = ((str(want.dhcp[0]), str(want.dhcp[1])),) if want.dhcp else ()
        if seen.dhcp != expected:
            shown_dhcp = ", ".join(f"{a}-{b}" for a, b in seen.dhcp) or "none"
            found.append(f"DHCP range {shown_dhcp}, cluster.yml wants {', '.join(f'{a}-{b}' for a, b in expected) or 'none'}")
    return found


# ------------------------------------------------------------------ virsh


class Virsh:
    """virsh against one libvirt URI, each call through k4w.infra.proc with a timeout."""

    def __init__(self, uri: str):
        self.uri = uri

    def argv(self, *args: str) -> list[str]:
        return ["virsh", "-c", self.uri, *args]

    def run(self, *args: str, timeout: float = VIRSH_TIMEOUT) -> proc.Result:
        try:
            return proc.run(self.argv(*args), timeout=timeout)
        except ToolMissing:
            raise K4wError(f"virsh is not installed: {VIRSH_INSTALL}") from None

    def ok(self, *args: str, timeout: float = VIRSH_TIMEOUT) -> str:
        """stdout of a call that must succeed; else a K4wError quoting virsh."""
        result = self.run(*args, timeout=timeout)
        if result.returncode != 0:
            raise K4wError(f"{shlex.join(self.argv(*args))} failed (exit {result.returncode}): {proc.tail(result.output, 5)}")
        return result.stdout

    def names(self, *flags: str) -> set[str]:
        """`net-list --name` with flags (--all, --persistent, --autostart): locale-independent output."""
        return {line.strip() for line in self.ok("net-list", *flags, "--name").splitlines() if line.strip()}


@dataclass(frozen=True)
class State:
    exists: bool
    active: bool = False
    persistent: bool = False
    autostart: bool = False
    problems: tuple[str, ...] = ()   # differences from what cluster.yml wants (defined and live)


def state(virsh: Virsh, want: Wanted) -> State:
    if want.name not in virsh.names("--all"):
        return State(False)
    active = want.name in virsh.names()
    persistent = want.name in virsh.names("--all", "--persistent")
    autostart = want.name in virsh.names("--all", "--autostart")
    # The definition a restart would use (--inactive) and, when running, what the bridge has now: a
    # `virsh net-edit` takes effect only on the next start, so the two can differ.
    problems = differences(want, read(virsh.ok("net-dumpxml", "--inactive", want.name), want))
    if active:
        problems += [f"{p} (running now; the definition differs from the running network)"
                     for p in differences(want, read(virsh.ok("net-dumpxml", want.name), want)) if p not in problems]
    return State(True, active, persistent, autostart, tuple(problems))


def overlaps(virsh: Virsh, want: Wanted) -> list[str]:
    """Other libvirt networks whose IPv4 subnet overlaps want's: libvirt refuses to start the second of
    two such networks ("Network is already in use by interface"), so say which before defining it."""
    found = []
    for name in sorted(virsh.names("--all") - {want.name}):
        result = virsh.run("net-dumpxml", "--inactive", name)
        if result.returncode != 0:
            continue   # removed meanwhile
        for address in read(result.stdout, want).addresses:
            if address.network.overlaps(want.host.network):
                found.append(f"libvirt network '{name}' ({address.with_prefixlen})")
    return found


def refusal(cfg: Config, want: Wanted, problems: tuple[str, ...] | list[str]) -> str:
    uri = cfg.libvirt.uri
    return (f"libvirt network '{want.name}' ({want.setting}) exists but differs from cluster.yml: {'; '.join(problems)}. "
            f"k4w does not redefine a network that VMs may be attached to. Either set {want.setting} to a new name "
            f"(network-up then defines it), or, once no VM uses it, remove it with `virsh -c {uri} net-destroy {want.name}; "
            f"virsh -c {uri} net-undefine {want.name}` and run invoke network-up again")


def _define(virsh: Virsh, want: Wanted) -> None:
    with tempfile.TemporaryDirectory(prefix="k4w-net-") as folder:
        path = Path(folder) / f"{want.name}.xml"
        path.write_text(network_xml(want), encoding="utf-8")
        virsh.ok("net-define", str(path))


def network_up(cfg: Config, dry_run: bool = False) -> list[str]:
    """Define, start and autostart both networks where needed; returns what was done, one line each."""
    virsh = Virsh(cfg.libvirt.uri)
    wants = wanted(cfg)
    if dry_run:
        for want in wants:
            ui.say(f"# {want.role} network: {want.describe()}\n# {want.name}.xml:\n{network_xml(want).rstrip()}")
            ui.say(f"# each command runs only when needed: define when '{want.name}' is absent, start when inactive, "
                   "autostart when off; an existing network that differs is refused, never redefined")
            for args in (("net-define", f"{want.name}.xml"), ("net-start", want.name), ("net-autostart", want.name)):
                proc.show(virsh.argv(*args))
        return []
    if not shutil.which("virsh"):
        raise K4wError(f"virsh is not installed: {VIRSH_INSTALL}")
    virsh.ok("uri")   # reachable at all: fail here with libvirt's own reason, before any change
    current = {want.name: state(virsh, want) for want in wants}
    # Refuse before changing anything: a second network's problem must not leave the first half-made.
    for want in wants:
        found = current[want.name]
        if found.exists and found.problems:
            raise K4wError(refusal(cfg, want, found.problems))
        if not found.exists and (clash := overlaps(virsh, want)):
            raise K4wError(f"libvirt network '{want.name}' would hold {want.host.with_prefixlen}, which overlaps "
                           f"{'; '.join(clash)}: choose another {'libvirt.management_cidr' if want.role == 'management' else 'network.node_cidr'} "
                           "in cluster.yml, or remove that network")
    done = []
    for want in wants:
        found = current[want.name]
        steps = []
        if not found.exists or not found.persistent:
            _define(virsh, want)
            steps.append("defined")
        if not found.active:
            virsh.ok("net-start", want.name, timeout=START_TIMEOUT)
            steps.append("started")
        if not found.autostart:
            virsh.ok("net-autostart", want.name)
            steps.append("set to autostart")
        line = (f"{want.role} network '{want.name}': {', '.join(steps)} ({want.describe()})" if steps else
                f"{want.role} network '{want.name}': already defined and active as cluster.yml says ({want.describe()}); nothing changed")
        ui.say(line)
        done.append(line)
    return done


def require(cfg: Config, virsh: Virsh | None = None, dry_run: bool = False) -> None:
    """cluster-up's first step on a libvirt host, as the cluster switch check is on Hyper-V: both networks
    exist as cluster.yml says and are active, else a K4wError naming what to run. The same reading of a
    network as network-up's (state), so a network network-up would refuse is refused here too, before any VM
    gets a NIC on it. Changes nothing; a dry run prints the queries and runs none."""
    virsh = virsh or Virsh(cfg.libvirt.uri)
    if dry_run:
        proc.show(virsh.argv("net-list", "--all", "--name"))
        for want in wanted(cfg):
            proc.show(virsh.argv("net-dumpxml", "--inactive", want.name))
        return
    for want in wanted(cfg):
        found = state(virsh, want)
        if not found.exists or not found.active:
            raise K4wError(f"the libvirt {want.role} network '{want.name}' ({want.setting}) is "
                           f"{'not defined' if not found.exists else 'not active'}: run `invoke network-up` first")
        if found.problems:
            raise K4wError(refusal(cfg, want, found.problems))


def plan_lines(cfg: Config) -> list[str]:
    """`invoke plan`'s network-up lines: each network, its mode and the host's address on it."""
    return [f"network-up: libvirt network '{w.name}' ({w.role}, {cfg.libvirt.uri}): {w.describe()}" for w in wanted(cfg)]


def nics_plan(cfg: Config) -> str:
    """Where the plan's `vagrant up` line says each VM's two NICs are: both in the domain from its creation
    (vagrant/Vagrantfile), so no host step attaches one as on Hyper-V."""
    lv = cfg.libvirt
    return (f"management NIC on libvirt network '{lv.management_network}', cluster NIC on '{lv.cluster_network}' "
            "with its static MAC, both in the domain from creation; all machines at once (--parallel)")

"""The steps of cluster-up, each small and idempotent, sharing one Context.

Order (issue "invoke cluster-up"): network check -> vagrant up -> cluster NICs (host) -> their IPs -> kubeadm
init -> manifests + master Ready -> Linux joins -> Windows joins -> all nodes Ready -> CoreDNS,
kube-proxy and Flannel rolled out -> demo.
Each step is recorded in build/cluster-state.json when it finished; cluster_up (up.py) skips
recorded steps, so a rerun after a failure continues where it stopped.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from k4w.derive import values as derive, step_env as derive_steps, identities
from k4w.outdir import private
from k4w.infra import proc, ui
from k4w.model import profiles
from k4w.infra import sources
from ..render import escape
from k4w.model.config import Config
from k4w.infra.errors import K4wError
from k4w.derive.values import Proxy
from ..bake.catalogue import BOX_PREFIX
from k4w.cluster.kubeapi import ApiError
from k4w.infra.redact import redact, register_secret
from k4w.cluster import bootstrap_token
from k4w.derive import control_plane, join_config
from k4w.cluster import existing_api
from . import libvirt_network
from .machines import ClusterInfo, Machine, VagrantDriver, mac_with, vm_id
from .network import NOT_ELEVATED, cluster_nic_command, switch_check_script
from .remote import RemoteError, RemoteExec, sh_env
from .state import State

LINUX_DIR = "/tmp/k4w"              # where scripts and manifests are uploaded on Linux guests
WINDOWS_DIR = "C:\\k4w"             # ... and on Windows guests
WINDOWS_CONFIG_DIR = "C:\\k\\config"  # docs/internals.md "Windows box"
WINRM_SCOPE_SCRIPT = "C:\\k\\winrm-scope.ps1"  # guest/windows/node/winrm-scope.ps1, installed by the bake
KUBECTL = "kubectl"                 # on the master as user vagrant, who gets ~/.kube/config from cluster-init.sh
TOKEN_TTL = "1h"                    # join tokens live just long enough for this run
JOIN_CONFIG_FILE = "kubeadm-join.yaml"  # the join config (token inside) on a Windows node, under WINDOWS_DIR; cluster-join*.ps1 deletes it
DEMO_DEPLOYMENT = "win-webserver"
# The demo's Nano Server pod that checks its volumes once (templates/manifests/demo-win-webserver.yaml.j2).
DEMO_VOLUME_CHECK = "win-nanoserver-volumes"
DEMO_NODE_PORT = 30080              # templates/manifests/demo-win-webserver.yaml.j2
SWITCH_MISSING = 3                  # exit code of network.switch_check_script when the switch is absent

_JOIN = re.compile(
    r"kubeadm join\s+(?P<api>\S+:\d+)\s+--token\s+(?P<token>[a-z0-9]{6}\.[a-z0-9]{16})\s+"
    r"--discovery-token-ca-cert-hash\s+(?P<hash>sha256:[0-9a-f]{64})"
)


class UnreadableAnswer(K4wError):
    """A guest answered, but not in the form asked for (e.g. kubectl -o json printed no JSON)."""


class Clock:
    """Wall time and sleeping, replaceable by a fake in tests."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass
class Context:
    cfg: Config
    out: Path
    cluster: ClusterInfo
    vagrant: VagrantDriver
    remote: RemoteExec
    host: Callable[[str], tuple[int, str]]
    clock: Clock
    state: State
    proxy: Proxy  # the resolved model's (k4w.derive.cluster.Cluster.proxy), what each node gets
    join_timeouts: dict  # the model's (Cluster.join_timeouts): every worker's kubeadm JoinConfiguration.timeouts
    dry_run: bool = False
    poll_seconds: float = control_plane.POLL_SECONDS
    started: float = 0.0
    timings: dict = field(default_factory=dict)
    artifacts: Path | None = None   # where the rendered files are read: a dry run's scratch render, else out
    # cluster.existing: the API of the cluster k4w did not make (k4w.cluster.kubeapi.Client) and the record of
    # what k4w added there (k4w.cluster.existing.Record); None for a cluster with a k4w master.
    api: object | None = None
    record: object | None = None
    windows_objects: list = field(default_factory=list)   # what existing.step_apply creates there
    flannel: object | None = None   # the cluster's own Flannel DaemonSet (k4w.cluster.flannel_address)
    # host.provider libvirt: the host's virsh (None: cluster.yml's libvirt.uri); ctx.host (PowerShell) is Hyper-V's.
    virsh: libvirt_network.Virsh | None = None

    @property
    def rendered(self) -> Path:
        return self.artifacts or self.out

    @property
    def ready_timeout(self) -> int:
        return self.cfg.cluster.ready_timeout


# ------------------------------------------------------------------ helpers

def wait_for(ctx: Context, what: str, check: Callable[[], tuple[bool, str]], timeout: float) -> None:
    """proc.wait_for on the context's clock (a fake one in tests) and poll interval. A dry run
    shows the check's command once and says what it would wait for: it never pretends success."""
    if ctx.dry_run:
        check()
        ui.say(f"would wait up to {timeout:.0f} s for {what}, checking every {ctx.poll_seconds:.0f} s")
        return
    proc.wait_for(what, not_yet_on_failure(check), timeout, clock=ctx.clock.now, sleep=ctx.clock.sleep, poll=ctx.poll_seconds)


def not_yet_on_failure(check: Callable[[], tuple[bool, str]]) -> Callable[[], tuple[bool, str]]:
    """A check whose remote command failed (sshd not up yet after a reboot, the API server
    restarting, half a JSON answer) has simply not seen the condition yet: poll again until the
    deadline, and let the timeout message carry the last failure."""
    def polled() -> tuple[bool, str]:
        try:
            return check()
        except (RemoteError, UnreadableAnswer, ApiError) as exc:   # ApiError: an existing cluster's API, briefly away
            return False, f"the check itself failed: {exc}"
    return polled


# The words of client-go (kubectl's, kubeadm's) when a request never reached a serving API server: a
# refused or reset TCP connection, a TLS handshake that timed out (e.g. `failed to download openapi: Get
# "https://<ip>:6443/openapi/v2": dial tcp <ip>:6443: connect: connection refused`), or a kube-apiserver that
# listens again but is still starting: its OpenAPI document not served yet (`failed to download openapi:
# unknown`, the fifth ubuntu-2604-e2e run, right after a restart) or a 503 (`the server is currently unable to
# handle the request`). Every command sent through on_master_api may run twice safely: apply, patch, get,
# delete --ignore-not-found, and a token create whose extra tokens delete_join_tokens removes.
API_AWAY = re.compile(r"connect: connection refused|The connection to the server \S+ was refused|"
                      r"net/http: TLS handshake timeout|connection reset by peer|Unable to connect to the server|"
                      r"failed to download openapi: unknown|the server is currently unable to handle the request")


def kubectl(ctx: Context, args: str) -> str:
    """kubectl on the master, through on_master_api."""
    return on_master_api(ctx, f"{KUBECTL} {args}")


def on_master_api(ctx: Context, command: str) -> str:
    """A command on the master that calls the API server (kubectl, kubeadm token). When the API server is
    away (on a loaded host kube-apiserver is restarted by its liveness probe, also just after kubeadm init),
    wait for it and run the command again, up to cluster.ready_timeout, instead of failing cluster-up on
    its first call (the seventh libvirt run: `kubeadm token create` met a restarting kube-apiserver)."""
    try:
        return ctx.remote.run(ctx.cluster.master, command)
    except RemoteError as exc:
        if ctx.dry_run or not API_AWAY.search(exc.tail):
            raise
        away = next(line.strip() for line in exc.tail.splitlines() if API_AWAY.search(line))
    ui.say(f"{ctx.cluster.master.name}: the API server did not answer `{redact(command)}` ({away[-160:]}); "
           f"running it again once it answers (up to {ctx.ready_timeout:.0f} s)")
    answered: list[str] = []

    def again() -> tuple[bool, str]:
        try:
            answered.append(ctx.remote.run(ctx.cluster.master, command))
        except RemoteError as exc:
            if not API_AWAY.search(exc.tail):
                raise  # the API server answered and refused the command: that is the command's result
            return False, exc.tail.strip().splitlines()[-1]
        return True, ""

    proc.wait_for(f"the API server to answer `{command}`", again, ctx.ready_timeout, clock=ctx.clock.now,
                  sleep=ctx.clock.sleep, poll=ctx.poll_seconds)
    return answered[-1]


def node_conditions(ctx: Context) -> dict[str, dict]:
    """{node name: its Ready condition} from `kubectl get nodes -o json` on the master (from the API
    of a cluster k4w did not make)."""
    if ctx.api is not None:
        return existing_api.node_conditions(ctx.api)
    raw = kubectl(ctx, "get nodes -o json")
    try:
        items = json.loads(raw or "{}").get("items", [])
    except json.JSONDecodeError:
        raise UnreadableAnswer(f"{ctx.cluster.master.name}: kubectl get nodes -o json returned no JSON: {raw[-300:]!r}") from None
    result = {}
    for item in items:
        ready = next((c for c in item.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), {})
        result[item["metadata"]["name"]] = ready
    return result


def describe_condition(cond: dict | None) -> str:
    if not cond:
        return "not registered with the API server yet"
    text = f"Ready={cond.get('status', '?')}"
    if cond.get("reason"):
        text += f" ({cond['reason']}"
        text += f": {cond['message']})" if cond.get("message") else ")"
    return text


def wait_ready(ctx: Context, machines: list[Machine]) -> None:
    def check() -> tuple[bool, str]:
        conditions = node_conditions(ctx)
        waiting = []
        for m in machines:
            cond = conditions.get(m.name)
            if cond and cond.get("status") == "True":
                node = ctx.state.node(m.name)
                if "ready_seconds" not in node:
                    ctx.state.set_node(m.name, ready_seconds=round(ctx.clock.now() - node.get("started", ctx.started), 1))
                delete_join_tokens(ctx, m)
            else:
                waiting.append(f"node {m.name} is not Ready, last condition: {describe_condition(cond)}")
        return not waiting, "; ".join(waiting)

    names = ", ".join(m.name for m in machines)
    if ctx.dry_run and any(not m.is_master for m in machines):
        ui.say(f"would delete each node's join token ({bootstrap_token.NAMESPACE}/{bootstrap_token.SECRET_PREFIX}<id>) "
               "as soon as the node is Ready")
    wait_for(ctx, f"{names} to be Ready", check, ctx.ready_timeout)


def remember_join_token(ctx: Context, m: Machine, token: str) -> None:
    """Note the id (never the secret) of a join token made for m in the state file, before the join
    uses it, so that it is deleted once m is Ready, also by a later run after a failure."""
    if ctx.dry_run:
        return
    token_id = token.split(".", 1)[0]
    ctx.state.set_node(m.name, join_tokens=[*ctx.state.node(m.name).get("join_tokens", []), token_id])


def join_token_description(m: Machine) -> str:
    """The description of every join token `kubeadm token create` makes for m (the Secret's `description`)."""
    return f"k4w: join of {m.name} (cluster-up)"


# kubectl's arguments that list the bootstrap token Secrets (type bootstrap.kubernetes.io/token, a field
# selector Secrets support) as name, tab, data.description: never the token's secret half.
JOIN_TOKEN_LIST = (f"-n {bootstrap_token.NAMESPACE} get secrets --field-selector type={bootstrap_token.SECRET_TYPE} -o "
                   "jsonpath=" + shlex.quote('{range .items[*]}{.metadata.name}{"\\t"}{.data.description}{"\\n"}{end}'))


def described_token_ids(listed: str, description: str) -> list[str]:
    """Ids of the tokens in JOIN_TOKEN_LIST's answer whose description is this one."""
    ids = []
    for line in listed.splitlines():
        name, _, encoded = line.partition("\t")
        try:
            found = base64.b64decode(encoded.strip(), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            continue
        if found == description and name.startswith(bootstrap_token.SECRET_PREFIX):
            ids.append(name.removeprefix(bootstrap_token.SECRET_PREFIX))
    return ids


def described_join_tokens(ctx: Context, m: Machine) -> list[str]:
    """Ids of the bootstrap tokens on k4w's master described as m's join token: also those of an attempt
    whose answer was lost (kube-apiserver stored the Secret and restarted before replying, and the command
    ran again), which no state file records."""
    return described_token_ids(kubectl(ctx, JOIN_TOKEN_LIST), join_token_description(m))


def delete_join_tokens(ctx: Context, m: Machine) -> None:
    """Delete the join tokens made for m, now that it is Ready: its kubelet has its own credentials
    since the TLS bootstrap, and a token left valid (1 h; until deleted on a cluster whose token
    cleaner does not run) lets whoever reads it register a node. By the id only (Secret
    kube-system/bootstrap-token-<id>), so the secret half is never on a command line; idempotent.
    On k4w's own master also every token described as m's (described_join_tokens): a token create that
    ran again left one unrecorded. Only while m has a recorded token, so that the waits, which call this
    for every Ready node on every check, list nothing once its tokens are gone (or for the master)."""
    ids = ctx.state.node(m.name).get("join_tokens") or []
    if ids and ctx.api is None and not ctx.dry_run:
        ids = [*ids, *(i for i in described_join_tokens(ctx, m) if i not in ids)]
    for token_id in ids:
        if ctx.api is not None:   # a cluster k4w did not make: through its API
            bootstrap_token.delete(ctx.api, token_id)
        else:
            kubectl(ctx, f"-n {bootstrap_token.NAMESPACE} delete secret {bootstrap_token.SECRET_PREFIX}{token_id} --ignore-not-found")
    if ids:
        ctx.state.set_node(m.name, join_tokens=[])
        ui.say(f"{m.name} is Ready: deleted its join token{'s' if len(ids) > 1 else ''} ({', '.join(ids)})")


def join_parameters(ctx: Context, m: Machine) -> dict[str, str]:
    """A fresh, short-lived join token for m from the master, parsed (never executed as a string); for a
    cluster k4w did not make, a bootstrap token made through its API (k4w.cluster.existing_api).
    --description names m, so that delete_join_tokens finds a token whose answer never came back
    (`kubeadm token create --description`: k8s.io/kubernetes v1.11.10 and v1.37.2 cmd/kubeadm/app/cmd/token.go)."""
    if ctx.api is not None:
        return existing_api.join_parameters(ctx)
    out = on_master_api(ctx, f"sudo kubeadm token create --print-join-command --ttl {TOKEN_TTL} "
                             f"--description {shlex.quote(join_token_description(m))}")
    match = _JOIN.search(out)
    if not match:
        raise K4wError(f"{ctx.cluster.master.name}: kubeadm token create printed no join command: {out.strip()[-300:]!r}")
    register_secret(match["token"])  # never printed from here on, in errors or logs
    return {"api": match["api"], "token": match["token"], "hash": match["hash"]}


def upload_linux(ctx: Context, m: Machine, source: Path, name: str | None = None) -> str:
    dest = f"{LINUX_DIR}/{name or source.name}"
    ctx.remote.upload(m, source, dest)
    return dest


def upload_windows(ctx: Context, m: Machine, source: Path, dest_dir: str = WINDOWS_DIR) -> str:
    dest = f"{dest_dir}\\{source.name}"
    ctx.remote.upload(m, source, dest)
    return dest


def upload_secret(ctx: Context, m: Machine, secret: str, name: str) -> str:
    """Hand a guest a secret as a file (`vagrant winrm` has no standard input, a command line is
    visible to every process on both ends and sudo logs it): written 0600 in a private host
    folder, uploaded, deleted here at once; the guest script reads and deletes its copy
    (cluster-join*.ps1 -ConfigFile, cluster-proxy.*)."""
    with tempfile.TemporaryDirectory(prefix="k4w-secret-") as folder:   # mode 0700
        path = Path(folder) / name
        write_private(path, secret)
        return upload_windows(ctx, m, path) if m.is_windows else upload_linux(ctx, m, path)


def prepare_dirs(ctx: Context, m: Machine) -> None:
    if m.is_windows:
        ctx.remote.run(m, f"New-Item -ItemType Directory -Force -Path {escape.ps(WINDOWS_DIR)}, {escape.ps(WINDOWS_CONFIG_DIR)} | Out-Null")
    else:
        # Private: cluster-proxy.sh's value file may hold the proxy password while it is there.
        ctx.remote.run(m, f"install -d -m 0700 {LINUX_DIR} && mkdir -p {LINUX_DIR}/manifests/patches")


# ------------------------------------------------------------------ the steps

def step_network(ctx: Context) -> None:
    """The cluster switch (Hyper-V), or both libvirt networks, must exist before any VM gets a NIC on it."""
    if ctx.cluster.on_libvirt:
        libvirt_network.require(ctx.cfg, ctx.virsh, ctx.dry_run)
        return
    code, output = ctx.host(switch_check_script(ctx.cfg))
    if code == SWITCH_MISSING:
        raise K4wError(f"the cluster switch '{ctx.cfg.hyperv.cluster_switch}' does not exist: run `invoke network-up` "
                       "in an elevated terminal first (it creates the switch, the host gateway address and the NAT)")
    if code != 0:
        raise K4wError(f"checking the cluster switch failed (exit {code}): {output}")


def machines_not_running(ctx: Context, states: dict[str, str] | None = None) -> list[str]:
    states = ctx.vagrant.status() if states is None else states
    return [m.name for m in ctx.cluster.machines if states.get(m.name) != "running"]


def record_vm_ids(ctx: Context) -> None:
    """Remember which VM (Hyper-V VM, libvirt domain) each machine is, so a later run notices one replaced
    behind its back."""
    if ctx.dry_run:
        return
    ctx.state.set_vms({m.name: vm_id(ctx.out, m.name, ctx.cluster.provider) for m in ctx.cluster.machines})


def vm_kind(ctx: Context) -> str:
    """What the provider's VM is called, in messages."""
    return "libvirt domain" if ctx.cluster.on_libvirt else "Hyper-V VM"


def check_vms_are_the_recorded_ones(ctx: Context, states: dict[str, str]) -> None:
    """Refuse to go on with a cluster whose VMs are not the ones it was built on.

    states: a `vagrant status` just taken, which made Vagrant forget the id of a VM that is gone.
    A VM destroyed outside k4w (Hyper-V Manager, `vagrant destroy`) would otherwise be re-created
    from the box by the restart below, and one re-created out of band already was: either way that
    node has none of the cluster's state (no kubeadm join, no proxy), and cluster-up would wait for
    it to be Ready until its timeout."""
    if ctx.dry_run:
        return
    recorded = ctx.state.vms()
    if recorded is None:   # a state file from before VM ids were kept: adopt what is there now
        record_vm_ids(ctx)
        return
    problems = []
    for m in ctx.cluster.machines:
        was, now = recorded.get(m.name), vm_id(ctx.out, m.name, ctx.cluster.provider)
        if not was:
            continue
        if states.get(m.name, "not_created") == "not_created" or not now:
            problems.append(f"{m.name}: its {vm_kind(ctx)} {m.vmname} (Id {was}) no longer exists: it was destroyed "
                            "outside cluster-up")
        elif now != was:
            problems.append(f"{m.name}: it is now {vm_kind(ctx)} Id {now}, not the VM {was} this cluster was built on: "
                            "it was re-created outside cluster-up")
    if problems:
        raise K4wError(
            f"the cluster's VMs changed behind k4w's back ({ctx.state.path} records the VMs it was built on):\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\nA replaced VM has none of the cluster's state. Run `invoke cluster-down` and then `invoke cluster-up` "
            "to build the cluster again; if every VM exists and runs, `invoke cluster-reset` and then "
            "`invoke cluster-up` rebuild it on the VMs as they are now.")


def build_task(m: Machine) -> str:
    return "build-windows" if m.is_windows else "build-ubuntu"


def newest_box_version(catalogue: Path) -> str | None:
    """The version the Vagrantfile pins (its newest_box_version): the highest in the catalogue.
    k4w's versions are numeric segments (bake.catalogue.box_version), compared as numbers."""
    try:
        versions = [v["version"] for v in json.loads(catalogue.read_text(encoding="utf-8")).get("versions", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise K4wError(f"{catalogue} is not a readable box catalogue ({exc}); rebuild the box") from None
    return max(versions, key=lambda v: tuple(int(p) if p.isdigit() else -1 for p in str(v).split(".")), default=None)


def step_boxes(ctx: Context, machines: list[Machine]) -> None:
    """Add each box the machines to be created need, once, before they boot at once: concurrent
    `vagrant up`s adding the same box collide on Vagrant's download lock (k4w.infra.vagrant.Vagrant.up)."""
    catalogues = {m.box: (Path(m.box_catalogue), m) for m in machines if m.box}
    if not catalogues:
        return
    installed = ctx.vagrant.boxes()
    for box, (catalogue, m) in sorted(catalogues.items()):
        name = BOX_PREFIX + box
        if not catalogue.is_file():
            if ctx.dry_run:
                ui.say(f"box {box} is not built yet ({catalogue} does not exist): run `invoke {build_task(m)}` "
                       "first, or the real run stops here", style="yellow")
            elif not any(n == name and p == ctx.cluster.provider for n, p, _ in installed):
                raise K4wError(f"box {box} is not built: {catalogue} does not exist and Vagrant has no {name} box. "
                               f"Run `invoke {build_task(m)}` first")
            continue
        if (name, ctx.cluster.provider, newest_box_version(catalogue)) not in installed:
            ctx.vagrant.box_add(catalogue)


def step_up(ctx: Context) -> None:
    states = ctx.vagrant.status()
    pending = [m for m in ctx.cluster.machines if states.get(m.name) != "running"]
    if pending:
        step_boxes(ctx, [m for m in pending if states.get(m.name, "not_created") == "not_created"])
        ctx.vagrant.up([m.name for m in pending])
    still = machines_not_running(ctx)
    if still and not ctx.dry_run:
        raise K4wError(f"vagrant up finished but these machines are not running: {', '.join(still)}")
    record_vm_ids(ctx)


def step_cluster_nic(ctx: Context) -> None:
    """Every VM's cluster NIC, from the host (host/cluster-nic.ps1): on the cluster switch, with its
    static MAC and MAC spoofing. Run for every machine on every cluster-up, because Vagrant moves
    every adapter to the management switch on each cold start, and one failed attach must not leave
    a machine without its NIC for good (it was a Vagrant trigger before)."""
    macs = {ctx.cluster.cluster_mac(m): m.name for m in ctx.cluster.machines}
    if len(macs) != len(ctx.cluster.machines):   # 40 bits of a hash: never seen, but never silently shared
        raise K4wError(f"two nodes of cluster {ctx.cluster.name} got the same cluster NIC MAC; rename one of them")
    if ctx.cluster.on_libvirt:
        ui.say(f"libvirt: nothing to attach; each VM has its cluster NIC on '{ctx.cluster.libvirt['cluster_network']}' "
               "with its static MAC in its domain definition since `vagrant up` (vagrant/Vagrantfile)")
        return
    for m in ctx.cluster.machines:
        code, output = ctx.host(cluster_nic_command(ctx.cfg, m.vmname, ctx.cluster.cluster_mac(m), m.is_windows))
        for line in output.splitlines():
            ui.say(line)
        if code == NOT_ELEVATED:
            raise K4wError("cluster-up attaches each VM's cluster NIC on this host and needs the rights Vagrant's "
                           "Hyper-V provider needs: run the terminal as Administrator (or join Hyper-V Administrators)")
        if code != 0:
            raise K4wError(f"{m.name}: attaching its cluster NIC to '{ctx.cfg.hyperv.cluster_switch}' failed "
                           f"(exit {code}){': ' + output.strip() if output.strip() else ''}")


def step_cluster_ip(ctx: Context) -> None:
    """Each node's static IP on the NIC whose MAC is its cluster NIC's (never by interface name or order)."""
    for m in ctx.cluster.machines:
        prepare_dirs(ctx, m)
        mac = ctx.cluster.cluster_mac(m)
        if m.is_windows:
            # cluster-ip.ps1 dot-sources the route logic it shares with the node's start-node.ps1.
            upload_windows(ctx, m, sources.REPO.guest / "windows" / "node" / "cluster-route.ps1")
            script = upload_windows(ctx, m, sources.REPO.guest / "windows" / "cluster" / "cluster-ip.ps1")
            command = (f"& {escape.ps(script)} -IPAddress {escape.ps(m.ip)} -PrefixLength {ctx.cluster.prefix_length} "
                       f"-MacAddress {escape.ps(mac_with(mac, '-'))}")
            if cluster_nic_routes_outbound(m.box):
                # The host's NetNat address on the cluster switch (host/network-up.ps1).
                command += f" -Gateway {escape.ps(derive.derive_network(ctx.cfg).gateway)}"
            ctx.remote.run(m, command)
            # With the cluster NIC configured, WinRM's rule is re-derived: the management NIC only
            # (guest/windows/node/winrm-scope.ps1, in the box since its bake).
            ctx.remote.run(m, f"& {escape.ps(WINRM_SCOPE_SCRIPT)}")
        else:
            script = upload_linux(ctx, m, sources.REPO.guest / "ubuntu" / "cluster" / "cluster-ip.sh")
            env = sh_env(K4W_NODE_IP=m.ip, K4W_PREFIX_LENGTH=ctx.cluster.prefix_length, K4W_CLUSTER_MAC=mac_with(mac, ":"),
                         K4W_SERVICE_CIDR=ctx.cfg.network.service_cidr)
            ctx.remote.run(m, f"sudo {env} bash {script}")


def cluster_nic_routes_outbound(box: str) -> bool:
    """Whether a Windows box's pods leave through its cluster NIC, which then needs a default route
    through the host's NAT (the profile's `cluster_nic_default_route`; cluster-ip.ps1 says why).
    The seed era's Windows pods get no outbound NAT at all (k4w/verify/matrix.py, WINDOWS_OUTBOUND_NAT)."""
    return bool(profiles.load(box).data.get("cluster_nic_default_route"))


def step_node_proxy(ctx: Context) -> None:
    """Each node gets the proxy of this cluster.yml before it pulls anything: a box carries none
    (the build keeps its proxy off the box). The values travel in a private file."""
    for m in ctx.cluster.machines:
        prepare_dirs(ctx, m)
        # With the proxy, the image mirrors' credentials and hosts.toml files of this cluster.yml
        # (containerd boxes; the box carries no credentials): the same private file.
        registry_values = derive_steps.node_registry_variables(ctx.cfg, profiles.load(m.box))
        if m.is_windows:
            values = {**derive_steps.node_proxy_variables(ctx.proxy, derive_steps.WINDOWS), **registry_values}
            common = upload_windows(ctx, m, sources.REPO.guest / "windows" / "common.ps1")
            script = upload_windows(ctx, m, sources.REPO.guest / "windows" / "cluster" / "cluster-proxy.ps1")
            values_file = upload_secret(ctx, m, json.dumps(values), "proxy.json")
            ctx.remote.run(m, f"& {escape.ps(script)} -ValuesFile {escape.ps(values_file)} -Common {escape.ps(common)}")
        else:
            values = {**derive_steps.node_proxy_variables(ctx.proxy, derive_steps.UBUNTU), **registry_values}
            wanted = ("K4W_PROXY_ENV", "K4W_APT_PROXY_CONF", "K4W_PROXY_FILE_MODE", *registry_values)
            text = "".join(f"{name}={shlex.quote(values[name])}\n" for name in wanted)
            upload_linux(ctx, m, sources.REPO.guest / "ubuntu" / "lib.sh")
            script = upload_linux(ctx, m, sources.REPO.guest / "ubuntu" / "cluster" / "cluster-proxy.sh")
            values_file = upload_secret(ctx, m, text, "proxy.env")
            ctx.remote.run(m, f"sudo {sh_env(K4W_PROXY_FILE=values_file)} bash {script}")


def step_master_init(ctx: Context) -> None:
    master = ctx.cluster.master
    ctx.state.set_node(master.name, started=ctx.clock.now())
    prepare_dirs(ctx, master)
    config = upload_linux(ctx, master, ctx.out / "kubeadm" / "kubeadm-config.yaml")
    upload_kubeadm_patches(ctx, master)
    # cluster-init.sh sources lib.sh beside it (k4w_kernel_tunables); /tmp may not have it after a reboot.
    upload_linux(ctx, master, sources.REPO.guest / "ubuntu" / "lib.sh")
    script = upload_linux(ctx, master, sources.REPO.guest / "ubuntu" / "cluster" / "cluster-init.sh")
    ctx.remote.run(master, f"sudo {sh_env(K4W_KUBEADM_CONFIG=config)} bash {script}")
    admin = ctx.remote.run(master, "sudo cat /etc/kubernetes/admin.conf")
    if not ctx.dry_run:
        write_private(ctx.out / "kubeconfig", admin)


def upload_kubeadm_patches(ctx: Context, master: Machine) -> None:
    """An emulated CPU's patches of kubeadm's static Pods (k4w.derive.control_plane), to the folder the kubeadm
    config names, emptied first: kubeadm applies every file there, so one left by an earlier render must go."""
    if not control_plane.emulated_cpu(ctx.cfg):
        return
    rendered = sorted(p for p in (ctx.rendered / control_plane.PATCHES_OUT_DIR).glob("*") if p.is_file())
    if not rendered and not ctx.dry_run:
        raise K4wError(f"{ctx.rendered / control_plane.PATCHES_OUT_DIR} has no rendered patches (libvirt.accelerator tcg): "
                       "run `invoke render`")
    folder = shlex.quote(control_plane.PATCHES_GUEST_DIR)
    ctx.remote.run(master, f"rm -rf {folder} && install -d -m 0700 {folder}")
    for path in rendered:
        ctx.remote.upload(master, path, f"{control_plane.PATCHES_GUEST_DIR}/{path.name}")


def step_manifests(ctx: Context) -> None:
    master = ctx.cluster.master
    manifests = ctx.out / "manifests"
    prepare_dirs(ctx, master)  # /tmp does not survive a reboot of the master between runs
    flannel = upload_linux(ctx, master, manifests / "kube-flannel.yaml", "manifests/kube-flannel.yaml")
    patch = upload_linux(ctx, master, manifests / "patches" / "linux-node-selector.yaml", "manifests/patches/linux-node-selector.yaml")
    kubectl(ctx, f"apply -f {flannel}")
    # The Windows nodes' flanneld and kube-proxy: token-Secret identities for the seed era's services,
    # the HostProcess DaemonSets of the containerd era (after kube-flannel.yaml: they bind its ClusterRole).
    for rel in windows_manifests(ctx):
        kubectl(ctx, f"apply -f {upload_linux(ctx, master, manifests / rel, f'manifests/{rel}')}")
    # kubeadm's own kube-proxy DaemonSet must stay off Windows nodes (its image and its iptables/nftables
    # modes are Linux only; Windows runs its own kube-proxy, as a service or a HostProcess DaemonSet).
    kubectl(ctx, f'-n kube-system patch daemonset kube-proxy --patch "$(cat {patch})"')
    # kubeadm 1.11's CoreDNS Deployment has no OS selector (added in 1.13, kubernetes#69940):
    # a replica rescheduled onto the Windows node would never start.
    kubectl(ctx, f'-n kube-system patch deployment coredns --patch "$(cat {patch})"')
    wait_ready(ctx, [master])


def windows_manifests(ctx: Context) -> list[str]:
    """The manifests (relative to OUT/manifests) the cluster's Windows nodes need: windows-node-rbac.yaml
    when a node runs flanneld and kube-proxy as services (the seed era), and each file of
    OUT/manifests/windows-<recipe>/ (the containerd era's HostProcess DaemonSets)."""
    wanted: list[str] = []
    profs = [profiles.load(m.box) for m in ctx.cluster.windows_workers]
    if any(not identities.runs_hostprocess(p) for p in profs):
        wanted.append("windows-node-rbac.yaml")
    for folder in sorted({p.node_templates for p in profs if identities.runs_hostprocess(p)}):
        rendered = sorted((ctx.out / "manifests" / folder).glob("*.yaml"))
        if not rendered and not ctx.dry_run:
            raise K4wError(f"{ctx.out / 'manifests' / folder} has no rendered manifests: run `invoke render`")
        wanted += [f"{folder}/{path.name}" for path in rendered]
    return wanted


def step_join_linux(ctx: Context, m: Machine) -> None:
    ctx.state.set_node(m.name, started=ctx.clock.now())
    join = join_parameters(ctx, m)
    remember_join_token(ctx, m, join["token"])
    prepare_dirs(ctx, m)
    upload_linux(ctx, m, sources.REPO.guest / "ubuntu" / "lib.sh")   # cluster-join.sh sources it
    script = upload_linux(ctx, m, sources.REPO.guest / "ubuntu" / "cluster" / "cluster-join.sh")
    node = next(n for n in ctx.cfg.nodes if n.name == m.name)
    # The era's kubelet flags (e.g. 1.11's pause image, kubernetes/kubeadm#1003), from the box profile.
    flags = derive.linux_kubelet_flags(profiles.load(node.box))
    config = join_config.for_worker(node.box, join["api"], join["token"], join["hash"], m.name, ctx.state.installation(),
                                      timeouts=ctx.join_timeouts)
    env = sh_env(K4W_NODE_NAME=m.name, K4W_NODE_IP=m.ip, K4W_KUBELET_EXTRA_ARGS=" ".join(flags))
    # The join config (token inside) goes on standard input: sudo logs its whole command line to
    # auth.log, and an upload would leave it in a file the vagrant user owns.
    ctx.remote.run(m, f"sudo {env} bash {script}", stdin=config)


def windows_join_script(box: str) -> str:
    """The join script of a Windows box's node recipe: cluster-join.ps1 for the seed recipe,
    cluster-join-<recipe>.ps1 for a profile naming one (docs/architecture.md, "Node recipes")."""
    recipe = profiles.load(box).node_recipe
    return f"cluster-join-{recipe}.ps1" if recipe else "cluster-join.ps1"


def service_account_token(ctx: Context, identity: identities.Identity) -> tuple[str, str]:
    """(token, base64 CA) of a component's token Secret (windows-node-rbac.yaml), once the token
    controller has filled it. The token is registered as a secret before anything could print it."""
    found: dict[str, str] = {}

    def filled() -> tuple[bool, str]:
        if ctx.api is not None:   # a cluster k4w did not make: its API (a dry run only says so)
            path = f"/api/v1/namespaces/{identity.namespace}/secrets/{identity.secret}"
            if ctx.dry_run:
                ui.say(f"would read Secret {identity.namespace}/{identity.secret} through the API ({path})")
                return False, "dry run"
            raw = json.dumps(ctx.api.get(path))
        else:
            raw = kubectl(ctx, f"-n {identity.namespace} get secret {identity.secret} -o json")
        try:
            data = (json.loads(raw or "{}").get("data") or {})
        except json.JSONDecodeError:
            raise UnreadableAnswer(f"kubectl get secret {identity.secret} -o json returned no JSON") from None
        register_secret(data.get("token"))
        if data.get("token") and data.get("ca.crt"):
            found.update(data)
            return True, ""
        return False, f"secret {identity.namespace}/{identity.secret} has no token yet (the token controller fills it)"

    wait_for(ctx, f"the token of service account {identity.service_account}", filled, ctx.ready_timeout)
    if not found:  # dry run
        return "", ""
    token = base64.b64decode(found["token"]).decode("ascii")
    register_secret(token)
    return token, found["ca.crt"]


def component_kubeconfig(api: str, identity: identities.Identity, token: str, ca_b64: str) -> str:
    """A kubeconfig for one Windows component: the API server of the join, the cluster CA of the
    token Secret, the ServiceAccount's token."""
    import yaml

    cluster, user = "k4w", identity.service_account
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": f"https://{api}", "certificate-authority-data": ca_b64}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
    }, sort_keys=False)


def install_component_kubeconfigs(ctx: Context, m: Machine, api: str) -> None:
    """flanneld and kube-proxy on a Windows node get kubeconfigs of their own identities, before the
    join script starts them. Each travels as a private file; cluster-kubeconfig.ps1 moves it into
    C:\\etc\\kubernetes with an ACL of SYSTEM and Administrators only and deletes the upload."""
    upload_windows(ctx, m, sources.REPO.guest / "windows" / "node" / "node-lib.ps1")   # dot-sourced: Invoke-K4wIcacls
    script = upload_windows(ctx, m, sources.REPO.guest / "windows" / "cluster" / "cluster-kubeconfig.ps1")
    for identity in identities.WINDOWS_COMPONENTS:
        token, ca_b64 = service_account_token(ctx, identity)
        uploaded = upload_secret(ctx, m, component_kubeconfig(api, identity, token, ca_b64), f"{identity.component}.conf")
        ctx.remote.run(m, f"& {escape.ps(script)} -Source {escape.ps(uploaded)} -Destination {escape.ps(identity.kubeconfig)}")


def step_join_windows(ctx: Context, m: Machine) -> None:
    ctx.state.set_node(m.name, started=ctx.clock.now())
    join = join_parameters(ctx, m)
    remember_join_token(ctx, m, join["token"])
    prepare_dirs(ctx, m)
    node_dir = ctx.out / "nodes" / m.name
    files = sorted(p for p in node_dir.iterdir() if p.is_file()) if node_dir.is_dir() else []
    if not files and not ctx.dry_run:
        raise K4wError(f"{node_dir} has no rendered node configs: run `invoke render`")
    for path in files:
        upload_windows(ctx, m, path, WINDOWS_CONFIG_DIR)
    # The seed era's services read kubeconfigs of their own identities; the containerd era's DaemonSet
    # pods get projected ServiceAccount tokens, so nothing of theirs is written to the node.
    if not identities.runs_hostprocess(profiles.load(m.box)):
        install_component_kubeconfigs(ctx, m, join["api"])
    cluster_scripts = sources.REPO.guest / "windows" / "cluster"
    upload_windows(ctx, m, cluster_scripts / "cluster-join-lib.ps1")   # dot-sourced by the join script
    upload_windows(ctx, m, sources.REPO.guest / "windows" / "common.ps1")   # dot-sourced by cluster-join-lib.ps1
    script = upload_windows(ctx, m, cluster_scripts / windows_join_script(m.box))
    config = join_config.for_worker(m.box, join["api"], join["token"], join["hash"], m.name, ctx.state.installation(),
                                      timeouts=ctx.join_timeouts)
    config_file = upload_secret(ctx, m, config, JOIN_CONFIG_FILE)
    # cluster.ready_timeout bounds the join and each service wait, not the scripts' own 300 s default:
    # kubeadm join's own waits (discovery, the kubelet's health, its TLS bootstrap) follow it too, through the
    # join configuration's timeouts (k4w/model/kubeadm_timeouts.py).
    ctx.remote.run(m, f"& {escape.ps(script)} -ConfigFile {escape.ps(config_file)} -NodeName {escape.ps(m.name)} "
                      f"-TimeoutSeconds {int(ctx.ready_timeout)}")


def step_ready(ctx: Context) -> None:
    wait_ready(ctx, list(ctx.cluster.machines))


# The add-ons kubeadm creates (cmd/kubeadm/app/phases/addons: the CoreDNS Deployment and the kube-proxy
# DaemonSet, both in kube-system, names fixed by kubeadm in both eras); Flannel's are read from its manifest.
KUBE_PROXY_ROLLOUT = ("kube-proxy", "kube-system", "daemonset", "kube-proxy")
COREDNS_ROLLOUT = ("CoreDNS", "kube-system", "deployment", "coredns")
TIMED_OUT = 124   # coreutils timeout's exit code when the command ran out of time (timeout(1))


def _daemonsets(manifest: Path, what: str) -> list[tuple[str, str, str, str]]:
    import yaml

    try:
        documents = [d for d in yaml.safe_load_all(manifest.read_text(encoding="utf-8")) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as exc:
        raise K4wError(f"cannot read the {what} DaemonSets from {manifest} ({exc}): run `invoke render`") from None
    # A DaemonSet that names its component (app.kubernetes.io/component, e.g. windows-flanneld) is
    # reported by it, so a failed wait says which of several it was.
    found = [((d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") or what,
              d["metadata"].get("namespace", "default"), "daemonset", d["metadata"]["name"])
             for d in documents if d.get("kind") == "DaemonSet"]
    if not found:
        raise K4wError(f"{manifest} holds no DaemonSet: run `invoke render`")
    return found


def rollouts(out: Path) -> list[tuple[str, str, str, str]]:
    """(what, namespace, kind, name) of every rollout cluster-up waits for, each after the ones it needs, so
    the first that fails is the cause rather than its symptom: kube-proxy; each Flannel DaemonSet of
    OUT/manifests/kube-flannel.yaml (kube-system in v0.11, kube-flannel in v0.28), whose flanneld reaches the
    API server through the kubernetes Service that kube-proxy programs; CoreDNS, whose pod sandboxes need
    flanneld's /run/flannel/subnet.env (the flannel CNI plugin reads it); then each Windows node DaemonSet of
    OUT/manifests/windows-<recipe>/ (the containerd era's HostProcess flanneld and kube-proxy: a Windows node
    is Ready only with them, but Ready comes first). The fourth libvirt run's flanneld crash-looped and
    cluster-up named only CoreDNS."""
    manifests = Path(out) / "manifests"
    found = [KUBE_PROXY_ROLLOUT, *_daemonsets(manifests / "kube-flannel.yaml", "Flannel"), COREDNS_ROLLOUT]
    for manifest in sorted(manifests.glob("windows-*/*.yaml")):
        found += _daemonsets(manifest, "Windows node")
    return found


def step_rollouts(ctx: Context) -> None:
    """Nodes Ready is not a working cluster: wait until CoreDNS, kube-proxy and Flannel have every
    replica/pod updated and available, and fail naming the one that did not come up. `rollout status`
    watches until done; coreutils `timeout` bounds it the same way in both eras' kubectl."""
    for what, namespace, kind, name in rollouts(ctx.rendered):
        command = f"timeout {int(ctx.ready_timeout)} {KUBECTL} -n {namespace} rollout status {kind}/{name}"
        if ctx.dry_run:
            ui.say(f"would wait up to {ctx.ready_timeout} s for the {what} rollout ({kind} {namespace}/{name})")
        try:
            ctx.remote.run(ctx.cluster.master, command)
        except RemoteError as exc:
            why = (f"did not finish within {ctx.ready_timeout} s" if exc.code == TIMED_OUT
                   else f"could not be watched (exit {exc.code})")
            raise K4wError(f"{what} did not come up: the rollout of {kind} {namespace}/{name} {why}. "
                           f"Last lines of `kubectl rollout status`:\n{exc.tail or '  (no output)'}\n"
                           f"Look at its pods: kubectl -n {namespace} get pods -o wide; "
                           f"kubectl -n {namespace} describe {kind} {name}") from None


def step_demo(ctx: Context) -> None:
    master = ctx.cluster.master
    if not ctx.cluster.windows_workers:
        ui.say("no Windows node: skipping the Windows demo workload")
        return
    prepare_dirs(ctx, master)
    demo = upload_linux(ctx, master, ctx.out / "manifests" / "demo-win-webserver.yaml", "manifests/demo-win-webserver.yaml")
    # A Pod's spec cannot be changed by apply, and a finished one never runs again: a new one each
    # time checks the node as it is now.
    kubectl(ctx, f"delete pod {DEMO_VOLUME_CHECK} --ignore-not-found")
    kubectl(ctx, f"apply -f {demo}")

    def available() -> tuple[bool, str]:
        raw = kubectl(ctx, f"get deployment {DEMO_DEPLOYMENT} -o json")
        try:
            status = (json.loads(raw or "{}").get("status") or {})
        except json.JSONDecodeError:
            raise UnreadableAnswer(f"kubectl get deployment {DEMO_DEPLOYMENT} -o json returned no JSON: {raw[-300:]!r}") from None
        count = int(status.get("availableReplicas") or 0)
        return count >= 1, f"deployment {DEMO_DEPLOYMENT} has {count} available replicas ({status.get('conditions', [])})"

    wait_for(ctx, f"the demo deployment {DEMO_DEPLOYMENT}", available, ctx.ready_timeout)


FLANNEL_DEFAULT_VNI = 1   # flannel's vxlan backend without a "VNI" (backend/vxlan/vxlan.go, defaultVNI)


def flannel_vxlan_device(out: Path) -> str:
    """The vxlan link flanneld creates on Linux nodes, flannel.<VNI> (backend/vxlan/vxlan.go), for
    the VNI of the net-conf the cluster was given: OUT/manifests/kube-flannel.yaml's ConfigMap."""
    import yaml

    manifest = Path(out) / "manifests" / "kube-flannel.yaml"
    try:
        documents = list(yaml.safe_load_all(manifest.read_text(encoding="utf-8")))
        netconf = next(json.loads(d["data"]["net-conf.json"]) for d in documents
                       if isinstance(d, dict) and d.get("kind") == "ConfigMap" and "net-conf.json" in (d.get("data") or {}))
    except (OSError, yaml.YAMLError, ValueError, StopIteration) as exc:
        raise K4wError(f"cannot read Flannel's net-conf.json from {manifest} ({exc or 'no ConfigMap holds it'}): "
                       "run `invoke render`") from None
    return f"flannel.{netconf.get('Backend', {}).get('VNI', FLANNEL_DEFAULT_VNI)}"


def write_private(path: Path, text: str) -> None:
    """Write a credential file readable only by the user (admin kubeconfig)."""
    private.write_private(path, text)


def step_list(cluster: ClusterInfo) -> list[tuple[str, Callable[[Context], None]]]:
    """Every recorded step, in order, as (state key, function)."""
    steps: list[tuple[str, Callable[[Context], None]]] = [
        ("up", step_up),
        ("cluster-nic", step_cluster_nic),
        ("cluster-ip", step_cluster_ip),
        ("node-proxy", step_node_proxy),
        ("master-init", step_master_init),
        ("manifests", step_manifests),
    ]
    steps += [(f"join:{m.name}", lambda ctx, m=m: step_join_linux(ctx, m)) for m in cluster.linux_workers]
    steps += [(f"join:{m.name}", lambda ctx, m=m: step_join_windows(ctx, m)) for m in cluster.windows_workers]
    steps += [("ready", step_ready), ("rollouts", step_rollouts), ("demo", step_demo)]
    return steps

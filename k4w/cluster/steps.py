"""The steps of cluster-up, each small and idempotent, sharing one Context.

Order (issue "invoke cluster-up"): network check -> vagrant up -> cluster NIC IPs -> kubeadm
init -> manifests + master Ready -> Linux joins -> Windows joins -> all nodes Ready -> demo.
Each step is recorded in build/cluster-state.json when it finished; cluster_up (up.py) skips
recorded steps, so a rerun after a failure continues where it stopped.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import outfiles, proc, profiles, sources, ui
from ..render import escape
from ..config import Config
from ..errors import K4wError
from ..redact import register_secret
from .machines import ClusterInfo, Machine, VagrantDriver
from .network import switch_check_script
from .remote import RemoteExec, sh_env
from .state import State

LINUX_DIR = "/tmp/k4w"              # where scripts and manifests are uploaded on Linux guests
WINDOWS_DIR = "C:\\k4w"             # ... and on Windows guests
WINDOWS_CONFIG_DIR = "C:\\k\\config"  # docs/internals.md "Windows box <-> cluster-up"
KUBECTL = "kubectl"                 # on the master as user vagrant, who gets ~/.kube/config from cluster-init.sh
TOKEN_TTL = "1h"                    # join tokens live just long enough for this run
DEMO_DEPLOYMENT = "win-webserver"
DEMO_NODE_PORT = 30080              # templates/manifests/demo-win-webserver.yaml.j2
SWITCH_MISSING = 3                  # exit code of network.switch_check_script when the switch is absent

_JOIN = re.compile(
    r"kubeadm join\s+(?P<api>\S+:\d+)\s+--token\s+(?P<token>[a-z0-9]{6}\.[a-z0-9]{16})\s+"
    r"--discovery-token-ca-cert-hash\s+(?P<hash>sha256:[0-9a-f]{64})"
)


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
    dry_run: bool = False
    poll_seconds: float = 5.0
    started: float = 0.0
    timings: dict = field(default_factory=dict)

    @property
    def ready_timeout(self) -> int:
        return self.cfg.cluster.ready_timeout


# ------------------------------------------------------------------ helpers

def wait_for(ctx: Context, what: str, check: Callable[[], tuple[bool, str]], timeout: float) -> None:
    """proc.wait_for on the context's clock (a fake one in tests) and poll interval."""
    proc.wait_for(what, check, timeout, clock=ctx.clock.now, sleep=ctx.clock.sleep, poll=ctx.poll_seconds)


def kubectl(ctx: Context, args: str) -> str:
    return ctx.remote.run(ctx.cluster.master, f"{KUBECTL} {args}")


def node_conditions(ctx: Context) -> dict[str, dict]:
    """{node name: its Ready condition} from `kubectl get nodes -o json` on the master."""
    raw = kubectl(ctx, "get nodes -o json")
    try:
        items = json.loads(raw or "{}").get("items", [])
    except json.JSONDecodeError:
        raise K4wError(f"{ctx.cluster.master.name}: kubectl get nodes -o json returned no JSON: {raw[-300:]!r}") from None
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
            else:
                waiting.append(f"node {m.name} is not Ready, last condition: {describe_condition(cond)}")
        return not waiting, "; ".join(waiting)

    names = ", ".join(m.name for m in machines)
    wait_for(ctx, f"{names} to be Ready", check, ctx.ready_timeout)


def join_parameters(ctx: Context) -> dict[str, str]:
    """A fresh, short-lived join token from the master, parsed (never executed as a string)."""
    out = ctx.remote.run(ctx.cluster.master, f"sudo kubeadm token create --print-join-command --ttl {TOKEN_TTL}")
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


def prepare_dirs(ctx: Context, m: Machine) -> None:
    if m.is_windows:
        ctx.remote.run(m, f"New-Item -ItemType Directory -Force -Path {escape.ps(WINDOWS_DIR)}, {escape.ps(WINDOWS_CONFIG_DIR)} | Out-Null")
    else:
        ctx.remote.run(m, f"mkdir -p {LINUX_DIR}/manifests/patches")


# ------------------------------------------------------------------ the steps

def step_network(ctx: Context) -> None:
    """The cluster switch must exist before any VM gets a NIC on it."""
    code, output = ctx.host(switch_check_script(ctx.cfg))
    if code == SWITCH_MISSING:
        raise K4wError(f"the cluster switch '{ctx.cfg.hyperv.cluster_switch}' does not exist: run `invoke network-up` "
                       "in an elevated terminal first (it creates the switch, the host gateway address and the NAT)")
    if code != 0:
        raise K4wError(f"checking the cluster switch failed (exit {code}): {output}")


def machines_not_running(ctx: Context) -> list[str]:
    states = ctx.vagrant.status()
    return [m.name for m in ctx.cluster.machines if states.get(m.name) != "running"]


def step_up(ctx: Context) -> None:
    pending = machines_not_running(ctx)
    if pending:
        ctx.vagrant.up(pending)
    still = machines_not_running(ctx)
    if still and not ctx.dry_run:
        raise K4wError(f"vagrant up finished but these machines are not running: {', '.join(still)}")


def step_cluster_ip(ctx: Context) -> None:
    for m in ctx.cluster.machines:
        prepare_dirs(ctx, m)
        if m.is_windows:
            script = upload_windows(ctx, m, sources.REPO.guest / "windows" / "cluster" / "cluster-ip.ps1")
            ctx.remote.run(m, f"& {escape.ps(script)} -IPAddress {escape.ps(m.ip)} -PrefixLength {ctx.cluster.prefix_length}")
        else:
            script = upload_linux(ctx, m, sources.REPO.guest / "ubuntu" / "cluster" / "cluster-ip.sh")
            env = sh_env(K4W_NODE_IP=m.ip, K4W_PREFIX_LENGTH=ctx.cluster.prefix_length)
            ctx.remote.run(m, f"sudo {env} bash {script}")


def step_master_init(ctx: Context) -> None:
    master = ctx.cluster.master
    ctx.state.set_node(master.name, started=ctx.clock.now())
    prepare_dirs(ctx, master)
    config = upload_linux(ctx, master, ctx.out / "kubeadm" / "kubeadm-config.yaml")
    script = upload_linux(ctx, master, sources.REPO.guest / "ubuntu" / "cluster" / "cluster-init.sh")
    ctx.remote.run(master, f"sudo {sh_env(K4W_KUBEADM_CONFIG=config)} bash {script}")
    admin = ctx.remote.run(master, "sudo cat /etc/kubernetes/admin.conf")
    if not ctx.dry_run:
        write_private(ctx.out / "kubeconfig", admin)


def step_manifests(ctx: Context) -> None:
    master = ctx.cluster.master
    manifests = ctx.out / "manifests"
    prepare_dirs(ctx, master)  # /tmp does not survive a reboot of the master between runs
    flannel = upload_linux(ctx, master, manifests / "kube-flannel.yaml", "manifests/kube-flannel.yaml")
    rbac = upload_linux(ctx, master, manifests / "windows-node-rbac.yaml", "manifests/windows-node-rbac.yaml")
    patch = upload_linux(ctx, master, manifests / "patches" / "linux-node-selector.yaml", "manifests/patches/linux-node-selector.yaml")
    kubectl(ctx, f"apply -f {flannel}")
    kubectl(ctx, f"apply -f {rbac}")
    # kubeadm's own kube-proxy DaemonSet must stay off Windows nodes (they run kube-proxy as a service).
    kubectl(ctx, f'-n kube-system patch daemonset kube-proxy --patch "$(cat {patch})"')
    # kubeadm 1.11's CoreDNS Deployment has no OS selector (added in 1.13, kubernetes#69940):
    # a replica rescheduled onto the Windows node would never start.
    kubectl(ctx, f'-n kube-system patch deployment coredns --patch "$(cat {patch})"')
    wait_ready(ctx, [master])


def step_join_linux(ctx: Context, m: Machine) -> None:
    ctx.state.set_node(m.name, started=ctx.clock.now())
    join = join_parameters(ctx)
    prepare_dirs(ctx, m)
    script = upload_linux(ctx, m, sources.REPO.guest / "ubuntu" / "cluster" / "cluster-join.sh")
    node = next(n for n in ctx.cfg.nodes if n.name == m.name)
    # kubeadm 1.11 does not pass imageRepository to the kubelet (kubernetes/kubeadm#1003), so
    # name the pause image the box pre-pulled, or the kubelet pulls k8s.gcr.io/pause itself.
    pause = profiles.load(node.box).data.kubernetes.pause_image
    env = sh_env(K4W_NODE_NAME=m.name, K4W_NODE_IP=m.ip, K4W_API_SERVER=join["api"],
                 K4W_JOIN_TOKEN=join["token"], K4W_CA_CERT_HASH=join["hash"], K4W_PAUSE_IMAGE=pause)
    ctx.remote.run(m, f"sudo {env} bash {script}")


def step_join_windows(ctx: Context, m: Machine) -> None:
    ctx.state.set_node(m.name, started=ctx.clock.now())
    join = join_parameters(ctx)
    prepare_dirs(ctx, m)
    node_dir = ctx.out / "nodes" / m.name
    files = sorted(p for p in node_dir.iterdir() if p.is_file()) if node_dir.is_dir() else []
    if not files and not ctx.dry_run:
        raise K4wError(f"{node_dir} has no rendered node configs: run `invoke render`")
    for path in files:
        upload_windows(ctx, m, path, WINDOWS_CONFIG_DIR)
    script = upload_windows(ctx, m, sources.REPO.guest / "windows" / "cluster" / "cluster-join.ps1")
    ctx.remote.run(m, f"& {escape.ps(script)} -ApiServer {escape.ps(join['api'])} -Token {escape.ps(join['token'])} "
                      f"-CaCertHash {escape.ps(join['hash'])} -NodeName {escape.ps(m.name)}")


def step_ready(ctx: Context) -> None:
    wait_ready(ctx, list(ctx.cluster.machines))


def step_demo(ctx: Context) -> None:
    master = ctx.cluster.master
    if not ctx.cluster.windows_workers:
        ui.say("no Windows node: skipping the Windows demo workload")
        return
    prepare_dirs(ctx, master)
    demo = upload_linux(ctx, master, ctx.out / "manifests" / "demo-win-webserver.yaml", "manifests/demo-win-webserver.yaml")
    kubectl(ctx, f"apply -f {demo}")

    def available() -> tuple[bool, str]:
        raw = kubectl(ctx, f"get deployment {DEMO_DEPLOYMENT} -o json")
        status = (json.loads(raw or "{}").get("status") or {})
        count = int(status.get("availableReplicas") or 0)
        return count >= 1, f"deployment {DEMO_DEPLOYMENT} has {count} available replicas ({status.get('conditions', [])})"

    wait_for(ctx, f"the demo deployment {DEMO_DEPLOYMENT}", available, ctx.ready_timeout)


def write_private(path: Path, text: str) -> None:
    """Write a credential file readable only by the user (admin kubeconfig)."""
    outfiles.write_file(path, text, mode=0o600)


def step_list(cluster: ClusterInfo) -> list[tuple[str, Callable[[Context], None]]]:
    """Every recorded step, in order, as (state key, function)."""
    steps: list[tuple[str, Callable[[Context], None]]] = [
        ("up", step_up),
        ("cluster-ip", step_cluster_ip),
        ("master-init", step_master_init),
        ("manifests", step_manifests),
    ]
    steps += [(f"join:{m.name}", lambda ctx, m=m: step_join_linux(ctx, m)) for m in cluster.linux_workers]
    steps += [(f"join:{m.name}", lambda ctx, m=m: step_join_windows(ctx, m)) for m in cluster.windows_workers]
    steps += [("ready", step_ready), ("demo", step_demo)]
    return steps

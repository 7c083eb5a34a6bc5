"""The address the cluster's own Flannel gives a Linux worker k4w joins to it (cluster.existing).

A k4w VM has two NICs and its default route is on the management NIC (a NAT address the other nodes
cannot reach). The owner's flanneld runs on k4w's Linux workers too, with the owner's arguments; with no
interface argument it takes the NIC of the default route: the node turns Ready and pod traffic to it is
lost. (k4w's own Windows flanneld, and k4w's own cluster's Linux flanneld, are given
--iface=<the cluster NIC's address>: templates/nodes/windows/flanneld.args.j2,
templates/manifests/windows-containerd/, templates/manifests/flannel/*.yaml.j2.)

flanneld's choice, flannel-io/flannel@v0.28.10 (module zip h1:jt+uW6XVV01MBb3YFahG7Ue9UE3W6zlNlJMf3JtdcXI=):
- main.go: --iface (repeatable), --iface-regex (repeatable) and --iface-can-reach pick the interface;
  with none of them it looks the interface up by opts.publicIP, and before that, once at start,
  sm.GetStoredPublicIP sets opts.publicIP from the Node's annotation <prefix>/node-public-ip; with
  neither, the interface of the default route. --kube-annotation-prefix defaults to flannel.alpha.coreos.com.
- pkg/subnet/kube/kube.go GetStoredPublicIP reads BackendNodePublicIP (<prefix>/node-public-ip);
  pkg/subnet/kube/annotations.go newAnnotations: a prefix without "/" gets one appended, one with a "/"
  not ending in "/" or "-" gets "-"; <prefix>/public-ip is the address flanneld registered (other nodes'
  routes and vxlan FDB entries point at it).
- <prefix>/public-ip-overwrite (same files) only rewrites the published public-ip: the vxlan device and
  host-gw routes stay on the default route's NIC, so k4w does not use it.

Before v0.25.3 flanneld read no node-public-ip: GetStoredPublicIP came in v0.25.2 reading <prefix>/public-ip,
and flannel commit 8a6570f4 (first in v0.25.3, b469eaea) made it read <prefix>/node-public-ip (pkg/subnet/kube/
kube.go and annotations.go at both tags). So an older flanneld with no interface argument cannot be steered:
k4w refuses it before any VM starts, naming the argument to add (NODE_PUBLIC_IP_SINCE).

So, with no interface argument in the owner's DaemonSet, k4w sets node-public-ip to the cluster NIC's
address on each of its Linux workers' Node as soon as the Node exists, and restarts that node's Flannel
pod once if it started before (flanneld reads the annotation only at start). With interface arguments,
the choice is the owner's; either way cluster-up then waits for public-ip to be the cluster address and
fails naming the arguments if it is not.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field

from k4w.infra import ui
from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import Client

DEFAULT_PREFIX = "flannel.alpha.coreos.com"
NODE_PUBLIC_IP_SINCE = (0, 25, 3)   # the first flanneld that reads <prefix>/node-public-ip (see the module)
_IMAGE_VERSION = re.compile(r":v?(\d+)\.(\d+)\.(\d+)(?:[-+@][^/]*)?$")
INTERFACE_FLAGS = ("iface", "iface-regex", "iface-can-reach")
NAMESPACES = ("kube-flannel", "kube-system")   # Flannel's namespace since v0.20.0, and before it (as facts.FLANNEL_CONFIGMAPS)


@dataclass
class FlannelDaemonSet:
    namespace: str
    name: str
    interface_args: list[str] = field(default_factory=list)   # e.g. ["--iface=eth1"], as written
    prefix: str = DEFAULT_PREFIX
    match_labels: dict = field(default_factory=dict)
    image: str = ""   # the flanneld container's image, whose tag says its version

    @property
    def version(self) -> tuple[int, int, int] | None:
        m = _IMAGE_VERSION.search(self.image.split("@", 1)[0])
        return tuple(int(g) for g in m.groups()) if m else None

    def unsteerable(self) -> str | None:
        """Why k4w cannot make this flanneld take the cluster NIC, or None when it can."""
        version = self.version
        if self.interface_args or version is None or version >= NODE_PUBLIC_IP_SINCE:
            return None
        return (f"{self.where} runs flanneld {'.'.join(map(str, version))} ({self.image}) with no --iface, --iface-regex "
                f"or --iface-can-reach: it would take the management NIC of k4w's Linux workers, and a flanneld older "
                f"than {'.'.join(map(str, NODE_PUBLIC_IP_SINCE))} does not read {self.annotation('node-public-ip')}, the "
                "annotation k4w would steer it with. Add --iface-can-reach=<the API server's address> to its arguments "
                "(it picks the NIC that routes there, the cluster NIC on k4w's VMs and on your own nodes alike), or "
                "update Flannel")

    @property
    def where(self) -> str:
        return f"DaemonSet {self.namespace}/{self.name}"

    def annotation(self, key: str) -> str:
        prefix = self.prefix if "/" in self.prefix else self.prefix + "/"
        if not prefix.endswith(("/", "-")):
            prefix += "-"
        return prefix + key

    def decision(self) -> str:
        """What k4w does for its Linux workers, for the plan and the facts table."""
        if self.interface_args:
            return (f"{self.where} chooses the interface by {' '.join(self.interface_args)}: k4w leaves that to it and "
                    f"checks each Linux worker's {self.annotation('public-ip')} is its cluster address")
        return (f"{self.where} has no --iface/--iface-regex/--iface-can-reach (it would take the management NIC): k4w sets "
                f"{self.annotation('node-public-ip')} to each Linux worker's cluster address, restarts that node's Flannel pod "
                f"if it started before, and checks {self.annotation('public-ip')}")


# The flags read here; each takes a value (main.go: flagSlice or StringVar).
TAKES_VALUE = (*INTERFACE_FLAGS, "kube-annotation-prefix")


def flags(argv: list[str]) -> list[tuple[str, str | None, str]]:
    """(name, value, as written) of each flag of a Go flag-package command line: -name or --name, a
    value after "=", or, for the flags of TAKES_VALUE, as the next word."""
    found, i = [], 0
    while i < len(argv):
        word = str(argv[i])
        if word.startswith("-") and word not in ("-", "--"):
            name, eq, value = word.lstrip("-").partition("=")
            if not eq and name in TAKES_VALUE and i + 1 < len(argv):
                i += 1
                value, word, eq = str(argv[i]), f"{word} {argv[i]}", "="
            found.append((name, value if eq else None, word))
        i += 1
    return found


def runs_flanneld(container: dict) -> bool:
    return any("flanneld" in str(word) for word in (container.get("command") or []) + (container.get("args") or []))


def find(api: Client, is_k4ws) -> FlannelDaemonSet | None:
    """The cluster's own flanneld DaemonSet (a container that runs flanneld), k4w's own left out."""
    for namespace in NAMESPACES:
        for ds in api.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets").get("items") or []:
            if is_k4ws(ds):
                continue
            spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
            container = next((c for c in spec.get("containers") or [] if runs_flanneld(c)), None)
            if container is None:
                continue
            parsed = flags([*(container.get("command") or []), *(container.get("args") or [])])
            prefix = next((v for n, v, _ in parsed if n == "kube-annotation-prefix" and v), DEFAULT_PREFIX)
            return FlannelDaemonSet(namespace=namespace, name=ds["metadata"]["name"],
                                    interface_args=[w for n, _, w in parsed if n in INTERFACE_FLAGS], prefix=prefix,
                                    match_labels=((ds.get("spec") or {}).get("selector") or {}).get("matchLabels") or {},
                                    image=str(container.get("image") or ""))
    return None


def settle(ctx, m, flannel: FlannelDaemonSet | None, wait_for) -> None:
    """After m joined: make the owner's flanneld on m use its cluster NIC (see the module), then wait
    (cluster.ready_timeout, with the steps' wait_for, passed in so that this module stays below the steps)
    for flanneld to have registered that address."""

    if flannel is None:
        return   # no Flannel DaemonSet to steer: facts.check refused a cluster without Flannel already
    node_path = f"/api/v1/nodes/{m.name}"
    public_ip, node_public_ip = flannel.annotation("public-ip"), flannel.annotation("node-public-ip")
    if ctx.dry_run:
        if not flannel.interface_args:
            ui.say(f"would set {node_public_ip}={m.ip} on Node {m.name} (PATCH {node_path}) once it is registered")
        ui.say(f"would wait up to {ctx.ready_timeout} s for {public_ip} of Node {m.name} to be {m.ip}")
        return
    restarted: list[str] = []   # the pods deleted so that flanneld starts again with the annotation (once)

    def registered() -> tuple[bool, str]:
        node = ctx.api.get_optional(node_path)
        if node is None:
            return False, f"Node {m.name} is not registered yet"
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if not flannel.interface_args and annotations.get(node_public_ip) != m.ip:
            ctx.api.request("PATCH", node_path, {"metadata": {"annotations": {node_public_ip: m.ip}}},
                            content_type="application/merge-patch+json")
            ui.say(f"{m.name}: set {node_public_ip}={m.ip}, so the cluster's flanneld takes the cluster NIC")
            return False, f"flanneld on {m.name} has not registered {m.ip} yet"
        got = annotations.get(public_ip)
        if got == m.ip:
            return True, ""
        if got and not flannel.interface_args and not restarted:
            # flanneld started before the annotation (it reads it only at start): its pod on m goes, the
            # DaemonSet makes a new one, which reads it.
            restarted.extend(restart_pods(ctx.api, flannel, m.name))
            if restarted:
                ui.say(f"{m.name}: flanneld had registered {got}, not {m.ip}: deleted its pod {', '.join(restarted)} "
                       "so that it starts again and reads the annotation")
        return False, f"{public_ip} of Node {m.name} is {got or 'not set yet'}, not its cluster address {m.ip}"

    try:
        wait_for(ctx, f"the cluster's Flannel on {m.name} to use its cluster NIC ({m.ip})", registered, ctx.ready_timeout)
    except K4wError as exc:
        why = (f"{flannel.where} chooses the interface by {' '.join(flannel.interface_args)}, which on {m.name} is not the "
               f"cluster NIC ({m.ip}): make those arguments match it (e.g. --iface-can-reach=<another node's address>)"
               if flannel.interface_args else f"flanneld on {m.name} did not take {node_public_ip}={m.ip}")
        raise K4wError(f"{exc}\n{why}; pod traffic to {m.name} would be lost") from None


def restart_pods(api: Client, flannel: FlannelDaemonSet, node: str) -> list[str]:
    """Delete the Flannel DaemonSet's pods on node (k4w's own node); the DaemonSet recreates them."""
    query = {"fieldSelector": f"spec.nodeName={node}"}
    if flannel.match_labels:
        query["labelSelector"] = ",".join(f"{k}={v}" for k, v in sorted(flannel.match_labels.items()))
    pods = api.get(f"/api/v1/namespaces/{flannel.namespace}/pods?{urllib.parse.urlencode(query)}").get("items") or []
    deleted = []
    for pod in pods:
        name = pod["metadata"]["name"]
        if api.delete(f"/api/v1/namespaces/{flannel.namespace}/pods/{name}"):
            deleted.append(f"{flannel.namespace}/{name}")
    return deleted

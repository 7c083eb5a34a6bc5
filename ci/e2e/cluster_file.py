"""The cluster.yml the e2e run writes, exactly as a user behind a proxy would write one."""

from __future__ import annotations

BOX = "debian-12-e2e"
# A node inside cluster.yml's default node_cidr (192.168.250.0/24; .1 is the host gateway).
NODE_IP = "192.168.250.10"
NODE_MEMORY_MB = 2048
# Seconds kubeadm waits for the control plane (and cluster-up for the node). Under TCG on 2 shared cores
# kube-apiserver was not healthy within the default 900 s at a guest load of 17 (cluster_run.BUDGETS);
# the cluster init step's own budget (1800 s) leaves room for the rest of cluster-init.sh.
READY_TIMEOUT_S = 1500


# What the --cluster run's cluster.yml adds: its guest runs on QEMU's emulated CPU, as a libvirt host without KVM
# runs k4w's VMs, so k4w renders the kubeadm config scaled to it (k4w/derive/control_plane.py).
EMULATED_CPU = """\
host:
  provider: libvirt   # the guests run under QEMU with TCG (ci/e2e/guest.py), as on a Linux host without KVM
libvirt:
  accelerator: tcg
"""


def text(proxy_url: str, mirror: str, cache: str, box: str = BOX, emulated_cpu: bool = False,
         registry: dict | None = None) -> str:
    """One master on the e2e box (the default CI box unless named); proxy.http and proxy.https both set (https is never copied
    from http, so a user behind one proxy writes it twice). The downloads come from the run's
    mirror (mirror.py: real binaries, or the seed era's CI stand-ins) into the run's component cache,
    as an air-gapped host with an internal mirror would have it. emulated_cpu: say libvirt.accelerator tcg
    (the --cluster run, on the containerd era's boxes: the seed era's kubeadm config cannot carry it).
    registry: the --offline run's `registry:` block (its image mirrors on 127.0.0.1); with it the bake imports
    every image from the host's image cache (downloads.images: cache)."""
    offline = ""
    if registry:
        mirrors = "".join(f"    {upstream}:\n      endpoint: {spec['endpoint']}\n      ca: {spec['ca']}\n"
                          for upstream, spec in registry["mirrors"].items())
        offline = f"  images: cache\nregistry:\n  mirrors:\n{mirrors}"
    return f"""\
# k4w end-to-end run (ci.e2e): one node on the CI box, behind the run's private squid.
{EMULATED_CPU if emulated_cpu else ""}cluster:
  name: k4w-e2e
  ready_timeout: {READY_TIMEOUT_S}
proxy:
  http: {proxy_url}
  https: {proxy_url}
  no_proxy: []
downloads:
  mirror: {mirror}
  cache: {cache}
{offline}nodes:
  - name: master
    role: master
    box: {box}
    ip: {NODE_IP}
    cpus: 2
    memory: {NODE_MEMORY_MB}
"""

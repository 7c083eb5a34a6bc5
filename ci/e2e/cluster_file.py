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


def text(proxy_url: str, mirror: str, cache: str, box: str = BOX) -> str:
    """One master on the e2e box (the default CI box unless named); proxy.http and proxy.https both set (https is never copied
    from http, so a user behind one proxy writes it twice). The downloads come from the run's
    mirror (mirror.py: real binaries, or the seed era's CI stand-ins) into the run's component cache,
    as an air-gapped host with an internal mirror would have it."""
    return f"""\
# k4w end-to-end run (ci.e2e): one node on the CI box, behind the run's private squid.
cluster:
  name: k4w-e2e
  ready_timeout: {READY_TIMEOUT_S}
proxy:
  http: {proxy_url}
  https: {proxy_url}
  no_proxy: []
downloads:
  mirror: {mirror}
  cache: {cache}
nodes:
  - name: master
    role: master
    box: {box}
    ip: {NODE_IP}
    cpus: 2
    memory: {NODE_MEMORY_MB}
"""

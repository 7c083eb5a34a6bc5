"""Cluster orchestration: network-up, cluster-up/down/reset (see up.py and network.py)."""

from .network import network_up, network_up_command
from .up import cluster_down, cluster_reset, cluster_up

__all__ = ["cluster_down", "cluster_reset", "cluster_up", "network_up", "network_up_command"]

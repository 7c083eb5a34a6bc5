"""`invoke inventory`: the cluster's Linux nodes as a kubespray inventory, OUT/inventory/hosts.yaml.

Group names and host variables as kubespray reads them, checked at kubernetes-sigs/kubespray@v2.31.0
(commit 1c9add48975060f45396b34d8e022c30d7f80dab): docs/ansible/inventory.md names the groups
kube_control_plane, kube_node and etcd, and k8s_cluster "the union of kube_node, kube_control_plane and
calico_rr" that playbooks/cluster.yml runs on (`hosts: k8s_cluster:etcd`); inventory/sample/inventory.ini
shows `ansible_host` (how Ansible reaches the host) and `ip` (the address Kubernetes binds to) per host,
and etcd as stacked on the control plane (`[etcd:children] kube_control_plane`), as kubeadm runs it on
k4w's master. The SSH user and key are the ones Vagrant uses: the box user `vagrant` and the key Vagrant
put in place of the insecure one on first boot, OUT/vagrant-state/machines/<name>/<provider>/private_key
(hyperv or libvirt: host.provider; k4w.cluster.machines.DOTFILE_DIR; Vagrant's config.ssh.insert_key default).

Both addresses are the node's static cluster IP: the management NIC's address comes from DHCP and
changes, the cluster NIC's is fixed and reachable from the host (the gateway address on the cluster
switch) or, with an External switch, from the user's routed network. Windows nodes are not listed:
kubespray's playbooks are for Linux hosts.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from k4w.infra import files as outfiles
from k4w.infra import ui
from k4w.infra.errors import K4wError
from k4w.cluster.machines import DOTFILE_DIR
from k4w.derive.cluster import Cluster

INVENTORY = Path("inventory") / "hosts.yaml"
SSH_USER = "vagrant"   # the box user (DESIGN.md "Rules that hold everywhere": the Vagrant convention)
# Names Ansible gives a meaning of its own (Ansible's docs, "How to build your inventory": the default
# groups all and ungrouped; "Implicit 'localhost'": a host named localhost in an inventory replaces the
# implicit one, so every `delegate_to: localhost` task of kubespray would then run on that node).
ANSIBLE_RESERVED = ("all", "ungrouped", "localhost")


def private_key(out: Path, name: str, provider: str) -> Path:
    return Path(out).resolve() / DOTFILE_DIR / "machines" / name / provider / "private_key"


def hosts(cluster: Cluster, out: Path) -> dict:
    """The inventory document: every Linux node under `all.hosts`, in kubespray's groups."""
    linux = [n for n in cluster.config.nodes if not cluster.profile(n.box).is_windows]
    masters = [n.name for n in linux if n.role == "master"]
    workers = [n.name for n in linux if n.role == "worker"]
    return {"all": {
        "hosts": {n.name: {"ansible_host": str(n.ip), "ip": str(n.ip), "ansible_user": SSH_USER,
                           "ansible_ssh_private_key_file": str(private_key(out, n.name, cluster.config.host.provider))} for n in linux},
        "children": {
            "kube_control_plane": {"hosts": {name: None for name in masters}},
            "etcd": {"children": {"kube_control_plane": None}},   # stacked etcd, as kubeadm runs it on the master
            "kube_node": {"hosts": {name: None for name in workers}},
            "k8s_cluster": {"children": {"kube_control_plane": None, "kube_node": None}},
        },
    }}


def _group_names(tree: dict) -> set[str]:
    names = set()
    for name, group in (tree or {}).items():
        names.add(name)
        names |= _group_names((group or {}).get("children") or {})
    return names


def check_names(document: dict) -> None:
    """Refuse a host named like a group of the inventory (kubespray's etcd), one of Ansible's own
    groups or its implicit localhost: Ansible reads such a name as the group or this machine."""
    clashes = sorted(set(document["all"]["hosts"]) & (_group_names(document["all"]["children"]) | set(ANSIBLE_RESERVED)))
    if clashes:
        raise K4wError(f"invoke inventory: node name(s) {', '.join(clashes)} are group or host names Ansible and kubespray "
                       "use themselves (all, ungrouped, localhost, " + ", ".join(sorted(_group_names(document["all"]["children"])))
                       + "); rename the node in cluster.yml")


def write(cluster: Cluster, out: Path, dry_run: bool = False) -> Path:
    path = Path(out) / INVENTORY
    document = hosts(cluster, out)
    check_names(document)
    text = ("# kubespray inventory of the Linux nodes of " + cluster.config.cluster.name
            + ", written by `invoke inventory` (k4w/commands/inventory.py names the kubespray tag it follows)\n"
            + yaml.safe_dump(document, sort_keys=False, default_flow_style=False))
    if dry_run:
        ui.say(f"would write {path}:\n{text}")
        return path
    outfiles.write_file(path, text, within=Path(out))
    ui.say(f"wrote {path}: ansible-playbook -i {path} cluster.yml (from a kubespray checkout)")
    if cluster.config.joins_existing:
        ui.say("cluster.existing: k4w has no control plane here, so kube_control_plane and etcd are empty; use kubespray's "
               "scale.yml with your cluster's own inventory and add these hosts to its kube_node", style="yellow")
    return path

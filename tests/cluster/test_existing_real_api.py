"""cluster.existing against a REAL API server: the pinned etcd and kube-apiserver of tools/lock.yml (1.37.2) on this host,
made a kubeadm cluster by the pinned kubeadm's own init phases, with the Flannel objects of k4w's own
rendered modern manifest (Flannel v0.28.10's kube-flannel.yml). k4w then reads the facts, refuses a
mismatch, applies the Windows objects, creates a bootstrap token that really authenticates, and
cluster-reset's removal deletes exactly what it added.

Fails (never skips) when etcd or kube-apiserver is not built: .ci/run's setup.sh builds both.
"""

from __future__ import annotations

import contextlib
import json
import re
import time

import pytest
import yaml

from k4w import render
from k4w.cluster import bootstrap_token, existing, facts as facts_mod
from k4w.derive.cluster import Cluster
from k4w.model.config import parse
from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import Client
from k4w.cluster import up as up_mod
from tests.cluster import real_control_plane as cp
from tests.cluster.conftest import machines_of, render_to
from tests.fakes.cluster_world import FakeClock, FakeRemote, FakeWorld
from tests.helpers import ROOT, invoke

# The REST collections of the kinds in Flannel's manifest (to set the cluster up the way its owner did).
COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
}


def existing_config(admin_conf, **network) -> Cluster:
    data = yaml.safe_load((ROOT / "examples" / "cluster-existing.yml").read_text())
    data["cluster"]["existing"] = str(admin_conf)
    data["network"].update(network)
    return Cluster.resolve(parse(yaml.safe_dump(data)))


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    folder = tmp_path_factory.mktemp("control-plane")
    with contextlib.ExitStack() as stack:
        plane = cp.start(folder, stack)
        api = plane.client()
        modern = Cluster.resolve(parse((ROOT / "examples" / "cluster-modern.yml").read_text()))
        flannel = render.render_files(modern, folder / "modern-out")["manifests/kube-flannel.yaml"]
        for doc in (d for d in yaml.safe_load_all(flannel) if isinstance(d, dict)):
            api.create(COLLECTIONS[doc["kind"]].format(ns=doc["metadata"].get("namespace", "")), doc)
        yield plane


def test_facts_of_a_real_kubeadm_cluster(plane):
    facts = facts_mod.read(plane.client())
    assert facts.version == cp.VERSION
    assert (facts.pod_cidr, facts.service_cidr, facts.cluster_domain) == (cp.POD_CIDR, cp.SERVICE_CIDR, "cluster.local")
    # kubeadm's CoreDNS addon keeps the Service name kube-dns, at the 10th address of the range.
    assert (facts.dns_ip, facts.dns_ip_source) == ("10.96.0.10", "Service kube-system/kube-dns")
    assert (facts.flannel["Network"], facts.flannel["Backend"]) == (cp.POD_CIDR, {"Type": "vxlan", "VNI": 4096, "Port": 4789})
    assert facts.flannel_source == "ConfigMap kube-flannel/kube-flannel-cfg"


def test_a_mismatch_is_refused_naming_both_values(plane):
    cluster = existing_config(plane.admin_conf, pod_cidr="10.245.0.0/16", backend="vxlan")
    with pytest.raises(K4wError) as refused:
        existing.check(plane.client(), cluster, plane.folder)
    text = str(refused.value)
    assert "pod CIDR: the cluster uses 10.244.0.0/16 (kubeadm-config networking.podSubnet), cluster.yml network.pod_cidr is 10.245.0.0/16" in text
    assert "Flannel Network: 10.244.0.0/16 in ConfigMap kube-flannel/kube-flannel-cfg, cluster.yml network.pod_cidr is 10.245.0.0/16" in text
    assert "nothing was started or changed" in text


HOSTPROCESS_NAMESPACE = "/api/v1/namespaces/k4w-windows-node"


def gone(api, path: str) -> bool:
    """Deleted; a Namespace once the namespace controller has emptied it (asynchronous, as in any
    cluster: a Terminating namespace refuses new objects, so the next test waits for it to go)."""
    if path == HOSTPROCESS_NAMESPACE:
        cp.wait_deleted(api, path)
    return api.get_optional(path) is None


# The containerd era's HostProcess manifest (templates/manifests/windows-containerd/), in its order.
HOSTPROCESS_OBJECTS = ("Namespace k4w-windows-node", "ServiceAccount k4w-windows-node/k4w-windows-flanneld",
                       "ClusterRoleBinding k4w:windows-flanneld", "ServiceAccount k4w-windows-node/k4w-windows-kube-proxy",
                       "ClusterRoleBinding k4w:windows-kube-proxy", "ConfigMap k4w-windows-node/k4w-windows-node-scripts",
                       "DaemonSet k4w-windows-node/k4w-flannel-windows", "DaemonSet k4w-windows-node/k4w-kube-proxy-windows")


def test_token_objects_and_reset(plane, tmp_path):
    api = plane.client()
    cluster = existing_config(plane.admin_conf)
    render.render(cluster, tmp_path)
    facts = existing.check(api, cluster, tmp_path)          # fits: no refusal, kubeadm's join RBAC found
    record = existing.Record(tmp_path, facts.server)
    docs = existing.with_api_endpoint(existing.windows_objects(tmp_path, cluster), existing.endpoint(api))
    said = existing.apply(api, docs, record)
    assert said == [f"created {n}" for n in HOSTPROCESS_OBJECTS]
    # The real API server admitted the HostProcess DaemonSets into the privileged namespace, pointed at
    # the API server cluster-info names (the render cannot know it for a cluster k4w did not make).
    flannel = api.get("/apis/apps/v1/namespaces/k4w-windows-node/daemonsets/k4w-flannel-windows")
    env = {e["name"]: e.get("value") for e in flannel["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert f"{env['KUBERNETES_SERVICE_HOST']}:{env['KUBERNETES_SERVICE_PORT']}" == existing.endpoint(api)
    # Idempotent: a second run creates nothing and keeps k4w's own objects, and the checks before it
    # do not take k4w's own Windows DaemonSets for the owner's.
    assert all(line.startswith("kept ") for line in existing.apply(api, docs, record))
    existing.check(api, cluster, tmp_path)

    join = existing.join_token(api, record)
    token_id = join["token"].split(".")[0]
    secret = api.get(f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token_id}")
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert join["api"] == plane.kubeadm_config.read_text().split("controlPlaneEndpoint: ")[1].split()[0]
    # The real kubeadm lists the token, and pins the very same CA hash k4w computed.
    assert token_id in plane.kubeadm_run("token", "list")
    printed = plane.kubeadm_run("token", "create", "--print-join-command", "--ttl", "5m")
    assert re.search(r"--discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})", printed)[1] == join["hash"]

    # The token authenticates: the API server names the bootstrap user and kubeadm's node group.
    review = Client(api.creds, bearer=join["token"]).request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:bootstrap:{token_id}"
    assert bootstrap_token.NODE_GROUP in user["groups"]

    # cluster-reset's removal: k4w's objects go, kubeadm's and the owner's stay.
    removed = existing.remove(api, tmp_path)
    assert len(removed) == len(HOSTPROCESS_OBJECTS) + 1 and all(line.startswith("deleted ") for line in removed)
    assert api.get_optional(f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token_id}") is None
    assert api.get_optional("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/k4w:windows-flanneld") is None
    assert api.get_optional("/apis/apps/v1/namespaces/k4w-windows-node/daemonsets/k4w-kube-proxy-windows") is None
    assert gone(api, HOSTPROCESS_NAMESPACE)
    assert api.get_optional("/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy") is not None
    assert api.get_optional("/apis/rbac.authorization.k8s.io/v1/clusterroles/flannel") is not None
    assert not (tmp_path / existing.RECORD_FILE).exists()


def write_existing_config(path, admin_conf, **network):
    data = yaml.safe_load((ROOT / "examples" / "cluster-existing.yml").read_text())
    data["cluster"]["existing"] = str(admin_conf)
    data["network"].update(network)
    path.write_text(yaml.safe_dump(data))
    return path


def test_cluster_up_refuses_a_mismatch_before_any_vm(plane, tmp_path):
    """The real `invoke cluster-up` (a dry run, so no Hyper-V is needed): it reads the facts first and
    stops naming both values; no vagrant command and no host PowerShell is even shown."""
    config = write_existing_config(tmp_path / "cluster.yml", plane.admin_conf, service_cidr="10.112.0.0/12")
    result = invoke("cluster-up", "--config", str(config), "--out", str(tmp_path / "out"), "--dry-run")
    assert result.returncode == 1, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert "service CIDR: the cluster uses 10.96.0.0/12 (kubeadm-config networking.serviceSubnet), " \
           "cluster.yml network.service_cidr is 10.112.0.0/12" in said
    after = said.split("==> existing cluster: reading its facts")[1]
    assert "$ vagrant" not in after and "powershell" not in after.lower()


def test_cluster_up_dry_run_of_a_fitting_cluster_shows_the_join_only_steps(plane, tmp_path):
    config = write_existing_config(tmp_path / "cluster.yml", plane.admin_conf)
    result = invoke("cluster-up", "--config", str(config), "--out", str(tmp_path / "out"), "--dry-run")
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert "fits cluster.yml" in said and cp.VERSION in said
    assert "would create ClusterRoleBinding k4w:windows-kube-proxy if absent" in said
    assert "would create a bootstrap token Secret kube-system/bootstrap-token-<id>" in said
    assert "kubeadm init" not in said and "master-init" not in said
    # A dry run changed nothing in the cluster.
    assert plane.client().get_optional("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/k4w:windows-kube-proxy") is None
    assert not (tmp_path / "out" / existing.RECORD_FILE).exists()


def test_a_kubeconfig_others_can_read_is_refused(plane, tmp_path):
    loose = tmp_path / "admin.conf"
    loose.write_bytes(plane.admin_conf.read_bytes())
    loose.chmod(0o644)
    config = write_existing_config(tmp_path / "cluster.yml", loose)
    result = invoke("cluster-up", "--config", str(config), "--out", str(tmp_path / "out"), "--dry-run")
    assert result.returncode == 1
    assert f"{loose} holds cluster-admin credentials but is readable by other accounts (mode 0644); run: chmod 600 {loose}" \
        in result.stdout + result.stderr


class PacedClock(FakeClock):
    """The fake clock (a wait's 900 s pass at once), with a little real time per poll, so that the real
    token controller gets to fill a Secret between two polls."""

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        time.sleep(0.05)


class JoiningGuests(FakeRemote):
    """The guests at the process boundary (tests/fakes/cluster_world.py), joined to the real API server:
    a node's join script registers its Node, Ready, as its kubelet would; every other command succeeds."""

    def __init__(self, world, api):
        super().__init__(world)
        self.api = api

    def run(self, machine, command: str, stdin: str = "") -> str:
        self.world.log.append(f"{machine.name}: {command}")
        self.world.stdins.append((machine.name, command, stdin))
        if "cluster-join" in command:
            # Registered as its kubelet would: with the labels and taints of the join configuration it was
            # handed (kubeadm-flags.env's --node-labels and --register-with-taints).
            config = stdin or self.world.uploaded["C:\\k4w\\kubeadm-join.yaml"][0]
            registration = yaml.safe_load(config)["nodeRegistration"]
            args = {a["name"]: a["value"] for a in registration.get("kubeletExtraArgs") or []}
            labels = dict(item.split("=", 1) for item in args.get("node-labels", "").split(",") if item)
            self.api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                              "metadata": {"name": machine.name, "labels": {"kubernetes.io/os": machine.os, **labels}},
                                              "spec": {"taints": registration.get("taints") or []}})
            node = self.api.get(f"/api/v1/nodes/{machine.name}")
            node["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
            self.api.request("PUT", f"/api/v1/nodes/{machine.name}/status", node)
        return ""


class WritesSeen(Client):
    """The admin client, noting every request that changes something (method, path)."""

    def __init__(self, creds):
        super().__init__(creds)
        self.writes: list[tuple[str, str]] = []

    def request(self, method, path, body=None, content_type="application/json"):
        if method != "GET":
            self.writes.append((method, path + ("/" + body["metadata"]["name"] if method == "POST" and body else "")))
        return super().request(method, path, body, content_type)


def k4w_bootstrap_tokens(api) -> list[str]:
    """The bootstrap token Secrets k4w made that the API server still holds (label app.kubernetes.io/part-of=k4w)."""
    listed = api.get(f"/api/v1/namespaces/{bootstrap_token.NAMESPACE}/secrets?labelSelector=app.kubernetes.io%2Fpart-of%3Dk4w")
    return [s["metadata"]["name"] for s in listed.get("items") or [] if s.get("type") == bootstrap_token.SECRET_TYPE]


def test_cluster_up_and_reset_on_the_real_api_server(plane, tmp_path):
    """cluster-up itself (Vagrant, the guests and the host faked at the process boundary, the cluster
    real): no master step, the Windows objects and a token applied and recorded, the join configuration
    the Windows node gets carries that token and kubeadm's CA pin, the node Ready and its token deleted
    then; then cluster-reset removes exactly what was recorded. The class check: k4w's only writes are
    creating what it records and deleting what it recorded (no PUT or PATCH of anything, the owner's
    objects untouched), and no bootstrap token k4w made outlives the join."""
    api = WritesSeen(plane.client().creds)
    out = tmp_path / "out"
    cluster = render_to(out, yaml.safe_load(write_existing_config(tmp_path / "cluster.yml", plane.admin_conf).read_text()))
    world = FakeWorld(machines_of(out))
    guests = JoiningGuests(world, plane.client())   # the kubelet's writes are not k4w's
    up_mod.cluster_up(cluster, out, validate=False, vagrant=world.vagrant, remote=guests, host=world.host, clock=PacedClock(), api=api)

    state = json.loads((out / "cluster-state.json").read_text())["steps"]
    assert list(state) == ["up", "cluster-nic", "cluster-ip", "node-proxy", "existing-apply", "join:winx-1", "ready"]
    assert not any("kubeadm init" in line or "kubectl" in line for line in world.log)
    record = json.loads((out / existing.RECORD_FILE).read_text())
    assert record["nodes"] == ["winx-1"] and len(record["objects"]) == len(HOSTPROCESS_OBJECTS) + 1
    token_secret = record["objects"][-1]["path"]
    assert token_secret.startswith("/api/v1/namespaces/kube-system/secrets/bootstrap-token-")
    join = yaml.safe_load(world.uploaded["C:\\k4w\\kubeadm-join.yaml"][0])["discovery"]["bootstrapToken"]
    assert join["token"].split(".")[0] == token_secret.rsplit("-", 1)[1]
    printed = plane.kubeadm_run("token", "create", "--print-join-command", "--ttl", "5m")
    assert join["caCertHashes"] == [re.search(r"--discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})", printed)[1]]
    assert existing.node_conditions(api)["winx-1"]["status"] == "True"
    # The real API server kept the marks the join configuration registers the Node with.
    installation = json.loads((out / "cluster-state.json").read_text())["installation"]
    registered = api.get("/api/v1/nodes/winx-1")
    assert registered["metadata"]["labels"]["k4w.io/installation"] == installation == record["installation"]
    # (beside node.kubernetes.io/not-ready, which the API server's TaintNodesByCondition adds to a new Node)
    assert {"key": "os", "value": "windows", "effect": "NoSchedule"} in registered["spec"]["taints"]
    created = [path for method, path in api.writes if method == "POST"]
    assert created == [o["path"] for o in record["objects"]]
    # ... and once the node is Ready, the deletion of its join token, the only other write.
    assert api.writes == [("POST", path) for path in created] + [("DELETE", token_secret)]
    assert k4w_bootstrap_tokens(api) == []
    api.writes.clear()

    up_mod.cluster_reset(cluster, out, vagrant=world.vagrant, remote=guests, host=world.host, clock=PacedClock(), api=api)
    assert api.writes == [("DELETE", "/api/v1/nodes/winx-1")] + [("DELETE", o["path"]) for o in reversed(record["objects"])]
    assert any(line.startswith("winx-1: & 'C:\\k4w\\cluster-reset.ps1'") for line in world.log)
    assert api.get_optional("/api/v1/nodes/winx-1") is None and api.get_optional(token_secret) is None
    assert api.get_optional("/api/v1/namespaces/k4w-windows-node/serviceaccounts/k4w-windows-flanneld") is None
    assert gone(api, HOSTPROCESS_NAMESPACE)
    assert api.get_optional("/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy") is not None
    assert not (out / existing.RECORD_FILE).exists()


def test_cluster_down_also_removes_what_k4w_added(plane, tmp_path):
    api = plane.client()
    out = tmp_path / "out"
    cluster = render_to(out, yaml.safe_load(write_existing_config(tmp_path / "cluster.yml", plane.admin_conf).read_text()))
    world = FakeWorld(machines_of(out))
    up_mod.cluster_up(cluster, out, validate=False, vagrant=world.vagrant, remote=JoiningGuests(world, api), host=world.host,
                      clock=PacedClock(), api=api)
    recorded = [o["path"] for o in json.loads((out / existing.RECORD_FILE).read_text())["objects"]]
    up_mod.cluster_down(cluster, out, vagrant=world.vagrant, api=api)
    assert "vagrant destroy" in world.log
    assert api.get_optional("/api/v1/nodes/winx-1") is None
    assert [path for path in recorded if not gone(api, path)] == []


# The address flanneld finds on the interface of a k4w VM's default route: the management NIC's NAT address.
MANAGEMENT_IP = "172.29.160.5"
FLANNEL_DS = "/apis/apps/v1/namespaces/kube-flannel/daemonsets/kube-flannel-ds"


class FlannelOnNodes:
    """What the cluster's DaemonSet controller and flanneld do on a k4w node, as far as k4w relies on it
    (flannel-io/flannel@v0.28.10 main.go, pkg/subnet/kube/kube.go): each Node gets a flanneld pod; at its
    start flanneld takes the address of an interface argument, else the Node's node-public-ip annotation,
    else the default route's interface, and registers it as the public-ip annotation. Only at start."""

    def __init__(self, api, iface_ip: str | None = None):
        self.api, self.iface_ip = api, iface_ip
        self.ds = api.get(FLANNEL_DS)

    def tick(self) -> None:
        labels = self.ds["spec"]["selector"]["matchLabels"]
        for node in self.api.get("/api/v1/nodes").get("items") or []:
            name = node["metadata"]["name"]
            pod = f"/api/v1/namespaces/kube-flannel/pods/kube-flannel-ds-{name}"
            there = self.api.get_optional(pod)
            if there is not None and there["metadata"].get("deletionTimestamp"):
                # Deleted: the kubelet stops it and confirms (no kubelet here), and the DaemonSet makes a new one.
                self.api.request("DELETE", pod + "?gracePeriodSeconds=0")
                there = None
            if there is not None:
                continue
            self.api.create("/api/v1/namespaces/kube-flannel/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"kube-flannel-ds-{name}", "labels": labels},
                "spec": {"nodeName": name, "serviceAccountName": "flannel", "automountServiceAccountToken": False,
                         "containers": [{"name": "kube-flannel", "image": "ghcr.io/flannel-io/flannel:v0.28.10"}]}})
            stored = (node["metadata"].get("annotations") or {}).get("flannel.alpha.coreos.com/node-public-ip")
            address = self.iface_ip or stored or MANAGEMENT_IP
            self.api.request("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"annotations": {"flannel.alpha.coreos.com/public-ip": address}}},
                             content_type="application/merge-patch+json")


class FlannelClock(PacedClock):
    def __init__(self, flannel: FlannelOnNodes):
        super().__init__()
        self.flannel = flannel

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.flannel.tick()


class JoiningWithFlannel(JoiningGuests):
    """A join after which flanneld started at once, before k4w could annotate the Node (the race lost)."""

    def __init__(self, world, api, flannel: FlannelOnNodes):
        super().__init__(world, api)
        self.flannel = flannel

    def run(self, machine, command: str, stdin: str = "") -> str:
        out = super().run(machine, command, stdin)
        if "cluster-join" in command:
            self.flannel.tick()
        return out


@contextlib.contextmanager
def flannel_args(api, args: list[str]):
    """The cluster's own Flannel DaemonSet with these flanneld args for the test, then as it was."""
    ds = api.get(FLANNEL_DS)
    before = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    ds["spec"]["template"]["spec"]["containers"][0]["args"] = args
    api.request("PUT", FLANNEL_DS, ds)
    try:
        yield
    finally:
        ds = api.get(FLANNEL_DS)
        ds["spec"]["template"]["spec"]["containers"][0]["args"] = before
        api.request("PUT", FLANNEL_DS, ds)


def linux_worker_config(tmp_path, admin_conf) -> dict:
    data = yaml.safe_load(write_existing_config(tmp_path / "cluster.yml", admin_conf).read_text())
    data["nodes"] = [{"name": "lnx-1", "role": "worker", "box": "ubuntu-2604", "ip": "192.168.252.11", "cpus": 2, "memory": 2048}]
    return data


def test_a_linux_worker_gets_the_cluster_nic_from_a_flannel_without_iface(plane, tmp_path):
    """The owner's flanneld has no --iface: it would register the management NIC's address, and the
    node would be Ready with pod traffic to it lost. k4w sets node-public-ip to the cluster address and
    restarts that node's Flannel pod, which started before; flanneld then registers the cluster address."""
    api = plane.client()
    out = tmp_path / "out"
    with flannel_args(api, ["--ip-masq", "--kube-subnet-mgr"]):
        cluster = render_to(out, linux_worker_config(tmp_path, plane.admin_conf))
        world = FakeWorld(machines_of(out))
        flannel = FlannelOnNodes(api)
        try:
            up_mod.cluster_up(cluster, out, validate=False, vagrant=world.vagrant, remote=JoiningWithFlannel(world, api, flannel),
                              host=world.host, clock=FlannelClock(flannel), api=api, poll_seconds=60)
            node = api.get("/api/v1/nodes/lnx-1")["metadata"]["annotations"]
            assert node["flannel.alpha.coreos.com/node-public-ip"] == "192.168.252.11"
            assert node["flannel.alpha.coreos.com/public-ip"] == "192.168.252.11"
            assert list(json.loads((out / "cluster-state.json").read_text())["steps"])[-3:] == ["join:lnx-1", "flannel:lnx-1", "ready"]
        finally:
            up_mod.cluster_reset(cluster, out, vagrant=world.vagrant, remote=JoiningGuests(world, api), host=world.host,
                                 clock=PacedClock(), api=api)
            api.delete("/api/v1/namespaces/kube-flannel/pods/kube-flannel-ds-lnx-1")
    assert api.get_optional("/api/v1/nodes/lnx-1") is None


def test_a_flannel_iface_that_misses_the_cluster_nic_fails_naming_it(plane, tmp_path):
    """The owner's --iface is theirs to choose; one that is not k4w's cluster NIC fails cluster-up
    (Ready is not enough), naming the argument, and k4w wrote no annotation."""
    api = plane.client()
    out = tmp_path / "out"
    with flannel_args(api, ["--ip-masq", "--kube-subnet-mgr", "--iface=eth0"]):
        cluster = render_to(out, linux_worker_config(tmp_path, plane.admin_conf))
        world = FakeWorld(machines_of(out))
        flannel = FlannelOnNodes(api, iface_ip=MANAGEMENT_IP)
        try:
            with pytest.raises(K4wError) as failed:
                up_mod.cluster_up(cluster, out, validate=False, vagrant=world.vagrant, remote=JoiningWithFlannel(world, api, flannel),
                                  host=world.host, clock=FlannelClock(flannel), api=api, poll_seconds=60)
            text = str(failed.value)
            assert f"flannel.alpha.coreos.com/public-ip of Node lnx-1 is {MANAGEMENT_IP}, not its cluster address 192.168.252.11" in text
            assert "DaemonSet kube-flannel/kube-flannel-ds chooses the interface by --iface=eth0" in text
            node = api.get("/api/v1/nodes/lnx-1")["metadata"]["annotations"]
            assert "flannel.alpha.coreos.com/node-public-ip" not in node
        finally:
            up_mod.cluster_reset(cluster, out, vagrant=world.vagrant, remote=JoiningGuests(world, api), host=world.host,
                                 clock=PacedClock(), api=api)
            api.delete("/api/v1/namespaces/kube-flannel/pods/kube-flannel-ds-lnx-1")


def test_names_installations_and_changed_content_on_the_real_api_server(plane, tmp_path):
    """The three ownership rules against the real API server: a node name it already has is refused
    before any VM; a second installation (another --out) shares k4w's objects, and the first one's reset
    leaves them to it; an object an older k4w applied with other content is replaced (a real PUT)."""
    api = WritesSeen(plane.client().creds)
    owners = plane.client()
    owners.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": "winx-1", "labels": {"kubernetes.io/os": "windows"}}})
    try:
        out_a = tmp_path / "a"
        data = yaml.safe_load(write_existing_config(tmp_path / "cluster.yml", plane.admin_conf).read_text())
        cluster_a = render_to(out_a, data)
        world = FakeWorld(machines_of(out_a))
        with pytest.raises(K4wError, match="node name winx-1: the cluster already has a Node winx-1, not one k4w joined"):
            up_mod.cluster_up(cluster_a, out_a, validate=False, vagrant=world.vagrant, remote=JoiningGuests(world, owners),
                              host=world.host, clock=PacedClock(), api=api)
        assert api.writes == [] and not any(c.startswith("vagrant up") for c in world.commands())
    finally:
        owners.delete("/api/v1/nodes/winx-1")

    ups = {}
    for name, node, ip in (("a", "winx-1", "192.168.252.21"), ("b", "winx-2", "192.168.252.22")):
        data["nodes"][0].update(name=node, ip=ip)
        out = tmp_path / name
        cluster = render_to(out, data)
        world = FakeWorld(machines_of(out))
        up_mod.cluster_up(cluster, out, validate=False, vagrant=world.vagrant, remote=JoiningGuests(world, owners),
                          host=world.host, clock=PacedClock(), api=api)
        ups[name] = (cluster, out, json.loads((out / "cluster-state.json").read_text())["installation"])
    flannel = "/apis/apps/v1/namespaces/k4w-windows-node/daemonsets/k4w-flannel-windows"
    assert existing.installations_of(api.get(flannel)) == {ups["a"][2], ups["b"][2]}

    # What an older k4w applied: another start script, so another digest. b's next apply replaces it.
    scripts = "/api/v1/namespaces/k4w-windows-node/configmaps/k4w-windows-node-scripts"
    older = owners.get(scripts)
    older["data"]["start-flanneld.ps1"] = "# an older k4w's script"
    older["metadata"]["annotations"][existing.CONTENT_SHA256] = "0" * 64
    owners.request("PUT", scripts, older)
    cluster_b, out_b, b = ups["b"]
    docs = existing.with_api_endpoint(existing.windows_objects(out_b, cluster_b), existing.endpoint(api))
    said = existing.apply(api, docs, existing.Record(out_b, api.creds.server))
    assert "updated ConfigMap k4w-windows-node/k4w-windows-node-scripts (k4w's, applied by an earlier k4w with other content)" in said
    assert owners.get(scripts)["data"] == next(d for d in docs if d["kind"] == "ConfigMap")["data"]

    said = existing.remove(api, ups["a"][1])
    assert "deleted Node winx-1" in said and owners.get_optional("/api/v1/nodes/winx-2") is not None
    assert owners.get_optional(flannel) is not None and existing.installations_of(owners.get(flannel)) == {b}
    said = existing.remove(api, out_b)
    assert "deleted Node winx-2" in said and owners.get_optional(flannel) is None
    assert gone(api, HOSTPROCESS_NAMESPACE)


def test_the_join_tokens_kubeadm_made_for_a_node_are_found_by_their_description_through_the_real_kubectl(plane):
    """On k4w's own master, cluster-up finds every join token `kubeadm token create --description` made for a node,
    also one whose answer was lost, by the exact kubectl command it runs there (steps.JOIN_TOKEN_LIST), here
    against a real kube-apiserver with the pinned kubeadm and kubectl; another node's token is not touched."""
    import shlex
    import subprocess

    from k4w.cluster import steps
    from k4w.cluster.machines import Machine
    from k4w.infra import pinned_tools

    node, other = (Machine(name=n, role="worker", os="linux", ip=ip, vmname=n) for n, ip in
                   (("worker-a", "192.0.2.21"), ("worker-b", "192.0.2.22")))
    tokens = {m.name: [re.search(r"--token ([a-z0-9]{6})\.([a-z0-9]{16})", plane.kubeadm_run(
        "token", "create", "--print-join-command", "--ttl", "1h", "--description", steps.join_token_description(m))).groups()
        for _ in range(times)] for m, times in ((node, 2), (other, 1))}
    made = {name: [token_id for token_id, _ in pairs] for name, pairs in tokens.items()}
    try:
        kubectl = pinned_tools.require("kubernetes-node", "kubectl")
        listed = subprocess.run([kubectl, "--kubeconfig", str(plane.admin_conf), *shlex.split(steps.JOIN_TOKEN_LIST)],
                                capture_output=True, text=True, timeout=60, check=True).stdout
        assert sorted(steps.described_token_ids(listed, steps.join_token_description(node))) == sorted(made["worker-a"])
        assert steps.described_token_ids(listed, steps.join_token_description(other)) == made["worker-b"]
        assert all(secret not in listed for _, secret in tokens["worker-a"])   # names and descriptions only
    finally:
        for token_id in (*made["worker-a"], *made["worker-b"]):
            plane.client().delete(f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token_id}")

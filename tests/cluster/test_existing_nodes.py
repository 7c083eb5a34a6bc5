"""cluster.existing: whose Nodes and objects are whose. A node name the cluster already uses is refused
before any VM starts; a Node is recorded only once k4w's join made it; cluster-reset deletes only this
installation's Nodes and token, and the shared objects only when no other k4w installation uses them; an
object an older k4w applied is replaced when its content changed, an object of the owner's never touched.

The API server here is a small in-memory one (the recorded answers of a real 1.37.2 kubeadm cluster,
tests/fixtures/existing-cluster/answers.json, plus the objects the test writes); the same flows against
the real API server are in test_existing_real_api.py."""

from __future__ import annotations

import copy
import json
import urllib.parse

import pytest
import yaml

from k4w.derive import node_marks
from k4w import render
from k4w.cluster import existing
from k4w.cluster import up as up_mod
from k4w.derive.cluster import Cluster
from k4w.model.config import parse
from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import ApiError, Credentials
from tests.cluster.conftest import machines_of, render_to
from tests.fakes.cluster_world import FakeClock, FakeRemote, FakeWorld
from tests.helpers import ROOT

RECORDED = json.loads((ROOT / "tests" / "fixtures" / "existing-cluster" / "answers.json").read_text())["answers"]
NODES = "/api/v1/nodes"
NAMESPACE = "/api/v1/namespaces/k4w-windows-node"
FLANNEL_DS = "/apis/apps/v1/namespaces/k4w-windows-node/daemonsets/k4w-flannel-windows"


class MemoryApi:
    """GET/POST/PUT/PATCH/DELETE on objects held in memory; the recorded answers for the rest. Nodes are
    objects of their own, listed (with a labelSelector of key=value) as the API server lists them."""

    def __init__(self, nodes: list[dict] | None = None):
        self.creds = Credentials(server="https://192.0.2.10:6443", ca_pem=b"")
        self.objects: dict[str, dict] = {k: copy.deepcopy(v) for k, v in RECORDED.items() if k != NODES}
        for node in copy.deepcopy(RECORDED[NODES]["items"]) + (nodes or []):
            self.objects[f"{NODES}/{node['metadata']['name']}"] = node
        self.writes: list[tuple[str, str]] = []
        self.version = 0

    def _missing(self, method, path):
        return ApiError(f"{method} {path}: HTTP 404 NotFound", status=404)

    def request(self, method: str, path: str, body: dict | None = None, content_type: str = "application/json") -> dict:
        if method == "GET":
            bare, _, query = path.partition("?")
            if bare == NODES:
                selector = urllib.parse.parse_qs(query).get("labelSelector", [""])[0]
                key, _, value = selector.partition("=")
                items = [copy.deepcopy(o) for p, o in self.objects.items() if p.startswith(NODES + "/")
                         and (not key or ((o["metadata"].get("labels") or {}).get(key) == value))]
                return {"items": items}
            if bare not in self.objects:
                raise self._missing(method, path)
            return copy.deepcopy(self.objects[bare])
        self.version += 1
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            self.writes.append((method, target))
            if target in self.objects:
                raise ApiError(f"POST {target}: HTTP 409 AlreadyExists", status=409)
            self.objects[target] = {**copy.deepcopy(body), "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
            return copy.deepcopy(self.objects[target])
        self.writes.append((method, path))
        if path not in self.objects:
            raise self._missing(method, path)
        if method == "DELETE":
            del self.objects[path]
            return {}
        if method == "PUT":
            assert body["metadata"]["resourceVersion"] == self.objects[path]["metadata"]["resourceVersion"]
            self.objects[path] = {**copy.deepcopy(body), "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        elif method == "PATCH":
            assert content_type == "application/merge-patch+json"
            meta = self.objects[path]["metadata"]
            meta.setdefault("annotations", {}).update(body["metadata"]["annotations"])
        return copy.deepcopy(self.objects[path])

    def get(self, path):
        return self.request("GET", path)

    def get_optional(self, path):
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path, body):
        return self.request("POST", path, body)

    def delete(self, path):
        try:
            self.request("DELETE", path)
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise


def node(name: str, os_name: str = "windows", **labels) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/os": os_name, **labels}}}


def k4w_node(name: str, installation: str) -> dict:
    return node(name, **node_marks.node_labels(installation))


def existing_cluster(tmp_path) -> tuple[Cluster, object]:
    data = yaml.safe_load((ROOT / "examples" / "cluster-existing.yml").read_text())
    out = tmp_path / "out"
    return render_to(out, data), out


class Kubelets(FakeRemote):
    """The guests at the process boundary; a join registers the Node the way its kubelet does: with the
    labels and taints of the join configuration cluster-up handed it (kubeadm-flags.env)."""

    def __init__(self, world, api):
        super().__init__(world)
        self.api = api

    def run(self, machine, command: str, stdin: str = "") -> str:
        self.world.log.append(f"{machine.name}: {command}")
        if "cluster-join" in command:
            config = stdin or self.world.uploaded["C:\\k4w\\kubeadm-join.yaml"][0]
            registration = yaml.safe_load(config)["nodeRegistration"]
            args = {a["name"]: a["value"] for a in registration.get("kubeletExtraArgs") or []}
            labels = dict(item.split("=", 1) for item in args.get("node-labels", "").split(",") if item)
            if self.api.get_optional(f"{NODES}/{machine.name}") is not None:
                return ""   # a join script run again on a joined node: its kubelet keeps the Node it has
            self.api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": machine.name, "labels": {"kubernetes.io/os": machine.os, **labels}},
                                    "spec": {"taints": registration.get("taints") or []},
                                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        return ""


def up(cluster, out, api, world=None):
    world = world or FakeWorld(machines_of(out))
    up_mod.cluster_up(cluster, out, validate=False, vagrant=world.vagrant, remote=Kubelets(world, api), host=world.host,
                      clock=FakeClock(), api=api)
    return world


# ------------------------------------------------------------------ finding: node-name collisions

def test_a_node_name_the_cluster_already_has_is_refused_before_any_vm(tmp_path):
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi([node("winx-1")])      # the owner's own (NotReady, say) Windows node of that name
    world = FakeWorld(machines_of(out))
    with pytest.raises(K4wError) as refused:
        up(cluster, out, api, world)
    assert "node name winx-1: the cluster already has a Node winx-1, not one k4w joined from this --out; rename it in " \
           "cluster.yml nodes[]" in str(refused.value)
    assert "nothing was started or changed" in str(refused.value)
    assert not [c for c in world.commands() if c.startswith("vagrant up")] and api.writes == []
    assert not (out / existing.RECORD_FILE).exists()


def test_another_installations_node_of_that_name_is_refused_naming_it(tmp_path):
    cluster, out = existing_cluster(tmp_path)
    with pytest.raises(K4wError) as refused:
        up(cluster, out, MemoryApi([k4w_node("winx-1", "0000feedbeef")]))
    assert "another k4w installation's (k4w.io/installation=0000feedbeef)" in str(refused.value)


def test_the_node_is_recorded_after_the_join_made_it_labelled_and_tainted(tmp_path):
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi()
    up(cluster, out, api)
    record = json.loads((out / existing.RECORD_FILE).read_text())
    installation = json.loads((out / "cluster-state.json").read_text())["installation"]
    assert record["nodes"] == ["winx-1"] and record["installation"] == installation
    registered = api.get(f"{NODES}/winx-1")
    assert registered["metadata"]["labels"]["k4w.io/installation"] == installation
    assert registered["metadata"]["labels"]["k4w.io/node"] == "true"
    assert registered["spec"]["taints"] == [{"key": "os", "value": "windows", "effect": "NoSchedule"}]
    # A rerun of the finished cluster-up takes its own Node for its own, not for a collision.
    up(cluster, out, api)


def test_a_deleted_state_file_does_not_make_a_new_installation_that_refuses_its_own_nodes(tmp_path):
    """cluster-state.json gone (some messages say to delete it), existing-cluster.json kept: the record's
    installation id is taken again, so the rerun takes its own Node for its own and reset still finds it."""
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi()
    up(cluster, out, api)
    installation = json.loads((out / existing.RECORD_FILE).read_text())["installation"]
    (out / "cluster-state.json").unlink()
    up(cluster, out, api)
    assert json.loads((out / "cluster-state.json").read_text())["installation"] == installation
    assert "deleted Node winx-1" in existing.remove(api, out)


def test_a_node_that_appears_right_before_the_join_is_neither_joined_nor_recorded(tmp_path, monkeypatch):
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi()
    world = FakeWorld(machines_of(out))
    original = existing.join_step

    def owner_registers_first(ctx, m, step):
        api.create(NODES, node(m.name))
        return original(ctx, m, step)

    monkeypatch.setattr(existing, "join_step", owner_registers_first)
    with pytest.raises(K4wError, match="node name winx-1: a Node winx-1 appeared in the cluster that this installation did not join"):
        up(cluster, out, api, world)
    assert json.loads((out / existing.RECORD_FILE).read_text())["nodes"] == []
    assert not any("cluster-join" in line for line in world.log)
    # ... so cluster-reset leaves the owner's Node alone.
    assert "deleted Node winx-1" not in existing.remove(api, out)
    assert api.get_optional(f"{NODES}/winx-1") is not None


# ------------------------------------------------------------------ finding: two installations, one cluster

def test_reset_keeps_what_another_installation_still_uses_and_the_last_one_deletes_it(tmp_path):
    cluster, out_a = existing_cluster(tmp_path / "a")
    api = MemoryApi()
    up(cluster, out_a, api)
    # A second host, its own --out and node name, the same cluster.
    data = yaml.safe_load((ROOT / "examples" / "cluster-existing.yml").read_text())
    data["nodes"][0].update(name="winx-2", ip="192.168.252.22")
    out_b = tmp_path / "b" / "out"
    cluster_b = render_to(out_b, data)
    up(cluster_b, out_b, api)
    a = json.loads((out_a / "cluster-state.json").read_text())["installation"]
    b = json.loads((out_b / "cluster-state.json").read_text())["installation"]
    assert a != b
    assert existing.installations_of(api.get(FLANNEL_DS)) == {a, b}

    said = existing.remove(api, out_a)
    assert "deleted Node winx-1" in said
    assert api.get_optional(f"{NODES}/winx-1") is None and api.get_optional(f"{NODES}/winx-2") is not None
    # The shared objects stay for b, now used by b only; a's token is gone.
    assert api.get_optional(NAMESPACE) is not None and existing.installations_of(api.get(FLANNEL_DS)) == {b}
    assert any(line.startswith("kept DaemonSet k4w-windows-node/k4w-flannel-windows: still used by k4w's installation ") for line in said)
    assert not [p for p in api.objects if "/secrets/bootstrap-token-" in p
                and api.objects[p]["metadata"]["labels"].get("k4w.io/installation") == a]

    said = existing.remove(api, out_b)
    assert "deleted Node winx-2" in said and "deleted DaemonSet k4w-windows-node/k4w-flannel-windows" in said
    assert api.get_optional(NAMESPACE) is None and api.get_optional(FLANNEL_DS) is None


def test_shared_objects_stay_while_another_installations_k4w_node_remains(tmp_path):
    """An installation of a k4w from before the annotation: only its node's label tells it is there."""
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi()
    up(cluster, out, api)
    api.create(NODES, k4w_node("winy-9", "0000feedbeef"))
    said = existing.remove(api, out)
    assert "kept Namespace k4w-windows-node: still used by k4w's node winy-9 (0000feedbeef)" in said
    assert api.get_optional(NAMESPACE) is not None and api.get_optional(f"{NODES}/winy-9") is not None


def test_a_recorded_node_another_installation_now_holds_is_kept(tmp_path):
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi()
    up(cluster, out, api)
    api.objects[f"{NODES}/winx-1"]["metadata"]["labels"]["k4w.io/installation"] = "0000feedbeef"
    said = existing.remove(api, out)
    assert "kept Node winx-1: it is labelled k4w.io/installation=0000feedbeef, another k4w installation's" in said
    assert api.get_optional(f"{NODES}/winx-1") is not None


# ------------------------------------------------------------------ finding: objects an older k4w applied

def test_an_object_an_older_k4w_applied_is_replaced_when_its_content_changed(tmp_path):
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi()
    up(cluster, out, api)
    installation = json.loads((out / "cluster-state.json").read_text())["installation"]
    # What an older k4w left: other start scripts in the ConfigMap, no annotations at all.
    path = "/api/v1/namespaces/k4w-windows-node/configmaps/k4w-windows-node-scripts"
    older = api.objects[path]
    older["data"] = {"start-flanneld.ps1": "# the older script"}
    older["metadata"].pop("annotations")
    docs = existing.with_api_endpoint(existing.windows_objects(out, cluster), existing.endpoint(api))
    api.writes.clear()
    said = existing.apply(api, docs, existing.Record(out, api.creds.server))
    assert "updated ConfigMap k4w-windows-node/k4w-windows-node-scripts (k4w's, applied by an earlier k4w with other content)" in said
    assert api.writes == [("PUT", path)]
    now = api.get(path)
    assert now["data"] == next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    assert now["metadata"]["annotations"][existing.INSTALLATIONS] == installation
    # Applied again, nothing changes.
    api.writes.clear()
    assert all(line.startswith("kept ") for line in existing.apply(api, docs, existing.Record(out, api.creds.server)))
    assert api.writes == []


def test_an_object_of_the_owners_is_never_changed(tmp_path):
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi()
    render.render(cluster, out)
    docs = existing.windows_objects(out, cluster)
    theirs = copy.deepcopy(next(d for d in docs if d["kind"] == "ConfigMap"))
    theirs["metadata"]["labels"] = {"team": "windows"}
    path = "/api/v1/namespaces/k4w-windows-node/configmaps/k4w-windows-node-scripts"
    api.objects[path] = copy.deepcopy(theirs)
    record = existing.Record(out, api.creds.server, "a1b2c3d4e5f6")
    with pytest.raises(K4wError, match="ConfigMap k4w-windows-node/k4w-windows-node-scripts already exists and is not k4w's"):
        existing.apply(api, docs, record)
    assert api.objects[path] == theirs and not [w for w in api.writes if w[1] == path]


# ------------------------------------------------------------------ the cluster's own Windows nodes

def test_the_owners_windows_nodes_are_named_and_left_alone(tmp_path, capsys):
    cluster, out = existing_cluster(tmp_path)
    api = MemoryApi([node("their-win-1")])
    up(cluster, out, api)
    said = capsys.readouterr().out
    assert "the cluster's own Windows nodes their-win-1 are not k4w's" in said
    ds = api.get(FLANNEL_DS)["spec"]["template"]["spec"]["nodeSelector"]
    assert ds == {"kubernetes.io/os": "windows", "k4w.io/node": "true"}   # their-win-1 has no k4w.io/node


# ------------------------------------------------------------------ replacing an older k4w's object safely

K4W = {"app.kubernetes.io/part-of": "k4w"}


def older(api: MemoryApi, doc: dict, **changes) -> str:
    """doc as an older k4w left it (no k4w annotations, changes applied), stored at its path."""
    path = existing.object_path(doc)
    left = copy.deepcopy(doc)
    left["metadata"].pop("annotations", None)
    left["metadata"]["resourceVersion"] = "7"
    for key, value in changes.items():
        left[key] = value
    api.objects[path] = left
    return path


def test_a_service_account_token_secret_keeps_the_token_its_controller_wrote():
    """The seed era's token Secret has no data in k4w's manifest; replacing it must not empty the token
    every Windows node's flanneld and kube-proxy log in with (nor drop the uid annotation it names)."""
    api = MemoryApi()
    doc = {"apiVersion": "v1", "kind": "Secret", "type": existing.SERVICE_ACCOUNT_TOKEN,
           "metadata": {"name": "k4w-windows-flanneld-token", "namespace": "kube-system", "labels": dict(K4W),
                        "annotations": {"kubernetes.io/service-account.name": "k4w-windows-flanneld"}}}
    path = older(api, doc)
    live = api.objects[path]
    live["metadata"]["annotations"] = {"kubernetes.io/service-account.name": "k4w-windows-flanneld",
                                       existing.SERVICE_ACCOUNT_UID: "0f6c9c1e-uid"}
    live["data"] = {"token": "dG9rZW4=", "ca.crt": "Y2E=", "namespace": "a3ViZS1zeXN0ZW0="}
    said = existing.apply(api, [doc], _record(api))
    assert said == ["updated Secret kube-system/k4w-windows-flanneld-token (k4w's, applied by an earlier k4w with other content)"]
    now = api.objects[path]
    assert now["data"] == {"token": "dG9rZW4=", "ca.crt": "Y2E=", "namespace": "a3ViZS1zeXN0ZW0="}
    assert now["metadata"]["annotations"][existing.SERVICE_ACCOUNT_UID] == "0f6c9c1e-uid"
    assert now["metadata"]["annotations"][existing.CONTENT_SHA256] == existing.content_sha256(doc)


@pytest.mark.parametrize("kind, field, old, new", [
    ("ClusterRoleBinding", "roleRef", {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "old-role"},
     {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "k4w-windows-flanneld"}),
    ("DaemonSet", "spec", {"selector": {"matchLabels": {"app": "old"}}, "template": {}},
     {"selector": {"matchLabels": {"app": "k4w-flannel-windows"}}, "template": {}}),
])
def test_an_object_whose_immutable_field_changed_is_made_again_not_put(kind, field, old, new):
    """A binding's roleRef and a DaemonSet's selector cannot be updated (the API server answers 422):
    k4w deletes its own object and makes it again with the new value."""
    api = MemoryApi()
    api_version = "rbac.authorization.k8s.io/v1" if kind == "ClusterRoleBinding" else "apps/v1"
    meta = {"name": "k4w-thing", "labels": dict(K4W)}
    if kind == "DaemonSet":
        meta["namespace"] = "k4w-windows-node"
    doc = {"apiVersion": api_version, "kind": kind, "metadata": meta, field: new}
    path = older(api, doc, **{field: old})
    said = existing.apply(api, [doc], _record(api))
    assert said[0].startswith(f"made {existing.describe(doc)} again")
    assert [m for m, p in api.writes if p.startswith(path.rsplit("/", 1)[0])] == ["DELETE", "POST"]
    assert api.objects[path][field] == new


def test_an_update_that_meets_another_writer_reads_the_object_again_once():
    """Two installations' cluster-up at once: the PUT's resourceVersion is stale (409 Conflict); k4w reads
    the object again and puts once more, rather than failing the whole cluster-up."""
    class Racing(MemoryApi):
        raced = False

        def request(self, method, path, body=None, content_type="application/json"):
            if method == "PUT" and not self.raced:
                self.raced = True
                self.objects[path]["metadata"]["resourceVersion"] = "8"   # the other writer's change
                raise ApiError(f"PUT {path}: HTTP 409 Conflict", status=409)
            return super().request(method, path, body, content_type)

    api = Racing()
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "k4w-cm", "namespace": "k4w-windows-node",
                                                                "labels": dict(K4W)}, "data": {"a": "new"}}
    path = older(api, doc, data={"a": "old"})
    said = existing.apply(api, [doc], _record(api))
    assert said == [f"updated {existing.describe(doc)} (k4w's, applied by an earlier k4w with other content)"]
    assert api.objects[path]["data"] == {"a": "new"}


def _record(api) -> existing.Record:
    record = existing.DryRunRecord.__new__(existing.DryRunRecord)
    record.path, record.data = None, {"server": api.creds.server, "installation": "a1b2c3d4e5f6", "objects": [], "nodes": []}
    return record

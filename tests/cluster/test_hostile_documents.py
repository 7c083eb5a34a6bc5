"""Every document k4w reads and did not just write (the API answers of cluster.existing, its own state
files under --out), in a shape it does not expect, ends in one line naming the source and the field:
a K4wError, never a traceback from the code that uses the document (k4w.infra.documents, k4w.cluster.api_models).

The table feeds each hostile shape to the reader of that document; the shapes are those a cluster
k4w did not make, a proxy in the way, or a hand-edited or truncated file can give."""

from __future__ import annotations

import base64
import copy
import http.client
import json

import pytest
import yaml

from k4w.cluster import bootstrap_token, existing, facts as facts_mod
from k4w.cluster.state import STATE_FILE, State
from k4w.infra.errors import K4wError
from k4w.cluster import kubeapi
from k4w.cluster.kubeapi import Client, Credentials
from tests.cluster.test_existing_facts import FLANNEL_CM, RECORDED, RecordedApi
from tests.helpers import ROOT, invoke

DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_YAML = "[" * 100_000
KUBEADM_CONFIG = facts_mod.KUBEADM_CONFIG
KUBELET_CONFIG = facts_mod.KUBELET_CONFIG
NODES = "/api/v1/nodes"
DAEMONSETS = "/apis/apps/v1/daemonsets"


def _with(path: str, change) -> dict:
    """The recorded answers with the one at path changed by change(answer) (or replaced by a value)."""
    result = copy.deepcopy(RECORDED)
    result[path] = change(copy.deepcopy(result.get(path))) if callable(change) else change
    return result


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(12))


def _configmap(key: str, text: str):
    return {"metadata": {"name": "x"}, "data": {key: text}}


def _cluster_configuration(networking) -> dict:
    return _with(KUBEADM_CONFIG, _configmap("ClusterConfiguration", json.dumps({"networking": networking})))


def _node(**spec) -> dict:
    return {"items": [{"metadata": {"name": "cp"}, "spec": spec}]}


def _netconf(text: str) -> dict:
    return _with(FLANNEL_CM, _configmap("net-conf.json", text))


def _without_flannel(daemonsets) -> dict:
    result = _with(DAEMONSETS, daemonsets)
    result.pop(FLANNEL_CM, None)
    return result


def _without_kube_dns(kubelet_text: str) -> dict:
    result = _with(KUBELET_CONFIG, _configmap("kubelet", kubelet_text))
    result.pop(facts_mod.KUBE_DNS, None)
    return result


# (id, the API answers, what the one line must name: the source, then the field)
FACTS_SHAPES = [
    ("version a list", _with("/version", []), ("/version", "the document")),
    ("gitVersion a number", _with("/version", {"gitVersion": 137}), ("/version", "gitVersion")),
    ("gitVersion not a version", _with("/version", {"gitVersion": "latest"}), ("/version", "gitVersion")),
    ("nodes.items a string", _with(NODES, {"items": "cp"}), (NODES, "items")),
    ("node name a number", _with(NODES, {"items": [{"metadata": {"name": 5}}]}), (NODES, "items[0].metadata.name")),
    ("node metadata a list", _with(NODES, {"items": [{"metadata": []}]}), (NODES, "items[0].metadata")),
    ("podCIDRs not CIDRs", _with(NODES, _node(podCIDRs=["ten"])), (NODES, "items[0].spec.podCIDRs[0]")),
    ("configmap data a list", _with(KUBEADM_CONFIG, {"data": []}), ("kube-system/kubeadm-config", "data")),
    ("networking a list", _cluster_configuration([]), ("kubeadm-config ClusterConfiguration", "networking")),
    ("podSubnet not a CIDR", _cluster_configuration({"podSubnet": "10.244.0.0/99"}), ("ClusterConfiguration", "networking.podSubnet")),
    ("ClusterConfiguration an alias bomb", _with(KUBEADM_CONFIG, _configmap("ClusterConfiguration", ALIAS_BOMB)),
     ("kubeadm-config ClusterConfiguration", "anchors and aliases")),
    ("serviceSubnet a number", _cluster_configuration({"serviceSubnet": 10}), ("ClusterConfiguration", "networking.serviceSubnet")),
    ("ClusterConfiguration not YAML", _with(KUBEADM_CONFIG, _configmap("ClusterConfiguration", "a: [")), ("ClusterConfiguration", "not valid YAML")),
    ("ClusterConfiguration nested 100,000 deep", _with(KUBEADM_CONFIG, _configmap("ClusterConfiguration", DEEP_YAML)),
     ("ClusterConfiguration", "nested more than 32 levels deep")),
    ("kube-dns clusterIP a number", _with(facts_mod.KUBE_DNS, {"spec": {"clusterIP": 10}}), ("kube-dns", "spec.clusterIP")),
    ("kube-dns spec a string", _with(facts_mod.KUBE_DNS, {"spec": "x"}), ("kube-dns", "spec")),
    ("kubernetes Service clusterIP not an IP", _with(facts_mod.KUBERNETES_SERVICE, {"spec": {"clusterIP": "ten"}}),
     ("services/kubernetes", "spec.clusterIP")),
    ("kubelet clusterDNS a string", _without_kube_dns("clusterDNS: 10.96.0.10"), ("kubelet-config kubelet", "clusterDNS")),
    ("net-conf.json a list", _netconf("[]"), ("net-conf.json", "the document")),
    ("net-conf.json not JSON", _netconf("{"), ("net-conf.json", "not valid JSON")),
    ("net-conf.json nested 100,000 deep", _netconf(DEEP_JSON), ("net-conf.json", "nested too deeply")),
    ("Flannel Network not a CIDR", _netconf('{"Network": "pods"}'), ("net-conf.json", "Network")),
    ("Flannel Backend a list", _netconf('{"Network": "10.244.0.0/16", "Backend": []}'), ("net-conf.json", "Backend")),
    ("Flannel VNI a string", _netconf('{"network": "10.244.0.0/16", "backend": {"type": "vxlan", "vni": "4096"}}'),
     ("net-conf.json", "Backend.VNI")),
    ("daemonsets.items a string", _without_flannel({"items": "calico"}), (DAEMONSETS, "items")),
    ("daemonset name a list", _without_flannel({"items": [{"metadata": {"name": ["cilium"]}}]}), (DAEMONSETS, "items[0].metadata.name")),
]


def one_line_naming(exc: K4wError, source: str, field: str) -> None:
    text = str(exc)
    assert "\n" not in text, text
    assert source in text and field in text, (source, field, text)
    assert len(text) < 400, text


@pytest.mark.parametrize("answers, names", [s[1:] for s in FACTS_SHAPES], ids=[s[0] for s in FACTS_SHAPES])
def test_each_hostile_api_answer_is_one_line_naming_it_and_its_field(answers, names):
    with pytest.raises(K4wError) as refused:
        facts_mod.read(RecordedApi(answers))
    one_line_naming(refused.value, *names)


CLUSTER_INFO = bootstrap_token.CLUSTER_INFO


def _cluster_info(kubeconfig) -> dict:
    text = kubeconfig if isinstance(kubeconfig, str) else json.dumps(kubeconfig)
    return _with(CLUSTER_INFO, _configmap("kubeconfig", text))


# (id, reader, the answers, source, field)
OTHER_READERS = [
    ("cluster-info server not a URL", existing.endpoint, _cluster_info({"clusters": [{"cluster": {"server": "10.0.0.1:6443"}}]}),
     "cluster-info kubeconfig", "clusters[0].cluster.server"),
    ("cluster-info server port not a number", existing.endpoint,
     _cluster_info({"clusters": [{"cluster": {"server": "https://10.0.0.1:64x3"}}]}), "cluster-info kubeconfig", "clusters[0].cluster.server"),
    ("cluster-info clusters an object", existing.endpoint, _cluster_info({"clusters": {"k": {}}}), "cluster-info kubeconfig", "clusters"),
    ("cluster-info kubeconfig nested 100,000 deep", existing.endpoint, _cluster_info(DEEP_YAML), "cluster-info kubeconfig",
     "nested more than 32 levels deep"),
    # An alias bomb (each line doubles the last): refused on the event stream, before pydantic could walk it.
    ("cluster-info kubeconfig an alias bomb", existing.endpoint, _cluster_info(ALIAS_BOMB), "cluster-info kubeconfig",
     "anchors and aliases"),
    ("cluster-info kubeconfig an alias bomb, for the CA hash", bootstrap_token.ca_cert_hash, _cluster_info(ALIAS_BOMB),
     "cluster-info kubeconfig", "anchors and aliases"),
    ("cluster-info data a list", bootstrap_token.ca_cert_hash, _with(CLUSTER_INFO, {"data": ["kubeconfig"]}), "cluster-info", "data"),
    ("cluster-info kubeconfig a list", bootstrap_token.ca_cert_hash, _cluster_info("[1, 2]"), "cluster-info", "CA certificate"),
    ("node conditions a string", existing.node_conditions, _with(NODES, {"items": [{"metadata": {"name": "w"}, "status": {"conditions": "Ready"}}]}),
     NODES, "items[0].status.conditions"),
    ("node without a name", existing.node_conditions, _with(NODES, {"items": [{"metadata": {}}]}), NODES, "items[0].metadata.name"),
    ("daemonset nodeSelector a list", lambda api: existing.prerequisites(api, [], True),
     _with(DAEMONSETS, {"items": [{"metadata": {"name": "kube-proxy"}, "spec": {"template": {"spec": {"nodeSelector": ["linux"]}}}}]}),
     DAEMONSETS, "items[0].spec.template.spec.nodeSelector"),
    ("daemonset affinity terms a string", lambda api: existing.prerequisites(api, [], True),
     _with(DAEMONSETS, {"items": [{"metadata": {"name": "kube-flannel-ds"}, "spec": {"template": {"spec": {
         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "linux"}}}}}}}]}),
     DAEMONSETS, "nodeSelectorTerms"),
    ("an object k4w would apply, with labels a list", lambda api: existing.prerequisites(
        api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "k4w-windows-node"}}], False),
     _with("/api/v1/namespaces/k4w-windows-node", {"metadata": {"name": "k4w-windows-node", "labels": ["k4w"]}}),
     "namespaces/k4w-windows-node", "metadata.labels"),
]


@pytest.mark.parametrize("reader, answers, source, field", [s[1:] for s in OTHER_READERS], ids=[s[0] for s in OTHER_READERS])
def test_each_other_reader_of_the_api_refuses_a_hostile_answer_in_one_line(reader, answers, source, field):
    with pytest.raises(K4wError) as refused:
        reader(RecordedApi(answers))
    one_line_naming(refused.value, source, field)


RECORD_SHAPES = [
    ("a list", "[]", "the document"),
    ("server a number", '{"server": 6443, "objects": [], "nodes": []}', "server"),
    ("objects an object", '{"server": "https://192.0.2.10:6443", "objects": {}, "nodes": []}', "objects"),
    ("an object path outside the API", '{"server": "https://192.0.2.10:6443", "objects": [{"kind": "Secret", "name": "x", '
     '"path": "/api/v1/../../healthz"}], "nodes": []}', "objects[0].path"),
    ("a node name with a slash", '{"server": "https://192.0.2.10:6443", "objects": [], "nodes": ["../namespaces/kube-system"]}', "nodes[0]"),
    ("truncated", '{"server": "https://192.0', "not valid JSON"),
    ("nested 100,000 deep", DEEP_JSON, "nested too deeply"),
]


@pytest.mark.parametrize("text, field", [s[1:] for s in RECORD_SHAPES], ids=[s[0] for s in RECORD_SHAPES])
def test_a_hostile_existing_cluster_record_is_one_line_naming_it(tmp_path, text, field):
    (tmp_path / existing.RECORD_FILE).write_text(text)
    with pytest.raises(K4wError) as refused:
        existing.remove(RecordedApi(RECORDED), tmp_path, dry_run=True)   # what cluster-down --dry-run reads
    one_line_naming(refused.value, str(tmp_path / existing.RECORD_FILE), field)


STATE_SHAPES = [
    ("a list", "[]", "the document"),
    ("steps a list", '{"version": 1, "digest": "d", "steps": ["up"], "nodes": {}}', "steps"),
    ("a step without its time", '{"version": 1, "digest": "d", "steps": {"up": {}}, "nodes": {}}', "steps.up.at"),
    ("nodes a list", '{"version": 1, "digest": "d", "steps": {}, "nodes": []}', "nodes"),
    ("vms a string", '{"version": 1, "digest": "d", "steps": {}, "nodes": {}, "vms": "x"}', "vms"),
    ("nested 100,000 deep", DEEP_JSON, "nested too deeply"),
]


@pytest.mark.parametrize("text, field", [s[1:] for s in STATE_SHAPES], ids=[s[0] for s in STATE_SHAPES])
def test_a_hostile_cluster_state_file_is_one_line_naming_it(tmp_path, text, field):
    (tmp_path / STATE_FILE).write_text(text)
    with pytest.raises(K4wError) as refused:
        State.load(tmp_path, "d")
    one_line_naming(refused.value, str(tmp_path / STATE_FILE), field)


class _Answer:
    def __init__(self, status: int, body: bytes):
        self.status, self._body = status, body

    def read(self, limit: int) -> bytes:
        return self._body[:limit]

    def getheader(self, name: str, default=None):
        return {"content-type": "application/json"}.get(name.lower(), default)


@pytest.mark.parametrize("status", [200, 500])
def test_an_api_answer_nested_100000_deep_is_one_line(monkeypatch, status):
    """The decoder itself: Python's json recurses per level and would raise RecursionError."""

    class Connection:   # the API server's side of the socket, answering the hostile body
        def __init__(self, *args, **kwargs):
            pass

        def request(self, *args, **kwargs):
            pass

        def getresponse(self):
            return _Answer(status, DEEP_JSON.encode())

        def close(self):
            pass

    # k4w's connection (kubeapi._Connection, an HTTPSConnection with one deadline for the whole request)
    monkeypatch.setattr(kubeapi, "_Connection", Connection)
    monkeypatch.setattr(kubeapi, "_ssl_context", lambda creds: None)   # no TLS: the answer is all this is about
    api = Client(Credentials(server="https://192.0.2.10:6443", ca_pem=b""))
    with pytest.raises(K4wError) as refused:
        api.get("/version")
    one_line_naming(refused.value, "GET https://192.0.2.10:6443/version", "nested too deeply")


# ------------------------------------------------------------------ k4w's other files under --out


def _read_cluster_json(out):
    from k4w.cluster.machines import load_cluster

    return load_cluster(out)


def _read_box_catalogue(out):
    from k4w.model import profiles
    from k4w.verify import throwaway

    return throwaway.box_ref(out, profiles.load("ubuntu-1604"))


def _read_build_record(out):
    from k4w.bake import catalogue

    return catalogue.read_record(out, "ubuntu-1604")


def _record_a_test(out):
    from k4w.verify import records

    return records.record_test(out, "ubuntu-1604", {"passed": True})


MACHINE = {"name": "m", "role": "master", "os": "linux", "ip": "10.0.0.10", "vmname": "k4w-m", "box": "ubuntu-1604",
           "box_catalogue": "boxes/ubuntu-1604.json"}
# (id, file under OUT, reader, its text, the field)
OUT_FILES = [
    ("cluster.json a list", "vagrant/cluster.json", _read_cluster_json, "[]", "the document"),
    ("cluster.json machines an object", "vagrant/cluster.json", _read_cluster_json,
     json.dumps({"cluster": "k4w", "prefix_length": 24, "machines": {}}), "machines"),
    ("cluster.json a machine without its ip", "vagrant/cluster.json", _read_cluster_json,
     json.dumps({"cluster": "k4w", "prefix_length": 24, "machines": [{k: v for k, v in MACHINE.items() if k != "ip"}]}), "machines[0].ip"),
    ("cluster.json prefix_length a string", "vagrant/cluster.json", _read_cluster_json,
     json.dumps({"cluster": "k4w", "prefix_length": "24", "machines": [MACHINE]}), "prefix_length"),
    ("cluster.json nested 100,000 deep", "vagrant/cluster.json", _read_cluster_json, DEEP_JSON, "nested too deeply"),
    ("box catalogue versions a string", "boxes/ubuntu-1604.json", _read_box_catalogue, json.dumps({"name": "k4w/ubuntu-1604", "versions": "1"}), "versions"),
    ("box catalogue a version without its number", "boxes/ubuntu-1604.json", _read_box_catalogue,
     json.dumps({"name": "k4w/ubuntu-1604", "versions": [{}]}), "versions[0].version"),
    ("box catalogue nested 100,000 deep", "boxes/ubuntu-1604.json", _read_box_catalogue, DEEP_JSON, "nested too deeply"),
    ("build record a list", "boxes/ubuntu-1604.record.json", _read_build_record, "[]", "the document"),
    ("build record box_file out of OUT/boxes", "boxes/ubuntu-1604.record.json", _read_build_record,
     json.dumps({"box_file": "../../home/user/.ssh/id_rsa"}), "box_file"),
    ("build record stamp a string", "boxes/ubuntu-1604.record.json", _read_build_record, json.dumps({"stamp": "x"}), "stamp"),
    ("build record, a test recorded into a list", "boxes/ubuntu-1604.record.json", _record_a_test, "[]", "the document"),
    ("build record, a test recorded, nested deep", "boxes/ubuntu-1604.record.json", _record_a_test, DEEP_JSON, "nested too deeply"),
]


@pytest.mark.parametrize("rel, reader, text, field", [s[1:] for s in OUT_FILES], ids=[s[0] for s in OUT_FILES])
def test_each_hostile_file_k4w_reads_back_from_out_is_one_line_naming_it(tmp_path, rel, reader, text, field):
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(K4wError) as refused:
        reader(tmp_path)
    one_line_naming(refused.value, str(path), field)


def _self_signed_ca() -> str:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


def test_cluster_down_dry_run_on_a_corrupt_record_is_one_line_from_the_real_cli(tmp_path):
    """The review's case as a user meets it: no traceback, exit 1, the file and the field named."""
    kubeconfig = tmp_path / "admin.conf"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "admin@k",
        "contexts": [{"name": "admin@k", "context": {"cluster": "k", "user": "admin"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://192.0.2.10:6443", "certificate-authority-data": _self_signed_ca()}}],
        "users": [{"name": "admin", "user": {"token": "abcdef.0123456789abcdef"}}]}))
    kubeconfig.chmod(0o600)
    data = yaml.safe_load((ROOT / "examples" / "cluster-existing.yml").read_text())
    data["cluster"]["existing"] = str(kubeconfig)
    config = tmp_path / "cluster.yml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert invoke("render", "--config", str(config), "--out", str(out)).returncode == 0
    (out / existing.RECORD_FILE).write_text('{"server": "https://192.0.2.10:6443", "objects": "all", "nodes": []}')
    result = invoke("cluster-down", "--dry-run", "--config", str(config), "--out", str(out))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert str(out / existing.RECORD_FILE) in last and "objects" in last, result.stderr


def test_an_object_that_exists_in_a_hostile_shape_is_one_line_when_apply_meets_it(tmp_path):
    """apply's create says 409 Conflict; the object there is read to see whether it is k4w's."""
    from k4w.cluster.kubeapi import ApiError

    class ConflictApi(RecordedApi):
        def create(self, path, body):
            raise ApiError(f"POST {path}: HTTP 409 AlreadyExists", status=409)

    path = "/api/v1/namespaces/k4w-windows-node"
    api = ConflictApi(_with(path, {"metadata": "k4w-windows-node"}))
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "k4w-windows-node"}}
    with pytest.raises(K4wError) as refused:
        existing.apply(api, [doc], existing.DryRunRecord(tmp_path, api.creds.server))
    one_line_naming(refused.value, f"GET https://192.0.2.10:6443{path}", "metadata")

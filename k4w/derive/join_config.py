"""The kubeadm join configuration of one worker: the join token and discovery hash in a file, never
on a command line (a command line is visible to every process and sudo logs it).

The file is built here, held against kubeadm's field table of the worker's kubeadm API
(k4w/validate/facts/kubeadm-config-*.yml), and handed to the guest as a secret: on standard input
for Linux (cluster-join.sh writes it 0600 and deletes it), as an uploaded file for Windows
(cluster-join*.ps1 restricts its ACL and deletes it), both also on failure.

Each document carries everything the join flags carried, because `--config` cannot be mixed with
them:
- kubeadm 1.11 (v1alpha2 NodeConfiguration): ValidateMixedArguments allows only --config,
  --ignore-preflight-errors, --skip-*, --dry-run, --kubeconfig and --v beside --config
  (kubernetes/kubernetes@v1.11.10:cmd/kubeadm/app/apis/kubeadm/validation/validation.go,
  commit 7a578febe155a7366767abce40d8a16795a96371); `token` also serves as discoveryToken and
  tlsBootstrapToken (SetDefaults_NodeConfiguration, cmd/kubeadm/app/apis/kubeadm/v1alpha2/defaults.go).
- current kubeadm (v1beta4 JoinConfiguration): discovery.bootstrapToken {apiServerEndpoint, token,
  caCertHashes}; token-based discovery also uses the token for the TLS bootstrap when
  discovery.tlsBootstrapToken is empty (cmd/kubeadm/app/apis/kubeadm/v1beta4/defaults.go at v1.35).

And the marks of a k4w node (k4w.derive.node_marks), so the kubelet registers its Node with them and no Node is ever
unmarked: its labels as the kubelet's --node-labels (nodeRegistration.kubeletExtraArgs: a list of {name, value}
in v1beta4, a map in v1alpha2), and on a Windows worker the Windows taint (nodeRegistration.taints, which
kubeadm passes to the kubelet as --register-with-taints for a worker join). Both land in kubeadm-flags.env,
which the Linux kubelet's drop-in and the containerd-era Windows kubelet (start-kubelet.ps1) read; the seed
era's Windows kubelet takes its flags from kubelet.args instead (templates/nodes/windows/kubelet.args.j2).
"""

from __future__ import annotations

import yaml

from k4w.derive import node_marks
from k4w.model import profiles
from k4w.infra.errors import K4wError

V1ALPHA2 = "kubeadm.k8s.io/v1alpha2"
V1BETA4 = "kubeadm.k8s.io/v1beta4"
# Shapes only, for `invoke validate` (the real values exist only during cluster-up).
SAMPLE_TOKEN = "abcdef.0123456789abcdef"
SAMPLE_HASH = "sha256:" + "0" * 64
# The API server of a cluster k4w did not make is known only at cluster-up (from its cluster-info);
# validation uses an address of TEST-NET-1 (RFC 5737) in its place.
SAMPLE_API_SERVER = "192.0.2.1:6443"
# An installation id of the shape k4w.cluster.state makes, for the sample join configurations.
SAMPLE_INSTALLATION = "0123456789ab"


def validation_api_server(cluster) -> str:
    """host:port the sample join configurations of `invoke validate` name (the master's, else the sample)."""
    from k4w.derive.values import API_PORT

    cfg = cluster.config
    return SAMPLE_API_SERVER if cfg.joins_existing else f"{cfg.master.ip}:{API_PORT}"


def cri_socket(box: str) -> str | None:
    """The CRI endpoint kubeadm must register for a worker of this box: the Windows containerd
    recipe's runtime.endpoint, the Linux profile's kubernetes.cri_socket; None leaves kubeadm's
    default (1.11: dockershim)."""
    data = profiles.load(box).data
    runtime = data.get("runtime") or {}
    return runtime.get("endpoint") or (data.get("kubernetes") or {}).get("cri_socket")


def document(api: str, api_server: str, token: str, ca_hash: str, node_name: str, socket: str | None,
             labels: dict[str, str] | None = None, windows: bool = False, timeouts: dict[str, str] | None = None) -> dict:
    registration = {"name": node_name, **({"criSocket": socket} if socket else {})}
    if windows:
        registration["taints"] = [dict(node_marks.WINDOWS_TAINT)]
    node_labels = node_marks.kubelet_node_labels(labels or node_marks.node_labels(None))
    if timeouts and api != V1BETA4:
        raise K4wError(f"kubeadm join timeouts ({', '.join(timeouts)}) need {V1BETA4}; {node_name} speaks {api}")
    if api == V1ALPHA2:
        registration["kubeletExtraArgs"] = {"node-labels": node_labels}
        return {"apiVersion": V1ALPHA2, "kind": "NodeConfiguration", "discoveryTokenAPIServers": [api_server],
                "token": token, "discoveryTokenCACertHashes": [ca_hash], "nodeRegistration": registration}
    if api == V1BETA4:
        registration["kubeletExtraArgs"] = [{"name": "node-labels", "value": node_labels}]
        return {"apiVersion": V1BETA4, "kind": "JoinConfiguration",
                "discovery": {"bootstrapToken": {"apiServerEndpoint": api_server, "token": token, "caCertHashes": [ca_hash]}},
                "nodeRegistration": registration, **({"timeouts": dict(timeouts)} if timeouts else {})}
    raise K4wError(f"no kubeadm join configuration for {api}: k4w writes {V1ALPHA2} and {V1BETA4}")


def worker_document(box: str, api_server: str, token: str, ca_hash: str, node_name: str, installation: str | None, *,
                    timeouts: dict[str, str] | None) -> dict:
    """The join configuration of a worker of this box, as a document (its kubeadm API, CRI socket and marks).
    timeouts: the model's Cluster.join_timeouts, a required keyword so that no caller (cluster-up, validate)
    builds a join configuration other than the one the cluster gets. Only v1beta4 carries them: kubeadm 1.11's
    NodeConfiguration (the seed era, a Hyper-V recipe) keeps its own defaults."""
    profile = profiles.load(box)
    api = profile.data.kubernetes.kubeadm_api
    return document(api, api_server, token, ca_hash, node_name, cri_socket(box), node_marks.node_labels(installation),
                    profile.is_windows, timeouts if api == V1BETA4 else None)


def for_worker(box: str, api_server: str, token: str, ca_hash: str, node_name: str, installation: str | None = None, *,
               timeouts: dict[str, str] | None) -> str:
    """The YAML text of a worker's join configuration, refused when kubeadm's field table of the
    worker's API does not accept it. installation: the k4w.io/installation label value (k4w.cluster.state)."""
    from k4w.model import kubeadm_fields as kubeadm_rules

    api = profiles.load(box).data.kubernetes.kubeadm_api
    text = yaml.safe_dump(worker_document(box, api_server, token, ca_hash, node_name, installation, timeouts=timeouts),
                          sort_keys=False)
    problems = kubeadm_rules.check_text(text, api, "kubeadm join config")
    if problems:
        raise K4wError(f"the join configuration of {node_name} is not one kubeadm {api} reads: " + "; ".join(problems))
    return text

"""What cluster-up reads and makes through the API of a cluster k4w did not make (cluster.existing)
that the shared steps need too: the nodes' Ready conditions and a join token. Here, not in existing.py,
so that the steps (k4w.cluster.steps) and the plan of a join-only cluster-up (k4w.cluster.existing,
which builds on the steps) depend one way."""

from __future__ import annotations

from k4w.infra import documents

from k4w.derive import node_marks

from k4w.infra import ui
from k4w.cluster.kubeapi import Client
from k4w.cluster.kubeapi import Credentials
from . import api_models as M, bootstrap_token, facts as facts_mod


def join_token(api: Client, record) -> dict[str, str]:
    """{api, token, hash} for join_config: a fresh recorded token, the CA hash and the endpoint nodes
    discover (cluster-info's server, the cluster's controlPlaneEndpoint). record: the
    installation's k4w.cluster.existing.Record, which lists the token's Secret."""
    ca_hash = bootstrap_token.ca_cert_hash(api)
    token = bootstrap_token.create(api, labels={node_marks.INSTALLATION_LABEL: record.installation} if record.installation else None)
    record.add("Secret", f"/api/v1/namespaces/{bootstrap_token.NAMESPACE}/secrets/{token.secret_name}",
               f"Secret {bootstrap_token.NAMESPACE}/{token.secret_name} (bootstrap token, expires {token.expiration})", shared=False)
    return {"api": endpoint(api), "token": token.value, "hash": ca_hash}


def join_parameters(ctx) -> dict[str, str]:
    """steps.join_parameters for a cluster k4w did not make; a dry run creates nothing."""
    if ctx.dry_run:
        ui.say("would create a bootstrap token Secret kube-system/bootstrap-token-<id> (TTL 1 h) through the API "
               "and read the CA hash from kube-public/cluster-info")
        return {"api": endpoint(ctx.api), "token": "abcdef.0123456789abcdef", "hash": "sha256:" + "0" * 64}
    return join_token(ctx.api, ctx.record)


def endpoint(api: Client) -> str:
    """host:port of the API server as cluster-info gives it to joining nodes; the kubeconfig's without one."""
    kubeconfig = cluster_info(api)
    if kubeconfig is None or not kubeconfig.clusters:
        return api.creds.host_port
    return Credentials(server=kubeconfig.clusters[0].cluster.server, ca_pem=b"").host_port


def cluster_info(api: Client) -> M.ClusterInfoKubeconfig | None:
    """kube-public/cluster-info's kubeconfig held to its shape (a server that is an https URL); None without it."""
    where = "ConfigMap kube-public/cluster-info"
    cm = facts_mod.answer(api, M.ConfigMap, bootstrap_token.CLUSTER_INFO, optional=True)
    text = ((cm and cm.data) or {}).get("kubeconfig")
    value = documents.yaml_value(text, f"{where} kubeconfig") if text else None
    return None if value is None else documents.parse(M.ClusterInfoKubeconfig, value, f"{where} kubeconfig")


def node_conditions(api: Client) -> dict[str, dict]:
    """{node: its Ready condition}, as steps.node_conditions reads them through kubectl."""
    result = {}
    path = "/api/v1/nodes"
    data = api.get(path)
    documents.parse(M.NodeList, data, f"GET {api.creds.server}{path}")
    for item in data.get("items") or []:
        ready = next((c for c in (item.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
        result[item["metadata"]["name"]] = ready
    return result

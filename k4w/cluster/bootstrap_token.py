"""A kubeadm join token made through the API, and the CA hash a join pins: no kubeadm on the host.

Formats, from kubernetes/kubernetes@v1.37.2 (its staging module k8s.io/cluster-bootstrap@v0.37.2, token/api/types.go the same as v0.35.4's):
- token/api/types.go: Secret `bootstrap-token-<id>` (BootstrapTokenSecretPrefix) of type
  `bootstrap.kubernetes.io/token` (SecretTypeBootstrapToken) in kube-system, keys token-id,
  token-secret, expiration (RFC 3339, UTC), description, auth-extra-groups, usage-bootstrap-
  authentication and usage-bootstrap-signing; the token is `<id>.<secret>`, `[a-z0-9]{6}` and
  `[a-z0-9]{16}` (BootstrapTokenPattern); it authenticates as `system:bootstrap:<id>`
  (BootstrapUserPrefix) in group system:bootstrappers.
- token/util/helpers.go GenerateBootstrapToken: each character drawn uniformly from [0-9a-z] by a
  cryptographic random source; here `secrets.choice`, which is the same.
- cmd/kubeadm/app/constants/constants.go: NodeBootstrapTokenAuthGroup
  `system:bootstrappers:kubeadm:default-node-token`, the group kubeadm's node RBAC binds.
- cmd/kubeadm/app/util/pubkeypin/pubkeypin.go Hash: `sha256:` + hex of sha256 over the CA
  certificate's RawSubjectPublicKeyInfo; the CA is the one in the `cluster-info` ConfigMap of
  kube-public (ConfigMapClusterInfo, key kubeconfig), which is what a joining node discovers.

The token is registered as a secret the moment it exists, so no error or log line prints it; it
only ever goes into the private join material (k4w.derive.join_config) the join uploads as a file.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import secrets
import string
from dataclasses import dataclass

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from k4w.infra import documents
from k4w.infra.errors import K4wError
from k4w.cluster.kubeapi import ApiError, Client
from k4w.infra.redact import register_secret

NAMESPACE = "kube-system"
SECRET_PREFIX = "bootstrap-token-"
SECRET_TYPE = "bootstrap.kubernetes.io/token"
NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"
USER_PREFIX = "system:bootstrap:"
ALPHABET = string.digits + string.ascii_lowercase   # validBootstrapTokenChars
ID_LENGTH, SECRET_LENGTH = 6, 16                     # BootstrapTokenIDBytes, BootstrapTokenSecretBytes
CLUSTER_INFO = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
DEFAULT_TTL = datetime.timedelta(hours=1)            # long enough for one cluster-up run, as steps.TOKEN_TTL
DESCRIPTION = "k4w: join of the Windows/Linux workers of cluster.yml (cluster-up)"


@dataclass(frozen=True)
class Token:
    id: str
    secret: str
    expiration: str

    @property
    def value(self) -> str:
        return f"{self.id}.{self.secret}"

    @property
    def secret_name(self) -> str:
        return SECRET_PREFIX + self.id

    @property
    def user(self) -> str:
        return USER_PREFIX + self.id


def generate(ttl: datetime.timedelta = DEFAULT_TTL, now: datetime.datetime | None = None) -> Token:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    token = Token(id="".join(secrets.choice(ALPHABET) for _ in range(ID_LENGTH)),
                  secret="".join(secrets.choice(ALPHABET) for _ in range(SECRET_LENGTH)),
                  expiration=(now + ttl).strftime("%Y-%m-%dT%H:%M:%SZ"))
    register_secret(token.secret)
    register_secret(token.value)
    return token


def secret_object(token: Token, labels: dict[str, str] | None = None) -> dict:
    """The Secret kubeadm's `token create` makes for a node join token (labels mark it k4w's, and which
    installation's)."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
        "metadata": {"name": token.secret_name, "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "k4w", **(labels or {})}},
        "stringData": {
            "token-id": token.id,
            "token-secret": token.secret,
            "expiration": token.expiration,
            "description": DESCRIPTION,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": NODE_GROUP,
        },
    }


def create(api: Client, ttl: datetime.timedelta = DEFAULT_TTL, labels: dict[str, str] | None = None) -> Token:
    """A new token, stored in the cluster. An id already taken (1 in 36^6) gets a fresh token."""
    for _ in range(3):
        token = generate(ttl)
        try:
            api.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", secret_object(token, labels))
            return token
        except ApiError as exc:
            if exc.status != 409:
                raise K4wError(f"cannot create the bootstrap token Secret {NAMESPACE}/{token.secret_name}: {exc}") from None
    raise K4wError("three bootstrap token ids in a row already existed; try again")


def ca_cert_hash(api: Client) -> str:
    """sha256:<hex> of the cluster CA's SubjectPublicKeyInfo, from kube-public/cluster-info."""
    from . import api_models, facts

    cm = facts.answer(api, api_models.ConfigMap, CLUSTER_INFO, optional=True)
    text = ((cm and cm.data) or {}).get("kubeconfig")
    if not text:
        raise K4wError("the cluster has no ConfigMap kube-public/cluster-info with a kubeconfig (kubeadm makes it in "
                       "`kubeadm init phase bootstrap-token`); a node cannot discover the cluster by token without it")
    try:
        clusters = (documents.yaml_value(text, "ConfigMap kube-public/cluster-info kubeconfig") or {}).get("clusters") or []
        ca_pem = base64.b64decode(clusters[0]["cluster"]["certificate-authority-data"])
        cert = x509.load_pem_x509_certificate(ca_pem)
    except (yaml.YAMLError, LookupError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise K4wError(f"kube-public/cluster-info holds no readable CA certificate ({exc})") from None
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def delete(api: Client, token_id: str) -> bool:
    return api.delete(f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET_PREFIX}{token_id}")

"""A real control plane on this host for the cluster.existing tests: the pinned etcd and kube-apiserver
(tools/lock.yml, k4w/infra/pinned_tools.py), set up by the pinned kubeadm's own init phases, so the objects k4w
reads (kubeadm-config, cluster-info, kube-dns, kube-proxy, kubeadm's join RBAC) are the real ones.

Nothing is skipped: a missing binary fails with the command that builds it (pinned_tools.require).
Every process runs under `nice -n 19` (the machine is shared) on free loopback ports, and readiness is
waited for by asking /readyz, never by sleeping a fixed time.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from k4w.infra import pinned_tools
from k4w.cluster.kubeapi import ApiError, Client, load_kubeconfig

# The control plane the lock pins (tools/lock.yml kubernetes-control-plane; kubeadm of kubernetes-node is
# the same release), so the test follows the lock instead of a copy of its version.
VERSION = pinned_tools.lock()["kubernetes-control-plane"]["version"]
POD_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/12"
READY_TIMEOUT_S = 45
ADVERTISE = "192.0.2.1"
EXTRA_PHASES: tuple = (("addon", "kube-proxy"),)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ControlPlane:
    folder: Path
    admin_conf: Path
    kubeadm: Path
    kubeadm_config: Path

    def client(self) -> Client:
        return Client(load_kubeconfig(self.admin_conf))

    def kubeadm_run(self, *args: str) -> str:
        result = subprocess.run(["nice", "-n", "19", str(self.kubeadm), *args, "--kubeconfig", str(self.admin_conf)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"kubeadm {args[:3]} failed: {result.stderr[-2000:]}"
        return result.stdout


def kubeadm_config(api_port: int, cert_dir: Path) -> str:
    # The v1beta4 documents kubeadm init reads (the fields k4w/validate/facts/kubeadm-config-v1beta4.yml
    # lists). The control-plane endpoint, which admin.conf and cluster-info name, is this host's
    # loopback; kubeadm refuses a loopback advertise address ("unable to select an IP from lo"), so
    # that is an address of TEST-NET-1 (RFC 5737) that only fills the kubernetes Service's Endpoints.
    return yaml.safe_dump_all([
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
         "localAPIEndpoint": {"advertiseAddress": ADVERTISE, "bindPort": api_port},
         "nodeRegistration": {"name": "cp"}},
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration", "kubernetesVersion": VERSION,
         "certificatesDir": str(cert_dir), "controlPlaneEndpoint": f"127.0.0.1:{api_port}",
         "networking": {"podSubnet": POD_CIDR, "serviceSubnet": SERVICE_CIDR, "dnsDomain": "cluster.local"}},
    ], sort_keys=False)


def wait_ready(api: Client, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"kube-apiserver exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            api.request("GET", "/readyz")
            return
        except ApiError as exc:
            # /readyz answers text/plain "ok", which the client refuses as no JSON object, keeping its status:
            # 200 is ready, 500 (which it answers while a post-start hook runs) is not yet.
            if exc.status == 200:
                return
            last = str(exc)
        time.sleep(0.5)   # the poll interval of a condition wait, not a readiness guess
    raise AssertionError(f"kube-apiserver not ready within {READY_TIMEOUT_S} s: {last}; log: {log.read_text()[-3000:]}")


def wait_token_controller(api: Client, log: Path) -> None:
    """Until the token controller fills a probe's service-account-token Secret (then the probe goes)."""
    namespace = "/api/v1/namespaces/default"
    api.create(f"{namespace}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "k4w-probe"}})
    api.create(f"{namespace}/secrets", {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                                        "metadata": {"name": "k4w-probe", "annotations": {"kubernetes.io/service-account.name": "k4w-probe"}}})
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not (api.get(f"{namespace}/secrets/k4w-probe").get("data") or {}).get("token"):
        if time.monotonic() > deadline:
            raise AssertionError(f"the token controller filled no token within {READY_TIMEOUT_S} s: {log.read_text()[-3000:]}")
        time.sleep(0.2)   # the poll interval of a condition wait
    api.delete(f"{namespace}/secrets/k4w-probe")
    api.delete(f"{namespace}/serviceaccounts/k4w-probe")


def wait_deleted(api: Client, path: str) -> None:
    """Until the object at path is gone (a Namespace: once the namespace controller has emptied it)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while api.get_optional(path) is not None:
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} still there {READY_TIMEOUT_S} s after its deletion: {api.get(path).get('status')}")
        time.sleep(0.2)   # the poll interval of a condition wait


def start(folder: Path, stack) -> ControlPlane:
    """etcd + kube-apiserver + kubeadm's init phases; processes end with `stack` (an ExitStack)."""
    etcd = pinned_tools.require("etcd")
    apiserver = pinned_tools.require("kubernetes-control-plane", "kube-apiserver")
    kubeadm = pinned_tools.require("kubernetes-node", "kubeadm")
    api_port, client_port, peer_port = free_port(), free_port(), free_port()
    certs, kubeconfigs = folder / "pki", folder / "kubeconfigs"
    config = folder / "kubeadm.yaml"
    config.write_text(kubeadm_config(api_port, certs))

    def run(*argv: str) -> None:
        result = subprocess.run(["nice", "-n", "19", *argv], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{argv[:4]} failed: {result.stderr[-2000:]}"

    run(str(kubeadm), "init", "phase", "certs", "all", "--config", str(config))
    for kubeconfig in ("admin", "super-admin"):
        run(str(kubeadm), "init", "phase", "kubeconfig", kubeconfig, "--config", str(config), "--kubeconfig-dir", str(kubeconfigs))
    admin = kubeconfigs / "admin.conf"
    os.chmod(admin, 0o600)

    def daemon(name: str, argv: list[str]) -> subprocess.Popen:
        log = folder / f"{name}.log"
        handle = stack.enter_context(open(log, "w"))
        proc = subprocess.Popen(["nice", "-n", "19", *argv], stdout=handle, stderr=subprocess.STDOUT)

        def stop() -> None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stack.callback(stop)
        return proc

    daemon("etcd", [str(etcd), "--name", "k4w-test", "--data-dir", str(folder / "etcd"),
                    "--listen-client-urls", f"http://127.0.0.1:{client_port}",
                    "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
                    "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                    "--initial-cluster", f"k4w-test=http://127.0.0.1:{peer_port}"])
    proc = daemon("kube-apiserver", [
        str(apiserver), "--etcd-servers", f"http://127.0.0.1:{client_port}",
        "--bind-address", "127.0.0.1", "--advertise-address", ADVERTISE, "--secure-port", str(api_port),
        "--tls-cert-file", str(certs / "apiserver.crt"), "--tls-private-key-file", str(certs / "apiserver.key"),
        "--client-ca-file", str(certs / "ca.crt"),
        "--service-account-key-file", str(certs / "sa.pub"), "--service-account-signing-key-file", str(certs / "sa.key"),
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range", SERVICE_CIDR, "--authorization-mode", "Node,RBAC",
        # What makes a bootstrap token authenticate at all (kubeadm's static pod sets it too).
        "--enable-bootstrap-token-auth=true",
        # kubeadm's static pod sets it; kube-proxy's DaemonSet (a privileged pod) is refused without it.
        "--allow-privileged=true",
        "--cert-dir", str(folder / "apiserver-certs")])
    plane = ControlPlane(folder, admin, kubeadm, config)
    wait_ready(plane.client(), proc, folder / "kube-apiserver.log")
    # admin.conf's user is in group kubeadm:cluster-admins, which `kubeadm init` binds to cluster-admin
    # with the super-admin (system:masters) credentials (kubernetes/kubernetes@v1.35.4
    # cmd/kubeadm/app/phases/kubeconfig: EnsureAdminClusterRoleBinding; constants.go
    # ClusterAdminsGroupAndClusterRoleBinding). The phases below do not do that; this does.
    Client(load_kubeconfig(kubeconfigs / "super-admin.conf")).create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "kubeadm:cluster-admins"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kubeadm:cluster-admins"}]})
    # Only the controllers a join relies on: the token controller fills service-account-token Secrets
    # (the Windows components' kubeconfigs), the bootstrap signer signs cluster-info for each token,
    # the token cleaner deletes expired ones, the namespace controller empties and removes a deleted
    # Namespace (k4w's HostProcess namespace on cluster-reset). No serving port (0: off), no leader election. kubeadm's
    # controller-manager.conf names the advertise address, which is not this host's, so it runs with
    # the super-admin kubeconfig (a test cluster; kubeadm gives it an identity of its own).
    daemon("kube-controller-manager", [
        str(pinned_tools.require("kubernetes-control-plane", "kube-controller-manager")),
        "--kubeconfig", str(kubeconfigs / "super-admin.conf"), "--secure-port", "0", "--leader-elect=false",
        "--controllers", "serviceaccount-token,bootstrapsigner,tokencleaner,namespace",
        "--service-account-private-key-file", str(certs / "sa.key"), "--root-ca-file", str(certs / "ca.crt")])
    wait_token_controller(plane.client(), folder / "kube-controller-manager.log")
    # What `kubeadm init` writes into the cluster after its control plane is up.
    for phase in (("upload-config", "all"), ("bootstrap-token",), ("addon", "coredns")) + EXTRA_PHASES:
        plane.kubeadm_run("init", "phase", *phase, "--config", str(config))
    return plane

"""The REAL pinned containerd pulls every image the libvirt cluster run needs from ci/e2e/registry.py's real
registries, through exactly the certs.d tree k4w derives from the `registry:` block (hosts.toml + ca.crt per
upstream), with every upstream unreachable (the proxy is a closed port). kubeadm's images go through the
CRI as a node's `kubeadm config images pull` does; Flannel's and the workloads' through `ctr --hosts-dir`,
which reads the same hosts.toml. The images are small test images pushed under the real names (the cluster
group's tools that build the real ones are not in CI). Runs as root only (containerd needs it; CI runs as
root): elsewhere it fails naming that, never skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from k4w import render
from k4w.derive import registry as derive_registry
from k4w.derive.cluster import Cluster
from k4w.infra import pinned_tools
from k4w.model import config
from k4w.verify import workloads
from ci.e2e import cluster_file, cluster_images, cluster_run, oci_archive, registry
from tests.helpers import running_daemon

# A TCP port nothing listens on (RFC 863 discard): the "proxy" that makes every upstream unreachable.
DEAD_PROXY = "http://127.0.0.1:9"
READY_TIMEOUT = 60


@pytest.fixture
def world(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("this test runs the real containerd, which needs root (CI runs the suite as root)")
    cfg_text = cluster_file.text("http://10.0.2.2:40123", "http://127.0.0.1:40124", str(tmp_path / "cache"), cluster_run.BOX)
    out = tmp_path / "out"
    render.render(Cluster.resolve(config.parse(cfg_text)), out)
    names = cluster_images.required(out) + [workloads.BUSYBOX_IMAGE, workloads.NGINX_IMAGE]
    payload = tmp_path / "payload.txt"
    payload.write_bytes(b"k4w registry e2e test image\n")
    archive = tmp_path / "test.tar"
    digest = oci_archive.write(archive, oci_archive.Image(name="k4w/test:1", entries=[
        oci_archive.Entry("/k4w/payload.txt", source=payload, mode=0o644)]))
    # Unix sockets need a short path (sun_path is 108 bytes); tmp_path under xdist is long.
    run = Path(tempfile.mkdtemp(prefix="k4w-regctrd-"))
    with registry.serving("127.0.0.1", tmp_path / "registries") as mirrors:
        for name in names:
            assert mirrors.push(name, archive) == digest
        data = yaml.safe_load(cfg_text)
        data["registry"] = mirrors.registry_block()
        path = tmp_path / "cluster.yml"
        path.write_text(yaml.safe_dump(data))
        certs = run / "certs.d"
        for rel, text in derive_registry.certs_d(config.load(path)).items():
            (certs / rel).parent.mkdir(parents=True, exist_ok=True)
            (certs / rel).write_text(text)
        config_file = run / "config.toml"
        # containerd@v2.3.7 config version 4: the sockets are the server plugins' own tables; the CRI
        # images plugin's registry.config_path is what k4w's 03-containerd.sh sets on a node.
        config_file.write_text(f"""version = 4
root = '{run}/root'
state = '{run}/state'
disabled_plugins = ['io.containerd.nri.v1.nri']

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = '{certs}'
[plugins.'io.containerd.server.v1.grpc']
  address = '{run}/containerd.sock'
[plugins.'io.containerd.server.v1.ttrpc']
  address = '{run}/containerd.sock.ttrpc'
[plugins.'io.containerd.internal.v1.opt']
  path = '{run}/opt'
""")
        binary = pinned_tools.require("containerd", "containerd")
        ctr = pinned_tools.require("containerd", "ctr")
        socket = run / "containerd.sock"
        env = {**os.environ, "HTTPS_PROXY": DEAD_PROXY, "HTTP_PROXY": DEAD_PROXY, "NO_PROXY": ""}
        try:
            with running_daemon(["nice", "-n", "19", binary, "--config", config_file], env=env, timeout=READY_TIMEOUT,
                                log=run / "containerd.log", what=f"containerd on {socket}",
                                answers=lambda: not subprocess.run([str(ctr), "--address", str(socket), "version"],
                                                                   capture_output=True, timeout=30).returncode):
                yield {"names": names, "digest": digest, "mirrors": mirrors, "socket": socket, "ctr": ctr, "certs": certs,
                       "env": env, "log": run / "containerd.log"}
        finally:
            shutil.copy(run / "containerd.log", tmp_path / "containerd.log")  # kept with the test's files
            shutil.rmtree(run, ignore_errors=True)


def test_containerd_pulls_every_cluster_image_from_its_upstreams_mirror(world):
    mirrors = world["mirrors"]
    before = mirrors.request_counts()
    kubeadm = pinned_tools.require("kubernetes-node", "kubeadm")
    version = next(n for n in world["names"] if "/kube-apiserver:" in n).rsplit(":", 1)[1]
    done = subprocess.run(["nice", "-n", "19", str(kubeadm), "config", "images", "pull", "--kubernetes-version", version,
                           "--cri-socket", f"unix://{world['socket']}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr + world["log"].read_text()[-3000:]
    for name in world["names"]:
        upstream, repository, tag = registry.mirror_reference(name)
        if upstream == "registry.k8s.io":
            continue
        # ctr takes only full names (the CRI normalizes busybox:1.28 to docker.io/library/busybox:1.28).
        name = f"{upstream}/{repository}:{tag}"
        done = subprocess.run([str(world["ctr"]), "--address", str(world["socket"]), "--namespace", "k8s.io", "images", "pull",
                               "--hosts-dir", str(world["certs"]), name], capture_output=True, text=True, timeout=300, env=world["env"])
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
    listed = subprocess.run([str(world["ctr"]), "--address", str(world["socket"]), "--namespace", "k8s.io", "images", "ls"],
                            capture_output=True, text=True, timeout=60).stdout
    for name in world["names"]:
        upstream, repository, tag = registry.mirror_reference(name)
        full = f"{upstream}/{repository}:{tag}"
        assert any(line.startswith(full + " ") and world["digest"] in line for line in listed.splitlines()), (full, listed)
        # The pull reached that upstream's mirror, under the upstream's path, with ?ns=<upstream>.
        fetched = [r for r in mirrors.registries[upstream].requests()[before[upstream]:]
                   if r.path == f"/v2/{repository}/manifests/{tag}" and f"ns={upstream}" in r.query and r.status == 200]
        assert fetched, f"{name}: no manifest request with ns={upstream} answered by the {upstream} mirror"
    # Every name one manifest request at least (one image's blobs are shared, so containerd fetches them once).
    assert mirrors.request_count(since=before) >= len(world["names"])

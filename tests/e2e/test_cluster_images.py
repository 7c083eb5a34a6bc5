"""The fast parts of `invoke e2e --cluster`, run in CI (the cluster itself is not: see docs/development.md):
the image names are exactly what the pinned kubeadm lists for our rendered config plus what the rendered
Flannel manifest runs, each at the version its pinned tool is built at; every command those manifests
run exists in its image; and an archive is what the real containerd imports, under the exact name."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from k4w.model import config
from k4w.derive import containerd_config
from k4w.infra import pinned_tools
from k4w import render
from k4w.derive.cluster import Cluster
from ci.e2e import cluster_file, cluster_images, cluster_run, oci_archive, squid
from ci.e2e.phases import E2EError
from tests.helpers import invoke

BOX = cluster_run.BOX


def rendered(tmp_path: Path) -> Path:
    """OUT of the e2e cluster.yml on the containerd-era CI box, as the --cluster run renders it."""
    out = tmp_path / "out"
    cfg = config.parse(cluster_file.text("http://10.0.2.2:40123", "http://127.0.0.1:40124", str(tmp_path / "cache"), BOX,
                                         emulated_cpu=True))
    render.render(Cluster.resolve(cfg), out)
    return out


@pytest.mark.parametrize("box", cluster_run.BOXES)
def test_the_cluster_run_renders_kubeadms_own_tcg_scaling_so_the_harness_edits_nothing(tmp_path, box):
    """The --cluster run's cluster.yml says libvirt.accelerator tcg (its guest runs on QEMU's TCG): kubeadm's
    config carries the leases and names the patches cluster-up uploads, so cluster_run only waits for them."""
    text = cluster_file.text("http://10.0.2.2:40123", "http://127.0.0.1:40124", str(tmp_path / "cache"), box, emulated_cpu=True)
    cluster = Cluster.resolve(config.parse(text))
    assert cluster.control_plane is not None
    out = tmp_path / "out"
    render.render(cluster, out)
    docs = {d["kind"]: d for d in yaml.safe_load_all((out / "kubeadm" / "kubeadm-config.yaml").read_text())}
    args = [f"--{a['name']}={a['value']}" for a in docs["ClusterConfiguration"]["scheduler"]["extraArgs"]]
    assert tuple(args) == cluster_run.TCG_LEASE_FLAGS
    assert docs["InitConfiguration"]["patches"]["directory"] == "/tmp/k4w/kubeadm-patches"
    for component in cluster_run.LIVENESS_TOLERANT:
        patch = yaml.safe_load((out / "kubeadm" / "patches" / f"{component}+strategic.yaml").read_text())
        assert patch["spec"]["containers"][0]["livenessProbe"]["failureThreshold"] == cluster_run.TCG_LIVENESS_FAILURE_THRESHOLD
    # The run without --cluster (and the seed era's box, whose kubeadm config cannot carry it) says no host.
    assert "host:" not in cluster_file.text("http://10.0.2.2:40123", "http://127.0.0.1:40124", str(tmp_path / "cache"))


def kubeadm() -> Path:
    found = pinned_tools.binary("kubernetes-node", "kubeadm")
    assert found, f"no pinned kubeadm in {pinned_tools.tool_dir('kubernetes-node')}: run scripts/build-tools (setup.sh does)"
    return found


# ------------------------------------------------------------------ names


def test_the_images_are_exactly_what_kubeadm_lists_and_the_flannel_manifest_runs(tmp_path):
    out = rendered(tmp_path)
    listed = subprocess.run([str(kubeadm()), "config", "images", "list", "--config", str(out / "kubeadm" / "kubeadm-config.yaml")],
                            capture_output=True, text=True, timeout=120, check=True).stdout.split()
    flannel = cluster_images.manifest_images(out / "manifests" / "kube-flannel.yaml")
    names = cluster_images.required(out)
    assert names == listed + [n for n in flannel if n not in listed]
    # Every kind of image the cluster needs is there, once: a wrong kubeadm config (another
    # imageRepository, version or DNS) shows here as a different list.
    assert sorted(cluster_images.split(n)[0] for n in names) == sorted(cluster_images.RECIPES)
    substitutes = cluster_images.check_names(names)
    assert list(substitutes) == [n for n in names if cluster_images.split(n)[0] == "flannel-cni-plugin"]
    assert substitutes[next(iter(substitutes))]["module"] == "github.com/containernetworking/plugins"


def test_an_image_at_another_version_than_its_pinned_tool_is_refused(tmp_path, monkeypatch):
    """Planted: the lock's etcd one patch release off kubeadm's DefaultEtcdVersion."""
    names = cluster_images.required(rendered(tmp_path))
    lock = yaml.safe_load(pinned_tools.LOCK_FILE.read_text(encoding="utf-8"))
    lock["tools"]["etcd"]["version"] = "v3.6.6"
    planted = tmp_path / "lock.yml"
    planted.write_text(yaml.safe_dump(lock), encoding="utf-8")
    monkeypatch.setattr(pinned_tools, "LOCK_FILE", planted)
    with pytest.raises(E2EError, match=r"registry.k8s.io/etcd:3.7.0-0: the pinned etcd is v3.6.6"):
        cluster_images.check_names(names)


def test_an_image_no_recipe_builds_is_refused():
    with pytest.raises(E2EError, match=r"no recipe builds the image registry.k8s.io/kube-dns:1.0"):
        cluster_images.check_names(["registry.k8s.io/kube-dns:1.0"])


# ------------------------------------------------------------------ what the manifests run


def _image_paths(name: str) -> set[str]:
    """The paths an image of `name` will hold, without building it (its programs and host files)."""
    recipe = cluster_images.recipe_for(name)
    paths = set(recipe.programs)
    for program in recipe.host:
        paths |= cluster_images.host_paths(program)
    return paths


def test_every_command_of_the_flannel_manifest_is_a_file_of_its_image(tmp_path):
    """Planted: the install-cni init container's /opt/bin/install-conf missing from the flannel recipe
    (the lock built flanneld alone) makes this fail."""
    manifest = rendered(tmp_path) / "manifests" / "kube-flannel.yaml"
    checked = []
    for document in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
        pod = ((document or {}).get("spec") or {}).get("template", {}).get("spec") or {}
        for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            program = container["command"][0]
            paths = _image_paths(container["image"])
            on_path = [f"{folder}/{program}" for folder in oci_archive.DEFAULT_PATH.split("=", 1)[1].split(":")]
            found = program in paths if program.startswith("/") else any(p in paths for p in on_path)
            assert found, f"{container['name']} runs {program}, which image {container['image']} does not hold"
            checked.append(program)
    assert checked == ["cp", "/opt/bin/install-conf", "/opt/bin/flanneld"]


def test_kubeadm_s_commands_are_on_the_control_plane_images_path():
    """kubeadm's static pods call kube-apiserver, kube-controller-manager, kube-scheduler and etcd by
    name (k8s.io/kubernetes@v1.37.2 cmd/kubeadm/app/phases/controlplane/manifests.go, etcd/local.go)."""
    path = oci_archive.DEFAULT_PATH.split("=", 1)[1].split(":")
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"):
        (program,) = cluster_images.RECIPES[name].programs
        assert str(Path(program).parent) in path and Path(program).name == name


# ------------------------------------------------------------------ the archive, read by containerd


def test_the_archive_holds_one_image_with_its_name_files_and_digests(tmp_path):
    archive = tmp_path / "busybox.tar"
    oci_archive.write(archive, cluster_run.test_image())
    read = oci_archive.read(archive)
    assert read.problems == []
    assert read.layout == {"imageLayoutVersion": "1.0.0"}
    assert read.names == [cluster_run.TEST_IMAGE] and read.refs == ["1"]
    assert read.config["config"]["Entrypoint"] == ["/bin/busybox"]
    assert read.files["/bin/cp"].issym() and read.files["/bin/cp"].linkname == "busybox"
    assert all(f.uid == 0 and f.gid == 0 for f in read.files.values())
    # The same files give the same archive: an unchanged image is imported as the same image.
    again = tmp_path / "again.tar"
    oci_archive.write(again, cluster_run.test_image())
    assert again.read_bytes() == archive.read_bytes()


def _test_image_root(tmp_path: Path) -> Path:
    """The --cluster test image, written as its OCI archive and unpacked: a root to chroot into."""
    if os.geteuid() != 0:
        pytest.fail("chroot needs root, as the e2e run has (run the test suite as in DEVELOPERS.md)")
    archive = tmp_path / "busybox.tar"
    oci_archive.write(archive, cluster_run.test_image())
    root = tmp_path / "root"
    oci_archive.unpack(archive, root)
    return root


def test_the_layer_runs_its_program_with_the_bundled_libraries_alone(tmp_path):
    """ldd's libraries and the loader travel with a host program: it runs in a root of the layer alone."""
    root = _test_image_root(tmp_path)
    done = subprocess.run(["chroot", str(root), "/bin/cp", "--help"], capture_output=True, text=True, timeout=30)
    assert "Usage: cp" in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_client_pod_s_request_reaches_the_web_pod_s_server_inside_the_test_image(tmp_path):
    """The exact commands the --cluster checks run in the two pods, run in a root of the test image:
    a busybox option that crashes (Debian 12's wget -T) fails here, not 40 minutes into a run."""
    root = _test_image_root(tmp_path)
    (root / "www").mkdir()
    (root / "www" / "index.html").write_text("k4w-marker\n")
    port = squid.free_port()
    server = subprocess.Popen(["chroot", str(root), *cluster_run.web_command(port=port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            done = subprocess.run(["chroot", str(root), *cluster_run.client_fetch(f"127.0.0.1:{port}")],
                                  capture_output=True, text=True, timeout=30)
            if done.returncode == 0 or time.monotonic() > deadline or server.poll() is not None:
                break
            time.sleep(0.2)  # poll interval while httpd binds its port
        assert done.returncode == 0 and done.stdout == "k4w-marker\n", (done.returncode, done.stdout, done.stderr)
    finally:
        server.kill()
        server.wait()


STATIC_PODS = Path(__file__).parents[1] / "fixtures" / "kubeadm-static-pods"


def _scaled(tmp_path: Path) -> None:
    """Runs the TCG static-pod script twice (a second run changes nothing) on copies of kubeadm's own
    manifests in tests/fixtures/kubeadm-static-pods: kube-controller-manager and kube-scheduler copied from
    the fourth 1.35.4 --cluster run; kube-apiserver and etcd written by the real kubeadm v1.37.2
    (`kubeadm init phase control-plane apiserver --dry-run`, `kubeadm init phase etcd local --dry-run`)."""
    for manifest in STATIC_PODS.glob("*.yaml"):
        shutil.copy(manifest, tmp_path / manifest.name)
    script = cluster_run.tcg_static_pod_script().replace("/etc/kubernetes/manifests", str(tmp_path))
    for _ in range(2):
        subprocess.run(["bash", "-c", script], check=True, timeout=30)


def test_the_tcg_leases_are_added_once_to_kubeadm_s_leader_electing_pods(tmp_path):
    _scaled(tmp_path)
    for component in cluster_run.LEADER_ELECTING:
        before = yaml.safe_load((STATIC_PODS / f"{component}.yaml").read_text())
        after = yaml.safe_load((tmp_path / f"{component}.yaml").read_text())
        command = before["spec"]["containers"][0]["command"]
        at = command.index("--leader-elect=true") + 1
        assert after["spec"]["containers"][0]["command"] == command[:at] + list(cluster_run.TCG_LEASE_FLAGS) + command[at:]
        after["spec"]["containers"][0]["command"] = command
        assert after == before


def test_kube_apiserver_and_etcd_tolerate_more_failed_liveness_probes_and_nothing_else_changes(tmp_path):
    _scaled(tmp_path)
    for component in cluster_run.LIVENESS_TOLERANT:
        before = yaml.safe_load((STATIC_PODS / f"{component}.yaml").read_text())
        after = yaml.safe_load((tmp_path / f"{component}.yaml").read_text())
        probes = lambda pod: {k: v for k, v in pod["spec"]["containers"][0].items() if k.endswith("Probe")}  # noqa: E731
        assert probes(before)["livenessProbe"]["failureThreshold"] == cluster_run.KUBEADM_LIVENESS_FAILURE_THRESHOLD
        assert probes(after)["livenessProbe"]["failureThreshold"] == cluster_run.TCG_LIVENESS_FAILURE_THRESHOLD
        # the startup probe (kubeadm: 24 failures) and every other field stay as kubeadm wrote them
        after["spec"]["containers"][0]["livenessProbe"]["failureThreshold"] = cluster_run.KUBEADM_LIVENESS_FAILURE_THRESHOLD
        assert after == before, component


def _mirror_pods(manifests: Path, ready: bool) -> dict:
    """`kubectl get pod -o json` of the four static pods' mirror pods on node master, from the manifests in MANIFESTS."""
    items = []
    for component in (*cluster_run.LEADER_ELECTING, *cluster_run.LIVENESS_TOLERANT):
        pod = yaml.safe_load((manifests / f"{component}.yaml").read_text())
        pod["metadata"]["name"] = f"{component}-master"
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
        items.append(pod)
    return {"kind": "List", "items": items}


def test_the_run_waits_until_each_static_pod_runs_its_scaled_manifest_and_is_ready(tmp_path):
    names = [f"{c}-master" for c in (*cluster_run.LEADER_ELECTING, *cluster_run.LIVENESS_TOLERANT)]
    # the kubelet has not restarted any of them yet: kubeadm's own manifests
    waiting = cluster_run.scaled_static_pods_waiting(_mirror_pods(STATIC_PODS, ready=True), names)
    assert waiting == [f"{n}: without the TCG settings (not restarted yet after the edit, or kubeadm did not apply them)"
                       for n in names]
    _scaled(tmp_path)
    assert cluster_run.scaled_static_pods_waiting(_mirror_pods(tmp_path, ready=False), names) == [f"{n}: not Ready" for n in names]
    restarting = _mirror_pods(tmp_path, ready=True)
    restarting["items"] = [p for p in restarting["items"] if p["metadata"]["name"] != "kube-apiserver-master"]
    assert cluster_run.scaled_static_pods_waiting(restarting, names) == ["kube-apiserver-master: not listed"]
    assert cluster_run.scaled_static_pods_waiting(_mirror_pods(tmp_path, ready=True), names) == []


def test_the_tcg_script_refuses_manifests_it_cannot_scale(tmp_path):
    for component in (*cluster_run.LEADER_ELECTING, *cluster_run.LIVENESS_TOLERANT):
        (tmp_path / f"{component}.yaml").write_text("spec: {}\n")
    script = cluster_run.tcg_static_pod_script().replace("/etc/kubernetes/manifests", str(tmp_path))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "no --leader-elect=true" in done.stderr
    for component in cluster_run.LEADER_ELECTING:
        shutil.copy(STATIC_PODS / f"{component}.yaml", tmp_path / f"{component}.yaml")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "kube-apiserver.yaml: no livenessProbe failureThreshold to scale" in done.stderr


def _containerd(tmp_path: Path):
    containerd = pinned_tools.binary("containerd", "containerd")
    ctr = pinned_tools.binary("containerd", "ctr")
    assert containerd and ctr, f"no pinned containerd in {pinned_tools.tool_dir('containerd')}: run scripts/build-tools"
    sock = tmp_path / "c.sock"
    conf = tmp_path / "config.toml"
    # A private daemon: its own root, state and sockets; no CRI (this test needs the image store only).
    # Schema 4, as k4w writes: the sockets are the server plugins' own tables there (containerd@v2.3.7
    # cmd/containerd/server/config/config.go serviceMigrate: [grpc] -> io.containerd.server.v1.grpc,
    # [ttrpc] -> io.containerd.server.v1.ttrpc, whose default address is NOT derived from grpc's in 4).
    conf.write_text(f"""version = {containerd_config.CONFIG_VERSION}
root = "{tmp_path / 'root'}"
state = "{tmp_path / 'state'}"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.nri.v1.nri"]
[plugins."io.containerd.server.v1.grpc"]
  address = "{sock}"
[plugins."io.containerd.server.v1.ttrpc"]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{tmp_path / 'opt'}"
""", encoding="utf-8")
    log = open(tmp_path / "containerd.log", "w")
    daemon = subprocess.Popen([str(containerd), "--config", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while subprocess.run([str(ctr), "--address", str(sock), "version"], capture_output=True).returncode != 0:
        assert daemon.poll() is None and time.monotonic() < deadline, (tmp_path / "containerd.log").read_text()[-2000:]
        time.sleep(0.2)  # poll interval of the socket check above
    return daemon, [str(ctr), "--address", str(sock), "-n", "k8s.io"]


def test_the_real_containerd_imports_the_archive_under_its_exact_name(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("containerd needs root, as the e2e run has (run the test suite as in DEVELOPERS.md)")
    archive = tmp_path / "busybox.tar"
    oci_archive.write(archive, cluster_run.test_image())
    daemon, ctr = _containerd(tmp_path)
    try:
        done = subprocess.run([*ctr, "images", "import", str(archive)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        listed = subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True, timeout=60).stdout.split()
        assert listed == [cluster_run.TEST_IMAGE]
        check = subprocess.run([*ctr, "images", "check"], capture_output=True, text=True, timeout=60).stdout
        assert "complete" in check, check
        # the private config is read as written, not migrated from an older schema at start
        assert "migrated" not in (tmp_path / "containerd.log").read_text()
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        shutil.rmtree(tmp_path / "root", ignore_errors=True)


# ------------------------------------------------------------------ the command


def test_dry_run_of_cluster_says_each_step_and_how_images_are_named():
    res = invoke("e2e", "--box", BOX, "--cluster", "--dry-run")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "kubeadm config images list --config" in res.stdout
    for step in cluster_run.BUDGETS:
        assert f"{step} (budget {cluster_run.BUDGETS[step]} s)" in res.stdout


def test_cluster_is_refused_on_the_docker_era_box():
    res = invoke("e2e", "--cluster", "--dry-run")
    assert res.returncode != 0
    assert "--cluster runs on the containerd era's boxes only: --box ubuntu-2404-e2e or ubuntu-2604-e2e (not debian-12-e2e)" in res.stdout + res.stderr


def test_a_host_without_the_images_programs_is_named_before_the_run_starts(tmp_path, monkeypatch):
    """A fresh host's libvirt run stopped after its 17-minute bake for want of conntrack; the tools phase now
    names every missing program and its package first."""
    from ci.e2e import cluster_images as images
    (tmp_path / "busybox").write_text("#!/bin/sh\n")
    (tmp_path / "busybox").chmod(0o755)
    monkeypatch.setattr(images, "SBIN", str(tmp_path))
    with pytest.raises(E2EError) as caught:
        images.require_host_programs()
    assert str(caught.value) == (f"{images.XTABLES_MULTI}, conntrack not installed on this host; the cluster images "
                                 "need them: sudo apt-get install conntrack iptables")

"""cluster-up / cluster-reset / cluster-down against recorded fakes (Vagrant, guests, host, clock).

Every command that would reach Vagrant, a guest or the host is logged in order; tests assert the
order, that a failure at any step resumes at that step, that a finished cluster only gets status
checks, timeouts (on a fake clock: no real waiting) and redaction.
"""

from __future__ import annotations

import json
import re

import pytest

from k4w.cluster import up as up_mod
from k4w.cluster.remote import RemoteError
from k4w.infra.errors import K4wError
from k4w.infra.redact import redact
from tests.cluster.conftest import machines_of, run_up
from tests.fakes.cluster_world import FakeClock, FakeWorld


def state(world) -> dict:
    return json.loads((world.out / "cluster-state.json").read_text())


def index(log, pattern, start=0):
    for i, line in enumerate(log[start:], start):
        if re.search(pattern, line):
            return i
    raise AssertionError(f"{pattern!r} not in log:\n" + "\n".join(log))


# host/cluster-nic.ps1 for every VM: its static MAC (k4w.cluster.machines.cluster_nic_mac of the
# cluster and node names) and MAC spoofing on the Windows node only.
CLUSTER_NIC_RUNS = [
    r"^host: & '.*cluster-nic\.ps1' -VMName 'k4w-master' -SwitchName 'k4w-cluster' -AdapterName 'k4w-cluster' "
    r"-MacAddress '02EF07A4AD4C' -MacSpoofing 'Off'; exit \$LASTEXITCODE$",
    r"^host: & '.*cluster-nic\.ps1' -VMName 'k4w-worker-linux' .* -MacAddress '02724F2B9A2A' -MacSpoofing 'Off'",
    r"^host: & '.*cluster-nic\.ps1' -VMName 'k4w-worker-win' .* -MacAddress '02C603E68ABF' -MacSpoofing 'On'",
]


def test_full_run_order(world):
    run_up(world)
    log = world.log
    order = [
        r"^host: switch check",
        r"^vagrant up master worker-linux worker-win",
        *CLUSTER_NIC_RUNS,
        r"^master: sudo env K4W_NODE_IP=192.168.250.10 K4W_PREFIX_LENGTH=24 K4W_CLUSTER_MAC=02:ef:07:a4:ad:4c K4W_SERVICE_CIDR=10.96.0.0/12 bash /tmp/k4w/cluster-ip.sh",
        r"^worker-linux: sudo env K4W_NODE_IP=192.168.250.11 .*cluster-ip.sh",
        r"^worker-win: & 'C:\\k4w\\cluster-ip.ps1' -IPAddress '192.168.250.21' -PrefixLength 24 -MacAddress '02-C6-03-E6-8A-BF'",
        r"^master: sudo env K4W_PROXY_FILE=/tmp/k4w/proxy.env bash /tmp/k4w/cluster-proxy.sh",
        r"^worker-win: & 'C:\\k4w\\cluster-proxy.ps1' -ValuesFile 'C:\\k4w\\proxy.json' -Common 'C:\\k4w\\common.ps1'",
        r"^master: upload kubeadm-config.yaml /tmp/k4w/kubeadm-config.yaml",
        r"^master: sudo env K4W_KUBEADM_CONFIG=/tmp/k4w/kubeadm-config.yaml bash /tmp/k4w/cluster-init.sh",
        r"^master: sudo cat /etc/kubernetes/admin.conf",
        r"^master: kubectl apply -f /tmp/k4w/manifests/kube-flannel.yaml",
        r"^master: kubectl apply -f /tmp/k4w/manifests/windows-node-rbac.yaml",
        r"^master: kubectl -n kube-system patch daemonset kube-proxy --patch",
        r"^master: kubectl get nodes -o json",
        r"^master: sudo kubeadm token create --print-join-command --ttl 1h",
        r"^worker-linux: sudo env K4W_NODE_NAME=worker-linux K4W_NODE_IP=192.168.250.11 .*bash /tmp/k4w/cluster-join.sh",
        r"^master: sudo kubeadm token create --print-join-command --ttl 1h",
        r"^worker-win: upload kubelet.args C:\\k\\config\\kubelet.args",
        r"^worker-win: upload cluster-join-lib.ps1 C:\\k4w\\cluster-join-lib.ps1",
        r"^worker-win: upload common.ps1 C:\\k4w\\common.ps1",
        r"^worker-win: upload kubeadm-join.yaml C:\\k4w\\kubeadm-join.yaml",
        r"^worker-win: & 'C:\\k4w\\cluster-join.ps1' -ConfigFile 'C:\\k4w\\kubeadm-join.yaml' -NodeName 'worker-win'",
        r"^master: kubectl get nodes -o json",
        r"^master: timeout 900 kubectl -n kube-system rollout status daemonset/kube-proxy$",
        r"^master: timeout 900 kubectl -n kube-system rollout status daemonset/kube-flannel-ds-amd64$",
        r"^master: timeout 900 kubectl -n kube-system rollout status deployment/coredns$",
        # The demo's Nano Server volume check runs anew on every cluster-up (a Pod's spec is immutable).
        r"^master: kubectl delete pod win-nanoserver-volumes --ignore-not-found",
        r"^master: kubectl apply -f /tmp/k4w/manifests/demo-win-webserver.yaml",
        r"^master: kubectl get deployment win-webserver -o json",
    ]
    at = 0
    for pattern in order:
        at = index(log, pattern, at) + 1
    assert (world.out / "kubeconfig").read_text().startswith("apiVersion: v1")
    assert oct((world.out / "kubeconfig").stat().st_mode & 0o777) == "0o600"
    assert list(state(world)["steps"]) == ["up", "cluster-nic", "cluster-ip", "node-proxy", "master-init", "manifests", "join:worker-linux",
                                           "join:worker-win", "ready", "rollouts", "demo"]
    # every node's config file went to C:\k\config before the join script ran
    uploads = [line for line in log if line.startswith("worker-win: upload") and "C:\\k\\config" in line]
    assert len(uploads) == 8


CLUSTER_IP_RUNS = [
    r"^master: sudo env K4W_NODE_IP=192.168.250.10 K4W_PREFIX_LENGTH=24 K4W_CLUSTER_MAC=02:ef:07:a4:ad:4c K4W_SERVICE_CIDR=10.96.0.0/12 bash /tmp/k4w/cluster-ip.sh$",
    r"^worker-linux: sudo env K4W_NODE_IP=192.168.250.11 K4W_PREFIX_LENGTH=24 K4W_CLUSTER_MAC=02:72:4f:2b:9a:2a K4W_SERVICE_CIDR=10.96.0.0/12 bash /tmp/k4w/cluster-ip.sh$",
    r"^worker-win: & 'C:\\k4w\\cluster-ip.ps1' -IPAddress '192.168.250.21' -PrefixLength 24 -MacAddress '02-C6-03-E6-8A-BF'$",
]


def test_second_run_checks_status_and_reapplies_every_static_ip(world, capsys):
    run_up(world)
    world.log.clear()
    run_up(world)
    assert world.log[:2] == ["host: switch check", "vagrant status"]
    at = 0
    for pattern in CLUSTER_NIC_RUNS + CLUSTER_IP_RUNS:   # every NIC from the host, then every IP on it
        at = index(world.log, pattern, at) + 1
    assert world.log[-1] == "master: kubectl get nodes -o json"
    assert not any("vagrant up" in line or "kubeadm" in line or "cluster-join" in line for line in world.log)
    assert "already up" in capsys.readouterr().out


def test_after_a_host_reboot_vms_start_ips_are_reapplied_and_every_node_is_awaited(world):
    """A host reboot leaves the VMs off (Vagrant's Hyper-V auto_start_action: Nothing); the next
    cluster-up starts them, re-applies each static IP after the trigger reconnected the cluster NIC,
    and ends only when every node is Ready again."""
    run_up(world)
    for name in ("master", "worker-linux", "worker-win"):
        world.states[name] = "off"
    world.scenario["not_ready"] = {"worker-win": {"reason": "KubeletNotReady", "message": "node is rebooting"}}
    world.log.clear()
    with pytest.raises(K4wError, match="timed out after 900 s waiting for master, worker-linux, worker-win to be Ready"):
        run_up(world)
    up_at = index(world.log, r"^vagrant up master worker-linux worker-win$")
    at = up_at
    for pattern in CLUSTER_NIC_RUNS + CLUSTER_IP_RUNS:
        at = index(world.log, pattern, at) + 1
    assert not any("kubeadm" in line for line in world.log)
    world.scenario["not_ready"] = {}
    world.log.clear()
    run_up(world)   # now all are running and Ready: only the checks and the IPs again
    assert not any("vagrant up" in line for line in world.log)


def test_stopped_vms_are_started_again_on_a_finished_cluster(world):
    run_up(world)
    world.states["worker-win"] = "poweroff"
    world.log.clear()
    run_up(world)
    assert "vagrant up worker-win" in world.log
    assert not any("kubeadm" in line for line in world.log)


# A command unique to each step, and the step key that must not be marked done when it fails.
FAILURES = {
    "up": r"vagrant up",
    "cluster-nic": r"cluster-nic\.ps1' -VMName 'k4w-worker-linux'",
    "cluster-ip": r"cluster-ip\.ps1",
    "node-proxy": r"cluster-proxy\.ps1",
    "master-init": r"cluster-init\.sh",
    "manifests": r"patch daemonset kube-proxy",
    "join:worker-linux": r"cluster-join\.sh",
    "join:worker-win": r"cluster-join\.ps1",
    "ready": None,   # fails through the timeout test below
    "rollouts": r"rollout status daemonset/kube-proxy",
    "demo": r"apply -f /tmp/k4w/manifests/demo",
}


def test_each_node_gets_the_proxy_from_a_private_file_never_from_a_command_line(tmp_path):
    from tests.cluster.conftest import render_to
    from tests.helpers import config_dict

    out = tmp_path / "build"
    password = "s3cr%21t"
    cluster = render_to(out, config_dict(**{"proxy.http": f"http://alice:{password}@proxy.corp:3128",
                                            "proxy.https": f"http://alice:{password}@proxy.corp:3128"}))
    world = FakeWorld(machines_of(out))
    world.cluster, world.out, world.clock = cluster, out, FakeClock()
    run_up(world)
    assert not [line for line in world.log if password in line]  # sudo and WinRM never see it
    linux = world.uploaded["/tmp/k4w/proxy.env"]
    assert f"HTTP_PROXY=http://alice:{password}@proxy.corp:3128" in linux[0] and "K4W_PROXY_FILE_MODE=0600" in linux[0]
    assert linux[1] == 0o600
    windows = json.loads(world.uploaded["C:\\k4w\\proxy.json"][0])
    assert windows["K4W_PROXY_ENABLED"] == "1" and windows["K4W_HTTP_PROXY_PASSWORD"] == password
    assert not any("{{" in value for value in windows.values())  # no Packer reference left
    # the proxy is in place before kubeadm pulls its first image
    assert index(world.log, r"cluster-proxy\.sh") < index(world.log, r"cluster-init\.sh")
    assert any(line.startswith("master: install -d -m 0700 /tmp/k4w") for line in world.log)


def test_a_containerd_node_gets_the_mirrors_and_their_credentials_in_the_same_private_file(tmp_path, monkeypatch):
    """A box carries no build credentials: cluster-up hands each containerd node this cluster.yml's
    mirrors (hosts.toml tree and credentials drop-in) with the proxy, never on a command line."""
    import base64

    from k4w.infra import sources
    from tests.cluster.conftest import render_to
    from tests.helpers import MODERN_BOXES, modern_config

    monkeypatch.setenv(sources.BOX_DIRS_ENV, str(MODERN_BOXES))
    out = tmp_path / "build"
    password = "m1rr0r%23pw"
    cluster = render_to(out, modern_config(**{"registry.mirrors": {
        "registry.k8s.io": {"endpoint": f"https://puller:{password}@harbor.corp.example/k8s-proxy"}}}))
    world = FakeWorld(machines_of(out))
    world.cluster, world.out, world.clock = cluster, out, FakeClock()
    run_up(world)
    assert not [line for line in world.log if "m1rr0r" in line]
    linux, mode = world.uploaded["/tmp/k4w/proxy.env"]
    assert mode == 0o600 and "K4W_REGISTRY_FILES=" in linux
    auth = next(line for line in linux.splitlines() if line.startswith("K4W_REGISTRY_AUTH="))
    assert 'password = "m1rr0r#pw"' in base64.b64decode(auth.split("=", 1)[1].strip("'")).decode()
    windows = json.loads(world.uploaded["C:\\k4w\\proxy.json"][0])
    assert base64.b64decode(windows["K4W_REGISTRY_AUTH"]).decode() == base64.b64decode(auth.split("=", 1)[1].strip("'")).decode()
    assert "registry.k8s.io/hosts.toml=" in windows["K4W_REGISTRY_FILES"]


@pytest.mark.parametrize("step", [s for s, p in FAILURES.items() if p])
def test_resume_after_a_failure_at_each_step(world, step):
    world.scenario["fail"] = [{"pattern": FAILURES[step], "times": 1, "exit": 7, "output": "boom"}]
    with pytest.raises(K4wError):
        run_up(world)
    done = list(state(world)["steps"]) if (world.out / "cluster-state.json").exists() else []
    keys = list(FAILURES)
    assert done == keys[:keys.index(step)], done
    first_log = list(world.log)
    world.log.clear()
    run_up(world)
    assert list(state(world)["steps"]) == keys
    # nothing that finished before the failure runs again, except the static IPs (re-applied on every run)
    for earlier, pattern in FAILURES.items():
        if pattern and earlier not in ("cluster-nic", "cluster-ip") and keys.index(earlier) < keys.index(step):
            assert not any(re.search(pattern, line) for line in world.log), (earlier, world.log)
    assert any(re.search(FAILURES[step], line) for line in world.log) and any(re.search(FAILURES[step], l) for l in first_log)


def test_ready_timeout_names_the_node_and_its_last_condition(world):
    world.scenario["not_ready"] = {"worker-win": {"reason": "KubeletNotReady",
                                                  "message": "runtime network not ready: cni config uninitialized"}}
    with pytest.raises(K4wError) as err:
        run_up(world)
    message = str(err.value)
    assert "timed out after 900 s" in message
    assert "node worker-win is not Ready, last condition: Ready=False (KubeletNotReady: runtime network not ready" in message
    assert "worker-linux" not in message.split("waiting for", 1)[1].split(":", 1)[1]
    assert 900 <= world.clock.slept <= 910   # simulated: the test did not wait
    assert "ready" not in state(world)["steps"] and "join:worker-win" in state(world)["steps"]


def test_unregistered_node_is_reported_as_such(world):
    world.scenario["unregistered"] = ["worker-linux"]
    with pytest.raises(K4wError, match="node worker-linux is not Ready, last condition: not registered"):
        run_up(world)


def test_missing_switch_stops_before_any_vm_work(world):
    world.switch_exists = False
    with pytest.raises(K4wError, match=r"cluster switch 'k4w-cluster' does not exist: run `invoke network-up`"):
        run_up(world)
    assert world.log == ["host: switch check"]


def test_a_changed_config_refuses_to_resume(world):
    world.scenario["fail"] = [{"pattern": "cluster-init", "times": 1}]
    with pytest.raises(K4wError):
        run_up(world)
    (world.out / "nodes" / "worker-win" / "kubelet.args").write_text("--v=9\n")
    with pytest.raises(K4wError, match="config changed.*cluster-reset.*cluster-down"):
        run_up(world)


def test_failed_remote_command_shows_node_command_code_and_tail_with_secrets_redacted(world):
    output = "\n".join(f"line {i}" for i in range(1, 31)) + "\nproxy http://bob:s3cretPW@proxy.corp:3128 refused"
    world.scenario["fail"] = [{"pattern": "bash /tmp/k4w/cluster-join.sh", "times": 1, "exit": 42, "output": output}]
    with pytest.raises(RemoteError) as err:
        run_up(world)
    message = redact(str(err.value))
    assert message.startswith("worker-linux: command failed with exit code 42:")
    assert "bash /tmp/k4w/cluster-join.sh" in message
    assert "s3cretPW" not in str(err.value) and "http://***@proxy.corp:3128" in str(err.value)
    assert "abcdef.0123456789abcdef" not in str(err.value)   # the join token
    tail = str(err.value).split("last 20 lines of output:\n", 1)[1].splitlines()
    assert len(tail) == 20 and tail[0] == "line 12"


def test_dry_run_prints_commands_and_changes_nothing(default_render, capsys):
    cluster, out = default_render
    up_mod.cluster_up(cluster, out, dry_run=True, validate=False, clock=FakeClock())
    printed = capsys.readouterr().out
    # The same Vagrant driver as a real run, so the exact command: folder, environment, arguments.
    ups = [line for line in printed.splitlines() if " up --provider=" in line]
    up = ups[0]
    assert [line.rsplit(" ", 1)[1] for line in ups] == ["master", "worker-linux", "worker-win"]  # one process each
    assert "# these 3 run at once, one process per machine:" in printed
    assert up.startswith("$ cd ") and up.endswith(" vagrant up --provider=hyperv master")
    # The boxes are not built here: it says so, and what builds them.
    assert "box windows-1803 is not built yet" in printed and "`invoke build-windows`" in printed
    assert f"K4W_CLUSTER_JSON={out.resolve() / 'vagrant' / 'cluster.json'} " in up
    assert "[worker-win] $ & 'C:\\k4w\\cluster-join.ps1'" in printed
    assert not (out / "cluster-state.json").exists() and not (out / "kubeconfig").exists()
    # It ends with what would happen, never with nodes Ready or a kubeconfig that does not exist.
    assert "would wait up to 900 s for master, worker-linux, worker-win to be Ready" in printed
    assert "no node is Ready and there is no kubeconfig" in printed
    assert not re.search(r"(?m)^\s*master\s+linux\s+192\.168\.250\.10\s+Ready", printed)
    assert "kubeconfig: " not in printed


def test_cluster_up_refuses_artifacts_that_fail_their_checks(default_render):
    cluster, out = default_render
    (out / "nodes" / "worker-win" / "kube-proxy.args").write_text("--cluster-cidr=10.9.0.0/16\n")
    with pytest.raises(K4wError, match="(?s)fail their checks.*--cluster-cidr"):
        up_mod.cluster_up(cluster, out, dry_run=True, clock=FakeClock())


def test_reset_undoes_kubeadm_everywhere_and_keeps_the_vms(world):
    run_up(world)
    world.log.clear()
    up_mod.cluster_reset(world.cluster, world.out, vagrant=world.vagrant, remote=world.remote, host=world.host, clock=world.clock)
    log = world.log
    at = index(log, r"^master: kubectl delete node worker-linux --ignore-not-found")
    at = index(log, r"^master: kubectl delete node worker-win --ignore-not-found", at)
    at = index(log, r"^worker-linux: sudo env K4W_FLANNEL_VXLAN_DEVICE=flannel.1 bash /tmp/k4w/cluster-reset.sh", at)
    at = index(log, r"^worker-win: & 'C:\\k4w\\cluster-reset.ps1'", at)
    index(log, r"^master: sudo env K4W_FLANNEL_VXLAN_DEVICE=flannel.1 bash /tmp/k4w/cluster-reset.sh", at)
    assert list(state(world)["steps"]) == ["up", "cluster-nic", "cluster-ip"]
    assert not (world.out / "kubeconfig").exists()
    world.log.clear()
    run_up(world)
    assert not any("vagrant up" in line for line in world.log)
    assert any("cluster-init.sh" in line for line in world.log)


def test_down_destroys_and_forgets(world):
    run_up(world)
    up_mod.cluster_down(world.cluster, world.out, vagrant=world.vagrant)
    assert world.log[-1] == "vagrant destroy"
    assert not (world.out / "cluster-state.json").exists() and not (world.out / "kubeconfig").exists()


def test_cluster_up_refuses_a_gen1_windows_box(tmp_path, monkeypatch):
    """Hyper-V hot-adds a NIC only to Gen2 VMs, and the cluster NIC is added after `vagrant up`."""
    import shutil

    import yaml as _yaml

    from k4w.model import profiles
    from k4w.cluster import up as up_module
    from k4w.derive.cluster import Cluster
    from k4w.infra.errors import K4wError
    from k4w.infra.sources import REPO_ROOT
    from tests.helpers import config_dict, use_sources, write_config

    folder = tmp_path / "boxes"
    shutil.copytree(REPO_ROOT / "boxes", folder)
    data = _yaml.safe_load((folder / "windows-1803.yml").read_text())
    data["build"]["generation"] = 1
    (folder / "windows-1803.yml").write_text(_yaml.safe_dump(data))
    use_sources(monkeypatch, box_folders=(folder,))
    profiles._load.cache_clear()
    cluster = Cluster.load(write_config(tmp_path / "cluster.yml", config_dict()))
    with pytest.raises(K4wError, match="Generation 2 Windows boxes.*windows-1803 \\(windows-1803.yml: build.generation 1\\)"):
        up_module.cluster_up(cluster, tmp_path / "out")


def test_real_cli_dry_run_ends_with_the_plan_and_the_unbuilt_boxes_not_a_ready_cluster(tmp_path):
    from tests.helpers import invoke

    out = tmp_path / "build"
    result = invoke("cluster-up", "--out", str(out), "--dry-run")
    printed = result.stdout + result.stderr
    assert result.returncode == 0, printed
    assert "Traceback" not in printed
    assert "no node is Ready and there is no kubeconfig" in printed
    assert re.search(r"(?m)^\s*worker-win\s+windows\s+192\.168\.250\.21\s+windows-1803\s+NOT BUILT YET$", printed), printed
    assert f"`invoke build-windows` ({out / 'boxes' / 'windows-1803.json'} does not exist)" in printed
    assert "kubeconfig: " not in printed and "seconds to Ready" not in printed
    assert not out.exists()


def test_readiness_wait_retries_a_failed_ssh_until_it_answers(world):
    """sshd or the API server not up yet is "not Ready yet", not the end of cluster-up."""
    world.scenario["fail"] = [{"pattern": r"^kubectl get nodes -o json$", "times": 3, "exit": 255,
                               "output": "ssh: connect to host 172.20.0.5 port 22: Connection refused"}]
    run_up(world)
    assert "ready" in state(world)["steps"]
    assert sum(line == "master: kubectl get nodes -o json" for line in world.log) >= 4


def test_readiness_wait_reports_the_last_ssh_failure_at_its_deadline(world):
    world.scenario["fail"] = [{"pattern": r"^kubectl get nodes -o json$", "times": 10_000, "exit": 255,
                               "output": "ssh: connect to host 172.20.0.5 port 22: Connection refused"}]
    with pytest.raises(K4wError) as err:
        run_up(world)
    message = str(err.value)
    assert message.startswith("timed out after 900 s waiting for master to be Ready")
    assert "the check itself failed: master: command failed with exit code 255" in message
    assert "Connection refused" in message
    assert 900 <= world.clock.slept <= 910


def test_only_a_modern_windows_node_gets_a_default_route_through_the_host_nat_on_its_cluster_nic(tmp_path):
    # windows-2022 (containerd era) pods leave through the cluster NIC (OutBoundNAT), so cluster-ip
    # gives that NIC the host's NetNat address (node_cidr's first host) as a lower-ranked gateway;
    # the seed era (test_full_run_order above) passes no -Gateway at all (CLUSTER_IP_RUNS end in $).
    from tests.cluster.conftest import render_to
    from tests.helpers import modern_config

    out = tmp_path / "build"
    cluster = render_to(out, modern_config())
    w = FakeWorld(machines_of(out))
    w.cluster, w.out, w.clock = cluster, out, FakeClock()
    run_up(w)
    [line] = [entry for entry in w.log if "cluster-ip.ps1" in entry and not entry.startswith("worker-win: upload")]
    assert re.fullmatch(r"worker-win: & 'C:\\k4w\\cluster-ip\.ps1' -IPAddress '192\.168\.250\.21' -PrefixLength 24 "
                        r"-MacAddress '02(-[0-9A-F]{2}){5}' -Gateway '192\.168\.250\.1'", line)
    assert not any("-Gateway" in entry for entry in w.log if entry.startswith(("master:", "worker-linux:")))
    # cluster-ip.ps1 dot-sources the route logic beside it (the one start-node.ps1 shares).
    assert w.log.index("worker-win: upload cluster-route.ps1 C:\\k4w\\cluster-route.ps1") < w.log.index(line)


@pytest.mark.parametrize("what, target", [("CoreDNS", "deployment kube-system/coredns"),
                                          ("kube-proxy", "daemonset kube-system/kube-proxy"),
                                          ("Flannel", "daemonset kube-system/kube-flannel-ds-amd64")])
def test_an_add_on_that_does_not_roll_out_fails_cluster_up_by_name_and_a_rerun_waits_again(world, what, target):
    kind, name = target.split(" ")
    world.scenario["fail"] = [{"pattern": f"rollout status {kind}/{name.split('/')[1]}$", "times": 1, "exit": 124,
                               "output": f'Waiting for {kind} "{name}" rollout to finish: 1 of 3 updated pods are available...\n'}]
    with pytest.raises(K4wError) as err:
        run_up(world)
    message = str(err.value)
    assert message.startswith(f"{what} did not come up: the rollout of {target} did not finish within 900 s")
    assert "1 of 3 updated pods are available" in message and f"describe {kind}" in message
    assert "rollouts" not in state(world)["steps"] and "ready" in state(world)["steps"]
    assert not any("demo-win-webserver" in line for line in world.log)
    world.log.clear()
    run_up(world)   # resumes at the rollouts, then the demo
    assert index(world.log, r"rollout status deployment/coredns") < index(world.log, r"demo-win-webserver")
    assert not any("kubeadm" in line for line in world.log)


@pytest.fixture
def modern_rollouts(tmp_path, monkeypatch) -> list[tuple[str, str, str, str]]:
    """cluster-up's rollouts of a rendered containerd-era cluster, in the order it waits for them."""
    from k4w.cluster.steps import rollouts
    from k4w.infra import sources
    from tests.cluster.conftest import render_to
    from tests.helpers import MODERN_BOXES, modern_config

    monkeypatch.setenv(sources.BOX_DIRS_ENV, str(MODERN_BOXES))
    out = tmp_path / "build"
    render_to(out, modern_config())
    return rollouts(out)


def test_modern_era_waits_for_flannel_in_its_own_namespace(modern_rollouts):
    assert ("Flannel", "kube-flannel", "daemonset", "kube-flannel-ds") in modern_rollouts


def test_each_rollout_is_waited_for_after_the_ones_it_needs_so_the_first_failure_names_the_cause(modern_rollouts):
    """flanneld reaches the API through the Service kube-proxy programs, and CoreDNS's sandboxes need
    flanneld's subnet.env: a crash-looping flanneld must fail cluster-up as Flannel, not as CoreDNS."""
    order = [(namespace, name) for _, namespace, _, name in modern_rollouts]
    assert order[:3] == [("kube-system", "kube-proxy"), ("kube-flannel", "kube-flannel-ds"), ("kube-system", "coredns")]
    assert {namespace for namespace, _ in order[3:]} == {"k4w-windows-node"} and len(order) == 5


# ------------------------------------------------------------------ VMs replaced outside cluster-up

def test_the_state_records_each_machines_hyperv_vm_id(world):
    run_up(world)
    recorded = state(world)["vms"]
    assert set(recorded) == {"master", "worker-linux", "worker-win"}
    assert all(recorded[name] == world.id_file(name).read_text() for name in recorded)


def test_a_vm_destroyed_outside_cluster_up_is_named_and_not_silently_recreated(world):
    run_up(world)
    was = state(world)["vms"]["worker-linux"]
    world.destroy_out_of_band("worker-linux")
    world.log.clear()
    with pytest.raises(K4wError) as err:
        run_up(world)
    assert f"worker-linux: its Hyper-V VM k4w-worker-linux (Id {was}) no longer exists" in str(err.value)
    assert "invoke cluster-down" in str(err.value) and "master:" not in str(err.value)
    assert not any("vagrant up" in line for line in world.log)   # an empty box would never join
    with pytest.raises(K4wError, match="no longer exists"):       # and it stays refused
        run_up(world)


def test_a_vm_recreated_outside_cluster_up_is_refused_until_cluster_reset_rebuilds_on_it(world):
    run_up(world)
    was = state(world)["vms"]["worker-win"]
    new = world.recreate_out_of_band("worker-win")
    world.log.clear()
    with pytest.raises(K4wError) as err:
        run_up(world)
    assert f"worker-win: it is now Hyper-V VM Id {new}, not the VM {was} this cluster was built on" in str(err.value)
    assert "invoke cluster-reset" in str(err.value)
    assert not any("cluster-ip" in line or "kubectl" in line for line in world.log)
    up_mod.cluster_reset(world.cluster, world.out, vagrant=world.vagrant, remote=world.remote, host=world.host, clock=world.clock)
    assert state(world)["vms"]["worker-win"] == new
    world.log.clear()
    run_up(world)
    assert any("cluster-join.ps1" in line for line in world.log)


def test_a_state_file_from_before_vm_ids_adopts_the_vms_there_now(world):
    run_up(world)
    data = state(world)
    del data["vms"]
    (world.out / "cluster-state.json").write_text(json.dumps(data))
    run_up(world)
    assert state(world)["vms"]["master"] == world.id_file("master").read_text()


# ------------------------------------------------------------------ the cluster NIC, from the host

def test_a_failed_nic_attach_names_the_machine_and_the_next_run_attaches_it(world):
    world.scenario["fail"] = [{"pattern": "cluster-nic\\.ps1' -VMName 'k4w-worker-win'", "times": 1, "exit": 1,
                               "output": "cluster-nic k4w-worker-win failed: The operation failed because the file was not found."}]
    with pytest.raises(K4wError) as err:
        run_up(world)
    assert str(err.value).startswith("worker-win: attaching its cluster NIC to 'k4w-cluster' failed (exit 1): ")
    assert "file was not found" in str(err.value)
    assert not any("cluster-ip" in line for line in world.log)   # no IP on a NIC that is not there
    world.log.clear()
    run_up(world)
    at = 0
    for pattern in CLUSTER_NIC_RUNS + CLUSTER_IP_RUNS:
        at = index(world.log, pattern, at) + 1


def test_without_the_rights_vagrant_needs_cluster_up_says_so(world):
    world.scenario["fail"] = [{"pattern": "cluster-nic\\.ps1", "times": 1, "exit": 2, "output": ""}]
    with pytest.raises(K4wError, match="needs the rights Vagrant's Hyper-V provider needs"):
        run_up(world)


def test_a_cluster_from_before_the_nic_step_gets_its_nics_attached_and_recorded(world):
    run_up(world)
    data = state(world)
    del data["steps"]["cluster-nic"]
    (world.out / "cluster-state.json").write_text(json.dumps(data))
    world.log.clear()
    run_up(world)
    index(world.log, CLUSTER_NIC_RUNS[-1])
    assert "cluster-nic" in state(world)["steps"]


def test_modern_era_applies_the_windows_daemonsets_and_waits_for_them_with_no_token_secret(tmp_path):
    """The containerd era: cluster-up applies the HostProcess DaemonSets from the master after Flannel's
    manifest, writes no component kubeconfig to the Windows node (the pods get projected tokens), and
    its rollout wait covers both Windows DaemonSets."""
    from tests.cluster.conftest import render_to
    from tests.helpers import modern_config

    out = tmp_path / "build"
    cluster = render_to(out, modern_config())
    w = FakeWorld(machines_of(out))
    w.cluster, w.out, w.clock = cluster, out, FakeClock()
    run_up(w)
    log = w.log
    flannel = index(log, r"^master: kubectl apply -f /tmp/k4w/manifests/kube-flannel\.yaml$")
    daemonsets = index(log, r"^master: kubectl apply -f /tmp/k4w/manifests/windows-containerd/windows-node-daemonsets\.yaml$")
    assert flannel < daemonsets < index(log, r"^worker-win: & 'C:\\k4w\\cluster-join-containerd\.ps1'")
    assert not any("windows-node-rbac.yaml" in line for line in log)
    assert not any(" get secret " in line or "cluster-kubeconfig.ps1" in line or "flanneld.conf" in line for line in log)
    waits = [index(log, rf"^master: timeout 900 kubectl -n k4w-windows-node rollout status daemonset/{name}$")
             for name in ("k4w-flannel-windows", "k4w-kube-proxy-windows")]
    assert index(log, r"rollout status daemonset/kube-flannel-ds$") < min(waits) and max(waits) < index(log, r"demo-win-webserver")
    # Only the kubelet's files reach C:\k\config; flanneld and kube-proxy have none on the node.
    uploads = sorted(line.split()[2] for line in log if line.startswith("worker-win: upload") and "C:\\k\\config" in line)
    assert uploads == ["cni.conf", "kubelet.args", "net-conf.json", "node.json"]


# What kubectl printed in the ubuntu-2604-e2e --cluster run when kube-apiserver was being restarted
# by its liveness probe 45 s after kubeadm init (TCG, guest load 10+).
APISERVER_RESTARTING = ('error: error validating "/tmp/k4w/manifests/kube-flannel.yaml": error validating data: failed to '
                        'download openapi: Get "https://192.168.250.10:6443/openapi/v2?timeout=32s": dial tcp '
                        '192.168.250.10:6443: connect: connection refused; if you choose to ignore these errors, turn '
                        'validation off with --validate=false')


# ... and when it listened again but was still starting (the fifth run, just after a restart), and the
# 503 a starting kube-apiserver answers.
APISERVER_STARTING = ('error: error validating "/tmp/k4w/manifests/kube-flannel.yaml": error validating data: failed to '
                      'download openapi: unknown; if you choose to ignore these errors, turn validation off with --validate=false')
APISERVER_UNAVAILABLE = "Error from server (ServiceUnavailable): the server is currently unable to handle the request"


@pytest.mark.parametrize("away", [APISERVER_RESTARTING, APISERVER_STARTING, APISERVER_UNAVAILABLE])
def test_a_kubectl_call_while_the_api_server_restarts_is_run_again_once_it_answers(world, away):
    world.scenario["fail"] = [{"pattern": r"^kubectl apply -f /tmp/k4w/manifests/kube-flannel\.yaml$", "times": 2,
                               "exit": 1, "output": away}]
    run_up(world)
    assert "ready" in state(world)["steps"]
    assert world.log.count("master: kubectl apply -f /tmp/k4w/manifests/kube-flannel.yaml") == 3
    assert world.clock.slept < 60  # polled, not a fixed wait


def test_a_kubectl_call_the_api_server_refuses_fails_at_once(world):
    refused = 'Error from server (Invalid): error when creating "kube-flannel.yaml": DaemonSet.apps "kube-flannel-ds" is invalid'
    world.scenario["fail"] = [{"pattern": r"^kubectl apply -f /tmp/k4w/manifests/kube-flannel\.yaml$", "times": 10_000,
                               "exit": 1, "output": refused}]
    with pytest.raises(RemoteError, match="is invalid"):
        run_up(world)
    assert world.log.count("master: kubectl apply -f /tmp/k4w/manifests/kube-flannel.yaml") == 1


def test_an_api_server_that_never_comes_back_ends_at_the_ready_timeout_naming_the_command(world):
    world.scenario["fail"] = [{"pattern": r"^kubectl apply -f /tmp/k4w/manifests/kube-flannel\.yaml$", "times": 10_000,
                               "exit": 1, "output": APISERVER_RESTARTING}]
    with pytest.raises(K4wError) as err:
        run_up(world)
    assert str(err.value).startswith("timed out after 900 s waiting for the API server to answer "
                                     "`kubectl apply -f /tmp/k4w/manifests/kube-flannel.yaml`")
    assert "connect: connection refused" in str(err.value)


def test_a_token_create_that_meets_a_restarting_api_server_runs_again_and_leaves_no_token_behind(world, capsys):
    """The seventh libvirt run: kube-apiserver stored the join token's Secret and restarted before answering,
    `kubeadm token create` failed "connection refused" and cluster-up stopped. Now it runs again once the API
    server answers, and the token of the lost answer, recorded nowhere, is found by its description and
    deleted with the others once the node is Ready."""
    world.scenario["lost_token_answers"] = 1
    run_up(world)
    creates = [line for line in world.log if "kubeadm token create" in line]
    assert len(creates) == 3   # worker-linux twice, worker-win once
    assert all(re.search(r"--description 'k4w: join of (worker-linux|worker-win) \(cluster-up\)'$", c) for c in creates)
    assert world.scenario["tokens_made"] == 3 and world.scenario["bootstrap_tokens"] == []
    assert "the API server did not answer `sudo kubeadm token create" in capsys.readouterr().out


@pytest.mark.parametrize("failing_join", [None, "worker-linux", "worker-win"])
def test_no_join_token_k4w_created_remains_after_cluster_up(world, failing_join):
    """Each join token (`kubeadm token create`, 1 h) is deleted once its node is Ready, also the one
    a failed join left behind and its rerun's; only its id goes on a command line."""
    if failing_join:
        pattern = r"bash /tmp/k4w/cluster-join\.sh" if failing_join == "worker-linux" else r"cluster-join\.ps1' -ConfigFile"
        world.scenario["fail"] = [{"pattern": pattern, "times": 1, "exit": 7, "output": "boom"}]
        with pytest.raises(K4wError):
            run_up(world)
        assert world.scenario["bootstrap_tokens"], "the failed join's token is still valid before the rerun"
    run_up(world)
    assert world.scenario["tokens_made"] == 2 + bool(failing_join)
    assert world.scenario["bootstrap_tokens"] == []
    deletes = [line for line in world.log if "delete secret bootstrap-token-" in line]
    assert deletes and all(re.fullmatch(r"master: kubectl -n kube-system delete secret bootstrap-token-[a-z0-9]{6} "
                                        r"--ignore-not-found", line) for line in deletes)
    # Deleted after the node was seen Ready, never before its join ran.
    assert index(world.log, r"worker-win: & 'C:\\k4w\\cluster-join.ps1'") < index(world.log, r"delete secret bootstrap-token-")
    assert all(not node.get("join_tokens") for node in state(world)["nodes"].values())

"""The containerd recipe's node start on Windows: containerd's pod sandboxes are removed through the
CRI before the HNS network goes (kube-cleanup.ps1 + cri-sandboxes.ps1, crictl from the bake), and
the cluster NIC's default route through the host's NAT is restored by the kube-proxy DaemonSet's
start script once Flannel (re)created its network (cluster-route.ps1, shared with cluster-ip.ps1). Nothing here can run PowerShell: the
scripts are held to these rules through their syntax trees and the real `invoke render`."""

from __future__ import annotations

import ipaddress
import json
import re

import pytest
import yaml

from k4w.infra.sources import REPO_ROOT as ROOT
from tests.bake.windows.windows_ps_static import calls
from tests.helpers import MODERN_ENV, invoke, modern_config, write_config

GUEST = ROOT / "guest" / "windows"
START_NODE = GUEST / "node-containerd" / "start-node.ps1"
START_KUBE_PROXY = GUEST / "hostprocess" / "start-kube-proxy.ps1"
DAEMONSETS = "manifests/windows-containerd/windows-node-daemonsets.yaml"
KUBE_CLEANUP = GUEST / "node" / "kube-cleanup.ps1"
CRI_SANDBOXES = GUEST / "node" / "cri-sandboxes.ps1"
CLUSTER_ROUTE = GUEST / "node" / "cluster-route.ps1"
NODE_LIB = GUEST / "node" / "node-lib.ps1"
CLUSTER_IP = GUEST / "cluster" / "cluster-ip.ps1"
CRICTL_FACTS = yaml.safe_load((ROOT / "k4w" / "validate" / "facts" / "crictl-1.37.0.yml").read_text())
PROFILE = yaml.safe_load((ROOT / "boxes" / "windows-2022.yml").read_text())


def _top_level(source: bytes) -> list:
    """The script's own calls (outside any function), in source order."""
    return [c for c in calls(source) if c.function is None]


def _text(call) -> str:
    return call.node.text.decode()


def _first(found: list, name: str, after: int = 0, containing: str = ""):
    for index, call in enumerate(found):
        if index >= after and call.name == name and containing in _text(call):
            return index
    raise AssertionError(f"no call of {name} {containing!r} after position {after}")


# ------------------------------------------------------------------ item 2: the cluster NIC's default route

def route_problems(start_script: bytes) -> list[str]:
    """Why this start-kube-proxy.ps1 (the kube-proxy DaemonSet's program, which waits for Flannel's
    network anyway) would leave the node without its default route through the host NAT after the
    HNS network moved the cluster address (empty: it restores it, at every start of the pod)."""
    problems = []
    found = _top_level(start_script)
    flannel_up = _first(found, "wait-k4wpodcondition", containing="Flannel's HNS network")
    setters = [(i, _text(c)) for i, c in enumerate(found) if c.name == "set-clusterdefaultroute"]
    if not any(i > flannel_up for i, _ in setters):
        problems.append("no Set-ClusterDefaultRoute after the wait for Flannel's network")
    source = start_script.decode()
    if setters and source.index("Set-ClusterDefaultRoute -IPAddress") > source.index("& (Join-Path $NodeDir 'kube-proxy.exe')"):
        problems.append("the route is set only after kube-proxy.exe, which runs in the foreground until the pod stops")
    if not any("-IPAddress $NodeIp" in text and "-Gateway $ClusterGateway" in text for _, text in setters):
        problems.append("Set-ClusterDefaultRoute is not called with the node's IP and K4W_CLUSTER_GATEWAY")
    if ". (Join-Path $NodeDir 'cluster-route.ps1')" not in source:
        problems.append("the script does not dot-source C:\\k\\cluster-route.ps1")
    return problems


def test_the_kube_proxy_pod_restores_the_default_route_once_flannel_has_recreated_its_network():
    assert route_problems(START_KUBE_PROXY.read_bytes()) == []


@pytest.mark.parametrize("defect", ["dropped", "after kube-proxy", "no gateway"])
def test_the_route_check_fails_on_a_start_script_that_stops_restoring_it(defect):
    source = START_KUBE_PROXY.read_text()
    route = "    Set-ClusterDefaultRoute -IPAddress $NodeIp -Gateway $ClusterGateway -LogPrefix 'start-kube-proxy'\n"
    run = "& (Join-Path $NodeDir 'kube-proxy.exe') @arguments\n"
    planted = {
        "dropped": source.replace(route, ""),
        "after kube-proxy": source.replace(route, "").replace(run, run + route.strip() + "\n"),
        "no gateway": source.replace("-Gateway $ClusterGateway", "-Gateway ''"),
    }[defect]
    assert planted != source, "the planted defect did not change the script"
    assert route_problems(planted.encode()) != []


def test_there_is_one_route_implementation_and_both_callers_use_it():
    # New-NetRoute/Set-NetRoute anywhere else would be a second copy that drifts (metric, checks).
    for script in sorted(GUEST.rglob("*.ps1")):
        writers = [c for c in calls(script.read_bytes()) if c.name in ("new-netroute", "set-netroute", "remove-netroute")]
        if script != CLUSTER_ROUTE:
            assert writers == [], f"{script.relative_to(ROOT)} changes routes itself: use cluster-route.ps1"
    assert ". (Join-Path $PSScriptRoot 'cluster-route.ps1')" in CLUSTER_IP.read_text()
    [setter] = [c for c in _top_level(CLUSTER_IP.read_bytes()) if c.name == "set-clusterdefaultroute"]
    assert "-Gateway $Gateway" in _text(setter) and "-IPAddress $IPAddress" in _text(setter)


def test_node_json_carries_the_gateway_cluster_up_gives_cluster_ip(tmp_path):
    config = write_config(tmp_path / "cluster.yml", modern_config())
    out = tmp_path / "out"
    result = invoke("render", "--config", str(config), "--out", str(out), env=MODERN_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    node = json.loads((out / "nodes" / "worker-win" / "node.json").read_text())
    node_cidr = ipaddress.ip_network(node["node_cidr"])
    # The host's NetNat address: node_cidr's first host (host/network-up.ps1), the -Gateway of cluster-ip.
    assert node["cluster_gateway"] == str(next(node_cidr.hosts())) == "192.168.250.1"
    assert PROFILE["cluster_nic_default_route"] is True
    # The kube-proxy DaemonSet, which restores the route, gets the same gateway.
    docs = [d for d in yaml.safe_load_all((out / DAEMONSETS).read_text()) if d]
    [proxy] = [d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "k4w-kube-proxy-windows"]
    env = {e["name"]: e.get("value") for e in proxy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["K4W_CLUSTER_GATEWAY"] == node["cluster_gateway"]


# ------------------------------------------------------------------ item 1: containerd's pod sandboxes

def crictl_call_problems(source: bytes) -> list[str]:
    """crictl arguments of cri-sandboxes.ps1 that cri-tools v1.37.0 does not have."""
    problems = []
    for call in calls(source):
        if call.name != "invoke-crictl":
            continue
        arguments = re.search(r"@\(([^)]*)\)", _text(call))
        words = re.findall(r"'([^']*)'", arguments.group(1)) if arguments else []
        if not words or words[0] not in CRICTL_FACTS["commands"]:
            problems.append(f"line {call.line}: crictl command {words[:1]} is not one of {sorted(CRICTL_FACTS['commands'])}")
            continue
        unknown = [w for w in words[1:] if w not in CRICTL_FACTS["commands"][words[0]]]
        if unknown:
            problems.append(f"line {call.line}: crictl {words[0]} has no {unknown}")
    text = source.decode()
    for flag in re.findall(r"& \$Crictl ((?:--[a-z-]+ \S+ )+)", text):
        for name in re.findall(r"(--[a-z-]+)", flag):
            if name not in CRICTL_FACTS["global_flags"]:
                problems.append(f"crictl has no global flag {name}")
    return problems


def test_every_crictl_call_uses_commands_and_flags_of_the_pinned_cri_tools():
    source = CRI_SANDBOXES.read_bytes()
    assert [c for c in calls(source) if c.name == "invoke-crictl"], "no crictl call found: the check would pass vacuously"
    assert "& $Crictl --runtime-endpoint $Endpoint --timeout" in source.decode()
    assert crictl_call_problems(source) == []
    assert PROFILE["components"]["crictl"]["version"] == CRICTL_FACTS["version"]


def test_the_crictl_check_fails_on_a_flag_cri_tools_lacks():
    source = CRI_SANDBOXES.read_text()
    assert crictl_call_problems(source.replace("@('rmp', '--force', '--all')", "@('rmp', '--force', '--all', '--timeout-per-pod')").encode())
    assert crictl_call_problems(source.replace("--runtime-endpoint $Endpoint", "--endpoint $Endpoint").encode())


def test_no_crictl_failure_is_silent():
    # Every result is judged by its exit code, and what is left after the removal is counted.
    remove = CRI_SANDBOXES.read_text()
    remove = remove[remove.index("function Remove-CriPodSandboxes"):]
    results = re.findall(r"\$(\w+) = Invoke-Crictl", remove)
    assert sorted(results) == ["after", "before", "removal"]
    for name in results:
        assert re.search(rf"\${name}\.Code -(ne|eq) 0", remove), name
    assert "$after.Lines.Count -gt 0" in remove and "pod sandboxes remain" in remove
    # Bounded: the wait for the runtime ends at a deadline, each call at crictl's --timeout.
    assert "(Get-Date) -gt $deadline" in remove and "throw \"the CRI runtime did not answer" in remove
    assert not re.search(r"Start-Sleep -Seconds \d", CRI_SANDBOXES.read_text())


def test_kube_cleanup_removes_the_sandboxes_before_it_even_lists_the_hns_network():
    found = _top_level(KUBE_CLEANUP.read_bytes())
    removal = _first(found, "remove-cripodsandboxes")
    first_hns = _first(found, "invoke-hns")
    assert removal < first_hns
    assert "-Endpoint $CriEndpoint" in _text(found[removal]) and "Join-Path $NodeDir 'crictl.exe'" in _text(found[removal])
    assert ". (Join-Path $PSScriptRoot 'cri-sandboxes.ps1')" in KUBE_CLEANUP.read_text()


def test_the_containerd_node_start_hands_its_runtime_endpoint_to_the_cleanup_with_containerd_answering():
    found = _top_level(START_NODE.read_bytes())
    cleanup_body = START_NODE.read_text()
    cleanup_body = cleanup_body[cleanup_body.index("# ---------------------------------------------------------------- 2. clean slate"):]
    assert "if ($network -eq $Node.network_name) { $cleanup.CriEndpoint = $Node.runtime_endpoint }" in cleanup_body
    assert "& (Join-Path $K 'kube-cleanup.ps1') @cleanup" in cleanup_body
    runtime_up = _first(found, "wait-condition", containing="answers on")
    kubelet = _first(found, "start-service", containing="'kubelet'")
    assert cleanup_body.index("answers on") < cleanup_body.index("& (Join-Path $K 'kube-cleanup.ps1')") and runtime_up < kubelet


def test_the_bake_installs_the_pinned_crictl_where_kube_cleanup_runs_it(render_windows):
    steps = PROFILE["provision"]
    assert steps.index("03-containerd.ps1") < steps.index("03-crictl.ps1") < steps.index("12-cleanup.ps1")
    bake = (GUEST / "bake" / "03-crictl.ps1").read_text()
    assert "Get-K4wVerifiedFile -Component 'crictl'" in bake and "$crictl = Join-Path $nodeDir 'crictl.exe'" in bake
    env = render_windows(2, box="windows-2022").env("03-crictl.ps1")
    assert env["K4W_CRICTL_VERSION"] == "1.37.0" and env["K4W_NODE_DIR"] == "C:\\k"
    crictl = PROFILE["components"]["crictl"]
    assert crictl["url"].endswith("/v1.37.0/crictl-v1.37.0-windows-amd64.tar.gz")
    assert crictl["sha256_url"] == crictl["url"] + ".sha256"


@pytest.mark.parametrize("library", [CRI_SANDBOXES, CLUSTER_ROUTE, NODE_LIB], ids=lambda p: p.name)
def test_the_new_libraries_only_define_functions_so_dot_sourcing_them_changes_nothing(library):
    # Exempt from the script header (test_windows_powershell.DOT_SOURCED): their callers' header applies.
    assert _top_level(library.read_bytes()) == []
    assert not re.search(r"^(\$ErrorActionPreference|Set-StrictMode|trap)", library.read_text(), re.M)

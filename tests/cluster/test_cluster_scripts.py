"""The guest scripts and the Vagrantfile, checked by the programs that read them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.cluster.conftest import LINUX_ONLY_VXLAN, render_to
from tests.cluster.pwsh_parse import parse_errors
from tests.helpers import ROOT

POWERSHELL = [
    ROOT / "guest" / "windows" / "node" / "start-node.ps1",
    ROOT / "guest" / "windows" / "cluster" / "cluster-ip.ps1",
    ROOT / "guest" / "windows" / "cluster" / "cluster-join.ps1",
    ROOT / "guest" / "windows" / "cluster" / "cluster-reset.ps1",
]
BASH = sorted((ROOT / "guest" / "ubuntu" / "cluster").glob("cluster-*.sh"))
START_NODE = POWERSHELL[0].read_text()


def need(tool: str, install: str) -> str:
    path = shutil.which(tool)
    if not path:
        pytest.fail(f"{tool} is not installed: {install}")
    return path


@pytest.mark.parametrize("script", POWERSHELL, ids=lambda p: p.name)
def test_powershell_parses_and_has_the_standard_header(script):
    text = script.read_text()
    assert parse_errors(text) == []
    from k4w.validate import powershell_rules as powershell  # the project's extra Windows PowerShell rules

    assert powershell.lint_errors(script) == []
    assert "$ErrorActionPreference = 'Stop'" in text and "Set-StrictMode -Version Latest" in text
    assert re.search(r"^trap \{", text, re.M), "needs a trap printing the error and its position"
    assert "PositionMessage" in text


@pytest.mark.parametrize("script", BASH, ids=lambda p: p.name)
def test_bash_passes_shellcheck_and_has_the_standard_header(script):
    shellcheck = need("shellcheck", "apt-get install -y shellcheck")
    proc = subprocess.run([shellcheck, "-x", "--severity=style", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    text = script.read_text()
    assert "set -euo pipefail" in text and "trap '" in text and " ERR" in text


def test_bash_scripts_exist():
    assert {p.name for p in BASH} == {"cluster-init.sh", "cluster-ip.sh", "cluster-join.sh", "cluster-reset.sh"}


# ------------------------------------------------------------------ start-node.ps1 behaviour

def test_start_node_does_nothing_without_config():
    # The absent-config exit comes before any service, registry or HNS call.
    exit_at = START_NODE.index("has not joined a cluster, nothing to start")
    first_action = min(START_NODE.index(word, START_NODE.index("# ----")) for word in ("Set-ServiceConfig $service", "Start-Service"))
    assert exit_at < first_action
    block = START_NODE[START_NODE.index("if (-not (Test-Path -LiteralPath $ConfigDir))"):exit_at + 80]
    assert "exit 0" in block


def test_start_node_order_is_external_then_docker_kubelet_flanneld_kube_proxy_after_cleanup():
    body = START_NODE[START_NODE.index("# ---------------------------------------------------------------- 2. clean slate"):]
    positions = [body.index(s) for s in ("kube-cleanup.ps1", "{ Initialize-ExternalNetwork }", "Start-Service -Name 'docker'",
                                          "Start-Service -Name 'kubelet'", "Start-Flanneld\n", "Start-Service -Name 'kube-proxy'")]
    assert positions == sorted(positions)
    waits = [body.index(s) for s in ("'docker answers'", "registered\"", "Flannel network", "{ Test-KubeProxyReady }")]
    assert waits == sorted(waits)
    # kube-proxy starts only after the Flannel wait has returned, never inside its retry block.
    flannel_wait = body.index("Wait-Condition \"Flannel network")
    flannel_wait_end = body.index("\n}\n", flannel_wait)  # the -OnPoll block closes at column 0
    assert "kube-proxy" not in body[flannel_wait:flannel_wait_end]
    assert body.index("Start-Service -Name 'kube-proxy'") > flannel_wait_end
    assert "$Services = @('kubelet', 'flanneld', 'kube-proxy')" in START_NODE  # stopped in reverse
    assert "Start-Sleep -Seconds $PollSeconds" in START_NODE and not re.search(r"Start-Sleep -Seconds \d", START_NODE), \
        "only condition polling, no fixed sleeps"


def test_start_order_comment_explains_the_change_from_seed_000():
    comment = START_NODE[START_NODE.index("# ---------------------------------------------------------------- 4. start in order"):
                         START_NODE.index("Start-Service -Name 'docker'")]
    for needed in ("Seed 000", "kube-proxy -> flanneld", "INTERFACE_TO_ADD_SERVICE_IP", "_ep)", "kube-cleanup.ps1", "start.ps1"):
        assert needed in comment, needed


def _function(name: str) -> str:
    start = START_NODE.index(f"function {name} {{")
    return START_NODE[start:START_NODE.index("\n}\n", start)]


def test_kube_proxy_is_ready_only_with_the_dns_service_ip_on_the_flannel_host_endpoint():
    ready = _function("Test-KubeProxyReady")
    assert ready.index("(Get-Service -Name 'kube-proxy').Status -ne 'Running'") < ready.index("$Node.dns_ip")
    assert '$serviceAdapter = "vEthernet ($($Node.network_name)_ep)"' in ready
    assert "$_.InterfaceAlias -eq $serviceAdapter" in ready
    wait = START_NODE[START_NODE.index("Start-Service -Name 'kube-proxy'"):]
    assert "Wait-Condition" in wait and "-Hint" in wait and "kube-proxy.log" in wait
    # Flannel is up only once the adapter kube-proxy needs exists too.
    assert '"vEthernet ($($Node.network_name)_ep)"' in _function("Test-FlannelNetwork")


def test_wait_condition_times_out_with_a_message():
    wait = _function("Wait-Condition")
    assert "$deadline = (Get-Date).AddSeconds($TimeoutSeconds)" in wait
    assert 'throw $message' in wait and 'timed out after $TimeoutSeconds s waiting for $What' in wait


def test_external_network_is_ensured_on_the_node_ip_adapter_and_waited_for():
    init = _function("Initialize-ExternalNetwork")
    # The adapter is looked up only when External does not exist yet.
    lookup = init.index("$adapter = Get-ClusterAdapterName")
    assert init.index("if (-not (Test-HnsNetwork $HnsExternalNetworkName)) {") < lookup
    assert lookup < init.index("Add-HnsExternalNetwork -AdapterName $adapter") < init.index("{ Test-NodeIpOnVSwitch }")
    assert "Get-NetIPAddress -AddressFamily IPv4 -IPAddress $Node.ip" in _function("Get-NodeAddress")
    on_vswitch = _function("Test-NodeIpOnVSwitch")
    assert "'Preferred'" in on_vswitch and "-not (Test-PhysicalAdapter $address.InterfaceIndex)" in on_vswitch
    assert "{ Initialize-ExternalNetwork }" in START_NODE and "if ($Node.backend -eq 'host-gw')" in START_NODE


def test_kube_proxy_firewall_rules_allow_its_program_from_the_pod_and_node_cidrs():
    rule = _function("Set-KubeProxyFirewallRule")
    assert "$remote = @($Node.pod_cidr, $Node.node_cidr)" in rule
    assert "$KubeProxyProgram = Join-Path $K 'kube-proxy.exe'" in START_NODE
    for command in ("New-NetFirewallRule", "Set-NetFirewallRule"):
        call = rule[rule.index(command):rule.index("\n", rule.index("-RemoteAddress", rule.index(command)))]
        for part in ("-Direction Inbound", "-Action Allow", "-Program $KubeProxyProgram", "-Protocol $Protocol",
                     "-RemoteAddress $remote", "-Profile Any", "-Enabled True"):
            assert part in call, (command, part)
    # Changed CIDRs (or program, protocol, profile) are noticed and rewritten; unchanged ones are left alone.
    assert rule.index("$same = $currentRemote -eq $wantedRemote") < rule.index("if (-not $same) {") < rule.index("Set-NetFirewallRule")
    assert "foreach ($protocol in 'TCP', 'UDP') { Set-KubeProxyFirewallRule $protocol }" in START_NODE
    # The firewall stays on: nothing here turns a profile off.
    assert "Set-NetFirewallProfile" not in START_NODE and "-Enabled False" not in START_NODE


@pytest.mark.parametrize("address, canonical", [
    ("10.244.0.0/16", "10.244.0.0/16"),
    ("10.244.0.0/255.255.0.0", "10.244.0.0/16"),
    ("192.168.250.0/255.255.255.0", "192.168.250.0/24"),
    ("10.96.0.10", "10.96.0.10/32"),
])
def test_firewall_addresses_are_compared_in_one_form(address, canonical):
    """Windows reports 10.244.0.0/16 back as 10.244.0.0/255.255.0.0; the rule is rewritten only when
    the CIDRs really changed. Mirrors ConvertTo-CanonicalCidr step by step (no PowerShell here)."""
    body = _function("ConvertTo-CanonicalCidr")
    assert "$Address.Split('/', 2)" in body and "if ($null -eq $suffix) { return \"$ip/32\" }" in body
    assert "if ($suffix -match '^\\d+$') { return \"$ip/$suffix\" }" in body
    assert "([Convert]::ToString($byte, 2) -replace '0', '').Length" in body
    ip, _, suffix = address.partition("/")
    if not suffix:
        result = f"{ip}/32"
    elif suffix.isdigit():
        result = f"{ip}/{suffix}"
    else:
        result = f"{ip}/{sum(bin(int(b)).count('1') for b in suffix.split('.'))}"
    assert result == canonical


def test_every_node_json_field_start_node_reads_is_rendered(default_render):
    _, out = default_render
    node = json.loads((out / "nodes" / "worker-win" / "node.json").read_text())
    used = set(re.findall(r"\$Node\.([a-z_]+)", START_NODE))
    assert {"ip", "network_name", "backend", "pod_cidr", "node_cidr", "dns_ip"} <= used
    assert used <= set(node), f"start-node.ps1 reads {sorted(used - set(node))} that node.json lacks"


def test_node_json_agrees_with_the_rest_of_the_node_config(default_render):
    cluster, out = default_render
    net = cluster.network
    node_dir = out / "nodes" / "worker-win"
    node = json.loads((node_dir / "node.json").read_text())
    assert (node["pod_cidr"], node["node_cidr"], node["dns_ip"], node["backend"]) == (net.pod_cidr, net.node_cidr, net.dns_ip, net.backend)
    # start-node.ps1 looks for the DNS IP on the adapter kube-proxy is told to use ...
    env = dict(line.split("=", 1) for line in (node_dir / "kube-proxy.env").read_text().splitlines() if "=" in line)
    assert env["INTERFACE_TO_ADD_SERVICE_IP"] == f"vEthernet ({node['network_name']}_ep)"
    # ... and expects userspace kube-proxy exactly when the backend is host-gw.
    args = (node_dir / "kube-proxy.args").read_text().split()
    assert ("--proxy-mode=userspace" in args) == (node["backend"] == "host-gw")
    assert f"--cluster-dns={node['dns_ip']}" in (node_dir / "kubelet.args").read_text().split()


def _route_error_pattern() -> str:
    return re.search(r"\$FlannelRouteErrorPattern = '([^']+)'", START_NODE).group(1)


@pytest.mark.parametrize("line, retried", [
    ("E0712 10:01:02.123 route_windows.go:63] Failed to add route: New-NetRoute : Element not found. (Windows System Error 1168)", True),
    ("error adding route via New-NetRoute: 1168", True),
    ("E0712 subnet.go:210] failed to acquire lease: node \"worker-win\" pod cidr not assigned", False),
    ("New-NetRoute : The object already exists (Windows System Error 5010)", False),
    ("I0712 flanneld started; 1168 leases renewed", False),
])
def test_flanneld_is_restarted_only_for_the_new_netroute_1168_error(line, retried):
    # .NET and Python regexes agree on this pattern's syntax (alternation, .*, literals).
    assert bool(re.search(_route_error_pattern(), line)) is retried


def test_flanneld_restart_happens_once_and_only_behind_the_1168_match():
    body = START_NODE[START_NODE.index("$script:FlannelRetried = $false"):]
    guard = body.index("Select-String -Pattern $FlannelRouteErrorPattern")
    restart = body.index("Stop-NodeService 'flanneld'")
    assert guard < body.index("if ($script:FlannelRetried)") < body.index("throw 'flanneld failed again") < restart
    assert START_NODE.count("Stop-NodeService 'flanneld'") == 1 and START_NODE.count("Restart-Service") == 0


def test_start_node_sets_nssm_parameters_only_when_they_differ():
    assert "if ((Get-NssmParameter $Service 'AppParameters') -ne $wantedParameters)" in START_NODE
    assert "-Type ExpandString" in START_NODE and "-Type MultiString" in START_NODE


# ------------------------------------------------------------------ Vagrantfile

def test_vagrantfile_is_valid_ruby():
    ruby = need("ruby", "apt-get install -y ruby")
    proc = subprocess.run([ruby, "-c", str(ROOT / "vagrant" / "Vagrantfile")], capture_output=True, text=True)
    assert proc.returncode == 0 and "Syntax OK" in proc.stdout, proc.stderr


def test_vagrant_validate_accepts_a_linux_only_cluster(tmp_path):
    vagrant = need("vagrant", "apt-get install -y vagrant")
    out = tmp_path / "build"
    render_to(out, LINUX_ONLY_VXLAN)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "K4W_CLUSTER_JSON": str(out / "vagrant" / "cluster.json"),
           "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"), "VAGRANT_CHECKPOINT_DISABLE": "1"}
    # --ignore-provider: the hyperv provider refuses Linux hosts and libvirt needs a running libvirtd;
    # the core config (boxes, networks, triggers, synced folders) is still validated.
    proc = subprocess.run([vagrant, "validate", "--ignore-provider"], cwd=ROOT / "vagrant", env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Vagrantfile validated successfully." in proc.stdout, proc.stdout + proc.stderr


def test_vagrantfile_reads_every_cluster_json_field_it_needs(default_render):
    _, out = default_render
    data = json.loads((out / "vagrant" / "cluster.json").read_text())
    text = (ROOT / "vagrant" / "Vagrantfile").read_text()
    for key in ("management_switch", "cluster_switch", "cluster"):
        assert (f'CLUSTER.fetch("{key}")' in text or f"CLUSTER.fetch('{key}')" in text) and key in data
    for key in ("name", "vmname", "box", "box_catalogue", "os", "cpus", "memory"):
        assert f'm.fetch("{key}")' in text or f"m.fetch('{key}')" in text
        assert key in data["machines"][0]
    assert "h.linked_clone = true" in text and "MacAddressSpoofing" in text and 'communicator = "winrm"' in text


def test_vagrant_trigger_powershell_parses_and_is_idempotent(tmp_path, default_render):
    ruby = need("ruby", "apt-get install -y ruby")
    _, out = default_render
    probe = tmp_path / "probe.rb"
    # Load the real Vagrantfile with Vagrant.configure stubbed, then print the trigger script for
    # a switch name that needs escaping.
    probe.write_text(
        "module Vagrant; def self.configure(*); end; end\n"
        f"load {json.dumps(str(ROOT / 'vagrant' / 'Vagrantfile'))}\n"
        "print attach_cluster_nic_script(\"k4w-worker-win\", \"it's $(x)\", true)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "K4W_CLUSTER_JSON": str(out / "vagrant" / "cluster.json")}
    proc = subprocess.run([ruby, str(probe)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert parse_errors(script) == []
    assert "-SwitchName 'it''s $(x)'" in script
    # attach only when absent, spoofing set only when different
    assert script.index("if ($null -eq $nic)") < script.index("Add-VMNetworkAdapter")
    assert "if ($nic.MacAddressSpoofing -ne $spoofing)" in script and "$spoofing = 'On'" in script

"""The cluster-stage guest scripts (guest/<os>/cluster/, guest/windows/node/start-node.ps1),
checked by the programs that read them and against what they must do."""

from __future__ import annotations

import getpass
import json
import re
import subprocess

import pytest
import yaml

from k4w.validate import powershell_rules as powershell
from tests.helpers import ROOT, system_tool

POWERSHELL = [
    ROOT / "guest" / "windows" / "node" / "start-node.ps1",
    ROOT / "guest" / "windows" / "cluster" / "cluster-ip.ps1",
    ROOT / "guest" / "windows" / "cluster" / "cluster-join.ps1",
    ROOT / "guest" / "windows" / "cluster" / "cluster-reset.ps1",
]
BASH = sorted((ROOT / "guest" / "ubuntu" / "cluster").glob("cluster-*.sh"))
LIB = ROOT / "guest" / "ubuntu" / "lib.sh"
START_NODE = POWERSHELL[0].read_text()
# The functions start-node.ps1 shares with the containerd recipe's (node-lib.ps1, dot-sourced from beside it).
NODE_LIB = (ROOT / "guest" / "windows" / "node" / "node-lib.ps1").read_text()


@pytest.mark.parametrize("script", POWERSHELL, ids=lambda p: p.name)
def test_powershell_parses_and_has_the_standard_header(script):
    text = script.read_text()
    assert powershell.parse_errors(script) == []
    assert powershell.lint_errors(script) == []
    assert "$ErrorActionPreference = 'Stop'" in text and "Set-StrictMode -Version Latest" in text
    assert re.search(r"^trap \{", text, re.M), "needs a trap printing the error and its position"
    assert "PositionMessage" in text


@pytest.mark.parametrize("script", BASH, ids=lambda p: p.name)
def test_bash_passes_shellcheck_and_has_the_standard_header(script):
    shellcheck = system_tool("shellcheck")
    proc = subprocess.run([shellcheck, "-x", "--severity=style", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    text = script.read_text()
    assert "set -euo pipefail" in text and "trap '" in text and " ERR" in text


def test_bash_scripts_exist():
    assert {p.name for p in BASH} == {"cluster-init.sh", "cluster-ip.sh", "cluster-join.sh", "cluster-proxy.sh", "cluster-reset.sh"}


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
    assert "Start-Sleep -Seconds $PollSeconds" in NODE_LIB and not re.search(r"Start-Sleep -Seconds \d", START_NODE + NODE_LIB), \
        "only condition polling, no fixed sleeps"


def test_start_order_comment_explains_the_change_from_the_2018_order():
    comment = START_NODE[START_NODE.index("# ---------------------------------------------------------------- 4. start in order"):
                         START_NODE.index("Start-Service -Name 'docker'")]
    for needed in ("2018", "kube-proxy -> flanneld", "KUBE_NETWORK", "exits when that network does not exist", "kube-cleanup.ps1", "start.ps1"):
        assert needed in comment, needed


def _function(name: str) -> str:
    text = START_NODE if f"function {name} {{" in START_NODE else NODE_LIB
    start = text.index(f"function {name} {{")
    return text[start:text.index("\n}\n", start)]


def test_kube_proxy_is_ready_only_with_an_hns_load_balancer_for_the_dns_service_ip():
    ready = _function("Test-KubeProxyReady")
    assert ready.index("(Get-Service -Name 'kube-proxy').Status -ne 'Running'") < ready.index("$Node.dns_ip")
    # Kernelspace kube-proxy programs ClusterIPs as HNS ELB policies; their VIPs hold the service IP.
    assert "Invoke-Hns GET '/policylists'" in ready and "@(Get-Field $policy 'VIPs') -contains $Node.dns_ip" in ready
    wait = START_NODE[START_NODE.index("Start-Service -Name 'kube-proxy'"):]
    assert "Wait-Condition" in wait and "-Hint" in wait and "kube-proxy.log" in wait
    assert '"vEthernet ($($Node.network_name)_ep)"' in _function("Test-FlannelNetwork")


def test_flanneld_gets_its_net_conf_where_v0_11_reads_it():
    # flanneld v0.11.0 has no --net-config-path; it reads /etc/kube-flannel/net-conf.json
    # (subnet/kube/kube.go at d3eea7f5), i.e. this path on the system drive.
    assert "$FlannelNetConf = 'C:\\etc\\kube-flannel\\net-conf.json'" in START_NODE
    assert "Copy-IfChanged (Join-Path $ConfigDir 'net-conf.json') $FlannelNetConf" in START_NODE
    configure_only = START_NODE.index("if ($ConfigureOnly)")
    assert START_NODE.index("Copy-IfChanged (Join-Path $ConfigDir 'net-conf.json')") < configure_only


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


def test_the_kubelet_port_is_narrowed_to_the_node_cidr_at_every_start():
    rule = _function("Set-FirewallRuleRemote")
    assert "Get-NetFirewallRule -Name $Name" in rule and "throw" in rule  # the box must have created it
    assert rule.index("if ($current -ne $wanted) {") < rule.index("Set-NetFirewallRule -Name $Name -RemoteAddress $Remote")
    assert "$KubeletFirewallRule = 'k4w-kubelet'" in START_NODE
    assert "Set-FirewallRuleRemote -Name $KubeletFirewallRule -Remote @($Node.node_cidr)" in START_NODE
    firewall = (ROOT / "guest" / "windows" / "bake" / "09-firewall.ps1").read_text()
    assert "Name = 'k4w-kubelet'; Protocol = 'TCP'; Port = '10250'" in firewall
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
    assert {"ip", "network_name", "backend", "node_cidr", "dns_ip"} <= used
    assert used <= set(node), f"start-node.ps1 reads {sorted(used - set(node))} that node.json lacks"


def test_node_json_agrees_with_the_rest_of_the_node_config(default_render):
    cluster, out = default_render
    net = cluster.network
    node_dir = out / "nodes" / "worker-win"
    node = json.loads((node_dir / "node.json").read_text())
    assert (node["pod_cidr"], node["node_cidr"], node["dns_ip"], node["backend"]) == (net.pod_cidr, net.node_cidr, net.dns_ip, net.backend)
    # kube-proxy programs the HNS network Flannel creates, the one start-node.ps1 waits for.
    env = dict(line.split("=", 1) for line in (node_dir / "kube-proxy.env").read_text().splitlines() if "=" in line)
    assert env == {"KUBE_NETWORK": node["network_name"]}
    args = (node_dir / "kube-proxy.args").read_text().split()
    assert "--proxy-mode=kernelspace" in args and not any(a.startswith("--proxy-mode=userspace") for a in args)
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


# ------------------------------------------------------------------ cluster-ip.sh in a K4W_ROOT sandbox
#
# Stand-ins for ip, netplan, ifup and ifdown: each logs its arguments; the cluster address "appears"
# once the backend applied it (netplan apply / ifup) or ip addr replace set it.
FAKE_IP = r"""#!/bin/bash
echo "ip $*" >> "$K4W_ROOT/calls"
case "$*" in
  "-4 route show default") echo "default via 10.0.0.1 dev eth0 proto dhcp" ;;
  "-4 -o addr show"*) [ -f "$K4W_ROOT/applied" ] && echo "3: eth1    inet $(cat "$K4W_ROOT/applied") scope global eth1" ;;
  "addr replace "*) echo "$3" > "$K4W_ROOT/applied" ;;
esac
exit 0
"""
FAKE_APPLY = r"""#!/bin/bash
echo "$(basename "$0") $*" >> "$K4W_ROOT/calls"
echo "$K4W_NODE_IP/$K4W_PREFIX_LENGTH" > "$K4W_ROOT/applied"
"""


CLUSTER_MAC = "02:4b:34:57:00:11"
NICS = {"lo": "00:00:00:00:00:00", "eth0": "00:15:5d:01:02:03", "eth1": CLUSTER_MAC.upper()}


def _cluster_ip_sandbox(tmp_path, backend: str, nics: dict[str, str] = NICS, mac: str = CLUSTER_MAC):
    """nics: {name: MAC} in sysfs, each a device except lo, plus a bridge that copied eth1's MAC."""
    root = tmp_path / "root"
    for nic, address in {**nics, "cni0": CLUSTER_MAC}.items():
        (root / "sys" / "class" / "net" / nic).mkdir(parents=True)
        (root / "sys" / "class" / "net" / nic / "address").write_text(address + "\n")
        if nic not in ("lo", "cni0"):
            (root / "sys" / "class" / "net" / nic / "device").mkdir()
    if backend == "netplan":
        (root / "etc" / "netplan").mkdir(parents=True)
        (root / "etc" / "netplan" / "50-cloud-init.yaml").write_text("network: {version: 2, ethernets: {eth0: {dhcp4: true}}}\n")
    else:
        (root / "etc" / "network" / "interfaces.d").mkdir(parents=True)
        (root / "etc" / "network" / "interfaces").write_text("source /etc/network/interfaces.d/*\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ip", FAKE_IP), ("netplan", FAKE_APPLY), ("ifup", FAKE_APPLY), ("ifdown", "#!/bin/bash\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    def run():
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "K4W_ROOT": str(root), "K4W_NODE_IP": "192.168.251.11",
               "K4W_PREFIX_LENGTH": "24", "K4W_TIMEOUT_SECONDS": "5", "K4W_CLUSTER_MAC": mac,
               "K4W_SERVICE_CIDR": "10.96.0.0/12"}
        return subprocess.run(["bash", str(ROOT / "guest" / "ubuntu" / "cluster" / "cluster-ip.sh")], env=env,
                              capture_output=True, text=True, timeout=60)

    return root, run


def test_cluster_ip_on_a_netplan_guest_writes_a_private_netplan_file_for_the_second_nic_and_applies_it_once(tmp_path):
    root, run = _cluster_ip_sandbox(tmp_path, "netplan")
    first = run()
    assert first.returncode == 0, first.stderr
    config = root / "etc" / "netplan" / "60-k4w-cluster.yaml"
    assert yaml.safe_load(config.read_text()) == {"network": {"version": 2, "ethernets": {
        "k4w-cluster": {"match": {"macaddress": CLUSTER_MAC}, "dhcp4": False, "dhcp6": False,
                        "addresses": ["192.168.251.11/24"], "routes": [{"to": "10.96.0.0/12", "scope": "link"}]}}}}
    assert config.stat().st_mode & 0o777 == 0o600
    assert "192.168.251.11/24 is up on eth1" in first.stdout
    assert (root / "calls").read_text().count("netplan apply") == 1
    assert not (root / "etc" / "network").exists()  # no ifupdown file on a netplan guest
    # Again (every cluster-up): the file is unchanged, so nothing is applied.
    second = run()
    assert second.returncode == 0 and "wrote" not in second.stdout
    assert (root / "calls").read_text().count("netplan apply") == 1


@pytest.mark.parametrize("backend", ["netplan", "ifupdown"])
def test_cluster_ip_finds_the_cluster_nic_by_its_mac_whatever_its_name_or_order(tmp_path, backend):
    """The kernel named the cluster NIC eth0 and the management NIC eth2 (probe order is not stable),
    and eth1 is a third NIC without the default route: only the MAC tells which one is the cluster's."""
    nics = {"lo": "00:00:00:00:00:00", "eth0": CLUSTER_MAC, "eth1": "00:15:5d:aa:bb:cc", "eth2": "00:15:5d:01:02:03"}
    root, run = _cluster_ip_sandbox(tmp_path, backend, nics)
    result = run()
    assert result.returncode == 0, result.stderr
    assert "192.168.251.11/24 is up on eth0" in result.stdout
    if backend == "ifupdown":
        assert "iface eth0 inet static" in (root / "etc" / "network" / "interfaces.d" / "k4w-cluster.cfg").read_text()


def test_cluster_ip_waits_for_a_cluster_nic_the_host_has_just_hot_added(tmp_path):
    """The NIC appears in sysfs only after the script started; `sleep` stands in for the time it takes."""
    nics = {"lo": "00:00:00:00:00:00", "eth0": "00:15:5d:01:02:03"}
    root, run = _cluster_ip_sandbox(tmp_path, "netplan", nics)
    eth1 = root / "sys" / "class" / "net" / "eth1"
    (tmp_path / "bin" / "sleep").write_text(
        f'#!/bin/bash\necho "sleep $*" >> "$K4W_ROOT/calls"\nmkdir -p "{eth1}/device"\necho "{CLUSTER_MAC}" > "{eth1}/address"\n')
    (tmp_path / "bin" / "sleep").chmod(0o755)
    result = run()
    assert result.returncode == 0, result.stderr
    assert "192.168.251.11/24 is up on eth1" in result.stdout and "sleep 1" in (root / "calls").read_text()


@pytest.mark.parametrize("backend", ["netplan", "ifupdown"])
def test_cluster_ip_routes_the_service_range_through_the_cluster_nic_on_every_run(tmp_path, backend):
    """The fourth libvirt run: its management network had no gateway, so no route covered 10.96.0.1 and
    flanneld's first API call failed with "network is unreachable". Every run (re)installs the route, as
    it re-applies the address."""
    root, run = _cluster_ip_sandbox(tmp_path, backend)
    for _ in range(2):
        result = run()
        assert result.returncode == 0, result.stderr
        assert "with the Service range 10.96.0.0/12 routed through it" in result.stdout
    assert (root / "calls").read_text().count("ip route replace 10.96.0.0/12 dev eth1 scope link") == 2


def test_cluster_ip_refuses_to_run_without_the_service_range(tmp_path):
    root, _ = _cluster_ip_sandbox(tmp_path, "netplan")
    result = subprocess.run(["bash", str(ROOT / "guest" / "ubuntu" / "cluster" / "cluster-ip.sh")],
                            env={"PATH": "/usr/bin:/bin", "K4W_NODE_IP": "192.168.251.11", "K4W_PREFIX_LENGTH": "24",
                                 "K4W_CLUSTER_MAC": CLUSTER_MAC, "K4W_ROOT": str(root)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "K4W_SERVICE_CIDR (network.service_cidr" in result.stderr
    assert not (root / "etc" / "netplan" / "60-k4w-cluster.yaml").exists()


def test_cluster_ip_fails_naming_the_mac_when_no_nic_has_it(tmp_path):
    root, run = _cluster_ip_sandbox(tmp_path, "netplan", mac="02:00:00:00:00:99")
    result = run()
    assert result.returncode == 1
    assert "no network interface has the cluster NIC's MAC 02:00:00:00:00:99" in result.stderr
    assert "host/cluster-nic.ps1" in result.stderr and not (root / "etc" / "netplan" / "60-k4w-cluster.yaml").exists()


def test_cluster_ip_without_netplan_keeps_ifupdown(tmp_path):
    root, run = _cluster_ip_sandbox(tmp_path, "ifupdown")
    result = run()
    assert result.returncode == 0, result.stderr
    text = (root / "etc" / "network" / "interfaces.d" / "k4w-cluster.cfg").read_text()
    assert "iface eth1 inet static" in text and "netmask 255.255.255.0" in text
    assert "up ip route replace 10.96.0.0/12 dev eth1 scope link" in text
    assert "ifup eth1" in (root / "calls").read_text() and "netplan" not in (root / "calls").read_text()
    # Again: an unchanged file is neither rewritten nor taken down and up.
    second = run()
    assert second.returncode == 0 and "wrote" not in second.stdout
    assert (root / "calls").read_text().count("ifup eth1") == 1


# ------------------------------------------------------------------ cluster-init.sh in a K4W_ROOT sandbox
#
# Stand-ins: kubeadm logs its arguments (init writes admin.conf, as its kubeconfig phase does, and
# the ConfigMaps unless told to fail before them); kubectl answers /healthz when api-up exists and
# the two ConfigMaps when configmaps exists.
FAKE_KUBEADM = r"""#!/bin/bash
echo "kubeadm $*" >> "$K4W_ROOT/calls"
case "$1" in
  init) mkdir -p "$K4W_ROOT/etc/kubernetes/manifests"; echo admin > "$K4W_ROOT/etc/kubernetes/admin.conf"
        touch "$K4W_ROOT/etc/kubernetes/manifests/kube-apiserver.yaml" "$K4W_ROOT/api-up"
        [ -f "$K4W_ROOT/fail-init" ] && exit 1
        touch "$K4W_ROOT/configmaps" ;;
  reset) rm -rf "$K4W_ROOT/etc/kubernetes" "$K4W_ROOT/api-up" "$K4W_ROOT/configmaps" ;;
esac
"""
FAKE_KUBECTL = r"""#!/bin/bash
echo "kubectl $*" >> "$K4W_ROOT/calls"
case "$*" in
  *--raw=/healthz*) [ -f "$K4W_ROOT/api-up" ] ;;
  *"get configmap"*) [ -f "$K4W_ROOT/configmaps" ] ;;
  *) exit 2 ;;
esac
"""


def _cluster_init_sandbox(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("kubeadm", FAKE_KUBEADM), ("kubectl", FAKE_KUBECTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    def run():
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "K4W_ROOT": str(root), "K4W_KUBEADM_CONFIG": "/tmp/k4w/kubeadm-config.yaml",
               "K4W_LIB": str(LIB),
               "K4W_KUBECONFIG_USER": getpass.getuser(), "K4W_API_TIMEOUT_SECONDS": "0"}
        result = subprocess.run(["bash", str(ROOT / "guest" / "ubuntu" / "cluster" / "cluster-init.sh")], env=env,
                                capture_output=True, text=True, timeout=60)
        calls = (root / "calls").read_text().splitlines() if (root / "calls").exists() else []
        (root / "calls").unlink(missing_ok=True)
        return result, [c for c in calls if c.startswith("kubeadm")]

    return root, run


def test_cluster_init_inits_once_and_then_only_installs_the_kubeconfig(tmp_path):
    root, run = _cluster_init_sandbox(tmp_path)
    first, kubeadm = run()
    assert first.returncode == 0, first.stderr
    assert kubeadm == ["kubeadm init --config /tmp/k4w/kubeadm-config.yaml"]
    assert (root / "home" / getpass.getuser() / ".kube" / "config").read_text() == "admin\n"
    second, kubeadm = run()
    assert second.returncode == 0 and kubeadm == [] and "the master is initialised" in second.stdout


def test_an_init_that_failed_after_writing_admin_conf_is_reset_and_run_again(tmp_path):
    root, run = _cluster_init_sandbox(tmp_path)
    (root / "fail-init").touch()
    failed, _ = run()
    assert failed.returncode != 0 and (root / "etc" / "kubernetes" / "admin.conf").is_file()
    (root / "fail-init").unlink()
    again, kubeadm = run()
    assert again.returncode == 0, again.stderr
    assert kubeadm == ["kubeadm reset --force", "kubeadm init --config /tmp/k4w/kubeadm-config.yaml"]
    assert "did not finish" in again.stdout


def test_a_master_whose_api_does_not_answer_is_not_reset_but_named(tmp_path):
    root, run = _cluster_init_sandbox(tmp_path)
    run()
    (root / "api-up").unlink()
    result, kubeadm = run()
    assert result.returncode == 1 and kubeadm == []
    assert "the API server did not answer within 0s" in result.stderr and "invoke cluster-reset" in result.stderr


# ------------------------------------------------------------------ the kubelet's kernel tunables on every node
# What setupKernelTunables requires of a kubelet with protectKernelDefaults (k8s.io/kubernetes@v1.37.2
# pkg/kubelet/cm/container_manager_linux.go; values: k8s.io/component-helpers@v0.37.2 node/util/sysctl/sysctl.go).
KUBELET_KERNEL_DEFAULTS = {"vm.overcommit_memory": "1", "vm.panic_on_oom": "0", "kernel.panic": "10",
                           "kernel.panic_on_oops": "1", "kernel.keys.root_maxkeys": "1000000",
                           "kernel.keys.root_maxbytes": "25000000"}
SYSCTL_FILE = ("etc", "sysctl.d", "90-k4w-kubernetes.conf")
# What starts or restarts a kubelet: kubeadm init/join start it; systemctl (re)start does.
KUBELET_START = re.compile(r"\bkubeadm\s+(init|join)\b|\bsystemctl\s+(re)?start\s+(--\S+\s+)*kubelet\b|"
                           r"\bsystemctl\s+enable\s+--now\s+kubelet\b|\bk4w_systemctl\s+(re)?start\s+kubelet\b")


def _code_lines(path):
    return [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if not line.lstrip().startswith("#")]


def sysctls_written(root):
    path = root.joinpath(*SYSCTL_FILE)
    return dict(line.split(" = ") for line in path.read_text().splitlines() if " = " in line) if path.is_file() else {}


def test_every_guest_script_that_starts_a_kubelet_ensures_the_kernel_tunables_first():
    """A box baked before a tunable was added (bake step 02) lacks it; cluster-reset keeps the VM, and
    a containerd-era kubelet (protectKernelDefaults: true) exits on the kernel's default after every
    reboot. So every script that (re)starts a kubelet calls lib.sh's k4w_kernel_tunables at its top
    level before the first such line, or is a bake step that runs after 02-kernel.sh, which calls it."""
    bake = ROOT / "guest" / "ubuntu" / "bake"
    kernel_step = [line for _, line in _code_lines(bake / "02-kernel.sh")]
    assert "k4w_kernel_tunables" in kernel_step
    starters, problems = [], []
    for script in sorted((ROOT / "guest" / "ubuntu").rglob("*.sh")):
        if script == LIB:
            continue
        lines = _code_lines(script)
        # Text in quotes is a message, not a command.
        starts = [n for n, line in lines if KUBELET_START.search(re.sub(r'"[^"]*"|\'[^\']*\'', '""', line))]
        if not starts:
            continue
        starters.append(script.relative_to(ROOT).as_posix())
        if script.parent == bake and script.name > "02-kernel.sh":
            continue   # Packer runs the bake steps in their order (k4w.derive.step_env)
        calls = [n for n, line in lines if line.strip() == "k4w_kernel_tunables" and not line[0].isspace()]
        if not calls or calls[0] > starts[0]:
            problems.append(f"{script.name}:{starts[0]} starts a kubelet without k4w_kernel_tunables at its top level before it")
    # The scan sees what it must: the two cluster scripts that start a kubelet, and the bake steps that restart one.
    assert {"guest/ubuntu/cluster/cluster-init.sh", "guest/ubuntu/cluster/cluster-join.sh"} <= set(starters)
    assert problems == []


def test_cluster_init_restores_the_kernel_tunables_of_a_box_baked_without_them(tmp_path):
    root, run = _cluster_init_sandbox(tmp_path)
    first, _ = run()
    assert first.returncode == 0, first.stderr
    assert {key: sysctls_written(root).get(key) for key in KUBELET_KERNEL_DEFAULTS} == KUBELET_KERNEL_DEFAULTS
    root.joinpath(*SYSCTL_FILE).unlink()   # an older box: initialised, but without the file
    again, kubeadm = run()
    assert again.returncode == 0 and kubeadm == [] and "the master is initialised" in again.stdout
    assert {key: sysctls_written(root).get(key) for key in KUBELET_KERNEL_DEFAULTS} == KUBELET_KERNEL_DEFAULTS

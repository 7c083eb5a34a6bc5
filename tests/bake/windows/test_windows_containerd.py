"""The containerd-era node recipe, checked statically (no PowerShell here): the containerd config
03-containerd.ps1 writes, held against containerd's own document at the pinned tag; the order and
readiness conditions of its start-node.ps1 (containerd and the kubelet only) and of the HostProcess
DaemonSets' start scripts (flanneld, kube-proxy); the kubelet launcher."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from k4w.model import config, profiles
from k4w.derive import step_env as derive_steps
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.derive.cluster import Cluster
from k4w.validate import powershell_rules

GUEST = ROOT / "guest" / "windows"
PROFILE = yaml.safe_load((ROOT / "boxes" / "windows-2022.yml").read_text())
FACTS = yaml.safe_load((ROOT / "k4w" / "validate" / "facts" / f"containerd-{PROFILE['components']['containerd']['version']}-config.yml").read_text())
CONTAINERD = (GUEST / "bake" / "03-containerd.ps1").read_text()
STEP_ENV = derive_steps.step_env(profiles.load("windows-2022"), Cluster.resolve(config.load(ROOT / "cluster.yml"))).env
START_NODE = (GUEST / "node-containerd" / "start-node.ps1").read_text()
HOSTPROCESS = GUEST / "hostprocess"
START_FLANNELD = (HOSTPROCESS / "start-flanneld.ps1").read_text()
START_KUBE_PROXY = (HOSTPROCESS / "start-kube-proxy.ps1").read_text()
RECIPE = (sorted((GUEST / "node-containerd").glob("*.ps1")) + [GUEST / "cluster" / "cluster-join-containerd.ps1"]
          + [p for p in sorted(HOSTPROCESS.glob("*.ps1")) if p.name != "hostprocess-lib.ps1"])


def rendered_config() -> str:
    """The config.toml 03-containerd.ps1 writes for this profile: its here-string template with
    PowerShell's -f placeholders filled in from the profile, as the script does from K4W_*."""
    template = re.search(r"\$configTemplate = @'\n(.*?)\n'@", CONTAINERD, re.S).group(1)
    assert ("$configTemplate -f $pauseImage, $cniBinDir, $cniConfDir, $script:K4wContainerdDropIns, "
            "$script:K4wRegistryHostsDir, $configVersion)") in CONTAINERD
    assert "$configVersion = Get-K4wEnv -Name 'K4W_CONTAINERD_CONFIG_VERSION'" in CONTAINERD
    runtime = PROFILE["runtime"]
    # {3}, {4}: common.ps1's containerd drop-in and registry hosts folders under %ProgramFiles%;
    # {5}: the step variable, as the box's rendered Packer template gives it.
    return template.format(PROFILE["kubernetes"]["pause_image"], runtime["cni_bin_dir"], runtime["cni_conf_dir"],
                           r"C:\Program Files\containerd\conf.d", r"C:\Program Files\containerd\certs.d",
                           STEP_ENV["K4W_CONTAINERD_CONFIG_VERSION"])


def tables(node: dict, path: str = "") -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            name = f"{path}.{key}" if path else key
            if "." in key:
                name = f"{path}.'{key}'" if path else f"'{key}'"
            found.update(tables(value, name))
        else:
            found.setdefault(path, set()).add(key)
    return found


def test_the_config_is_containerds_own_version_4_with_the_pause_image_pinned_and_the_cni_folders_set():
    config = tomllib.loads(rendered_config())
    # containerd 2.3.7's ConfigVersion: an older version is migrated, with a warning, at every start.
    assert config["version"] == FACTS["config_version"] == 4
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == PROFILE["kubernetes"]["pause_image"]
    cni = config["plugins"]["io.containerd.cri.v1.runtime"]["cni"]
    assert cni == {"bin_dirs": [PROFILE["runtime"]["cni_bin_dir"]], "conf_dir": PROFILE["runtime"]["cni_conf_dir"], "max_conf_num": 1}


def test_every_table_and_key_is_one_containerd_documents_at_the_pinned_tag():
    found = tables(tomllib.loads(rendered_config()))
    assert found.pop("") <= set(FACTS["top_level"])
    for table, keys in found.items():
        assert table in FACTS["tables"], f"[{table}] is not a table of containerd's config (facts at {FACTS['source']['commit']})"
        assert keys <= set(FACTS["tables"][table]), f"[{table}] {sorted(keys - set(FACTS['tables'][table]))}"
        assert not keys & set(FACTS["deprecated"].get(table, [])), f"[{table}] uses a deprecated key"


def test_the_checker_catches_a_key_containerd_lacks():
    bad = tables(tomllib.loads(rendered_config().replace("conf_dir =", "conf_directory =")))
    table = "plugins.'io.containerd.cri.v1.runtime'.cni"
    assert not bad[table] <= set(FACTS["tables"][table])


def test_containerd_is_a_service_that_answers_before_the_step_ends():
    assert "@('--register-service', '--log-file', (Join-Path $logDir 'containerd.log'))" in CONTAINERD and "Set-Service -Name 'containerd' -StartupType Automatic" in CONTAINERD
    # Its proxy goes on the service key only once the service exists.
    assert CONTAINERD.index("'--register-service'") < CONTAINERD.index("Set-K4wServiceProxy -Service 'containerd'")
    assert re.search(r"Wait-K4wCondition -Description \"containerd answering on \$endpoint\"", CONTAINERD)
    assert "Get-K4wVerifiedFile -Component 'containerd'" in CONTAINERD


def _body() -> str:
    return START_NODE[START_NODE.index("# ---------------------------------------------------------------- 2. clean slate"):]


def test_start_node_cleans_up_then_starts_containerd_and_the_kubelet_each_after_a_real_wait():
    body = _body()
    # containerd first: kube-cleanup.ps1 removes its pod sandboxes through the CRI (-CriEndpoint).
    order = [body.index(s) for s in ("Start-Service -Name $Node.runtime_service", "& (Join-Path $K 'kube-cleanup.ps1')", "Start-Service -Name 'kubelet'")]
    assert order == sorted(order)
    waits = [body.index(s) for s in ("answers on", "& (Join-Path $K 'kube-cleanup.ps1')", "registered\"")]
    assert waits == sorted(waits)
    assert "foreach ($network in $Node.network_name, $StaleNatNetwork)" in body and "$StaleNatNetwork = 'nat'" in START_NODE
    # The polling is node-lib.ps1's Wait-Condition, which start-node.ps1 dot-sources.
    node_lib = (GUEST / "node" / "node-lib.ps1").read_text()
    assert ". (Join-Path $PSScriptRoot 'node-lib.ps1')" in START_NODE and "$PollSeconds = 2" in START_NODE
    assert "Start-Sleep -Seconds $PollSeconds" in node_lib and not re.search(r"Start-Sleep -Seconds \d", START_NODE + node_lib)
    # flanneld and kube-proxy are the HostProcess DaemonSets' pods, never services started here.
    assert not re.search(r"Start-Service -Name '(flanneld|kube-proxy)'", START_NODE)


def test_the_daemonset_scripts_wait_on_conditions_not_fixed_sleeps():
    lib = (HOSTPROCESS / "hostprocess-lib.ps1").read_text()
    assert "Start-Sleep -Seconds $K4wPollSeconds" in lib
    for text in (lib, START_FLANNELD, START_KUBE_PROXY, (HOSTPROCESS / "ready-flanneld.ps1").read_text()):
        assert not re.search(r"Start-Sleep -Seconds \d", text)
    # kube-proxy runs only once Flannel's network exists, and in the foreground (the pod lives as long as it).
    assert START_KUBE_PROXY.index("Wait-K4wPodCondition -What \"Flannel's HNS network") < START_KUBE_PROXY.index("$sourceVip = Get-SourceVip")
    assert START_KUBE_PROXY.rstrip().endswith("& (Join-Path $NodeDir 'kube-proxy.exe') @arguments\nexit $LASTEXITCODE")
    assert START_FLANNELD.rstrip().endswith("& (Join-Path $NodeDir 'flanneld.exe') @arguments\nexit $LASTEXITCODE")


def test_kube_proxy_gets_the_source_vip_reserved_on_flannels_network_once():
    vip = START_KUBE_PROXY[START_KUBE_PROXY.index("function Get-SourceVip"):START_KUBE_PROXY.index("# ---------------------------------------------------------------- 1.")]
    helper = START_KUBE_PROXY[START_KUBE_PROXY.index("function Invoke-HostLocal"):START_KUBE_PROXY.index("function Get-SourceVip")]
    assert "host-local.exe" in helper and "CNI_COMMAND = $Command" in helper
    # Idempotent on restart: a kept VIP inside the network's subnet is reused; a new one is reserved
    # after a DEL, since host-local refuses a second ADD for the same owner.
    assert vip.index("Test-K4wAddressInSubnet -Address $kept -Cidr $subnet") < vip.index("Invoke-HostLocal 'DEL' $subnet") < vip.index("Invoke-HostLocal 'ADD' $subnet")
    assert "(Get-Field $_ 'Name') -eq $NetworkName" in START_KUBE_PROXY
    assert "$SourceVipFile = Join-Path $NodeDir 'SourceVip.json'" in START_KUBE_PROXY
    # kube-cleanup.ps1 deletes the same file with the network, so a new network gets a new VIP.
    assert "SourceVip.json" in (GUEST / "node" / "kube-cleanup.ps1").read_text()


def test_only_the_rendered_cni_config_stays_in_containerds_conf_dir():
    cni = START_FLANNELD[START_FLANNELD.index("# ---------------------------------------------------------------- 1."):START_FLANNELD.index("# ---------------------------------------------------------------- 2.")]
    assert "Where-Object { $_.FullName -ne $wanted }" in cni and "Remove-Item -LiteralPath $other.FullName" in cni
    # Copied only when it differs: a restart of the pod changes nothing.
    assert "(Get-FileHash -LiteralPath $RenderedCni).Hash -ne (Get-FileHash -LiteralPath $wanted).Hash" in cni


def test_start_node_reads_only_fields_node_json_renders():
    template = (ROOT / "templates" / "nodes" / "windows-containerd" / "node.json.j2").read_text()
    rendered = set(re.findall(r'^\s*"([a-z_]+)":', template, re.M))
    used = set(re.findall(r"\$Node\.([a-z_]+)", START_NODE))
    assert used <= rendered, sorted(used - rendered)


def test_the_kubelet_launcher_passes_kubeadms_flags_then_the_nodes_without_invoke_expression():
    launcher = (GUEST / "node-containerd" / "start-kubelet.ps1").read_text()
    assert "$KubeadmFlags = 'C:\\var\\lib\\kubelet\\kubeadm-flags.env'" in launcher
    assert "@(Read-KubeadmFlags $KubeadmFlags) + @(Read-NodeArgs $NodeArgs)" in launcher
    code = "\n".join(line for line in launcher[launcher.index("#>"):].splitlines() if not line.lstrip().startswith("#"))
    assert "Invoke-Expression" not in code and "& (Join-Path $K 'kubelet.exe') @arguments" in code


@pytest.mark.parametrize("script", RECIPE, ids=lambda p: p.name)
def test_the_recipes_scripts_parse_and_have_the_standard_header(script):
    text = script.read_text()
    assert powershell_rules.parse_errors(script) == [] and powershell_rules.lint_errors(script) == []
    assert "$ErrorActionPreference = 'Stop'" in text and "Set-StrictMode -Version Latest" in text
    assert re.search(r"^trap \{", text, re.M)


def test_the_containerd_join_passes_the_cri_socket_and_the_seed_keeps_its_own():
    from k4w.cluster import steps
    assert steps.windows_join_script("windows-2022") == "cluster-join-containerd.ps1"
    assert steps.windows_join_script("windows-1803") == "cluster-join.ps1"
    # The socket travels in the JoinConfiguration (kubeadm refuses join flags beside --config), from
    # the profile value node.json's runtime_endpoint also comes from.
    from k4w.model import profiles
    from k4w.derive import join_config
    doc = yaml.safe_load(join_config.for_worker("windows-2022", "10.0.0.1:6443", join_config.SAMPLE_TOKEN,
                                                join_config.SAMPLE_HASH, "w", timeouts=None))
    assert doc["nodeRegistration"]["criSocket"] == profiles.load("windows-2022").data.runtime.endpoint
    assert "criSocket" not in yaml.safe_load(join_config.for_worker("windows-1803", "10.0.0.1:6443", join_config.SAMPLE_TOKEN,
                                                                    join_config.SAMPLE_HASH, "w", timeouts=None))["nodeRegistration"]
    join = (GUEST / "cluster" / "cluster-join-containerd.ps1").read_text()
    assert join.index("Invoke-K4wStartNode @('-ConfigureOnly')") < join.index("Start-K4wKubeadmJoin")


def test_the_prepull_goes_through_the_cri_so_the_mirrors_their_credentials_and_the_pinned_label_apply():
    # containerd v2.3.7 internal/cri/server/images/image_pull.go: a CRI pull resolves through
    # config_path (registryHosts), authenticates with the registry.configs credentials (PullImage),
    # labels the image managed, and pinned when it is the configured sandbox image (getLabels), which
    # the kubelet's image GC then spares. ctr images pull does none of the middle two.
    step = (ROOT / "guest" / "windows" / "bake" / "04-prepull-images.ps1").read_text()
    assert "Invoke-K4wExe -FilePath $crictl -ArgumentList @('--runtime-endpoint', $endpoint, 'pull', $reference)" in step
    assert "'pull'" in step and "'images', 'pull'" not in step
    # The sandbox image the CRI pins is the one pulled (K4W_PAUSE_IMAGE in both steps).
    assert "(Get-K4wEnv -Name 'K4W_PAUSE_IMAGE')" in step and "$pauseImage = Get-K4wEnv -Name 'K4W_PAUSE_IMAGE'" in CONTAINERD
    assert tomllib.loads(rendered_config())["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == \
        PROFILE["kubernetes"]["pause_image"]
    # crictl is installed before the pre-pull.
    steps = PROFILE["provision"]
    assert steps.index("03-crictl.ps1") < steps.index("04-prepull-images.ps1")


def test_a_node_running_as_configured_is_left_alone_so_its_pods_keep_their_network():
    # cluster-up run again reaches start-node on a joined node; the clean slate would delete the HNS
    # network under the running pod sandboxes. Only a stopped service or an unregistered node earns one.
    head = START_NODE[:START_NODE.index("# ---------------------------------------------------------------- 2. clean slate")]
    skip = head[head.index("$running = "):]
    assert "-not $running -and (Test-NodeRegistered)" in skip and "exit 0" in skip
    assert "@($Node.runtime_service, 'kubelet')" in skip
    assert head.index("if ($ConfigureOnly)") < head.index("$running = ")


def test_the_mirrors_credentials_are_private_before_they_are_written_and_leave_with_the_build():
    """Windows has no 0600: the drop-in gets an ACL for SYSTEM and Administrators only (inheritance
    removed: a file under Program Files inherits read access for Users) on an empty file, then the
    content. 12-cleanup.ps1 removes the build's; cluster-up's cluster-proxy.ps1 writes the node's."""
    common = (ROOT / "guest" / "windows" / "common.ps1").read_text()
    body = common[common.index("function Set-K4wContainerdRegistry"):]
    assert body.index("New-Item -ItemType File -Path $script:K4wRegistryAuthFile") < body.index(
        "Protect-K4wPrivateFile -Path $script:K4wRegistryAuthFile") < body.index(
        "Set-K4wFileContent -Path $script:K4wRegistryAuthFile")
    protect = common[common.index("function Protect-K4wPrivateFile"):common.index("function Set-K4wContainerdRegistry")]
    assert "SetAccessRuleProtection($true, $false)" in protect and "@('S-1-5-18', 'S-1-5-32-544')" in protect
    cleanup = (ROOT / "guest" / "windows" / "bake" / "12-cleanup.ps1").read_text()
    assert "Remove-Item -LiteralPath $script:K4wRegistryAuthFile -Force" in cleanup
    proxy = (ROOT / "guest" / "windows" / "cluster" / "cluster-proxy.ps1").read_text()
    assert "Set-K4wContainerdRegistry -Files ([string]$values.K4W_REGISTRY_FILES) -Auth ([string]$values.K4W_REGISTRY_AUTH)" in proxy
    # The same folders the config template names (imports and config_path).
    assert "$script:K4wContainerdDropIns, $script:K4wRegistryHostsDir" in CONTAINERD
    assert "imports = ['{3}\\*.toml']" in CONTAINERD and "config_path = '{4}'" in CONTAINERD

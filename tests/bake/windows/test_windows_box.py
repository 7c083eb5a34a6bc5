"""The box profile, the embedded Vagrantfile and the contracts between the box and the rest of k4w
that can be checked without Hyper-V."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.model.profiles import CHECKSUM_KEYS
from k4w.validate.powershell_rules import parse_text_errors
from tests.helpers import system_tool

from windows_fixtures import BOX

PROFILE = yaml.safe_load((ROOT / "boxes" / f"{BOX}.yml").read_text())
GUEST = ROOT / "guest" / "windows"
# What the Packer build runs or uploads: Setup bootstrap, bake steps, the shared library.
BOX_BUILD_SCRIPTS = sorted([*(GUEST / "setup").glob("*.ps1"), *(GUEST / "bake").glob("*.ps1"), GUEST / "common.ps1"])
VAGRANTFILE = ROOT / "vagrant" / "box" / "windows.Vagrantfile"
# Components whose checksum could not be found published anywhere (see the profile comments):
# the build must refuse them until someone pins a verified value.
UNPINNED = {"flannel"}  # Flannel publishes no checksum for flanneld.exe: the user pins it (invoke pin)


def test_profile_keeps_the_contract_keys():
    for key in ("name", "os_family", "node_os", "min_memory_mb", "supports_vxlan"):
        assert key in PROFILE
    assert PROFILE["iso"]["name"] and isinstance(PROFILE["iso"]["index"], int)
    kube = PROFILE["kubernetes"]
    assert kube["version"] == "1.11.10" and kube["kubeadm_api"] == "kubeadm.k8s.io/v1alpha2"
    assert kube["node_os_label"] == "beta.kubernetes.io/os" and kube["pause_image"]
    assert PROFILE["build"]["generation"] in (1, 2)
    assert PROFILE["supports_vxlan"] is False  # vxlan on Windows needs Server 2019


def test_every_component_is_pinned_with_a_well_formed_checksum_or_knowingly_unpinned():
    components = PROFILE["components"]
    assert set(components) == {"kubernetes", "docker", "cni", "flannel", "nssm"}
    for name, spec in components.items():
        assert spec["version"] and spec["url"].startswith("https://"), name
        if spec.get("sha256"):
            assert re.fullmatch(r"[0-9a-f]{64}", spec["sha256"]), name
        if spec.get("sha512"):
            assert re.fullmatch(r"[0-9a-f]{128}", spec["sha512"]), name
        if spec.get("sha256_url"):
            assert spec["sha256_url"] == spec["url"] + ".sha256", name
        pinned = any(spec.get(k) for k in CHECKSUM_KEYS)
        assert pinned == (name not in UNPINNED), f"{name}: pinned={pinned}; update UNPINNED and the profile comment together"


def test_an_unpinned_component_makes_the_build_refuse_before_installing_anything():
    """00-preflight.ps1 runs first and asks Get-K4wComponentChecks about every component, which
    throws naming the profile key when no checksum is pinned; Get-K4wVerifiedFile asks it too."""
    preflight = (GUEST / "bake" / "00-preflight.ps1").read_text()
    common = (GUEST / "common.ps1").read_text()
    assert "Get-K4wComponentChecks -Component $component" in preflight
    assert "foreach ($component in $components)" in preflight and "throw" in preflight
    checks = common[common.index("function Get-K4wComponentChecks"):common.index("function Get-K4wVerifiedFile")]
    assert re.search(r"if \(-not \$checks\) \{\s+\$profilePath = .*\s+throw \"components\.\$Component has no checksum in \$profilePath", checks)
    verified = common[common.index("function Get-K4wVerifiedFile"):]
    assert "Get-K4wComponentChecks -Component $Component" in verified


def test_box_release_records_exactly_the_profile_components(render_windows):
    env = render_windows(2).env("11-box-release.ps1")
    assert env["K4W_BOX"] == BOX
    assert json.loads(env["K4W_RELEASE_JSON"]) == {
        "box": BOX, "components": {name: str(spec["version"]) for name, spec in PROFILE["components"].items()}}
    script = (GUEST / "bake" / "11-box-release.ps1").read_text()
    assert "box-release.json" in script and "(Get-K4wEnv -Name 'K4W_RELEASE_JSON') | ConvertFrom-Json" in script


MARKERS = ("restart", "upload", "fetch-release")


def test_the_step_list_names_existing_scripts_and_known_markers():
    steps = PROFILE["provision"]
    scripts = [s for s in steps if s not in MARKERS]
    for script in scripts:
        assert (GUEST / "bake" / script).is_file(), script
    assert scripts == sorted(scripts)
    # Every bake script is some Windows profile's step (windows-2022 runs the containerd era's).
    every = set()
    for path in (ROOT / "boxes").glob("*.yml"):
        data = yaml.safe_load(path.read_text())
        if data["os_family"] == "windows":
            every |= {s for s in data["provision"] if s not in MARKERS}
    assert sorted(every) == sorted(p.name for p in (GUEST / "bake").glob("[0-9][0-9]-*.ps1"))
    # The Containers feature needs its reboot before Docker; C:\k\ holds the node scripts before 08.
    assert steps.index("02-containers-feature.ps1") < steps.index("restart") < steps.index("03-docker.ps1")
    assert steps.index("upload") < steps.index("08-node-services.ps1")


def test_services_are_registered_as_the_cluster_start_expects():
    script = (GUEST / "bake" / "08-node-services.ps1").read_text()
    known = re.findall(r"Name = '([a-z-]+)'; Program = \(Join-Path \$nodeDir '[a-z-]+\.exe'\)", script)
    assert known == ["kubelet", "flanneld", "kube-proxy"]
    # <runtime> -> the profile's node_services in their order, each depending on the one before:
    # kubelet -> flanneld -> kube-proxy on the seed era (kernelspace kube-proxy needs flanneld's HNS
    # network), the kubelet alone on the containerd era.
    assert "$wanted = @((Get-K4wEnv -Name 'K4W_NODE_SERVICES') -split ','" in script
    assert "$previous = $runtimeService" in script and "$known[$name].DependsOn = $previous" in script
    assert "if ($wanted.Count -eq 0 -or $wanted[0] -ne 'kubelet')" in script
    # A service the profile does not list is removed, so a box never keeps one of another era.
    assert "Invoke-K4wExe -FilePath $nssm -ArgumentList @('remove', $name, 'confirm')" in script
    assert "$runtimeService = Get-K4wEnv -Name 'K4W_CONTAINER_RUNTIME'" in script
    assert "'Start' 'SERVICE_DEMAND_START'" in script  # Manual
    assert "'AppExit' @('Default', 'Restart')" in script
    assert re.search(r"'reset', \$svc.Name, \$value", script) and "'AppParameters'" in script
    assert "$taskName = 'k4w-node-start'" in script and "New-ScheduledTaskTrigger -AtStartup" in script
    assert "start-node.ps1" in script


def test_kube_cleanup_touches_only_the_clusters_objects():
    script = (GUEST / "node" / "kube-cleanup.ps1").read_text()
    assert re.search(r"\[Parameter\(Mandatory = \$true\)\][^\n]*\[string\]\$NetworkName", script)
    # No blanket removals: NetNat only by the given name, HNS networks only by NetworkName.
    assert not re.search(r"Get-NetNat\s*\|\s*Remove-NetNat", script)
    assert "Remove-NetNat -Name $NatName" in script
    assert "(Get-Field $_ 'Name') -eq $NetworkName" in script
    for path in ("C:\\var\\lib\\cni", "C:\\run\\flannel\\subnet.env", "SourceVip.json", "SourceVipRequest.json"):
        assert path in script
    # start-node.ps1 (cluster-up) calls it with the parameter it declares.
    start_node = GUEST / "node" / "start-node.ps1"
    if start_node.is_file():
        assert "kube-cleanup.ps1') -NetworkName" in start_node.read_text()


def test_the_bootstrap_is_on_the_setup_media_it_is_looked_for_by_name(render_windows, generation):
    rendered = render_windows(generation)
    builder = rendered.packer["builders"][0]
    media = builder["cd_files"] if generation == 2 else builder["floppy_files"]
    setup = [p for p in media if not p.endswith("/components/*")]
    # winrm-scope.ps1: the bootstrap scopes WinRM to the host with it before Packer connects;
    # winrm-cert.ps1: it makes the HTTPS listener and its key
    assert {Path(p).name for p in setup} == {"Autounattend.xml", "k4w-bootstrap.ps1", "common.ps1", "winrm-scope.ps1", "winrm-cert.ps1"}
    assert "Join-Path $_.Root 'k4w-bootstrap.ps1'" in rendered.unattend
    bootstrap = (GUEST / "setup" / "k4w-bootstrap.ps1").read_text()
    assert ". (Join-Path $PSScriptRoot 'common.ps1')" in bootstrap
    # The parameters the answer file passes exist in the script.
    for name in ("HttpProxy", "HttpsProxy", "NoProxy"):
        assert f"[string]${name} = ''" in bootstrap
    # Packer may connect as soon as the HTTPS listener exists (winrm-cert.ps1 makes it): it must be the last step.
    assert bootstrap.index("& $certScript") > max(bootstrap.index(s) for s in (
        "Set-K4wSystemProxy", "Set-NetConnectionProfile", "LocalAccountTokenFilterPolicy", "PasswordNeverExpires"))


def test_vagrantfile_is_valid_ruby():
    ruby = system_tool("ruby")
    result = subprocess.run([ruby, "-c", str(VAGRANTFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "Syntax OK" in result.stdout, result.stderr


def _vagrant_plugin_dir() -> Path:
    system_tool("vagrant")
    gem = subprocess.run(["ruby", "-e", "print Gem::Specification.find_by_name('vagrant').gem_dir"],
                         capture_output=True, text=True, timeout=60)
    if gem.returncode == 0 and gem.stdout:
        return Path(gem.stdout) / "plugins"
    found = sorted(Path("/usr/share/rubygems-integration/all/gems").glob("vagrant-*/plugins"))
    if not found:
        pytest.fail("cannot find Vagrant's plugin sources to check the Vagrantfile's settings against")
    return found[-1]


def test_vagrantfile_uses_only_settings_this_vagrant_knows():
    """`vagrant validate` needs the winrm gem and a Hyper-V host; check every setting against the
    attr_accessors of the installed Vagrant's own config classes instead."""
    plugins = _vagrant_plugin_dir()
    known = {
        "winrm": plugins / "communicators" / "winrm" / "config.rb",
        "h": plugins / "providers" / "hyperv" / "config.rb",
        "vm": plugins / "kernel_v2" / "config" / "vm.rb",
    }
    accessors = {k: set(re.findall(r"attr_accessor :(\w+)", p.read_text())) for k, p in known.items()}
    text = VAGRANTFILE.read_text()
    used = {
        "winrm": set(re.findall(r"config\.winrm\.(\w+)\s*=", text)),
        "h": set(re.findall(r"\bh\.(\w+)\s*=", text)),
        "vm": set(re.findall(r"config\.vm\.(\w+)\s*=", text)),
    }
    for scope, names in used.items():
        assert names, scope
        assert names <= accessors[scope], f"unknown {scope} settings: {names - accessors[scope]}"
    assert 'config.winrm.username = "vagrant"' in text
    # The box travels: no password in it (the cluster Vagrantfile reads this installation's), and
    # WinRM over HTTPS 5986 only, the one listener the box keeps.
    assert "winrm.password" not in text.replace("without setting config.winrm.password", "")
    assert "config.winrm.transport = :ssl" in text and "config.winrm.port = 5986" in text


# ------------------------------------------------------------------ node runtime (08-node-services.ps1, node/)

def _service_loop(script: str) -> str:
    """The body of 08-node-services.ps1's per-service loop (every value set there applies to each service)."""
    start = script.index("foreach ($svc in $services) {")
    return script[start:script.index("\n}\n", start)]


def test_every_service_gets_app_no_console_like_its_other_values():
    # NSSM 2.24 services can stay Paused on Windows 10 1703+ (nssm.cc/download); AppNoConsole=1 avoids it.
    loop = _service_loop((GUEST / "bake" / "08-node-services.ps1").read_text())
    assert "Set-NssmValue $svc.Name 'AppNoConsole' '1'" in loop
    # Set through the same idempotent helper as the rest, before the service is checked.
    assert loop.index("'AppNoConsole'") < loop.index("$service = Get-Service -Name $svc.Name")


def _task_arguments(script: str, node_dir: str = "C:\\k") -> str:
    """The boot task's Arguments as 08-node-services.ps1 builds them, expanded the way PowerShell does."""
    line = re.search(r'^\$arguments = "(.*)"$', script, re.M).group(1)
    values = {
        "$quotedStartNodeAtBoot": "'" + (node_dir + "\\start-node-at-boot.ps1").replace("'", "''") + "'",
        "$quotedStartNode": "'" + (node_dir + "\\start-node.ps1").replace("'", "''") + "'",
        "$quotedLog": "'" + (node_dir + "\\logs\\start-node.log").replace("'", "''") + "'",
    }
    for name, value in values.items():
        line = line.replace(name, value)
    assert not re.search(r"(?<!`)\$[a-zA-Z]", line), f"unexpanded variable in {line}"
    return line.replace('`"', '"').replace("`$", "$")


def test_boot_task_appends_start_node_output_to_its_log_and_keeps_the_exit_code():
    script = (GUEST / "bake" / "08-node-services.ps1").read_text()
    assert '$startNodeLog = Join-Path $logDir \'start-node.log\'' in script
    arguments = _task_arguments(script)
    assert arguments == ("-NoProfile -NonInteractive -ExecutionPolicy Bypass -Command \"& 'C:\\k\\start-node-at-boot.ps1' "
                         "-StartNode 'C:\\k\\start-node.ps1' -Log 'C:\\k\\logs\\start-node.log'; exit $LASTEXITCODE\"")
    # What -Command runs is PowerShell the grammar accepts, and it names parameters the wrapper declares.
    command = arguments.split("-Command ", 1)[1].strip('"')
    assert parse_text_errors(command) == []
    wrapper = (GUEST / "node" / "start-node-at-boot.ps1").read_text()
    assert "[Parameter(Mandatory = $true)][string]$StartNode" in wrapper and "[Parameter(Mandatory = $true)][string]$Log" in wrapper
    # An apostrophe in the node folder stays inside the PowerShell literal.
    assert "'C:\\it''s\\start-node.ps1'" in _task_arguments(script, "C:\\it's")
    # The idempotency check compares exactly these arguments, so an old -File task is replaced.
    assert "$existing.Actions[0].Arguments -eq $arguments" in script
    # The simulated box the Windows spec runs against registers the same action.
    from tests.fakes.windows_host import _box_state

    assert _box_state(None)["task_actions"] == [
        "C:\\Windows\\System32\\WindowsPowerShell\\v1.0\\powershell.exe " + arguments]


def test_start_node_comment_names_the_real_log_capture():
    start_node = (GUEST / "node" / "start-node.ps1").read_text()
    assert "C:\\k\\logs\\start-node.log" in start_node
    assert "task's log capture standard output only" not in start_node


def test_kube_cleanup_never_deletes_the_external_placeholder_network():
    script = (GUEST / "node" / "kube-cleanup.ps1").read_text()
    hns = (GUEST / "node" / "hns.ps1").read_text()
    assert "$HnsExternalNetworkName = 'External'" in hns
    # The only network deletion walks $networks, which holds exactly the networks named -NetworkName ...
    assert re.findall(r"Invoke-Hns DELETE \"/networks/[^\"]+\"", script) == ['Invoke-Hns DELETE "/networks/$($network.ID)"']
    assert "foreach ($network in $networks)" in script
    assert "$networks = @(Invoke-Hns GET '/networks' | Where-Object { (Get-Field $_ 'Name') -eq $NetworkName })" in script
    # ... and -NetworkName External is refused before any HNS call.
    guard = script.index("if ($NetworkName -eq $HnsExternalNetworkName) {")
    assert script.index(". (Join-Path $PSScriptRoot 'hns.ps1')") < guard < script.index("Invoke-Hns GET")
    assert "throw" in script[guard:guard + 250]


def test_external_network_matches_microsofts_l2bridge_placeholder_and_is_idempotent():
    hns = (GUEST / "node" / "hns.ps1").read_text()
    body = hns[hns.index("function Add-HnsExternalNetwork"):]
    assert "[ValidateSet('GET', 'POST', 'DELETE')]" in hns and "[K4w.Hns]::HNSCall($Method, $Path, $Request, [ref]$response)" in hns
    # Exists already: return before the adapter is even looked at.
    exists = body.index("if (Test-HnsNetwork $HnsExternalNetworkName) { return $false }")
    assert exists < body.index("if (-not $AdapterName)") < body.index("Invoke-Hns POST '/networks' $request")
    for field in ("Type               = 'L2Bridge'", "NetworkAdapterName = $AdapterName",
                  "AddressPrefix = '192.168.255.0/30'; GatewayAddress = '192.168.255.1'"):
        assert field in body
    assert "192.168.255.0/30" in body[:body.index("param(")]  # the comment names where the values come from
    assert "CreateExternalNetwork" in body and "hostgw_windows.go" in body


def test_boot_task_retries_start_node_and_restarts_a_task_that_failed_to_start():
    """Services recover only through the boot task: one failed start-node.ps1 at boot (master not
    back yet) must not leave the node down until the next reboot."""
    script = (GUEST / "bake" / "08-node-services.ps1").read_text()
    # Task Scheduler restarts only a task that failed to start (MS-TSCH 2.5.4.2): set for that...
    assert "-RestartCount $restartCount -RestartInterval $restartInterval" in script
    assert "$restartCount = 3" in script and "$restartInterval = New-TimeSpan -Minutes 1" in script
    assert "$existing.Settings.RestartCount -eq $restartCount" in script   # an older task is replaced
    # ...and the action itself retries start-node.ps1 on a non-zero exit, bounded, keeping the last code.
    wrapper = (GUEST / "node" / "start-node-at-boot.ps1").read_text()
    assert "[int]$Attempts = 10" in wrapper and "[int]$RetrySeconds = 60" in wrapper
    loop = wrapper[wrapper.index("for ($attempt = 1;"):]
    assert "$code = $LASTEXITCODE" in loop and "if ($code -eq 0) { exit 0 }" in loop and loop.rstrip().endswith("exit $code")
    assert "$startNodeAtBoot" in script.split("foreach ($required in", 1)[1].split("\n", 1)[0]   # the bake checks it is there


def _windows_profiles():
    for path in sorted((ROOT / "boxes").glob("*.yml")):
        data = yaml.safe_load(path.read_text())
        if data["os_family"] == "windows":
            yield pytest.param(data, id=data["name"])


@pytest.mark.parametrize("profile", list(_windows_profiles()))
def test_every_windows_box_records_its_patch_level_and_installs_the_update_it_pins(profile):
    steps = profile["provision"]
    # The host's build record gets the UBR only from the guest's record, downloaded after 11 wrote it.
    assert "11-box-release.ps1" in steps and "fetch-release" in steps
    assert steps.index("11-box-release.ps1") < steps.index("fetch-release") < steps.index("12-cleanup.ps1")
    update = (profile.get("components") or {}).get("windows_update")
    if update is None:
        assert "02-windows-update.ps1" not in steps  # nothing to install
        return
    # A pinned update is installed, completed by a restart, and its UBR is what 11 holds the box to.
    assert "02-windows-update.ps1" in steps and steps[steps.index("02-windows-update.ps1") + 1] == "restart"
    assert isinstance(update["ubr"], int) and update["ubr"] > 0
    assert re.fullmatch(r"KB\d{7}", update["version"])
    assert update["url"].endswith(".msu") and update["media_file"].endswith(".msu")

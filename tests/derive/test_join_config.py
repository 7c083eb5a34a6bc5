"""Join tokens travel in a kubeadm configuration file, never on a command line (issue 21 item 7):
the file is one kubeadm reads at the worker's API, private while it exists, and gone after the
join, failed joins included."""

from __future__ import annotations

import re
import stat
import subprocess

import pytest
import yaml

from k4w.derive import join_config
from k4w.infra.errors import K4wError
from k4w.model import kubeadm_fields as kubeadm_rules
from tests.helpers import MODERN_BOXES, ROOT

# A kubeadm flag that carries a join secret (kubeadm join --help, 1.11 and current).
SECRET_FLAG = re.compile(r"--(token|discovery-token|tls-bootstrap-token)(?![\w-])")
API = "192.168.250.10:6443"


def _scripts():
    guest = ROOT / "guest"
    return sorted(guest.rglob("*.sh")) + sorted(guest.rglob("*.ps1")) + sorted((ROOT / "host").rglob("*.ps1"))


def test_no_guest_or_host_script_passes_a_join_secret_as_a_flag():
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in _scripts()
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if SECRET_FLAG.search(line)]
    assert offenders == []


def test_the_secret_flag_pattern_catches_a_planted_join_command():
    assert SECRET_FLAG.search("kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef")
    assert SECRET_FLAG.search("$joinArgs = @('join', $ApiServer, '--token', $Token)")
    assert not SECRET_FLAG.search("--discovery-token-ca-cert-hash sha256:00")


@pytest.mark.parametrize("box,kind", [("windows-1803", "NodeConfiguration"), ("ubuntu-1604", "NodeConfiguration")])
def test_seed_era_join_config_is_a_v1alpha2_node_configuration(box, kind):
    doc = yaml.safe_load(join_config.for_worker(box, API, join_config.SAMPLE_TOKEN, join_config.SAMPLE_HASH, "w1", "abc123", timeouts=None))
    assert doc["kind"] == kind and doc["token"] == join_config.SAMPLE_TOKEN
    # The node registers marked as k4w's (k4w/derive/node_marks.py): its labels, and a Windows node the Windows taint.
    taints = {"taints": [{"key": "os", "value": "windows", "effect": "NoSchedule"}]} if box.startswith("windows") else {}
    assert doc["discoveryTokenAPIServers"] == [API] and doc["nodeRegistration"] == {
        "name": "w1", **taints, "kubeletExtraArgs": {"node-labels": "k4w.io/node=true,k4w.io/installation=abc123"}}


@pytest.mark.parametrize("box,socket", [("windows-2022", "npipe:////./pipe/containerd-containerd"),
                                         ("ubuntu-2404", "unix:///var/run/containerd/containerd.sock")])
def test_containerd_era_join_config_is_a_v1beta4_join_configuration_with_the_cri_socket(box, socket, monkeypatch):
    monkeypatch.setenv("K4W_BOX_DIRS", str(MODERN_BOXES))
    doc = yaml.safe_load(join_config.for_worker(box, API, join_config.SAMPLE_TOKEN, join_config.SAMPLE_HASH, "w1", "abc123", timeouts=None))
    assert doc["kind"] == "JoinConfiguration"
    assert doc["discovery"]["bootstrapToken"] == {"apiServerEndpoint": API, "token": join_config.SAMPLE_TOKEN,
                                                  "caCertHashes": [join_config.SAMPLE_HASH]}
    taints = {"taints": [{"key": "os", "value": "windows", "effect": "NoSchedule"}]} if box.startswith("windows") else {}
    assert doc["nodeRegistration"] == {"name": "w1", "criSocket": socket, **taints,
                                       "kubeletExtraArgs": [{"name": "node-labels", "value": "k4w.io/node=true,k4w.io/installation=abc123"}]}


@pytest.mark.parametrize("api,planted,complaint", [
    (join_config.V1BETA4, {"token": "x"}, "JoinConfiguration has no field 'token'"),
    (join_config.V1BETA4, {"discovery": {"bootstrapToken": {"apiServerEndpoint": API}}}, "needs 'token'"),
    (join_config.V1ALPHA2, {"discovery": {}}, "NodeConfiguration has no field 'discovery'"),
])
def test_a_join_config_kubeadm_would_refuse_is_named(api, planted, complaint):
    doc = {**join_config.document(api, API, join_config.SAMPLE_TOKEN, join_config.SAMPLE_HASH, "w1", None), **planted}
    problems = kubeadm_rules.check_text(yaml.safe_dump(doc), api, "join")
    assert any(complaint in p for p in problems), problems


def test_an_api_without_a_join_document_is_refused():
    with pytest.raises(K4wError, match="no kubeadm join configuration for kubeadm.k8s.io/v1beta3"):
        join_config.document("kubeadm.k8s.io/v1beta3", API, "t", "h", "w1", None)


# ------------------------------------------------------------------ cluster-join.sh in a K4W_ROOT sandbox
# The stand-in kubeadm records the mode and text of the file --config names; systemctl does nothing.
FAKE_KUBEADM = r"""#!/bin/bash
echo "kubeadm $*" >> "$K4W_ROOT/calls"
if [ "$1" = join ]; then
  stat -c %a "$3" > "$K4W_ROOT/config-mode"; cp "$3" "$K4W_ROOT/config-seen"; echo "$3" > "$K4W_ROOT/config-path"
  [ -f "$K4W_ROOT/fail-join" ] && exit 7
  mkdir -p "$K4W_ROOT/etc/kubernetes"; touch "$K4W_ROOT/etc/kubernetes/kubelet.conf"
fi
exit 0
"""


@pytest.fixture
def join_sandbox(tmp_path):
    root = tmp_path / "root"
    for folder in ("etc/default", "run"):
        (root / folder).mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("kubeadm", FAKE_KUBEADM), ("systemctl", "#!/bin/bash\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    config = join_config.for_worker("ubuntu-1604", API, join_config.SAMPLE_TOKEN, join_config.SAMPLE_HASH, "worker-linux", timeouts=None)

    def run():
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "K4W_ROOT": str(root), "K4W_NODE_NAME": "worker-linux",
               "K4W_NODE_IP": "192.168.250.11", "K4W_LIB": str(ROOT / "guest" / "ubuntu" / "lib.sh")}
        return subprocess.run(["bash", str(ROOT / "guest" / "ubuntu" / "cluster" / "cluster-join.sh")], env=env,
                              input=config, capture_output=True, text=True, timeout=60)

    return root, config, run


def test_linux_join_passes_a_private_config_file_and_deletes_it(join_sandbox):
    root, config, run = join_sandbox
    result = run()
    assert result.returncode == 0, result.stderr
    assert (root / "calls").read_text().splitlines() == [f"kubeadm join --config {(root / 'config-path').read_text().strip()}"]
    assert (root / "config-seen").read_text() == config and (root / "config-mode").read_text().strip() == "600"
    assert list((root / "run").iterdir()) == []
    assert join_config.SAMPLE_TOKEN not in result.stdout + result.stderr


def test_linux_join_deletes_the_config_when_kubeadm_fails(join_sandbox):
    root, _, run = join_sandbox
    (root / "fail-join").touch()
    result = run()
    assert result.returncode == 7 and "kubeadm join --config" in result.stderr
    assert list((root / "run").iterdir()) == []


def test_linux_join_of_a_joined_node_runs_no_kubeadm_and_leaves_no_file(join_sandbox):
    root, _, run = join_sandbox
    assert run().returncode == 0
    (root / "calls").unlink()
    second = run()
    assert second.returncode == 0 and "has joined" in second.stdout
    assert not (root / "calls").exists() and list((root / "run").iterdir()) == []


def test_linux_join_restores_the_kernel_tunables_of_a_box_baked_without_them(join_sandbox):
    """Joined or not, the worker gets the sysctl file a kubelet with protectKernelDefaults needs."""
    from tests.cluster.test_guest_scripts import KUBELET_KERNEL_DEFAULTS, SYSCTL_FILE, sysctls_written
    root, _, run = join_sandbox
    assert run().returncode == 0
    assert {key: sysctls_written(root).get(key) for key in KUBELET_KERNEL_DEFAULTS} == KUBELET_KERNEL_DEFAULTS
    root.joinpath(*SYSCTL_FILE).unlink()   # an older box, already joined
    second = run()
    assert second.returncode == 0 and "has joined" in second.stdout
    assert {key: sysctls_written(root).get(key) for key in KUBELET_KERNEL_DEFAULTS} == KUBELET_KERNEL_DEFAULTS


# ------------------------------------------------------------------ the Windows join scripts (no PowerShell here)
WINDOWS_JOINS = [ROOT / "guest" / "windows" / "cluster" / name for name in ("cluster-join.ps1", "cluster-join-containerd.ps1")]


@pytest.mark.parametrize("script", WINDOWS_JOINS, ids=lambda p: p.name)
def test_windows_join_protects_the_config_before_kubeadm_and_removes_it_on_every_path(script):
    text = script.read_text(encoding="utf-8")
    # Initialize-K4wJoin (cluster-join-lib.ps1, which both join scripts dot-source) protects it first.
    lib = (ROOT / "guest" / "windows" / "cluster" / "cluster-join-lib.ps1").read_text(encoding="utf-8")
    initialize = lib[lib.index("function Initialize-K4wJoin"):]
    initialize = initialize[:initialize.index("\n}\n")]
    assert "Protect-K4wPrivateFile -Path $ConfigFile" in initialize
    assert initialize.index("Protect-K4wPrivateFile") < initialize.index("$env:PATH")   # before any other step
    protect, start = text.index("Initialize-K4wJoin $ConfigFile"), text.index("Start-K4wKubeadmJoin")
    assert text.index(". (Join-Path $PSScriptRoot 'cluster-join-lib.ps1')") < protect < start
    trap = text[text.index("trap {"):text.index("}", text.index("trap {"))]
    assert "Remove-Item -LiteralPath $ConfigFile" in trap                       # failure anywhere
    assert re.search(r"\} finally \{\s+Remove-K4wSecretFile \$ConfigFile", text)   # around kubeadm
    joined = text[text.index("Test-Path -LiteralPath $KubeletConf"):]
    assert joined.index("Remove-K4wSecretFile $ConfigFile") < joined.index("exit")  # already joined


def test_windows_secret_acl_is_system_and_administrators_without_inheritance():
    """One ACL helper for every private file of the Windows guest (common.ps1), which the join library loads."""
    lib = (ROOT / "guest" / "windows" / "cluster" / "cluster-join-lib.ps1").read_text(encoding="utf-8")
    assert ". (Join-Path $PSScriptRoot 'common.ps1')" in lib and "SetAccessRule" not in lib
    common = (ROOT / "guest" / "windows" / "common.ps1").read_text(encoding="utf-8")
    protect = common[common.index("function Protect-K4wPrivateFile"):]
    protect = protect[:protect.index("\n}\n")]
    assert "SetAccessRuleProtection($true, $false)" in protect
    assert "@('S-1-5-18', 'S-1-5-32-544')" in protect
    every_ps1 = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "guest" / "windows").rglob("*.ps1"))
    assert every_ps1.count("SetAccessRuleProtection(") == 1   # no second hand-built ACL helper
    assert "$null = $process.Handle" in lib

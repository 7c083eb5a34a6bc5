"""invoke validate's rules over the Linux guest scripts: no credential in a unit's Environment=, and
every apt command through lib.sh's k4w_apt (bounded lock and first-boot waits). Each rule passes the
real sources and fails on a defect planted in a real file."""

from __future__ import annotations

from pathlib import Path

from k4w import validate
from k4w.derive.cluster import Cluster
from k4w.validate import apt_rules, systemd_unit_rules
from tests.helpers import ROOT

LIB = ROOT / "guest" / "ubuntu" / "lib.sh"


def _cluster() -> Cluster:
    return Cluster.load(ROOT / "cluster.yml")


def test_the_real_guest_scripts_and_templates_pass_both_rules():
    for check in (systemd_unit_rules.run, apt_rules.run):
        result = check(_cluster(), Path("unused"))
        assert result.ok, result.problems
        assert "guest/ubuntu/lib.sh" in result.checked and "guest/ubuntu/bake/07-cleanup.sh" in result.checked
    assert "templates/kubeadm/api/v1beta4.yaml.j2" in systemd_unit_rules.run(_cluster(), Path("unused")).checked


def test_the_unit_rule_refuses_the_drop_in_k4w_wrote_before():
    """Planted: lib.sh's old drop-in, the proxy pairs as Environment= lines chosen at run time."""
    text = LIB.read_text()
    planted = text.replace('content+=$\'\\n\'"[Service]"$\'\\n\'"EnvironmentFile=${env_file}"',
                           'content+=$\'\\n\'"[Service]"$\'\\n\'"Environment=\\"$pair\\""')
    assert planted != text
    [problem] = systemd_unit_rules.text_problems(planted, "lib.sh")
    assert "Environment= whose variable is chosen at run time" in problem and "EnvironmentFile= (mode 0600)" in problem


def test_the_unit_rule_refuses_a_literal_proxy_or_secret_and_keeps_the_kubelet_flags():
    # The kubelet unit and its drop-in are written once, by lib.sh's k4w_install_kubelet_service (both eras' step 04).
    step = (ROOT / "guest" / "ubuntu" / "lib.sh").read_text()
    assert 'Environment=\\"KUBELET_CONFIG_ARGS=' in step  # the plant below has a line to go beside
    assert systemd_unit_rules.text_problems(step, "04") == []  # KUBELET_*_ARGS lines stay
    planted = step.replace('Environment=\\"KUBELET_CONFIG_ARGS=', 'Environment=\\"HTTPS_PROXY=${K4W_PROXY}\\"\nEnvironment=\\"KUBELET_CONFIG_ARGS=')
    problems = systemd_unit_rules.text_problems(planted, "04")
    assert any("Environment= sets HTTPS_PROXY" in p for p in problems), problems
    assert any("expands $K4W_PROXY" in p for p in problems), problems
    assert systemd_unit_rules.text_problems('Environment="A=$(cat /etc/pw)"', "x")[0].endswith(
        "Environment=A takes its value from a command at run time: write it to a root-only EnvironmentFile= instead")
    assert "sets the systemd manager's environment" in systemd_unit_rules.text_problems(
        'systemctl set-environment "HTTP_PROXY=$p"', "x")[0]


def test_the_apt_rule_refuses_an_apt_command_outside_k4w_apt():
    cleanup = (ROOT / "guest" / "ubuntu" / "bake" / "07-cleanup.sh").read_text()
    planted = cleanup.replace("k4w_apt apt-get clean", "apt-get clean")
    assert planted != cleanup
    [problem] = apt_rules.script_problems(planted, "07-cleanup.sh")
    assert "'apt-get clean' takes apt's or dpkg's locks without waiting" in problem and "k4w_apt apt-get" in problem
    # Queries take no lock; a message that quotes a command is not one.
    assert apt_rules.script_problems('a=$(dpkg --print-architecture)\napt-mark showhold | grep -q x\n'
                                     'k4w_log "skipped \'apt-get install x\'"\n', "x") == []
    assert len(apt_rules.script_problems("sudo DEBIAN_FRONTEND=noninteractive apt install -y x && dpkg -i y.deb", "x")) == 2


def test_the_apt_rule_holds_k4w_apt_to_its_waits():
    text = LIB.read_text()
    assert apt_rules.library_problems(text, "lib.sh") == []
    no_timeout = text.replace('-o "DPkg::Lock::Timeout=${K4W_APT_LOCK_TIMEOUT}" ', "")
    assert apt_rules.library_problems(no_timeout, "lib.sh") == [
        "lib.sh: k4w_apt must pass -o DPkg::Lock::Timeout=N to apt and call k4w_wait_first_boot first"]
    unbounded = text.replace('timeout "$K4W_FIRST_BOOT_TIMEOUT" cloud-init status --wait', "cloud-init status --wait")
    assert apt_rules.library_problems(unbounded, "lib.sh") == [
        "lib.sh: k4w_wait_first_boot must wait for 'cloud-init status --wait' under timeout(1)"]

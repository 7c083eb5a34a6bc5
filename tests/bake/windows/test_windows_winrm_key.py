"""No two VMs share a WinRM TLS key (Packer and Vagrant skip peer verification, so the key is what
tells one listener from another): the bake's key leaves with the build's last command, and every VM
makes its own at first boot. Held over the rendered template and every Windows guest script."""

from __future__ import annotations

import re

import pytest

from k4w.infra.sources import REPO_ROOT as ROOT

GUEST = ROOT / "guest" / "windows"

CERT_SCRIPT = GUEST / "setup" / "winrm-cert.ps1"
BOOTSTRAP = GUEST / "setup" / "k4w-bootstrap.ps1"


def _friendly_name() -> str:
    return re.search(r"\$FriendlyName = '([^']+)'", CERT_SCRIPT.read_text()).group(1)


def test_only_winrm_cert_makes_a_certificate_or_an_https_listener():
    """The class: a script that made its own certificate or listener would bring back a key the
    shutdown does not know to delete, or one no boot replaces."""
    makers = []
    for script in sorted(GUEST.rglob("*.ps1")):
        text = script.read_text(encoding="utf-8-sig")
        if re.search(r"New-SelfSignedCertificate|-Transport\s+HTTPS|CertificateThumbPrint\s", text, re.I):
            makers.append(script.relative_to(GUEST).as_posix())
    assert makers == ["setup/winrm-cert.ps1"]


@pytest.mark.parametrize("generation", [1, 2])
def test_the_build_deletes_the_bake_key_before_it_shuts_down(render_windows, generation):
    command = render_windows(generation).packer["builders"][0]["shutdown_command"]
    name = _friendly_name()
    assert f"$_.FriendlyName -eq '{name}'" in command
    assert "Remove-Item -Path $c.PSPath -DeleteKey" in command  # the private key goes with the certificate
    assert "throw 'no k4w WinRM HTTPS certificate to delete'" in command  # none found: no shutdown, the build fails
    assert command.index("-DeleteKey") < command.index("shutdown.exe")
    assert command.index("$ErrorActionPreference = 'Stop'") < command.index("-DeleteKey")


def _shutdown_listener_removal(command: str) -> str:
    """The part of the shutdown_command that runs after shutdown.exe has scheduled the shutdown."""
    return command.split("shutdown.exe /s ", 1)[1]


@pytest.mark.parametrize("generation", [1, 2])
def test_the_build_removes_the_https_listener_with_its_key(render_windows, generation):
    """Left bound to the deleted key, the listener would answer a VM's first boot with a TLS
    failure (Vagrant's SSLError) instead of a refused connection until winrm-cert.ps1 has run."""
    command = render_windows(generation).packer["builders"][0]["shutdown_command"]
    after = _shutdown_listener_removal(command)
    # Every HTTPS listener goes, found by its transport (what winrm-cert.ps1 creates: -Transport HTTPS).
    assert "Get-ChildItem -Path WSMan:\\localhost\\Listener | Where-Object { $_.Keys -contains 'Transport=HTTPS' }" in after
    assert "foreach ($i in $l) { Remove-Item -Path $i.PSPath -Recurse -Force }" in after
    assert "throw 'no WinRM HTTPS listener to remove'" in after  # none found: the build fails
    # After the shutdown is scheduled (removing the listener may end this WinRM shell), and a failure
    # aborts that shutdown, so the build fails on shutdown_timeout instead of shipping the listener.
    assert "if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }; try {" in after
    assert "catch { shutdown.exe /a; throw }" in after
    assert after.index("Remove-Item -Path $i.PSPath") < after.index("catch { shutdown.exe /a; throw }")


def test_every_boot_makes_a_key_when_the_listener_has_none_of_this_machine():
    text = CERT_SCRIPT.read_text()
    # The listener's certificate must be in the machine store with its private key and name this computer;
    # otherwise a new key is made here, the listener rebound, and the other k4w certificates deleted.
    assert "$_.Thumbprint -eq $bound.Trim() -and $_.HasPrivateKey" in text
    assert "$names -contains $env:COMPUTERNAME" in text
    keep = text.index("exit 0\n")
    assert keep < text.index("New-SelfSignedCertificate") < text.index("-CertificateThumbPrint $new.Thumbprint")
    assert text.index("-CertificateThumbPrint $new.Thumbprint") < text.index("-DeleteKey")


def test_the_bootstrap_registers_the_key_as_a_startup_task_of_system():
    text = BOOTSTRAP.read_text()
    # The boot task k4w-winrm-scope runs winrm-cert.ps1 first (tests/bake/windows/test_windows_boot_tasks.py).
    assert "foreach ($taskScript in @($certScript, $scope))" in text
    assert "New-ScheduledTaskTrigger -AtStartup" in text and "-UserId 'SYSTEM'" in text
    assert "Copy-Item -LiteralPath (Join-Path $PSScriptRoot 'winrm-cert.ps1') -Destination $certScript" in text


def test_validate_parses_the_shutdown_command_like_every_inline_powershell(render_windows):
    """The shutdown_command is the build's last PowerShell: `invoke validate` reads it with the other
    inline snippets (k4w/validate/powershell_snippets.py), so a broken one fails before a bake."""
    from k4w.validate import powershell_rules, powershell_snippets

    rendered = render_windows(2, write=True)
    template = next((rendered.out / "packer").glob("*.pkr.hcl"))
    [(where, script)] = [s for s in powershell_snippets.packer_inline(template) if "shutdown_command" in s[0]]
    assert "-DeleteKey" in script and powershell_rules.parse_text_errors(script) == []
    broken = script.replace("foreach ($c in $k) {", "foreach ($c in $k) ", 1)
    assert powershell_rules.parse_text_errors(broken)

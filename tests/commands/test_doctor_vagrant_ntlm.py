"""`invoke doctor` probes whether Vagrant's own Ruby computes the MD4 that the NTLM login to Windows
nodes needs (WinRM inside TLS; OpenSSL 3 keeps MD4 in its legacy provider: hashicorp/vagrant#13076,
#13216, #13242), and says what to do when it cannot.

The `vagrant` here is a fake at the process boundary: `--version` answers, and `validate` loads the
Vagrantfile of $VAGRANT_CWD with this machine's real Ruby and OpenSSL 3, as Vagrant loads one, with
a stand-in of rubyntlm that hashes as rubyntlm 0.6.3 does (OpenSSL::Digest::MD4). Whether MD4 is there
is decided by OpenSSL itself, through OPENSSL_CONF: the default provider only, or the legacy one too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from k4w.commands import doctor

RUBYNTLM = 'require "openssl"\nmodule Net; module NTLM\n  def self.ntlm_hash(password, opt = {})\n' \
           '    OpenSSL::Digest::MD4.digest(password.encode("UTF-16LE"))\n  end\nend; end\n'
LEGACY_CNF = ("openssl_conf = k4w_init\n[k4w_init]\nproviders = k4w_providers\n[k4w_providers]\n"
              "default = k4w_default\nlegacy = k4w_legacy\n[k4w_default]\nactivate = 1\n[k4w_legacy]\nactivate = 1\n")


def fake_vagrant(folder: Path, version: str = "2.4.1", with_rubyntlm: bool = True, loads_vagrantfile: bool = True) -> Path:
    gems = folder / "gems"
    gems.mkdir(parents=True)
    if with_rubyntlm:
        (gems / "rubyntlm.rb").write_text(RUBYNTLM)
    load = ('cd "$VAGRANT_CWD" && exec ruby -I "' + str(gems) + '" -e \'module Vagrant; def self.configure(*); end; end; '
            'load "Vagrantfile"; puts "Vagrantfile validated successfully."\'') if loads_vagrantfile else \
        'echo "Vagrant failed to initialize at a very early stage" >&2; exit 1'
    exe = folder / "vagrant"
    exe.write_text(f'#!/bin/sh\ncase "$1" in\n  --version) echo "Vagrant {version}" ;;\n  validate) {load} ;;\n'
                   '  *) echo "unexpected: $*" >&2; exit 2 ;;\nesac\n')
    exe.chmod(0o755)
    return exe


@pytest.fixture(autouse=True)
def _ruby():
    assert shutil.which("ruby"), "ruby is needed (apt-get install ruby): the fake vagrant runs the probe with it"


def test_a_vagrant_whose_openssl_lacks_md4_fails_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENSSL_CONF", os.devnull)  # OpenSSL 3 with its default provider only
    check = doctor.vagrant_ntlm_check(str(fake_vagrant(tmp_path)))
    assert not check.ok and check.stages == ("cluster",)
    assert "Vagrant's Ruby cannot compute MD4 for NTLM (OpenSSL::Digest::DigestError" in check.detail
    assert "'Digest initialization failed'" in check.detail and "OpenSSL 3." in check.detail
    assert "Vagrant 2.4.0 or newer" in check.fix and "activates both default and legacy" in check.fix


def test_the_legacy_provider_the_fix_names_makes_the_probe_pass(tmp_path, monkeypatch):
    conf = tmp_path / "openssl.cnf"
    conf.write_text(LEGACY_CNF)
    monkeypatch.setenv("OPENSSL_CONF", str(conf))
    check = doctor.vagrant_ntlm_check(str(fake_vagrant(tmp_path / "v")))
    assert check.ok, check.detail
    assert check.detail.startswith("Vagrant's Ruby computes the NTLM hash (OpenSSL 3.")


def test_a_vagrant_without_winrm_gems_is_told_to_install_them(tmp_path):
    check = doctor.vagrant_ntlm_check(str(fake_vagrant(tmp_path, with_rubyntlm=False)))
    assert not check.ok and "Vagrant cannot load rubyntlm" in check.detail
    assert check.fix.startswith("a Vagrant packaged by a distribution leaves WinRM's gems out: 'vagrant plugin install winrm")


def test_a_vagrant_that_never_loads_the_probe_fails_naming_its_output(tmp_path):
    check = doctor.vagrant_ntlm_check(str(fake_vagrant(tmp_path, loads_vagrantfile=False)))
    assert not check.ok and "did not load k4w's probe Vagrantfile" in check.detail
    assert "Vagrant failed to initialize at a very early stage" in check.detail


def test_doctor_probes_a_vagrant_of_a_supported_version_only(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENSSL_CONF", os.devnull)
    for version, probed in (("2.4.1", True), ("2.1.5", False)):
        folder = tmp_path / version
        fake_vagrant(folder, version=version)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        checks = {c.name: c for c in doctor.tool_checks(tmp_path / "out")}
        assert checks["vagrant"].ok == probed
        assert ("vagrant WinRM NTLM (MD4)" in checks) == probed
        if probed:
            assert not checks["vagrant WinRM NTLM (MD4)"].ok

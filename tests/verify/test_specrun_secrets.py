"""A spec's target options that carry a credential never reach its command line.

`cluster-test` and `test-box` hand testinfra winrm://vagrant:<box user password>@host URLs. A
command line is visible to every local account (ps, /proc/PID/cmdline, WMI's Win32_Process), an
environment only to the process's owner, so such options travel in PYTEST_ADDOPTS.
"""

from __future__ import annotations

import json
import subprocess

from k4w.infra.proc import Runner
from k4w.infra.sources import REPO_ROOT
from k4w.verify import specrun

PASSWORD = "Ab3-unique-box-user-password"


def _request(tmp_path, port: int) -> specrun.SpecRequest:
    url = f"--hosts=winrm://vagrant:{PASSWORD}@127.0.0.1:{port}?no_ssl=true"
    return specrun.SpecRequest(suite="box windows-1803", spec="windows", junit=tmp_path / "junit.xml",
                               result=tmp_path / "result.json", args=[url, "--k4w-box=windows-1803", f"--k4w-config={REPO_ROOT / 'cluster.yml'}"])


def test_a_credential_option_is_in_the_childs_environment_not_its_command_line(tmp_path, closed_port):
    request = _request(tmp_path, closed_port)
    argv = request.command()
    assert not any(PASSWORD in a for a in argv)
    assert "--k4w-box=windows-1803" in argv                      # options without a secret stay
    assert PASSWORD in specrun.child_env(request)["PYTEST_ADDOPTS"]


def test_pytest_really_takes_the_hosts_option_from_the_environment(tmp_path, closed_port):
    # The real Windows box spec against a closed port: had --hosts not arrived, pytest would stop
    # with the spec's usage error ("--hosts is required"); it runs the checks and they error instead.
    request = _request(tmp_path, closed_port)
    proc = subprocess.run(request.command(), env=specrun.child_env(request), capture_output=True, text=True, timeout=300,
                          cwd=str(REPO_ROOT))
    result = json.loads(request.result.read_text())
    assert result["exit_status"] not in specrun.NOT_RUN, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert result["errors"] + result["failed"] > 0


def test_the_dry_run_shows_the_option_redacted(tmp_path, closed_port, capsys):
    specrun.run(_request(tmp_path, closed_port), Runner(log=tmp_path / "log", dry_run=True))
    shown = capsys.readouterr().out
    assert "PYTEST_ADDOPTS" in shown and "winrm://***@127.0.0.1" in shown and PASSWORD not in shown

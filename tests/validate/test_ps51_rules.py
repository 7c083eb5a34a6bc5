"""The Windows PowerShell 5.1 rules (k4w/validate/ps51_rules.py): each catches its planted
pitfall, leaves the 5.1-safe form alone, finds nothing in the project's scripts, and runs in
`invoke validate` on files and on the PowerShell the templates render inline."""

from __future__ import annotations

import dataclasses

import pytest

from k4w.validate import powershell_snippets, ps51_rules
from tests.helpers import ROOT, use_sources

# rule -> (planted defect, the 5.1-safe form of the same code)
CASES = {
    "exitcode-without-handle": (
        "$p = Start-Process -FilePath 'kubeadm.exe' -ArgumentList @('join') -NoNewWindow -PassThru\n"
        "$p.WaitForExit()\nif ($p.ExitCode -ne 0) { throw 'join failed' }\n",
        "$p = Start-Process -FilePath 'kubeadm.exe' -ArgumentList @('join') -NoNewWindow -PassThru\n"
        "$null = $p.Handle\n$p.WaitForExit()\nif ($p.ExitCode -ne 0) { throw 'join failed' }\n"),
    "web-request-basic-parsing": (
        "Invoke-WebRequest -Uri $url -OutFile $file\n",
        "Invoke-WebRequest -Uri $url -OutFile $file -UseBasicParsing\n"),
    "lastexitcode-after-cmdlet": (
        "Start-Service -Name 'docker'\nif ($LASTEXITCODE -ne 0) { throw 'docker did not start' }\n",
        "& docker.exe version\nif ($LASTEXITCODE -ne 0) { throw 'docker does not answer' }\n"),
    "pipeline-chain": (
        "kubeadm.exe reset -f && Write-Output 'reset'\n",
        "kubeadm.exe reset -f\nif ($LASTEXITCODE -eq 0) { Write-Output 'reset' }\n"),
    "join-path-children": (
        "$p = Join-Path 'C:\\k' 'cni' 'config'\n",
        "$p = Join-Path 'C:\\k' 'cni\\config'\n"),
    "convertto-json-depth": (
        "$record | ConvertTo-Json | Set-Content -LiteralPath $f -Encoding ASCII\n",
        "$record | ConvertTo-Json -Depth 4 | Set-Content -LiteralPath $f -Encoding ASCII\n"),
    "file-encoding": (
        "$json | Set-Content -LiteralPath 'C:\\k\\config\\node.json' -Encoding UTF8\n",
        "[IO.File]::WriteAllText('C:\\k\\config\\node.json', $json, (New-Object System.Text.UTF8Encoding $false))\n"),
    "ps6-parameter": (
        "$node = Get-Content -LiteralPath $f -Raw | ConvertFrom-Json -AsHashtable\n",
        "$node = Get-Content -LiteralPath $f -Raw | ConvertFrom-Json\n"),
    "ps6-variable": (
        "if ($IsWindows) { Write-Output 'windows' }\n",
        "if ($env:OS -eq 'Windows_NT') { Write-Output 'windows' }\n"),
    # Not a 5.1 difference: a process excluded by name alone is excluded in any folder, a pod's too.
    "defender-process-path": (
        "$processes = @('kubelet.exe', 'kube-proxy.exe')\nAdd-MpPreference -ExclusionProcess $processes\n",
        "$nodeDir = Get-K4wEnv -Name 'K4W_NODE_DIR'\n"
        "$processes = @((Join-Path $nodeDir 'kubelet.exe'), (Join-Path $nodeDir 'kube-proxy.exe'))\n"
        "Add-MpPreference -ExclusionProcess $processes\n"),
}


def _rules(text: str) -> set[str]:
    return {f.rule for f in ps51_rules.check_source(text.encode("utf-8"))}


def test_every_rule_has_a_planted_case():
    assert set(CASES) == set(ps51_rules.RULES)


@pytest.mark.parametrize("rule", list(CASES))
def test_rule_catches_its_planted_pitfall(rule):
    planted, _ = CASES[rule]
    assert rule in _rules(planted)


@pytest.mark.parametrize("rule", list(CASES))
def test_rule_accepts_the_51_safe_form(rule):
    _, safe = CASES[rule]
    assert _rules(safe) == set()


@pytest.mark.parametrize("text", [
    "Out-File -FilePath $log -InputObject 'x'\n",      # UTF-16LE in 5.1
    "'x' > C:\\k\\config\\kubelet.args\n",             # the same through redirection
    "Set-Content -LiteralPath $f -Value 'x'\n",         # the ANSI code page
    "Set-Content -LiteralPath $f -Value 'x' -Encoding utf8NoBOM\n",   # 6.0+
])
def test_every_51_default_encoding_is_caught(text):
    assert "file-encoding" in _rules(text) or "ps6-parameter" in _rules(text)


@pytest.mark.parametrize("text", [
    "& $ctr version *> $null\n",
    "Write-Output 'x' | Out-File -FilePath $log -Append -Encoding utf8 -Width 4096\n",   # a log, appended
    "curl.exe -fsSL $url\n",
])
def test_what_is_fine_in_51_is_not_reported(text):
    assert _rules(text) == set()


def test_curl_and_wget_are_invoke_webrequest_in_51():
    assert "web-request-basic-parsing" in _rules("curl -o $f $url\n")
    assert "web-request-basic-parsing" in _rules("wget $url\n")


def test_a_project_function_counts_as_a_program_for_lastexitcode():
    text = "Invoke-K4wExe -FilePath 'sc.exe' -ArgumentList @('query')\nif ($LASTEXITCODE -ne 0) { throw 'x' }\n"
    assert "lastexitcode-after-cmdlet" in _rules(text)
    assert ps51_rules.check_text(text, {"invoke-k4wexe"}) == []


def test_the_projects_powershell_has_no_51_pitfall():
    scripts = sorted((ROOT / "guest").rglob("*.ps1")) + sorted((ROOT / "host").rglob("*.ps1"))
    found = {str(p.relative_to(ROOT)): f for p, f in ps51_rules.check_files(scripts).items() if f}
    assert found == {}


def test_validate_reports_a_planted_pitfall_in_a_script(tmp_path, monkeypatch):
    from k4w.model import config
    from k4w import validate
    from k4w.derive.cluster import Cluster

    cluster = Cluster.resolve(config.load(ROOT / "cluster.yml"))
    scratch = use_sources(monkeypatch, root=tmp_path)
    (tmp_path / "guest").mkdir()
    (tmp_path / "host").mkdir()
    (tmp_path / "guest" / "join.ps1").write_text(CASES["exitcode-without-handle"][0])
    result = ps51_rules.run(dataclasses.replace(cluster, sources=scratch), tmp_path / "out")
    assert not result.ok
    assert any(p.startswith("guest/join.ps1:3:5: [exitcode-without-handle]") for p in result.problems), result.problems


def test_validate_reads_the_powershell_rendered_into_autounattend_and_packer(tmp_path):
    from k4w import render, validate
    from k4w.derive.cluster import Cluster

    cluster = Cluster.load(ROOT / "cluster.yml")
    out = tmp_path / "out"
    render.render(cluster, out)
    clean = ps51_rules.run(cluster, out)
    assert clean.ok, clean.problems
    assert any("Autounattend.xml" in c and "CommandLine" in c for c in clean.checked)

    answer = out / "http" / "windows-1803" / "Autounattend.xml"
    answer.write_text(answer.read_text().replace("Select-Object -First 1;", "Select-Object -First 1; $IsWindows;", 1))
    template = out / "packer" / "windows-1803.pkr.hcl"
    template.write_text(template.read_text().replace('provisioner "windows-restart" {',
                                                     'provisioner "powershell" {\n    inline = ["a.exe && b.exe"]', 1))
    snippets = dict(powershell_snippets.rendered(out))
    assert any("inline" in where for where in snippets)
    broken = ps51_rules.run(cluster, out)
    assert any("CommandLine" in p and "[ps6-variable]" in p for p in broken.problems), broken.problems
    assert any("inline" in p and "[pipeline-chain]" in p for p in broken.problems), broken.problems


# ------------------------------------------------------------------ function-output
# A function returns all it writes to the success stream: in a function whose value is used, only
# its result may reach it (start-kube-proxy.ps1's Get-SourceVip gave kube-proxy a message as its
# --source-vip).
GET_SOURCE_VIP = (
    "function Get-SourceVip {\n"
    "    if (Test-Path -LiteralPath $f) {\n"
    "        $kept = Get-Content -LiteralPath $f -Raw\n"
    "        if ($kept -like '10.*') { return $kept }\n"
    "        Write-Output \"source VIP $kept is not in this node's pod subnet any more\"\n"
    "    }\n"
    "    return (Invoke-HostLocal 'ADD')\n"
    "}\n"
    "$sourceVip = Get-SourceVip\n")


def _output_findings(text: str) -> list[str]:
    return [str(f) for f in ps51_rules.check_source(text.encode("utf-8")) if f.rule == "function-output"]


def test_a_message_in_a_function_whose_value_is_assigned_is_caught():
    [finding] = _output_findings(GET_SOURCE_VIP)
    assert finding.startswith("5:9: [function-output] Write-Output of a message in get-sourcevip")
    assert _output_findings(GET_SOURCE_VIP.replace("Write-Output \"source", "Write-Host \"source")) == []


@pytest.mark.parametrize("statement", [
    "$list.Add($x)",                     # ArrayList.Add returns the new index
    "New-Item -ItemType Directory -Path $d",
    "icacls.exe $d /grant 'x:(R)'",      # a program's stdout
    "& $exe --version",
    "Write-Output $x",
    "$x",
    "Set-Content -LiteralPath $f -Value $x -Encoding ASCII -PassThru",
    "Get-Noisy",                         # a project function that writes
    "Wait-Event -SourceIdentifier $id -Timeout 5",   # returns the event it waited for (PSEventArgs)
])
def test_every_kind_of_stray_output_is_caught(statement):
    text = (f"function Get-Noisy {{ Write-Output 'x' }}\n"
            f"function Get-Value {{\n    {statement}\n    return 1\n}}\n$v = Get-Value\n")
    assert any(f.startswith("3:5: [function-output]") for f in _output_findings(text)), _output_findings(text)


@pytest.mark.parametrize("statement", [
    "$null = $list.Add($x)",
    "[void]$list.Add($x)",
    "[void](New-Item -ItemType Directory -Path $d)",
    "New-Item -ItemType Directory -Path $d | Out-Null",
    "icacls.exe $d /grant 'x:(R)' > $null",
    "& $exe --version *> $null",
    "$count++",
    "$stream.Dispose()",
    "Write-Host \"a message\"",
    "Set-Content -LiteralPath $f -Value $x -Encoding ASCII",
    "Set-Quiet",                         # a project function that writes nothing
])
def test_the_allowed_forms_are_not_reported(statement):
    text = (f"function Set-Quiet {{ Write-Host 'x'; $null = New-Item -Path $p }}\n"
            f"function Get-Value {{\n    {statement}\n    return 1\n}}\n$v = Get-Value\n")
    assert _output_findings(text) == []


@pytest.mark.parametrize("use", ["$v = Get-Value", "$v = @(Get-Value)", "if (Get-Value) { 'y' }",
                                 "Write-Host \"$(Get-Value)\"", "$n = (Get-Value).Count",
                                 "function Get-Outer { Get-Value }\n$o = Get-Outer"])
def test_every_use_of_a_value_counts(use):
    text = "function Get-Value {\n    Write-Output 'checking'\n    return $true\n}\n" + use + "\n"
    assert _output_findings(text) != []


def test_the_result_in_tail_position_is_the_value_and_a_function_called_for_effect_may_write():
    tail = ("function Get-Value {\n    $a = 1\n    if ($a) { $a } else { foreach ($i in 1..2) { $i } }\n}\n"
            "$v = Get-Value\n")
    assert _output_findings(tail) == []
    effect = "function Show-State {\n    Write-Output 'state'\n    kubectl.exe get nodes\n}\nShow-State\n"
    assert _output_findings(effect) == []


def test_a_library_function_assigned_in_another_script_is_checked_in_the_library(tmp_path):
    library = tmp_path / "lib.ps1"
    library.write_text("function Get-Subnet {\n    Write-Output 'reading the subnet'\n    return '10.244.1.0/24'\n}\n")
    script = tmp_path / "start.ps1"
    script.write_text(". (Join-Path $PSScriptRoot 'lib.ps1')\n$subnet = Get-Subnet\n")
    found = ps51_rules.check_files([library, script])
    assert found[script] == []
    assert [f.split(" [")[1].split("]")[0] for f in found[library]] == ["function-output"]


@pytest.mark.parametrize("text", [
    "Add-MpPreference -ExclusionProcess 'kubelet.exe'\n",                        # a literal
    "Set-MpPreference -ExclusionProcess @('C:\\k\\kubelet.exe', 'flanneld.exe')\n",  # one of two
    "$d = 'C:\\Temp'\nAdd-MpPreference -ExclusionProcess (Join-Path $d 'kubelet.exe')\n",   # not a node folder
    "$all = @{ x = @('containerd.exe') }\n$p = $all['x']\nAdd-MpPreference -ExclusionProcess $p\n",  # through a hashtable
])
def test_every_process_exclusion_outside_the_node_folders_is_caught(text):
    assert "defender-process-path" in _rules(text)


def test_the_defender_step_names_every_process_by_its_full_path():
    script = ROOT / "guest" / "windows" / "bake" / "10-defender-exclusions.ps1"
    assert ps51_rules.check_text(script.read_text()) == []
    assert "-ExclusionProcess" in script.read_text()

"""Autounattend.xml: the rendered file passes the structural checker for both generations, carries
the per-build password (encoded) and the proxy exactly as configured; and every checker rule is
shown to fire on a broken variant, so a pass means something."""

from __future__ import annotations

import base64
import re

import pytest
from lxml import etree

from k4w.validate.unattend_rules import bootstrap_arguments, check_unattend

from windows_fixtures import BOX_USER_SECRET, HTTP_PROXY, HTTPS_PROXY, PROXY_PASSWORD, SECRET

NS = {"u": "urn:schemas-microsoft-com:unattend"}


def _decode(value: str, suffix: str) -> str:
    text = base64.b64decode(value).decode("utf-16-le")
    assert text.endswith(suffix)
    return text[: -len(suffix)]


def _values(xml: str, path: str) -> list[str]:
    return [el.text for el in etree.fromstring(xml.encode()).iterfind(path, NS)]


@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "proxy"])
def test_rendered_answer_file_passes_the_checker(render_windows, generation, proxied):
    rendered = render_windows(generation, http=HTTP_PROXY if proxied else None, https=HTTPS_PROXY if proxied else None)
    iso = rendered.profile.iso
    assert check_unattend(rendered.unattend, generation, iso.index, proxy=rendered.proxy, image_name=iso.image_name) == []


def test_passwords_decode_to_the_per_build_secret_and_the_installations_box_user_password(render_windows):
    xml = render_windows(2).unattend
    [admin] = _values(xml, ".//u:UserAccounts/u:AdministratorPassword/u:Value")
    [autologon] = _values(xml, ".//u:AutoLogon/u:Password/u:Value")
    [vagrant] = _values(xml, ".//u:LocalAccount/u:Password/u:Value")
    assert _decode(admin, "AdministratorPassword") == SECRET
    assert _decode(autologon, "Password") == SECRET
    # not Vagrant's shared vagrant/vagrant: nothing a pod can reach may offer a well-known login
    assert _decode(vagrant, "Password") == BOX_USER_SECRET != "vagrant"
    assert set(_values(xml, ".//u:PlainText")) == {"false"}


def test_layout_follows_the_generation(render_windows):
    gen2 = render_windows(2).unattend
    gen1 = render_windows(1).unattend
    assert _values(gen2, ".//u:CreatePartition/u:Type") == ["EFI", "MSR", "Primary"]
    assert _values(gen2, ".//u:InstallTo/u:PartitionID") == ["3"]
    assert _values(gen1, ".//u:CreatePartition/u:Type") == ["Primary", "Primary"]
    assert _values(gen1, ".//u:ModifyPartition/u:Active") == ["true"]
    assert _values(gen1, ".//u:InstallTo/u:PartitionID") == ["2"]


def test_image_selection_and_product_key_come_from_the_profile(render_windows, profile_dir):
    rendered = render_windows(2)
    # By name where the profile names the image (the preflight checks the name against the ISO).
    assert _values(rendered.unattend, ".//u:MetaData/u:Key") == ["/IMAGE/NAME"]
    assert _values(rendered.unattend, ".//u:MetaData/u:Value") == [rendered.profile.iso.image_name]
    assert _values(rendered.unattend, ".//u:ProductKey") == []  # none pinned: no element that could stop Setup
    # image_name: null (media whose names are not unique) falls back to the index.
    profile_dir(lambda data: data["iso"].update(index=1, image_name=None, product_key="2HXDN-KRXHB-GPYC7-YCKFJ-7FVDG"))
    rendered = render_windows(2)
    assert _values(rendered.unattend, ".//u:MetaData/u:Key") == ["/IMAGE/INDEX"]
    assert _values(rendered.unattend, ".//u:MetaData/u:Value") == ["1"]
    assert _values(rendered.unattend, ".//u:ProductKey/u:Key") == ["2HXDN-KRXHB-GPYC7-YCKFJ-7FVDG"]
    assert _values(rendered.unattend, ".//u:ProductKey/u:WillShowUI") == ["OnError"]
    assert check_unattend(rendered.unattend, 2, 1) == []
    assert any("/IMAGE/INDEX is '1', but the box profile's iso.index" in p for p in check_unattend(rendered.unattend, 2, 2))


def test_no_proxy_argument_without_a_proxy(render_windows):
    # only where WinRM may be reached from: the Default Switch's gateway, the host (k4w/derive/winrm_scope.py)
    assert bootstrap_arguments(render_windows(2).unattend) == {"WinRmRemote": "DefaultGateway"}


def test_winrm_on_another_management_switch_admits_the_local_subnet():
    from k4w.derive import winrm_scope

    assert winrm_scope.remote_scope("Default Switch") == "DefaultGateway"
    assert winrm_scope.remote_scope("corp-external") == "LocalSubnet"


def test_proxy_reaches_the_bootstrap_without_credentials(render_windows):
    rendered = render_windows(2, http=HTTP_PROXY, https=HTTPS_PROXY)
    args = bootstrap_arguments(rendered.unattend)
    assert args == {
        "HttpProxy": "proxy.corp.example:3128",
        "HttpsProxy": "secure-proxy.corp.example:8443",
        "NoProxy": rendered.proxy.no_proxy_str,
        "WinRmRemote": "DefaultGateway",
    }
    assert PROXY_PASSWORD not in rendered.unattend and "builder" not in rendered.unattend


def test_https_proxy_is_not_copied_from_http(render_windows):
    args = bootstrap_arguments(render_windows(2, http=HTTP_PROXY).unattend)
    assert args["HttpProxy"] == "proxy.corp.example:3128"
    assert "HttpsProxy" not in args


def test_no_proxy_entries_that_would_break_quoting_are_refused_by_the_config(render_windows):
    """A quote or '&' in no_proxy would break the first-logon command line: refused up front."""
    from k4w.infra.errors import ConfigError

    with pytest.raises(ConfigError, match="proxy.no_proxy: entries must be host names"):
        render_windows(2, http=HTTP_PROXY, no_proxy=["o'brien.corp.example", "a&b.example"])


# ------------------------------------------------------------------ every rule fires when broken

def _break(xml: str, old: str, new: str, count: int = 1) -> str:
    assert old in xml, f"test is stale: {old!r} not in the rendered answer file"
    return xml.replace(old, new, count)


BROKEN = {
    "component in a pass where it is not valid": (
        lambda x: _break(x, '<settings pass="specialize">', '<settings pass="auditUser">'),
        "Microsoft-Windows-Security-SPP-UX is not valid in pass auditUser",
    ),
    "setting ignored in its pass": (
        lambda x: _break(x, "<ComputerName>", "<OOBE><HideEULAPage>true</HideEULAPage></OOBE><ComputerName>"),
        "Microsoft-Windows-Shell-Setup/OOBE is ignored in pass specialize",
    ),
    "wrong architecture": (
        lambda x: _break(x, 'name="Microsoft-Windows-Setup" processorArchitecture="amd64"', 'name="Microsoft-Windows-Setup" processorArchitecture="x86"'),
        "processorArchitecture='x86', expected 'amd64'",
    ),
    "wrong public key token": (
        lambda x: _break(x, 'publicKeyToken="31bf3856ad364e35"', 'publicKeyToken="31bf3856ad364e36"'),
        "publicKeyToken='31bf3856ad364e36'",
    ),
    "missing versionScope": (
        lambda x: _break(x, ' versionScope="nonSxS"', ""),
        "versionScope=None, expected 'nonSxS'",
    ),
    "unknown component": (
        lambda x: _break(x, 'name="Microsoft-Windows-Security-SPP-UX"', 'name="Microsoft-Windows-Security-SPP"'),
        "unknown component 'Microsoft-Windows-Security-SPP'",
    ),
    "image name does not match the profile": (
        lambda x: _break(x, "SERVERDATACENTERACORE</Value>", "SERVERSTANDARDACORE</Value>"),
        "/IMAGE/NAME is 'Windows Server 2016 SERVERSTANDARDACORE', but the box profile's iso.image_name is "
        "'Windows Server 2016 SERVERDATACENTERACORE'",
    ),
    "image selected by index although the profile names it": (
        lambda x: re.sub(r"<Key>/IMAGE/NAME</Key>\s*<Value>[^<]*</Value>", "<Key>/IMAGE/INDEX</Key><Value>2</Value>", x),
        "image selected by '/IMAGE/INDEX'; it must be /IMAGE/NAME",
    ),
    "two image selections": (
        lambda x: _break(x, "</MetaData>", "</MetaData><MetaData><Key>/IMAGE/INDEX</Key><Value>2</Value></MetaData>"),
        "2 InstallFrom/MetaData entries",
    ),
    "trailing whitespace in a value": (
        lambda x: _break(x, "<Key>/IMAGE/NAME</Key>", "<Key>/IMAGE/NAME </Key>"),
        "'/IMAGE/NAME ' has leading/trailing whitespace",
    ),
    "plain-text password": (
        lambda x: _break(x, "<PlainText>false</PlainText>", "<PlainText>true</PlainText>"),
        "must have <PlainText>false</PlainText>",
    ),
    "password encoded with the wrong suffix": (
        lambda x: re.sub(r"(<AdministratorPassword>\s*<Value>)[^<]+",
                         lambda m: m.group(1) + base64.b64encode("pwPassword".encode("utf-16-le")).decode(), x),
        "must encode password + 'AdministratorPassword'",
    ),
    "password not encoded at all": (
        lambda x: re.sub(r"(<AdministratorPassword>\s*<Value>)[^<]+", r"\1not base64!", x),
        "is not the base64 UTF-16LE encoding",
    ),
    "auto logon more than once": (
        lambda x: _break(x, "<LogonCount>1</LogonCount>", "<LogonCount>3</LogonCount>"),
        "LogonCount must be 1",
    ),
    "bootstrap expected on a fixed drive": (
        lambda x: re.sub(r"<CommandLine>[^<]+</CommandLine>", r"<CommandLine>powershell.exe -File E:\\k4w-bootstrap.ps1</CommandLine>", x),
        "uses a fixed drive letter",
    ),
    "first-logon command too long": (
        lambda x: _break(x, "&amp; $s", "&amp; $s -NoProxy '" + "x" * 1100 + "'"),
        "Setup's limit is 1024",
    ),
    "double quote inside the -Command argument": (
        lambda x: _break(x, "&amp; $s", "&amp; $s -NoProxy 'a\"b'"),
        "has a double quote inside its -Command",
    ),
    "InstallTo points at the wrong partition": (
        lambda x: _break(x, "<PartitionID>3</PartitionID>\n          </InstallTo>", "<PartitionID>1</PartitionID>\n          </InstallTo>"),
        "InstallTo PartitionID 1 is not the Windows partition (3 for Gen2)",
    ),
    "EFI partition not FAT32": (
        lambda x: _break(x, "<Format>FAT32</Format>", "<Format>NTFS</Format>"),
        "EFI partition (PartitionID 1) must be formatted FAT32",
    ),
    "Active on a GPT disk": (
        lambda x: _break(x, "<Format>FAT32</Format>", "<Format>FAT32</Format><Active>true</Active>"),
        "sets Active, which only exists on MBR disks",
    ),
    "empty product key": (
        lambda x: _break(x, "<AcceptEula>true</AcceptEula>", "<AcceptEula>true</AcceptEula><ProductKey><Key></Key><WillShowUI>Always</WillShowUI></ProductKey>"),
        "is not a 25-character key",
    ),
    "Dynamic Update left on": (
        lambda x: _break(x, "<Enable>false</Enable>", "<Enable>true</Enable>"),
        "DynamicUpdate/Enable is 'true', not 'false'",
    ),
    "Dynamic Update may show its page": (
        lambda x: _break(x, "<WillShowUI>Never</WillShowUI>\n      </DynamicUpdate>", "<WillShowUI>OnError</WillShowUI>\n      </DynamicUpdate>"),
        "DynamicUpdate/WillShowUI is 'OnError', not 'Never'",
    ),
    "Dynamic Update left to Setup's default": (
        lambda x: re.sub(r"<DynamicUpdate>.*?</DynamicUpdate>", "", x, flags=re.S),
        "0 DynamicUpdate elements",
    ),
    "credentials in the answer file": (
        lambda x: _break(x, "<FullName>k4w</FullName>", "<FullName>http://u:p@proxy:3128</FullName>"),
        "user:password@ credentials",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_rule_fires_on_a_broken_gen2_file(render_windows, case):
    rendered = render_windows(2)
    xml, name = rendered.unattend, rendered.profile.iso.image_name
    assert check_unattend(xml, 2, 2, image_name=name) == []
    mutate, expected = BROKEN[case]
    problems = check_unattend(mutate(xml), 2, 2, image_name=name)
    assert any(expected in p for p in problems), problems


def test_gen2_layout_is_refused_for_gen1_and_back(render_windows):
    gen2 = render_windows(2).unattend
    gen1 = render_windows(1).unattend
    assert any("Gen1 (BIOS) boots from MBR" in p for p in check_unattend(gen2, 1, 2))
    assert any("Gen2 (UEFI) needs GPT partitions EFI, MSR, Primary" in p for p in check_unattend(gen1, 2, 2))


def test_gen1_without_an_active_partition_is_refused(render_windows):
    gen1 = render_windows(1).unattend
    broken = _break(gen1, "<Active>true</Active>", "")
    assert any("must be Active" in p for p in check_unattend(broken, 1, 2))


def test_https_copied_from_http_is_refused(render_windows):
    rendered = render_windows(2, http=HTTP_PROXY)  # no https proxy configured
    broken = _break(rendered.unattend, " -NoProxy", " -HttpsProxy 'proxy.corp.example:3128' -NoProxy")
    problems = check_unattend(broken, 2, 2, proxy=rendered.proxy)
    assert any("was copied from the http proxy" in p for p in problems), problems


def test_proxy_mismatch_and_unconfigured_proxy_are_refused(render_windows):
    proxied = render_windows(2, http=HTTP_PROXY, https=HTTPS_PROXY)
    direct = render_windows(2)
    assert any("but no such proxy is configured" in p for p in check_unattend(proxied.unattend, 2, 2, proxy=direct.proxy))
    assert any("-HttpProxy is None, expected" in p for p in check_unattend(direct.unattend, 2, 2, proxy=proxied.proxy))


def test_malformed_xml_is_reported_not_raised():
    assert check_unattend("<unattend><settings>", 2, 2)[0].startswith("not well-formed XML")


def test_the_same_proxy_for_both_schemes_is_fine_when_configured_so(render_windows):
    rendered = render_windows(2, http=HTTP_PROXY, https=HTTP_PROXY)
    args = bootstrap_arguments(rendered.unattend)
    assert args["HttpProxy"] == args["HttpsProxy"] == "proxy.corp.example:3128"
    assert check_unattend(rendered.unattend, 2, 2, proxy=rendered.proxy, image_name=rendered.profile.iso.image_name) == []

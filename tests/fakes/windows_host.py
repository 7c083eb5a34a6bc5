"""A stand-in for a Windows Server 1803 node reached over WinRM: a testinfra backend plugin
(`--hosts=fakewin://node`) that replaces testinfra's winrm backend and the real box.

Load with `-p tests.fakes.windows_host`. It answers the PowerShell queries of
k4w.verify.windows_queries with the JSON a healthy box built from boxes/windows-1803.yml
gives (shapes as ConvertTo-Json prints them), so the real Windows spec and conftest run end to
end here. $FAKE_WINDOWS_DEFECT names defects to plant (comma-separated), to show the matching checks fail;
$FAKE_WINDOWS_PROXY_FROM names the cluster.yml whose proxy the machine carries, as cluster-up
leaves a node; unset, it carries none, as every box does (the build removes its proxy).
Nothing here can tell whether the PowerShell is right on Windows: that only a Hyper-V host shows.
"""

from __future__ import annotations

import base64
import json
import os
import re

from testinfra import backend as backends
from testinfra.backend import base

from k4w.model import config, profiles
from k4w.derive.values import derive_proxy

K = "C:\\k"
SERVICES = {
    "docker": ("Running", "Automatic", [], '"C:\\Program Files\\docker\\dockerd.exe" --run-service'),
    "kubelet": ("Stopped", "Manual", ["docker"], "C:\\k\\nssm.exe"),
    "flanneld": ("Stopped", "Manual", ["kubelet"], "C:\\k\\nssm.exe"),
    "kube-proxy": ("Stopped", "Manual", ["flanneld"], "C:\\k\\nssm.exe"),
    "wuauserv": ("Stopped", "Manual", ["rpcss"], "C:\\Windows\\system32\\svchost.exe -k netsvcs -p"),
}
# 1803's last Server servicing level is not what a box of ours reaches (it pins no update): any UBR
# the ISO brings. This one is a stand-in value.
PATCH_LEVEL = {"build": 17134, "ubr": 48}
FIREWALL = [
    ("k4w-kubelet", "TCP", "10250"),
    ("k4w-flannel-vxlan", "UDP", "4789"),
    ("k4w-nodeport-tcp", "TCP", "30000-32767"),
    ("k4w-nodeport-udp", "UDP", "30000-32767"),
]
QFAILURE = """[SC] QueryServiceConfig2 SUCCESS

SERVICE_NAME: {name}
        RESET_PERIOD (in seconds)    : 86400
        REBOOT_MESSAGE               :
        COMMAND_LINE                 :
        FAILURE_ACTIONS              : RESTART -- Delay = 10000 milliseconds.
                                       RESTART -- Delay = 10000 milliseconds.
                                       RESTART -- Delay = 10000 milliseconds."""
WINHTTP_DIRECT = "\nCurrent WinHTTP proxy settings:\n\n    Direct access (no proxy server).\n"


def _box_state(defect: str | None) -> dict:
    prof = profiles.load("windows-1803").data
    kube = f"v{prof.kubernetes.version}"
    natives = {
        "docker.exe version": prof.components.docker.version,
        "docker.exe images": "\n".join([*prof.images.values(), prof.kubernetes.pause_image]),
        f"{K}\\kubelet.exe --version": f"Kubernetes {kube}",
        f"{K}\\kube-proxy.exe --version": f"Kubernetes {kube}",
        f"{K}\\kubeadm.exe version": kube,
        f"{K}\\kubectl.exe version": f'Client Version: version.Info{{Major:"1", Minor:"11", GitVersion:"{kube}"}}',
        f"{K}\\flanneld.exe --version": f"v{prof.components.flannel.version}",
    }
    for name in ("kubelet", "kube-proxy", "flanneld"):
        natives[f"sc.exe qfailure {name}"] = QFAILURE.format(name=name)
    release = {"box": "windows-1803", "components": {n: str(c["version"]) for n, c in prof.components.items()},
               "os": dict(PATCH_LEVEL)}
    state = {
        "services": {n: dict(zip(("status", "start_type", "depends_on", "image_path"), v)) for n, v in SERVICES.items()},
        "nssm": {n: {"application": f"{K}\\{n}.exe", "parameters": None, "stdout": f"{K}\\logs\\{n}.log",
                     "stderr": f"{K}\\logs\\{n}.log", "rotate_files": 1, "rotate_bytes": 10485760, "exit_default": "Restart",
                     "no_console": 1}
                 for n in ("kubelet", "kube-proxy", "flanneld")},
        "natives": natives,
        "firewall": [{"name": n, "enabled": "True", "direction": "Inbound", "action": "Allow", "profile": "Any",
                      "protocol": p, "ports": [port]} for n, p, port in FIREWALL],
        "profiles": [{"name": n, "enabled": "True"} for n in ("Domain", "Private", "Public")],
        "defender": {"installed": True, "paths": ["C:\\ProgramData\\docker", K],
                     "processes": ["C:\\Program Files\\docker\\dockerd.exe", f"{K}\\kubelet.exe", f"{K}\\kube-proxy.exe",
                                   f"{K}\\flanneld.exe"]},
        "release": "\ufeff" + json.dumps(release, indent=4),
        "patch_level": dict(PATCH_LEVEL),
        # What guest/windows/node/winrm-scope.ps1 and the build's shutdown_command leave.
        # ... and guest/windows/setup/winrm-cert.ps1 at the VM's first boot: a key of its own, for its name.
        "winrm": {"listeners": ["Transport=HTTPS"], "administrator_enabled": False, "scope_task": True,
                  "rules": [{"name": "k4w-winrm-https", "ports": ["5986"], "interfaces": ["Ethernet"], "remote": ["DefaultGateway"]}],
                  "cert_task": True, "computer": "WORKER-WIN",
                  "cert": {"thumbprint": "0F" * 20, "in_store": True, "private_key": True, "names": ["WORKER-WIN"],
                           "friendly_name": "k4w WinRM HTTPS"}},
        "proxy": {"winhttp": WINHTTP_DIRECT, "machine": {}, "docker_service": []},
        # 08-node-services.ps1's k4w-node-start action (Execute + ' ' + Arguments).
        "task_actions": [f"C:\\Windows\\System32\\WindowsPowerShell\\v1.0\\powershell.exe -NoProfile -NonInteractive "
                         f"-ExecutionPolicy Bypass -Command \"& '{K}\\start-node-at-boot.ps1' -StartNode "
                         f"'{K}\\start-node.ps1' -Log '{K}\\logs\\start-node.log'; exit $LASTEXITCODE\""],
    }
    proxy_from = os.environ.get("FAKE_WINDOWS_PROXY_FROM")
    proxy = derive_proxy(config.load(proxy_from)) if proxy_from else None
    if proxy and proxy.enabled:
        # What cluster-proxy.ps1 leaves on a node: WinHTTP (host:port, ';' bypass list), the
        # machine environment and the docker service's Environment value, upper case only.
        hostport = proxy.http.split("://", 1)[1].rsplit("@", 1)[-1]
        state["proxy"] = {
            "winhttp": f"\nCurrent WinHTTP proxy settings:\n\n    Proxy Server(s) :  http={hostport}\n"
                       f"    Bypass List     :  {';'.join(proxy.no_proxy)}\n",
            "machine": {k: v for k, v in proxy.env.items() if k.isupper()},
            "docker_service": [f"{k}={v}" for k, v in proxy.env.items() if k.isupper()],
        }
    for name in filter(None, (defect or "").split(",")):
        if name == "public_firewall_off":
            state["profiles"][2]["enabled"] = "False"
        elif name == "kubelet_automatic":
            state["services"]["kubelet"]["start_type"] = "Automatic"
        elif name == "nssm_console":  # a service registered without AppNoConsole
            state["nssm"]["flanneld"]["no_console"] = None
        elif name == "kube_proxy_before_flanneld":  # the 2018 chain docker -> kubelet -> kube-proxy -> flanneld
            state["services"]["kube-proxy"]["depends_on"] = ["kubelet"]
            state["services"]["flanneld"]["depends_on"] = ["kube-proxy"]
        elif name == "task_without_log":  # the boot task as before: -File, output lost
            state["task_actions"] = [f"C:\\Windows\\System32\\WindowsPowerShell\\v1.0\\powershell.exe -NoProfile "
                                     f"-NonInteractive -ExecutionPolicy Bypass -File \"{K}\\start-node.ps1\""]
        elif name == "release_behind_the_system":  # a record written before the update's restart
            state["release"] = json.dumps({**release, "os": {**PATCH_LEVEL, "ubr": PATCH_LEVEL["ubr"] - 1}})
        elif name == "windows_update_disabled":
            state["services"]["wuauserv"]["start_type"] = "Disabled"
        elif name == "other_build":  # an ISO of another Windows build
            state["patch_level"] = {**PATCH_LEVEL, "build": 17763}
            state["release"] = json.dumps({**release, "os": state["patch_level"]})
        elif name == "winrm_as_before":  # the bootstrap of before: HTTP listener, 5986 for any address, Administrator on
            state["winrm"] = {**state["winrm"], "listeners": ["Transport=HTTP", "Transport=HTTPS"], "administrator_enabled": True, "scope_task": False,
                              "rules": [{"name": "k4w-winrm-https", "ports": ["5986"], "interfaces": ["Any"], "remote": ["Any"]},
                                        {"name": "WINRM-HTTP-In-TCP", "ports": ["5985"], "interfaces": ["Any"], "remote": ["Any"]}]}
        elif name == "winrm_key_from_the_box":  # the box's bake-time key: deleted by the shutdown, never replaced
            state["winrm"] = {**state["winrm"], "cert_task": False,
                              "cert": {**state["winrm"]["cert"], "in_store": False, "private_key": False, "names": [],
                                       "friendly_name": ""}}
        elif name == "k_inherits":  # C:\k left with C:\'s ACL: Authenticated Users may modify kubelet.exe
            state["acl_inherits"] = [K, f"{K}\\kubelet.exe"]
        elif name == "defender_bare_names":  # 10-defender-exclusions.ps1 as it was: processes by name alone
            state["defender"]["processes"] = state["defender"]["processes"] + ["kubelet.exe"]
        elif name == "pods_locked":  # the pod folder as locked as the rest of C:\var: ContainerUser is denied
            state["pods_locked"] = True
        elif name == "pods_authenticated_users":  # the grant of before: every local account reads pod Secrets
            state["pods_grant"] = "S-1-5-11"
        elif name == "stale_release":
            state["release"] = json.dumps({**release, "components": {**release["components"], "docker": "17.06.2-ee-16"}})
        else:
            raise ValueError(f"unknown defect {name}")
    return state


# A folder or file as protect-node-folders.ps1 leaves it (top folders protected, the rest
# inheriting), or, for a planted defect, with C:\'s ACL (Windows Server's C:\ grants
# Authenticated Users S-1-5-11 modify and Users S-1-5-32-545 read to what is created below it).
_ADMIN_ONLY_ACES = [{"sid": sid, "type": "Allow", "rights": "FullControl", "inheritance": "ContainerInherit, ObjectInherit",
                     "propagation": "None", "inherited": False} for sid in ("S-1-5-18", "S-1-5-32-544")]
_TOP_FOLDERS = ("C:\\k", "C:\\k4w", "C:\\etc", "C:\\var", "C:\\run")


_PODS = "C:\\var\\lib\\kubelet\\pods"


def _acl_row(path: str, inherits_c: bool, pods_locked: bool = False, pods_grant: str = "S-1-5-93-2-2") -> dict:
    top = path in _TOP_FOLDERS or path.startswith("C:\\ProgramData\\containerd")
    rules = [dict(r, inherited=not top) for r in _ADMIN_ONLY_ACES]
    if path == _PODS and not pods_locked:   # protect-node-folders.ps1's grant to containers (ContainerUser)
        rules.append({"sid": pods_grant, "type": "Allow", "rights": "Modify, Synchronize",
                      "inheritance": "ContainerInherit, ObjectInherit",
                      "propagation": "InheritOnly" if pods_grant == "S-1-5-93-2-2" else "None", "inherited": False})
    if inherits_c:
        rules += [{"sid": "S-1-5-11", "type": "Allow", "rights": "Modify, Synchronize", "inheritance": "None",
                   "propagation": "None", "inherited": True},
                  {"sid": "S-1-5-32-545", "type": "Allow", "rights": "ReadAndExecute, Synchronize",
                   "inheritance": "None", "propagation": "None", "inherited": True}]
    return {"path": path, "exists": True, "protected": top and not inherits_c, "owner": "S-1-5-32-544", "rules": rules}


def _strings(text: str) -> list[str]:
    return [s.replace("''", "'") for s in re.findall(r"'((?:[^']|'')*)'", text)]


class FakeWindowsBackend(base.BaseBackend):
    NAME = "fakewin"

    def __init__(self, hostspec: str, *args, **kwargs):
        self.state = _box_state(os.environ.get("FAKE_WINDOWS_DEFECT"))
        super().__init__(hostspec, *args, **kwargs)

    def run(self, command: str, *args: str, **kwargs):
        command = self.get_command(command, *args)
        if command.startswith("echo "):
            return self.result(0, command.encode(), command[5:].encode(), b"")
        script = base64.b64decode(command.rsplit(" ", 1)[1]).decode("utf-16-le")
        body = script.split("$k4wResult = & {", 1)[1].rsplit("}\nConvertTo-Json", 1)[0]
        return self.result(0, command.encode(), json.dumps(self._answer(body)).encode(), b"")

    def _answer(self, body: str):
        s = self.state
        if "WSMan:\\localhost\\Listener" in body:
            return s["winrm"]
        if "Get-Acl -LiteralPath $path" in body:
            return [_acl_row(p, p in s.get("acl_inherits", ()), s.get("pods_locked", False),
                             s.get("pods_grant", "S-1-5-93-2-2")) for p in _strings(body.split("foreach ($path in ", 1)[1].split("\n", 1)[0])]
        if "Get-WindowsFeature" in body:
            return "Installed"
        if "Get-NetFirewallPortFilter" in body:
            wanted = _strings(body.split("$wanted = ", 1)[1].split("\n", 1)[0])
            return [r for r in s["firewall"] if set(r["ports"]) & set(wanted)]
        if "Get-NetFirewallProfile" in body:
            return s["profiles"]
        if "Get-MpPreference" in body:
            return s["defender"]
        if "winhttp" in body:
            return s["proxy"]
        if "Get-ScheduledTask" in body:
            return {"exists": True, "state": "Ready", "triggers": ["MSFT_TaskBootTrigger"], "user": "SYSTEM",
                    "actions": s["task_actions"]}
        if "AppExit" in body:
            names = _strings(body.split("foreach ($name in ", 1)[1].split("\n", 1)[0])
            return [{"name": n, "exists": True, **s["nssm"][n]} for n in names]
        if "Get-Service -Name $name" in body:
            names = _strings(body.split("foreach ($name in ", 1)[1].split("\n", 1)[0])
            return [{"name": n, "exists": True, **s["services"][n]} for n in names]
        if "Test-Path -LiteralPath $path" in body:
            return {p: True for p in _strings(body.split("foreach ($path in ", 1)[1].split("\n", 1)[0])}
        if "CurrentBuild" in body:
            return s["patch_level"]
        if "Get-Content -LiteralPath" in body:
            return s["release"]
        if "Invoke-Native " in body:
            exe, *arguments = _strings(body.rsplit("Invoke-Native ", 1)[1])
            for key in (" ".join([exe, *arguments[:2]]), f"{exe} {arguments[0]}"):
                if key in s["natives"]:
                    return {"rc": 0, "output": s["natives"][key]}
        raise AssertionError(f"fake Windows node: no answer for query:\n{body}")


backends.BACKENDS[FakeWindowsBackend.NAME] = f"{__name__}.FakeWindowsBackend"

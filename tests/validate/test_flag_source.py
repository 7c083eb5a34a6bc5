"""scripts/flag-table: the 1.37 flag tables are what the tag's own source registers.

The parser is held to small Go texts of each registration form it must read (and the ones it must
not), and every generated table in k4w/validate/facts/ is compared with a fresh generation from the
module zip the Go module proxy serves for its tag (the proxy is reachable wherever the pinned tools
are built; the module is already in the Go module cache after scripts/build-tools).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from k4w.infra import pinned_tools
from k4w.infra.sources import REPO_ROOT as ROOT
from k4w.devtools import flag_source

GO = '''
const (
	NodeName = "node-name"
	// Gone = "gone"
)
func (f *KubeletFlags) AddFlags(mainfs *pflag.FlagSet) {
	fs := pflag.NewFlagSet("", pflag.ExitOnError)
	fs.StringVar(&f.KubeConfig, "kubeconfig", f.KubeConfig, "Path to a kubeconfig file, (with a comma) and \\"quotes\\".")
	fs.Int32Var(
		&f.MaxPods, "max-pods", f.MaxPods,
		"Number of pods.",
	)
	fs.Var(cliflag.NewMapStringBool(&f.FeatureGates), "feature-gates", "key=value pairs")
	fs.VarP(VerbosityLevelPflag(&c.Verbosity), "v", "v", "number for the log level verbosity")
	fs.BoolP("help", "h", false, "help")
	flagSet.StringVar(&cfg.Name, options.NodeName, "", `Specify the node name.`)
	// fs.StringVar(&f.Old, "commented-out", "", "never registered")
	fs.DurationVar(&f.MinimumGCAge.Duration, "minimum-container-ttl-duration", 0, "Minimum age")
	fs.MarkDeprecated("minimum-container-ttl-duration", "Use --eviction-hard instead. Will be removed in a future version.")
	timeout := time.Duration(seconds)
	o.config.Mode = kubeproxyconfig.ProxyMode("iptables")
}
'''


def test_every_registration_form_is_read_and_nothing_else():
    found = flag_source.registered(GO, flag_source.constants([GO]))
    assert found.names == {"kubeconfig", "max-pods", "feature-gates", "v", "help", "node-name", "minimum-container-ttl-duration"}
    assert found.deprecated == {"minimum-container-ttl-duration": "Use --eviction-hard instead. Will be removed in a future version."}
    assert found.unresolved == []


def test_a_name_the_parser_cannot_read_is_listed_never_guessed():
    found = flag_source.registered('fs.StringVar(&x, options.Unknown, "", "usage")\nfs.Var(v, name, "usage")', {})
    assert found.names == set() and found.unresolved == ["fs.StringVar(options.Unknown, ...)", "fs.Var(name, ...)"]


def test_a_deprecated_flag_goes_to_removed_not_to_flags():
    text = GO

    def read(module, version, path):
        return text if path.endswith("options.go") else ""

    table = flag_source.generate("kubelet-1.37", read=read)
    assert "minimum-container-ttl-duration" in table["removed"] and "minimum-container-ttl-duration" not in table["flags"]


def test_kube_proxy_modes_are_the_ones_its_validation_accepts_without_a_gate():
    validation = '''
func validateProxyModeLinux(mode kubeproxyconfig.ProxyMode, fldPath *field.Path) field.ErrorList {
	validModes := sets.New[string](
		string(kubeproxyconfig.ProxyModeIPTables),
		string(kubeproxyconfig.ProxyModeNFTables),
	)
	if utilfeature.DefaultFeatureGate.Enabled(features.KubeProxyIPVS) {
		validModes.Insert(string(kubeproxyconfig.ProxyModeIPVS))
	}
}

func validateProxyModeWindows(mode kubeproxyconfig.ProxyMode, fldPath *field.Path) field.ErrorList {
	validModes := sets.New[string](
		string(kubeproxyconfig.ProxyModeKernelspace),
	)
}
'''
    types = ('const (\n\tProxyModeIPTables    ProxyMode = "iptables"\n\tProxyModeIPVS        ProxyMode = "ipvs"\n'
             '\tProxyModeNFTables    ProxyMode = "nftables"\n\tProxyModeKernelspace ProxyMode = "kernelspace"\n)\n')
    assert flag_source.proxy_modes(validation, types) == {"linux": ["iptables", "nftables"], "windows": ["kernelspace"]}


@pytest.mark.parametrize("table", sorted(flag_source.SPECS))
def test_the_committed_table_is_what_the_tag_registers(table):
    """Regenerates from the tag's module zip (Go module cache, else the proxy) and compares byte for byte."""
    assert shutil.which("go"), "go is not installed: scripts/flag-table reads the tag through `go mod download`"
    result = subprocess.run([str(ROOT / "scripts" / "flag-table"), "--check", table], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{table}.yml matches the source at the tag" in result.stdout


def test_the_1_37_tables_hold_the_flags_k4w_renders_and_refuse_the_removed_pause_flag():
    kubelet = yaml.safe_load((flag_source.Path(flag_source.__file__).parents[1] / "validate" / "facts" / "kubelet-1.37.yml").read_text())
    proxy = yaml.safe_load((flag_source.Path(flag_source.__file__).parents[1] / "validate" / "facts" / "kube-proxy-1.37.yml").read_text())
    assert {"node-ip", "hostname-override", "config", "kubeconfig", "v"} <= set(kubelet["flags"])
    assert {"windows-service"} <= set(kubelet["windows_only"])
    assert "pod-infra-container-image" not in kubelet["flags"] + kubelet["windows_only"]
    assert {"source-vip", "network-name", "enable-dsr"} <= set(proxy["windows_only"])
    assert proxy["modes"] == {"linux": ["iptables", "nftables"], "windows": ["kernelspace"]}


# Flags the real binaries print that the tables leave out on purpose: the ones copied from global flag sets by
# name (kubelet's AddGlobalFlags: --version, cadvisor's --housekeeping-interval; cobra's --help) and the ones the
# source marks for removal (removed:).
GLOBAL = {"kubelet": {"help", "version", "housekeeping-interval"}, "kube-proxy": {"help", "version"}}


@pytest.mark.tools
@pytest.mark.parametrize("binary,tool", [("kubelet", "kubernetes-node"), ("kube-proxy", "kubernetes-control-plane")])
def test_the_linux_flags_of_the_table_are_the_ones_the_real_1_37_binary_prints(binary, tool):
    """The pinned binary built from the same tag (scripts/build-tools) lists its Linux flags in --help: the
    table must hold every one of them but the deliberate omissions, and nothing it lacks."""
    program = pinned_tools.require(tool, binary)
    helped = set(re.findall(r"^\s+(?:-\w, )?--([a-z0-9-]+)", subprocess.run(
        [str(program), "--help"], capture_output=True, text=True, timeout=60).stdout, re.M))
    table = yaml.safe_load((flag_source.Path(flag_source.__file__).parents[1] / "validate" / "facts" / f"{binary}-1.37.yml").read_text())
    listed = set(table["flags"]) | set(table.get("linux_only") or [])
    assert listed - helped == set()
    assert helped - listed == GLOBAL[binary] | (set(table.get("removed") or {}) & helped)

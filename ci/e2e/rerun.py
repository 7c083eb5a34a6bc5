"""Run a rendered Packer template's provisioners again on a live guest, as Packer ran them.

Same files to the same destinations, same scripts in the same order, same environment
(the template's environment_vars with its ${var.<name>} variables resolved, plus the
PACKER_BUILD_NAME/PACKER_BUILDER_TYPE Packer adds), through the template's own
execute_command. Used by the idempotence check. PACKER_HTTP_ADDR is not set: a booted box has
no build host, so a step must prove its install complete without the build media.

A provisioner with use_env_var_file gets its environment as Packer writes it: a file of
`export NAME='value'` lines, sorted by name, each ' written as '"'"' (escapeEnvVars and
createEnvVarFileContent in provisioner/shell/provisioner.go, hashicorp/packer v1.9.4 ae9daec1, as in v1.6.6),
uploaded beside the script with mode 0600, and named by {{ .EnvVarFile }} in the command.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from k4w.infra import packer_hcl

from .guest import Ssh
from .phases import E2EError, Phase

# Where the scripts are uploaded for the re-run (Packer uses /tmp/script_NNNN.sh).
REMOTE_DIR = "/tmp/k4w-rerun"


@dataclass(frozen=True)
class Step:
    kind: str  # file | shell
    source: Path
    destination: str  # for shell: where the script is uploaded
    command: str = ""  # for shell: the rendered execute_command
    env_file: str = ""  # for a shell step with use_env_var_file: where its environment file goes
    env_file_content: str = ""


# An HCL2 interpolation or directive other than a variable reference (the template passes the proxy
# URLs as ${var.http_proxy} so Packer can mask them as sensitive variables).
_OTHER_TEMPLATE = re.compile(r"(?<!\$)\$\{(?!var\.)|(?<!%)%\{")


def interpolate(value: str, variables: dict) -> str:
    """Resolve ${var.name} from the template's variables, as Packer does (k4w.infra.packer_hcl); refuse
    any other interpolation rather than run a step with a literal '${...}' in its environment."""
    if _OTHER_TEMPLATE.search(value.replace("$${", "").replace("%%{", "")):
        raise E2EError(f"the re-run cannot resolve the HCL template expression in {value!r}; only ${{var.<name>}} is supported")
    try:
        return packer_hcl.resolve(value, {name: str(v) for name, v in variables.items()})
    except KeyError as missing:
        raise E2EError(f"${{var.{missing.args[0]}}} names no variable of the template "
                       f"(variables: {', '.join(variables) or 'none'})") from None


def _assignments(env: list[str], builder_type: str) -> list[str]:
    assignments = [f"PACKER_BUILD_NAME={builder_type}", f"PACKER_BUILDER_TYPE={builder_type}", *env]
    for item in assignments:
        if "=" not in item:
            raise E2EError(f"environment_vars entry without '=': {item!r}")
    return assignments


def packer_vars(env: list[str], builder_type: str) -> str:
    """{{ .Vars }} as Packer's shell provisioner renders it: each KEY=value quoted, Packer's own first."""
    return " ".join(shlex.quote(item) for item in _assignments(env, builder_type))


def packer_env_file(env: list[str], builder_type: str) -> str:
    """The file use_env_var_file uploads: `export KEY='value'` per variable, sorted by KEY."""
    pairs = dict(item.split("=", 1) for item in _assignments(env, builder_type))
    return "".join(f"export {key}='{value.replace(chr(39), chr(39) + chr(34) + chr(39) + chr(34) + chr(39))}'\n"
                   for key, value in sorted(pairs.items()))


def steps(template: dict) -> list[Step]:
    """The provisioners of a rendered template, in order, with their commands ready to run."""
    builders = template.get("builders") or [{}]
    builder_type = builders[0].get("type", "")
    found: list[Step] = []
    for index, prov in enumerate(template.get("provisioners", []), start=1):
        kind = prov.get("type")
        if kind == "file":
            found.append(Step("file", Path(prov["source"]), prov["destination"]))
        elif kind == "shell":
            if "script" not in prov:
                raise E2EError(f"provisioner {index} is a shell provisioner without 'script'; the re-run supports scripts only")
            script = Path(prov["script"])
            remote = f"{REMOTE_DIR}/{index:02d}-{script.name}"
            env = [interpolate(item, template.get("variables") or {}) for item in prov.get("environment_vars", [])]
            if prov.get("use_env_var_file"):
                template_cmd = prov.get("execute_command", "chmod +x {{.Path}}; . {{.EnvVarFile}} && {{.Path}}")
                if "{{ .EnvVarFile }}" not in template_cmd or "{{ .Path }}" not in template_cmd:
                    raise E2EError(f"provisioner {index}: execute_command lacks {{{{ .EnvVarFile }}}} or {{{{ .Path }}}}: {template_cmd}")
                env_file = f"{REMOTE_DIR}/{index:02d}-varfile.sh"
                command = template_cmd.replace("{{ .EnvVarFile }}", env_file).replace("{{ .Path }}", remote)
                found.append(Step("shell", script, remote, command, env_file, packer_env_file(env, builder_type)))
                continue
            template_cmd = prov.get("execute_command", "chmod +x {{ .Path }}; {{ .Vars }} {{ .Path }}")
            if "{{ .Vars }}" not in template_cmd or "{{ .Path }}" not in template_cmd:
                raise E2EError(f"provisioner {index}: execute_command lacks {{{{ .Vars }}}} or {{{{ .Path }}}}: {template_cmd}")
            command = template_cmd.replace("{{ .Vars }}", packer_vars(env, builder_type))
            found.append(Step("shell", script, remote, command.replace("{{ .Path }}", remote)))
        else:
            raise E2EError(f"provisioner {index} has type {kind!r}; the re-run knows file and shell")
    return found


def run_all(template: dict, ssh: Ssh, phase: Phase) -> list[str]:
    """Upload and run every step; returns one line per step. A failing step raises."""
    done = []
    ssh.run(f"mkdir -p {REMOTE_DIR}", phase, "create the re-run folder")
    for step in steps(template):
        ssh.upload(step.source.read_bytes(), step.destination, phase)
        if step.kind == "file":
            done.append(f"file  {step.source.name} -> {step.destination}")
            continue
        if step.env_file:
            # As Packer does: 0600 before the content (the proxy's credentials) is written, then removed.
            ssh.run(f"umask 077 && : > {shlex.quote(step.env_file)}", phase, f"create {step.env_file}")
            ssh.upload(step.env_file_content, step.env_file, phase)
        try:
            result = ssh.run(step.command, phase, f"re-run of {step.source.name}")
        finally:
            if step.env_file:
                ssh.run(f"rm -f {shlex.quote(step.env_file)}", phase, f"remove {step.env_file}", check=False)
        last = (result.stdout.strip().splitlines() or [""])[-1]
        done.append(f"shell {step.source.name}: exit 0: {last}")
    return done

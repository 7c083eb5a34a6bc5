"""Run a rendered Packer template's provisioners again on a live guest, as Packer ran them.

Same files to the same destinations, same scripts in the same order, same environment
(the template's environment_vars with its {{user `...`}} variables resolved, plus the
PACKER_BUILD_NAME/PACKER_BUILDER_TYPE Packer adds), through the template's own
execute_command. Used by the idempotence check. PACKER_HTTP_ADDR is not set: a booted box has
no build host, so a step must prove its install complete without the build media.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

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


# Packer's user-variable function, e.g. {{user `http_proxy`}} (the template passes the proxy
# URLs this way so Packer can mask them as sensitive-variables).
_USER_VARIABLE = re.compile(r"\{\{\s*user\s+`([^`]+)`\s*\}\}")


def interpolate(value: str, variables: dict) -> str:
    """Resolve {{user `name`}} from the template's variables, as Packer does; refuse any other
    template function rather than run a step with a literal '{{...}}' in its environment."""
    def user(match: re.Match) -> str:
        name = match.group(1)
        if name not in variables:
            raise E2EError(f"{{{{user `{name}`}}}} names no variable of the template (variables: {', '.join(variables) or 'none'})")
        return str(variables[name])

    resolved = _USER_VARIABLE.sub(user, value)
    if "{{" in resolved:
        raise E2EError(f"the re-run cannot resolve the Packer template function in {value!r}; only {{{{user `...`}}}} is supported")
    return resolved


def packer_vars(env: list[str], builder_type: str) -> str:
    """{{ .Vars }} as Packer's shell provisioner renders it: each KEY=value quoted, Packer's own first."""
    assignments = [f"PACKER_BUILD_NAME={builder_type}", f"PACKER_BUILDER_TYPE={builder_type}", *env]
    for item in assignments:
        if "=" not in item:
            raise E2EError(f"environment_vars entry without '=': {item!r}")
    return " ".join(shlex.quote(item) for item in assignments)


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
            template_cmd = prov.get("execute_command", "chmod +x {{ .Path }}; {{ .Vars }} {{ .Path }}")
            if "{{ .Vars }}" not in template_cmd or "{{ .Path }}" not in template_cmd:
                raise E2EError(f"provisioner {index}: execute_command lacks {{{{ .Vars }}}} or {{{{ .Path }}}}: {template_cmd}")
            env = [interpolate(item, template.get("variables") or {}) for item in prov.get("environment_vars", [])]
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
        result = ssh.run(step.command, phase, f"re-run of {step.source.name}")
        last = (result.stdout.strip().splitlines() or [""])[-1]
        done.append(f"shell {step.source.name}: exit 0: {last}")
    return done

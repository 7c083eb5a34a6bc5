"""Parse `packer build -machine-readable` output into phase, provisioner step N of M and errors.

Format (Packer docs, "Machine-Readable Output"): one line per message,
`timestamp,target,type,data...`. A comma inside data is written `%!(PACKER_COMMA)`, a newline
a literal `\\n`, a carriage return `\\r`. Human output is `ui,say` (`==> build: text`),
`ui,message` (indented guest output) and `ui,error`; a failed build also emits
`error-count` and `<build>,error,<message>`.

Packer prints no generic "provisioner N starts" line, so steps are recognised by what each
provisioner type says first (strings from Packer's provisioner sources):
  shell / powershell / windows-shell  "Provisioning with <kind> script: <path>" (per script)
  windows-restart                     "Restarting Machine"
  file                                "Uploading <src> => <dst>" / "Downloading ..."
  shell-local                         "Running local shell script: <path>"
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath

COMMA = "%!(PACKER_COMMA)"
_LINE = re.compile(r"^(\d+),([^,]*),([^,]+)(?:,(.*))?$")
# "==> hyperv-iso: text" or "==> hyperv-iso (vagrant): text"; the build name has no ':'.
_SAY = re.compile(r"^==> (?P<build>[^:(]+?)(?: \((?P<pp>[^)]+)\))?: (?P<text>.*)$", re.S)
_OUTPUT = re.compile(r"^\s*(?P<build>[^:(\s]+)(?: \((?P<pp>[^)]+)\))?: (?P<text>.*)$", re.S)
_ERRORED = re.compile(r"^Build '[^']*' errored after [^:]*: (?P<text>.*)$", re.S)
_INTERRUPTED = re.compile(r"Cancelling build after receiving|Cleanly cancelled builds after being interrupted")
# Summary lines that repeat the real error or carry none.
_GENERIC_ERRORS = re.compile(r"^(==> )?(Some builds didn't complete successfully|Builds finished but no artifacts)|^--> ")


def unescape(data: str) -> str:
    return data.replace(COMMA, ",").replace("\\n", "\n").replace("\\r", "\r")


@dataclass(frozen=True)
class Line:
    timestamp: int
    target: str
    type: str
    data: tuple[str, ...]

    @property
    def text(self) -> str:
        """The human text of a ui line (data after the ui kind), unescaped."""
        return unescape(",".join(self.data[1:])) if self.data else ""


def parse_line(raw: str) -> Line | None:
    """One machine-readable line, or None for anything else (plain stderr text)."""
    match = _LINE.match(raw.rstrip("\r\n"))
    if not match:
        return None
    ts, target, kind, rest = match.groups()
    data = tuple(rest.split(",")) if rest is not None else ()
    return Line(int(ts), target, kind, data)


# ------------------------------------------------------------------ provisioner steps


@dataclass(frozen=True)
class Marker:
    step: int  # 1-based provisioner index
    label: str
    pattern: re.Pattern


_SCRIPT_KIND = {"shell": "shell", "powershell": "powershell", "windows-shell": "windows-shell"}


def plan_steps(template: dict) -> tuple[int, list[Marker]]:
    """(number of provisioners, the markers that announce each one, in order)."""
    provisioners = template.get("provisioners", []) or []
    markers: list[Marker] = []
    for index, prov in enumerate(provisioners, start=1):
        kind = prov.get("type", "")
        if kind in _SCRIPT_KIND:
            said = _SCRIPT_KIND[kind]
            scripts = list(prov.get("scripts") or []) + ([prov["script"]] if prov.get("script") else [])
            for script in scripts:
                pattern = re.compile(rf"^Provisioning with {said} script: {re.escape(script)}$", re.I)
                markers.append(Marker(index, PurePath(script.replace("\\", "/")).name, pattern))
            if prov.get("inline"):
                # Inline commands run from a temporary file whose name we cannot know.
                markers.append(Marker(index, f"inline {kind}", re.compile(rf"^Provisioning with {said} script: ", re.I)))
        elif kind == "windows-restart":
            markers.append(Marker(index, "restart", re.compile(r"^Restarting Machine")))
        elif kind == "file":
            source = prov.get("source") or (prov.get("sources") or [""])[0]
            label = f"upload {PurePath(str(source).rstrip('/').replace(chr(92), '/')).name}".strip()
            markers.append(Marker(index, label, re.compile(r"^(Uploading|Downloading) .* => ")))
        elif kind == "shell-local":
            markers.append(Marker(index, "local shell", re.compile(r"^Running local shell script: ")))
        elif kind == "breakpoint":
            markers.append(Marker(index, "breakpoint", re.compile(r"^Pausing at breakpoint")))
        # Other types announce nothing we can rely on; the count still includes them.
    return len(provisioners), markers


# ------------------------------------------------------------------ the state of one build


@dataclass(frozen=True)
class Event:
    """Something worth a line in plain output: kind is phase, step, error or note."""

    kind: str
    text: str


# Messages of the wrap-up after success or failure (VM deletion, summaries): they must not
# hide where a failed build was when it failed.
_WRAPUP = re.compile(
    r"^(Provisioning step had errors|Unregistering and deleting virtual machine|Deleting |Clean"
    r"|Disconnecting from vmconnect|Cancelling build|Cleanly cancelled|Build '.*' (finished|errored)"
    r"|==> |--> |keep_registered set)"
)
# Builder steps that run after the last provisioner (hyperv/qemu builders, post-processors).
_AFTER_PROVISIONING = re.compile(
    r"^(Gracefully halting|Forcibly halting|Exporting virtual machine|Skipping export|Compacting|Running post-processor)"
)


@dataclass
class BuildState:
    total_steps: int = 0
    markers: list[Marker] = field(default_factory=list)
    phase: str = "starting"  # the latest narration, for display
    location: str = "before Packer's first step"  # the last real work, for failure messages
    step: int = 0
    step_label: str = ""
    provisioning_done: bool = False
    errors: list[str] = field(default_factory=list)  # every ui,error text (guest stderr too)
    build_errors: list[str] = field(default_factory=list)  # `<build>,error,<msg>`: why it failed
    error_count: int = 0
    interrupted: bool = False
    last_output: str = ""
    plain_text: list[str] = field(default_factory=list)  # lines that were not machine-readable
    first_ts: int | None = None
    last_ts: int | None = None
    _next_marker: int = 0

    @classmethod
    def for_template(cls, template: dict) -> "BuildState":
        total, markers = plan_steps(template)
        return cls(total_steps=total, markers=markers)

    # -- feeding

    def feed(self, raw: str) -> list[Event]:
        line = parse_line(raw)
        if line is None:
            text = raw.rstrip("\r\n").strip()
            if text:
                self.plain_text.append(text)
                self.last_output = text
                return [Event("note", text)]
            return []
        self.first_ts = self.first_ts or line.timestamp
        self.last_ts = line.timestamp
        if line.type == "ui" and line.data:
            return self._ui(line.data[0], line.text)
        if line.type == "error-count" and line.data and line.data[0].isdigit():
            self.error_count = int(line.data[0])
        elif line.type == "error" and line.data:
            self.build_errors.append(unescape(",".join(line.data)).strip())
        return []

    def _ui(self, kind: str, text: str) -> list[Event]:
        if kind == "say":
            return self._say(text.strip())
        if kind == "error":
            return self._error(text.strip())
        output = _OUTPUT.match(text.strip("\r\n"))
        self.last_output = (output.group("text") if output else text).strip() or self.last_output
        return []

    def _match_marker(self, body: str) -> Marker | None:
        for i in range(self._next_marker, len(self.markers)):
            if self.markers[i].pattern.search(body):
                self._next_marker = i + 1
                return self.markers[i]
        return None

    def _say(self, text: str) -> list[Event]:
        match = _SAY.match(text)
        body = (match.group("text") if match else text).strip()
        if _INTERRUPTED.search(body):
            self.interrupted = True
        if match and match.group("pp"):
            self.phase = f"post-processor {match.group('pp')}: {body}"
            self.location = f"post-processor {match.group('pp')} ('{body}')"
            return [Event("phase", self.phase)]
        marker = None if self.provisioning_done else self._match_marker(body)
        if marker:
            self.step, self.step_label = marker.step, marker.label
            self.phase = f"provisioner {self.step}/{self.total_steps}: {self.step_label}"
            self.location = f"provisioner {self.step}/{self.total_steps} ({self.step_label})"
            return [Event("step", self.phase)]
        self.phase = body or self.phase
        if _WRAPUP.search(body) or body.startswith("Provisioning with"):
            return [Event("note", body)]
        if self.step and not self.provisioning_done:
            if not _AFTER_PROVISIONING.search(body):
                return [Event("note", body)]  # a provisioner's own narration
            self.provisioning_done = True
        self.location = f"'{body}'"
        return [Event("phase", body)]

    def _error(self, text: str) -> list[Event]:
        if _INTERRUPTED.search(text):
            self.interrupted = True
        match = _SAY.match(text)
        body = (match.group("text") if match else text).strip()
        errored = _ERRORED.match(body)
        if errored:
            body = errored.group("text").strip()
        if body and not _GENERIC_ERRORS.match(body):
            repeated = bool(self.errors) and self.errors[-1] == body  # "==> b: X" then "Build 'b' errored: X"
            self.errors.append(body)
            if repeated:
                return []
            return [Event("error", body)]
        return []

    # -- summaries

    @property
    def where(self) -> str:
        """Where the build was: the provisioner step, else the builder phase."""
        return self.location

    @property
    def last_error(self) -> str | None:
        for source in (self.build_errors, [e for e in self.errors if not _INTERRUPTED.search(e)], self.errors, self.plain_text):
            if source:
                return source[-1]
        return None

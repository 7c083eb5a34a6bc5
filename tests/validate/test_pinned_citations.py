"""Facts about a pinned upstream are cited at the version the boxes pin.

The box profiles pin one version of each upstream per era (boxes/*.yml), and tools/lock.yml the ones
the project builds. A comment or a document that cites `owner/repo@vX`, `owner/repo vX`,
`owner/repo at vX` or `module@vX` of such an upstream must cite a pinned version, or say in the same
paragraph that the fact holds at a pinned one ("v0.28.9 (...), the same at v0.28.10"). Issue 23 found
the class: the pins moved (Flannel v0.28.9 -> v0.28.10, crictl 1.35 -> 1.37) and the citations of the
old tags stayed, so nobody had read those facts at the versions the boxes run.

What this cannot see: a citation by commit alone, or a version written without the repository's name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from k4w.infra.sources import REPO_ROOT as ROOT

# upstream -> how it is cited (GitHub repository and Go module path), and where the boxes pin it
# (keys of a box profile; each value's first x.y.z is the version).
UPSTREAMS = {
    "kubernetes": (r"kubernetes/kubernetes|k8s\.io/kubernetes", ("kubernetes.version", "components.kubernetes.version")),
    "flannel": (r"flannel-io/flannel|coreos/flannel", ("components.flannel.version", "kubernetes.flannel_image")),
    "cri-tools": (r"kubernetes-sigs/cri-tools|sigs\.k8s\.io/cri-tools", ("components.crictl.version",)),
    "containerd": (r"containerd/containerd(?:/v2)?", ("components.containerd.version",)),
    "runc": (r"opencontainers/runc", ("components.runc.version",)),
    "cni-plugins": (r"containernetworking/plugins", ("components.cni.version",)),
}
# Where facts are cited. Not tests/ (their fixtures keep the versions they were copied from) and not
# k4w/validate/facts/ (each table is generated for, and named by, its own version).
CITING = ("README.md", "docs/**/*.md", "boxes/*.yml", "tools/lock.yml", "k4w/**/*.py", "templates/**/*",
          "guest/**/*", "host/**/*", "scripts/*", "tasks.py", "examples/*")
NOT_CITING = ("k4w/validate/facts/",)

VERSION = re.compile(r"\d+\.\d+\.\d+")


def _lookup(data: dict, dotted: str):
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def pinned_versions(root: Path) -> dict[str, set[str]]:
    pins: dict[str, set[str]] = {name: set() for name in UPSTREAMS}
    for box in sorted((root / "boxes").glob("*.yml")):
        data = yaml.safe_load(box.read_text())
        for name, (_, keys) in UPSTREAMS.items():
            for key in keys:
                found = VERSION.search(str(_lookup(data, key) or ""))
                if found:
                    pins[name].add(found.group())
    for tool in yaml.safe_load((root / "tools" / "lock.yml").read_text())["tools"].values():
        for name, (names, _) in UPSTREAMS.items():
            if re.fullmatch(rf"(?:github\.com/)?(?:{names})", tool["module"]):
                pins[name].add(VERSION.search(tool["version"]).group())
    return pins


def paragraphs(text: str):
    """(first line number, text) of each paragraph: lines up to one that is empty once comment
    markers are stripped, so a comment block and a Markdown paragraph are each one."""
    block: list[str] = []
    first = 1
    for number, line in enumerate(text.splitlines(), 1):
        if re.sub(r"[\s#/<>*|\"-]", "", line) == "":
            if block:
                yield first, "\n".join(block)
            block = []
        else:
            if not block:
                first = number
            block.append(line)
    if block:
        yield first, "\n".join(block)


def _names_a_pin(text: str, pins: set[str]) -> bool:
    return any(re.search(rf"(?<![\d.]){re.escape(pin)}(?!\.?\d)", text) for pin in pins)


def stale_citations(text: str, pins: dict[str, set[str]]) -> list[tuple[int, str]]:
    """(line, citation) of each citation of a pinned upstream at a version no box pins, in a
    paragraph that names no pinned version of it either."""
    found = []
    for first, paragraph in paragraphs(text):
        for name, (names, _) in UPSTREAMS.items():
            for cited in re.finditer(rf"(?:{names})(?:@| at | )v?(\d+\.\d+\.\d+)(?![\w.]*\d)", paragraph):
                if cited.group(1) in pins[name] or _names_a_pin(paragraph, pins[name]):
                    continue
                found.append((first + paragraph.count("\n", 0, cited.start()), cited.group(0)))
    return found


def citing_files(root: Path) -> list[Path]:
    files = {path for pattern in CITING for path in root.glob(pattern) if path.is_file()}
    return sorted(path for path in files
                  if not any(path.relative_to(root).as_posix().startswith(skip) for skip in NOT_CITING))


PINS = pinned_versions(ROOT)


def test_every_upstream_has_a_pin():
    # Reading the pins is itself checked: an empty set would let every citation of it pass.
    assert all(PINS.values()), PINS
    assert {"0.28.10", "0.11.0"} <= PINS["flannel"] and {"1.37.2", "1.11.10"} <= PINS["kubernetes"]


def test_the_repository_cites_facts_at_the_pinned_versions():
    stale = []
    for path in citing_files(ROOT):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        stale += [f"{path.relative_to(ROOT)}:{line}: {cited}" for line, cited in stale_citations(text, PINS)]
    assert stale == [], "cited at a version no box pins (check the fact at the pinned tag and cite that):\n" + "\n".join(stale)


@pytest.mark.parametrize("text, cited", [
    # The README's outbound-traffic section before issue 23's fix: Flannel is pinned at v0.28.10.
    ("interface up by that address, flannel-io/flannel v0.28.9 `pkg/ipmatch/match.go`; without it",
     "flannel-io/flannel v0.28.9"),
    ("see kubernetes/kubernetes@v1.35.4 cmd/kubeadm/app/constants/constants.go", "kubernetes/kubernetes@v1.35.4"),
    ("# own store stays consistent (kubernetes-sigs/cri-tools v1.35.0 (46c81013) cmd/crictl/sandbox.go,",
     "kubernetes-sigs/cri-tools v1.35.0"),
    ("github.com/containerd/containerd/v2@v2.3.4 internal/cri/config/config.go", "containerd/containerd/v2@v2.3.4"),
])
def test_a_citation_of_an_unpinned_version_is_found(text, cited):
    assert stale_citations(text, PINS) == [(1, cited)]


@pytest.mark.parametrize("text", [
    "flannel-io/flannel@v0.28.10 pkg/ipmatch/match.go",
    "Shape read from flannel-io/flannel Documentation/kube-flannel.yml at tag v0.28.9 (commit\n"
    "5cd0d526), unchanged at v0.28.10",
    "kubernetes/kubernetes@v1.37.2, as at v1.35.4",
    "the flannel plugin of containernetworking/plugins v0.9.1",   # tools/lock.yml builds that one
])
def test_a_citation_at_or_beside_a_pinned_version_passes(text):
    assert stale_citations(text, PINS) == []


def test_a_paragraph_ends_at_an_empty_comment_line():
    text = "# flannel-io/flannel v0.28.10 reads it\n#\n# flannel-io/flannel v0.28.9 says so"
    assert stale_citations(text, PINS) == [(3, "flannel-io/flannel v0.28.9")]

"""The name an image has once containerd's CRI pulled it (k4w.derive.registry.stored_name): an imported
image must carry exactly that name, or the kubelet's request does not find it and the node pulls again.

The cases are distribution/reference v0.6.0's own (normalize_test.go TestParseDockerRef, the function the
CRI of containerd v2.3.7 names images with: internal/cri/server/images/image_pull.go), input -> expected.
"""

from __future__ import annotations

import pytest

from k4w.derive import registry

DIGEST = "sha256:e6693c20186f837fc393390135d8a598a96a833917917789d63766cab6c59582"
UPSTREAM_CASES = {
    "busybox": "docker.io/library/busybox:latest",
    "busybox:latest": "docker.io/library/busybox:latest",
    f"busybox@{DIGEST}": f"docker.io/library/busybox@{DIGEST}",
    "library/busybox": "docker.io/library/busybox:latest",
    "docker.io/busybox": "docker.io/library/busybox:latest",
    "docker.io/library/busybox": "docker.io/library/busybox:latest",
    "docker.io/busybox:latest": "docker.io/library/busybox:latest",
    "library/busybox:latest": "docker.io/library/busybox:latest",
    "docker.io/library/busybox:latest": "docker.io/library/busybox:latest",
    "gcr.io/library/busybox": "gcr.io/library/busybox:latest",
    f"gcr.io/library/busybox:latest@{DIGEST}": f"gcr.io/library/busybox@{DIGEST}",
}


@pytest.mark.parametrize("image", sorted(UPSTREAM_CASES))
def test_an_image_is_named_as_the_cri_names_it(image):
    assert registry.stored_name(image) == UPSTREAM_CASES[image]


@pytest.mark.parametrize("image, domain, rest", [
    ("localhost:5000/team/app:v1", "localhost:5000", "team/app:v1"),
    ("localhost/app", "localhost", "app"),
    ("index.docker.io/busybox", "docker.io", "library/busybox"),
    ("Example/app", "Example", "app"),   # not lowercase: a domain (splitDockerDomain)
    ("team/app", "docker.io", "team/app"),
])
def test_the_registry_of_a_name_is_where_distribution_reference_puts_it(image, domain, rest):
    assert registry.image_domain(image) == (domain, rest)

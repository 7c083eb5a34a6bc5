"""The interface between the runner and the real Packer templates (docs/internals.md).

Renders the repository's own cluster.yml in memory and checks what the runner relies on:
where the box and the VM go, how the Windows password arrives, and that every provisioner
announces itself so "step N of M" is right.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k4w import config, profiles, render
from k4w.cluster_model import Cluster
from k4w.sources import REPO_ROOT as ROOT
from k4w.bake.transcript import plan_steps

OUT = Path("/nonexistent/k4w-out")  # rendered in memory only


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render.render_files(Cluster.load(ROOT / "cluster.yml"), OUT, secrets_for=None)


@pytest.fixture(scope="module")
def boxes() -> list[str]:
    return config.load(ROOT / "cluster.yml").boxes()


def test_box_and_vm_go_where_the_runner_looks(rendered, boxes):
    for box in boxes:
        template = json.loads(rendered[f"packer/{box}.json"])
        outputs = [pp.get("output") for pp in template.get("post-processors", []) if isinstance(pp, dict) and pp.get("type") == "vagrant"]
        assert outputs == [f"{OUT}/boxes/.partial/{box}-{{{{.Provider}}}}.box"], box
        for builder in template["builders"]:
            assert builder.get("output_directory") == f"{OUT}/packer-vm/{box}", box


def test_windows_password_comes_from_the_environment_only(rendered, boxes):
    for box in boxes:
        if not profiles.load(box).is_windows:
            continue
        text = rendered[f"packer/{box}.json"]
        template = json.loads(text)
        variables = {k: v for k, v in template.get("variables", {}).items() if "K4W_ADMIN_PASSWORD" in v}
        assert variables and set(variables) <= set(template.get("sensitive-variables", [])), box
        assert render.PLACEHOLDER_SECRETS["admin_password"] not in text


def test_every_provisioner_announces_itself(rendered, boxes):
    for box in boxes:
        total, markers = plan_steps(json.loads(rendered[f"packer/{box}.json"]))
        assert total > 0
        assert {m.step for m in markers} == set(range(1, total + 1)), f"{box}: a provisioner type the progress view cannot see"

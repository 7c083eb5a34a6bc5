"""Box builds: run Packer on the rendered templates (invoke build-windows, build-ubuntu, build).

build_box / build_boxes orchestrate; packer_preflight lists host problems for `invoke doctor`.
"""

from k4w.infra.packer_cli import packer_preflight
from .runner import BoxResult, BuildFailed, build_box, build_boxes

__all__ = ["BoxResult", "BuildFailed", "build_box", "build_boxes", "packer_preflight"]

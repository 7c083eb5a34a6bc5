"""The end-to-end bake CI runs for real (`invoke e2e`, tests/e2e/).

No Hyper-V in CI, so the Linux half of the pipeline runs in QEMU: a debootstrapped Debian 12
disk (base_image), a real squid as the user's proxy (squid), the real `packer build` of the
`debian-12-e2e` and `ubuntu-2404-e2e` profiles through the same template and guest steps as the
Ubuntu boxes of each era (ubuntu-1604, ubuntu-2404), a fresh
guest booted from the produced box (guest) checked by the Ubuntu box spec, and a second run
of the provisioning that must change nothing (idempotence).
"""

from ci.e2e.run import BOXES, CI_BOXES, E2EResult, default_out, run_e2e

__all__ = ["BOXES", "CI_BOXES", "E2EResult", "default_out", "run_e2e"]

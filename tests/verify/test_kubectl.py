"""kubectl helpers the cluster spec waits with: timeouts that say what was last seen, and a pod's
state explained."""

from __future__ import annotations

import pytest

from k4w.infra.proc import wait_for
from k4w.verify.kubectl import pod_ready, pod_state


def test_wait_for_times_out_with_the_last_state():
    now = [0.0]

    def sleep(s):
        now[0] += s

    with pytest.raises(TimeoutError, match="waiting for pod x to be ready; last seen: x: Pending; x waiting ErrImagePull"):
        wait_for("pod x to be ready", lambda: (False, "x: Pending; x waiting ErrImagePull"), 30, clock=lambda: now[0], sleep=sleep)
    assert now[0] >= 30  # polled until the deadline, on the fake clock
    assert wait_for("x", lambda: (True, "done"), 30, clock=lambda: 0, sleep=sleep) == "done"


def test_pod_state_explains_a_pod_that_is_not_ready():
    pod = {"metadata": {"name": "win-client"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "win-client", "state": {"waiting": {"reason": "ContainerCreating", "message": "HNS endpoint"}}}]}}
    assert not pod_ready(pod)
    assert pod_state(pod) == "win-client: Pending; win-client waiting ContainerCreating HNS endpoint"

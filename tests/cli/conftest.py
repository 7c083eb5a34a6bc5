"""Fixtures for the CLI tests, which run the real `invoke` as a user does."""

import pytest

from tests.helpers import invoke


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """An --out folder the real `invoke render` filled from the default cluster.yml (one per test module)."""
    out = tmp_path_factory.mktemp("out")
    result = invoke("render", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out

"""Fixtures the served-channel tests share."""

from __future__ import annotations

import pytest
from serving import rule_server


@pytest.fixture
def running(request, tmp_path):
    """A ``monoagent serve`` whose openai-api conversation rule is the test's parameter (indirect), else the default."""
    server = rule_server(tmp_path, getattr(request, "param", None))
    yield server
    server.stop()

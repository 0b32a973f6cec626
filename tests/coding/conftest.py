"""Fixtures of the coding tests: the fake providers live on 127.0.0.1, which the
worker's own calls (a scaffold agent's, the model gateway's) reach only when an operator
allow-lists it, as tests/agents/conftest.py explains."""

import pytest

from tests.agents.conftest import LOOPBACK


@pytest.fixture(autouse=True)
def _loopback_allowlisted(settings):
    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK)

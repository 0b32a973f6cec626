"""Fixtures of the coding tests: the fake providers live on 127.0.0.1, which the
worker's own calls (a scaffold agent's, the model gateway's) reach only when an operator
allow-lists it, as tests/agents/conftest.py explains."""

import pytest

from agents.models import Agent, Arena
from tests.agents.conftest import LOOPBACK


@pytest.fixture(autouse=True)
def _loopback_allowlisted(settings):
    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK)


@pytest.fixture
def coders(db):
    """Two scaffold agents offered the shell: the coding agents a repo task is drawn
    between (the roster's built-ins cannot work on a repository)."""
    arena = Arena.objects.public()
    return [
        Agent.objects.create(
            arena=arena,
            slug=f"coder-{n}",
            display_name=f"Coder {n}",
            kind="scaffold",
            provider="anthropic",
            model_id="m",
            tool_set=["shell", "deliver"],
        )
        for n in (1, 2)
    ]

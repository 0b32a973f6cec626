"""Fixtures for the provider tests: fake provider servers and a recorder for backoff
waits. Nothing here is autouse: other tests in this package are unaffected."""

import base64
from collections.abc import Iterator

import pytest

from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI

# A real 1×1 PNG: the fakes check that images arrive as valid base64.
PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.fixture
def png() -> bytes:
    return PNG_1X1


@pytest.fixture
def sleeps() -> list[float]:
    """Pass ``sleep=sleeps.append`` to a client: the backoff waits are recorded, not
    slept."""
    return []


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """A running FakeAnthropic with an empty script (``push`` replies onto it)."""
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running FakeOpenAI with an empty script (``push`` replies onto it)."""
    with FakeOpenAI() as fake:
        yield fake

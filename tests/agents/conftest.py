"""Fixtures for the provider tests: fake provider servers, a recorder for backoff
waits, and the address policy. The fakes and the reference entrant live on 127.0.0.1,
which the worker's own calls may reach only when an operator allow-lists it: every test
here runs with loopback allow-listed explicitly (``ARENA_INTERNAL_ALLOWLIST``, and
:func:`loopback_outbound` for clients built by hand); tests/agents/test_outbound.py
shows the same calls refused without it."""

import base64
import contextlib
import threading
from collections.abc import Iterator

import pytest

from examples.remote_entrant.server import EntrantServer
from sandboxes.netpolicy import Allowlist, OutboundPolicy
from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI

LOOPBACK = "127.0.0.0/8,::1"


def loopback_outbound() -> OutboundPolicy:
    """The policy the fakes need: loopback allow-listed, no DNS (names are refused)."""
    return OutboundPolicy(allowlist=Allowlist.parse(LOOPBACK), resolver=None)


@pytest.fixture(autouse=True)
def _loopback_allowlisted(settings):
    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK)


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


@contextlib.contextmanager
def entrant_serving(secret: bytes) -> Iterator[EntrantServer]:
    """The reference entrant (examples/remote_entrant) on a free loopback port, served
    from a thread, with ``secret``; shut down at the end."""
    server = EntrantServer(("127.0.0.1", 0), secret)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

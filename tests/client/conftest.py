"""The client (client/, the ``arena_client`` package) driven in this process against
pytest-django's live server: scaffold agents on fake OpenAI-compatible servers on
127.0.0.1, a real RQ worker in a thread for the evals queue, alice's real API token."""

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import django_rq
import pytest
from django.db import connections
from rq import SimpleWorker
from rq.timeouts import TimerDeathPenalty

from accounts.services import api_token_create
from agents.models import Agent, Arena
from tests.agents.conftest import LOOPBACK
from tests.agents.fake_providers import FakeOpenAI, HttpError, text

CLIENT_DIR = Path(__file__).resolve().parents[2] / "client"
if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))


def echo_policy(name: str):
    """A candidate that repeats the prompt after its name."""

    def answer(request: dict) -> object:
        content = request["messages"][-1]["content"]
        prompt = content if isinstance(content, str) else content[0]["text"]
        return text(f"[{name}] {prompt}")

    return answer


def judge_policy(request: dict) -> object:
    return text(json.dumps({"winner": "tie", "reason": "both repeat the task"}))


def broken_policy(request: dict) -> object:
    return HttpError(400)


POLICIES = {"echo": echo_policy("echo"), "parrot": echo_policy("parrot"),
            "judge": judge_policy, "broken": broken_policy}  # fmt: skip


@pytest.fixture(autouse=True)
def _loopback_allowlisted(settings):
    settings.ARENA = settings.ARENA.replace(internal_allowlist=LOOPBACK)


@pytest.fixture
def fake_agents(db) -> Iterator[dict[str, FakeOpenAI]]:
    """Arena scaffold agents echo, parrot, judge and broken (its provider answers 400),
    each on its own fake OpenAI-compatible server (no key, as a local model's)."""
    arena = Arena.objects.public()
    with ExitStack() as stack:
        fakes = {
            slug: stack.enter_context(FakeOpenAI(policy=policy))
            for slug, policy in POLICIES.items()
        }
        for slug, fake in fakes.items():
            Agent.objects.create(
                arena=arena, slug=slug, display_name=slug.title(), kind="scaffold",
                provider="openai_compatible", model_id=f"{slug}-model",
                params={"base_url": fake.base_url, "max_tokens": 64},
            )  # fmt: skip
        yield fakes


class ThreadWorker(SimpleWorker):
    """A worker off the main thread: no signal handlers, a timer for job timeouts."""

    death_penalty_class = TimerDeathPenalty

    def _install_signal_handlers(self) -> None:
        pass


@pytest.fixture
def evals_worker(transactional_db) -> Iterator[None]:
    """A real RQ worker on the evals queue, in a thread, until the test ends."""
    queue = django_rq.get_queue("evals")
    stop = threading.Event()

    def work() -> None:
        try:
            while not stop.is_set():
                ThreadWorker([queue], connection=queue.connection).work(burst=True)
                stop.wait(0.2)
        finally:
            connections.close_all()  # this thread's own, or the test database stays in use

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)


@pytest.fixture
def token_of():
    def make(user) -> str:
        return api_token_create(user=user, name="client-test")[1]

    return make


@pytest.fixture
def arena(live_server, capsys, monkeypatch):
    """``arena(token, *argv)`` runs the client's main in this process against the live
    server: (exit code, stdout, stderr)."""
    from arena_client.cli import main

    monkeypatch.delenv("ARENA_URL", raising=False)
    monkeypatch.delenv("ARENA_TOKEN", raising=False)

    def run(token: str | None, *argv: str, url: str | None = None) -> tuple[int, str, str]:
        capsys.readouterr()
        prefix = ["--url", url or live_server.url]
        if token is not None:
            prefix += ["--token", token]
        try:
            code = main([*prefix, *argv])
        except SystemExit as exit:
            code = exit.code
        out, err = capsys.readouterr()
        return code, out, err

    return run

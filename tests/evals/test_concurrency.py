"""An evaluation's calls run concurrently, bounded per provider endpoint: the fake
servers count the requests in flight (each answer takes a little while), and no
endpoint ever sees more than the bound, while every call is still made and stored."""

import threading
import time

import pytest
from django.db import connection

from accounts.models import Team
from agents.models import Agent, Arena
from evals import services
from evals.models import EvalRun, EvalSpan
from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI, text
from tests.evals.scripted import KEY, suite_bytes

pytestmark = pytest.mark.django_db(transaction=True)


class InFlight:
    """A policy answering after ``delay_s`` that records the most requests it held at once."""

    def __init__(self, answer: str, delay_s: float = 0.05) -> None:
        self.answer, self.delay_s = answer, delay_s
        self.now = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, request: dict):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.delay_s)  # the fake provider's own latency, not a test wait
        with self.lock:
            self.now -= 1
        return text(self.answer)


def test_calls_are_concurrent_and_bounded_per_endpoint(alice, monkeypatch, settings):
    settings.ARENA = settings.ARENA.replace(eval_provider_concurrency=3)
    monkeypatch.setenv("EVAL_TEST_API_KEY", KEY)
    policies = {"fast": InFlight("2"), "slow": InFlight("2", delay_s=0.1)}
    with (
        FakeOpenAI(api_key=KEY, policy=policies["fast"]) as fast,
        FakeAnthropic(api_key=KEY, policy=policies["slow"]) as slow,
    ):
        arena = Arena.objects.public()
        for slug, fake, provider in (("fast", fast, "openai"), ("slow", slow, "anthropic")):
            Agent.objects.create(
                arena=arena, slug=slug, display_name=slug, kind="scaffold", provider=provider,
                model_id=f"{slug}-model",
                params={"base_url": fake.base_url, "api_key_env": "EVAL_TEST_API_KEY"},
            )  # fmt: skip
        team = Team.objects.get(name="Acme")
        suite = services.suite_store(team=team, name="arith.yaml", data=suite_bytes())
        evaluation = services.evaluation_create(
            team=team, suite=suite, agent_slugs=["fast", "slow"]
        )
        services.evaluation_execute(evaluation_id=evaluation.pk)

    assert EvalRun.objects.filter(status="done").count() == 40
    assert EvalSpan.objects.count() == 40
    # each endpoint had three requests in flight at once, never more
    assert policies["fast"].most == 3 and policies["slow"].most == 3


def test_two_evaluations_at_once_share_the_bound_per_endpoint(alice, monkeypatch, settings):
    """Two evaluation jobs running at the same time (as on two workers) against one
    endpoint hold at most the bound between them, not the bound each."""
    settings.ARENA = settings.ARENA.replace(eval_provider_concurrency=2)
    monkeypatch.setenv("EVAL_TEST_API_KEY", KEY)
    policy = InFlight("2")
    with FakeOpenAI(api_key=KEY, policy=policy) as fake:
        arena = Arena.objects.public()
        for slug in ("one", "two"):  # two agents, one endpoint
            Agent.objects.create(
                arena=arena, slug=slug, display_name=slug, kind="scaffold", provider="openai",
                model_id=f"{slug}-model",
                params={"base_url": fake.base_url, "api_key_env": "EVAL_TEST_API_KEY"},
            )  # fmt: skip
        team = Team.objects.get(name="Acme")
        suite = services.suite_store(team=team, name="arith.yaml", data=suite_bytes())
        evaluations = [
            services.evaluation_create(team=team, suite=suite, agent_slugs=[slug])
            for slug in ("one", "two")
        ]
        errors: list[BaseException] = []

        def execute(pk: int) -> None:
            try:
                services.evaluation_execute(evaluation_id=pk)
            except BaseException as exc:  # reported in the test's thread
                errors.append(exc)
            finally:
                connection.close()  # this thread's own

        threads = [threading.Thread(target=execute, args=(e.pk,)) for e in evaluations]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert errors == []
    assert EvalRun.objects.filter(status="done").count() == 40
    assert policy.most == 2  # two jobs × a bound of 2 each would have reached 4

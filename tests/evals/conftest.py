from contextlib import ExitStack

import pytest

from agents.models import Agent, Arena
from tests.agents.conftest import _loopback_allowlisted  # noqa: F401 - the fakes are on loopback
from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI
from tests.evals.scripted import (
    KEY,
    candidate_policy,
    desktop_policy,
    judge_policy,
    mixed_judge_policy,
)
from tests.evals.tournament_world import acme, world  # noqa: F401 - the tournaments' world


@pytest.fixture
def arena_agents(monkeypatch, alice):
    """alpha and gamma on fake OpenAI servers, beta and the judge on fake Anthropic ones."""
    monkeypatch.setenv("EVAL_TEST_API_KEY", KEY)
    with ExitStack() as stack:
        fakes = {
            "alpha": stack.enter_context(FakeOpenAI(api_key=KEY, policy=candidate_policy("alpha"))),
            "beta": stack.enter_context(
                FakeAnthropic(api_key=KEY, policy=candidate_policy("beta"))
            ),
            "gamma": stack.enter_context(FakeOpenAI(api_key=KEY, policy=candidate_policy("gamma"))),
            "judge": stack.enter_context(FakeAnthropic(api_key=KEY, policy=judge_policy)),
        }
        scaffolds_on(fakes)
        yield fakes


def scaffolds_on(fakes: dict) -> None:
    """A scaffold agent of the arena per fake server, named by its key, its model
    ``<slug>-model``, its key in EVAL_TEST_API_KEY."""
    arena = Arena.objects.public()
    for slug, fake in fakes.items():
        Agent.objects.create(
            arena=arena, slug=slug, display_name=slug.title(), kind="scaffold",
            provider="openai" if isinstance(fake, FakeOpenAI) else "anthropic",
            model_id=f"{slug}-model",
            params={"base_url": fake.base_url, "api_key_env": "EVAL_TEST_API_KEY"},
        )  # fmt: skip


@pytest.fixture
def desktop_agents(monkeypatch, alice):
    """The same four, scripted for the mixed suite: in their lanes too (tests.evals.scripted
    ``desktop_policy``), and the judge on desktop tasks' final messages."""
    monkeypatch.setenv("EVAL_TEST_API_KEY", KEY)
    arena = Arena.objects.public()
    with ExitStack() as stack:
        fakes = {
            "alpha": stack.enter_context(
                FakeOpenAI(
                    api_key=KEY, policy=desktop_policy("alpha", FakeOpenAI.tool_result_texts)
                )
            ),
            "beta": stack.enter_context(
                FakeAnthropic(
                    api_key=KEY, policy=desktop_policy("beta", FakeAnthropic.tool_result_texts)
                )
            ),
            "gamma": stack.enter_context(
                FakeOpenAI(
                    api_key=KEY, policy=desktop_policy("gamma", FakeOpenAI.tool_result_texts)
                )
            ),
            "judge": stack.enter_context(FakeAnthropic(api_key=KEY, policy=mixed_judge_policy)),
        }
        for slug, fake in fakes.items():
            Agent.objects.create(
                arena=arena, slug=slug, display_name=slug.title(), kind="scaffold",
                provider="openai" if isinstance(fake, FakeOpenAI) else "anthropic",
                model_id=f"{slug}-model",
                params={"base_url": fake.base_url, "api_key_env": "EVAL_TEST_API_KEY",
                        "max_tokens": 256},
            )  # fmt: skip
        yield fakes


@pytest.fixture(autouse=True)
def _calls_in_the_test_thread(settings):
    """One call at a time, in the test's own thread (and so its transaction); the
    concurrency test asks for more, on committed data."""
    settings.ARENA = settings.ARENA.replace(eval_provider_concurrency=1)

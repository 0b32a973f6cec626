"""Benchmark: an offline evaluation of 1,000 chat tasks × 4 agents (issue #16) against
fake provider servers on 127.0.0.1 (tests/agents/fake_providers.py, one per agent,
answering at once), on PostgreSQL (a throwaway database made from DATABASE_URL).
Prints one JSON document.

- arena: ``evals.services.evaluation_execute`` — 4,000 candidate calls through the real
  OpenAI SDK client, each stored as a run with its span and exact-match score — at a
  concurrency of 1 and of ``ARENA_EVAL_PROVIDER_CONCURRENCY`` (4 per endpoint), then the
  run record (``evals.selectors.evaluation_record``);
- reference, the same run: the same 4,000 calls made directly with the same clients and
  the same thread layout, storing nothing. The difference per call is the arena's
  overhead (the database rows, the spans, the retry wrapper, the scheduling, and the
  evaluation's own clients being built). A one-task evaluation and a reference call run
  first, untimed: the SDKs' first import and first call take seconds.
- with provider latency: 100 tasks × 4 agents with fakes answering after 50 ms, at both
  concurrencies (what the per-endpoint bound is for: real providers take seconds; at
  zero latency on 2 cores, threads only contend with the in-process fakes).

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \\
     .venv/bin/python tests/bench/bench_evals.py [tasks]
"""

import json
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

from agents.providers.base import Text, Turn  # noqa: E402
from tests.agents.fake_providers import FakeOpenAI, text  # noqa: E402

KEY = "sk-bench-evals-0123456789"
AGENTS = 4


def suite(tasks: int) -> bytes:
    return json.dumps(
        [
            {
                "id": f"t{n}",
                "prompt": f"Compute {n}+{n}. Answer with the number only.",
                "evaluation": {"type": "exact", "expected": str(2 * n)},
            }
            for n in range(tasks)
        ]
    ).encode()


LATENCY_S = {"now": 0.0}  # the fake providers' answer time, per scenario


def answer(request: dict):
    if LATENCY_S["now"]:
        time.sleep(LATENCY_S["now"])  # the emulated provider's latency
    prompt = request["messages"][-1]["content"]
    prompt = prompt if isinstance(prompt, str) else prompt[0]["text"]
    n = int(prompt.split(" ")[1].split("+")[0])
    return text(str(2 * n), usage=(20, 2))


def reference(clients: list, prompts: list[str], concurrency: int) -> float:
    """The same calls, straight through the clients, nothing stored."""

    def call(client, prompt) -> None:
        client.complete(system="", turns=[Turn("user", [Text(prompt)])], tools=[], max_tokens=4096)

    started = time.perf_counter()
    if concurrency == 1:
        for prompt in prompts:
            for client in clients:
                call(client, prompt)
    else:
        with ThreadPoolExecutor(max_workers=concurrency * len(clients)) as pool:
            list(pool.map(lambda job: call(*job), [(c, p) for p in prompts for c in clients]))
    return time.perf_counter() - started


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    report: dict = {"tasks": tasks, "agents": AGENTS, "loadavg_start": os.getloadavg()}
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"bench_evals_{database['NAME']}"
    config = setup_databases(verbosity=0, interactive=False)
    os.environ["EVAL_BENCH_API_KEY"] = KEY
    try:
        from accounts.services import team_create
        from agents.models import Agent, Arena
        from agents.providers.openai_client import OpenAIClient
        from evals import selectors, services
        from evals.models import EvalRun
        from sandboxes.netpolicy import Allowlist, OutboundPolicy

        settings.ARENA = settings.ARENA.replace(internal_allowlist="127.0.0.0/8")
        from django.contrib.auth import get_user_model

        owner = get_user_model().objects.create_user(username="bench", password="x" * 12)
        team = team_create(name="Bench", owner=owner)
        with ExitStack() as stack:
            fakes = [
                stack.enter_context(FakeOpenAI(api_key=KEY, policy=answer)) for _ in range(AGENTS)
            ]
            arena = Arena.objects.public()
            for i, fake in enumerate(fakes):
                Agent.objects.create(
                    arena=arena, slug=f"agent-{i}", display_name=f"Agent {i}", kind="scaffold",
                    provider="openai", model_id=f"model-{i}",
                    params={"base_url": fake.base_url, "api_key_env": "EVAL_BENCH_API_KEY"},
                )  # fmt: skip
            stored = services.suite_store(team=team, name="bench.json", data=suite(tasks))
            prompts = [t["prompt"] for t in stored.tasks]
            outbound = OutboundPolicy(allowlist=Allowlist.parse("127.0.0.0/8"), resolver=None)
            clients = [
                OpenAIClient(f"model-{i}", KEY, fake.base_url, max_retries=0, outbound=outbound)
                for i, fake in enumerate(fakes)
            ]
            calls = tasks * AGENTS
            # warm-up: the SDKs' first import and first call (seconds: their pydantic
            # types are built on first use), outside both timings
            warm = services.suite_store(team=team, name="warm.json", data=suite(1))
            services.evaluation_execute(
                evaluation_id=services.evaluation_create(
                    team=team, suite=warm, agent_slugs=[f"agent-{i}" for i in range(AGENTS)]
                ).pk
            )
            reference(clients, prompts[:1], 1)
            for concurrency in (1, settings.ARENA.eval_provider_concurrency):
                evaluation = services.evaluation_create(
                    team=team, suite=stored, agent_slugs=[f"agent-{i}" for i in range(AGENTS)]
                )
                started = time.perf_counter()
                services.evaluation_execute(evaluation_id=evaluation.pk, concurrency=concurrency)
                arena_s = time.perf_counter() - started
                done = EvalRun.objects.filter(evaluation=evaluation, status="done").count()
                started = time.perf_counter()
                record = selectors.evaluation_record(evaluation)
                record_s = time.perf_counter() - started
                reference_s = reference(clients, prompts, concurrency)
                report[f"concurrency_{concurrency}"] = {
                    "calls": calls,
                    "runs_done": done,
                    "exact_match": record["statistics"]["exact_match"],
                    "arena_s": round(arena_s, 3),
                    "arena_calls_per_s": round(calls / arena_s, 1),
                    "reference_s": round(reference_s, 3),
                    "reference_calls_per_s": round(calls / reference_s, 1),
                    "arena_overhead_ms_per_call": round((arena_s - reference_s) / calls * 1000, 3),
                    "record_s": round(record_s, 3),
                    "record_bytes": len(json.dumps(record)),
                }
            # With a provider latency (50 ms per answer, 100 tasks): what the concurrency
            # bound is for; at zero latency on 2 cores threads only contend.
            LATENCY_S["now"] = 0.05
            few = services.suite_store(team=team, name="latency.json", data=suite(100))
            latency: dict = {"tasks": 100, "calls": 100 * AGENTS, "provider_latency_ms": 50}
            for concurrency in (1, settings.ARENA.eval_provider_concurrency):
                evaluation = services.evaluation_create(
                    team=team, suite=few, agent_slugs=[f"agent-{i}" for i in range(AGENTS)]
                )
                started = time.perf_counter()
                services.evaluation_execute(evaluation_id=evaluation.pk, concurrency=concurrency)
                arena_s = time.perf_counter() - started
                reference_s = reference(clients, [t["prompt"] for t in few.tasks], concurrency)
                latency[f"concurrency_{concurrency}"] = {
                    "arena_s": round(arena_s, 3),
                    "arena_calls_per_s": round(400 / arena_s, 1),
                    "reference_s": round(reference_s, 3),
                    "arena_overhead_ms_per_call": round((arena_s - reference_s) / 400 * 1000, 3),
                }
            LATENCY_S["now"] = 0.0
            report["with_provider_latency"] = latency
            requests = defaultdict(int)
            for i, fake in enumerate(fakes):
                requests[f"agent-{i}"] = len(fake.requests)
            report["requests_per_fake"] = dict(requests)
    finally:
        teardown_databases(config, verbosity=0)
    report["loadavg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark: admission and matchmaking. Prints one JSON document.

- admission: ``task_submit`` end to end (consent, classifier, near-duplicate check
  against the submitter's 200 most recent tasks, the locked queue bound, the draw, the
  rows) on the database of DATABASE_URL (a throwaway test database is created and
  dropped), against a reference near-duplicate check that re-tokenises every earlier
  task with a naive set-of-trigrams loop. Measured twice: in steady state (this
  process has seen the earlier tasks, so their trigrams are cached) and cold (the
  trigram cache emptied before every call, as in a freshly started worker);
- matchmaker: one draw for 200 agents, ours against a numpy reference of the same
  distribution.
Targets (issue #5): admission p50 ≤ 10 ms, a draw for 200 agents ≤ 2 ms.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \
     .venv/bin/python tests/bench/bench_admission.py
"""

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

import numpy as np  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

from battles.matchmaking import Candidate, draw_pair  # noqa: E402


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 3),
        "n": len(ordered),
    }


def reference_draw(counts: np.ndarray, strengths: np.ndarray, rng: np.random.Generator):
    weights = (counts + 4.0) ** -0.5
    first = rng.choice(len(counts), p=weights / weights.sum())
    p = 1 / (1 + np.exp(-(strengths[first] - strengths)))
    w = weights * (0.05 + 4 * p * (1 - p))
    w[first] = 0
    second = rng.choice(len(counts), p=w / w.sum())
    return (first, second) if rng.random() < 0.5 else (second, first)


def bench_matchmaker() -> dict:
    rng = random.Random(7)
    pool = [Candidate(i, rng.randint(0, 500), rng.gauss(0, 1)) for i in range(200)]
    ours = []
    for _ in range(2000):
        t = time.perf_counter()
        draw_pair(pool, rng)
        ours.append(time.perf_counter() - t)
    counts = np.array([c.rated_battles for c in pool], dtype=float)
    strengths = np.array([c.strength for c in pool])
    np_rng = np.random.default_rng(7)
    reference = []
    for _ in range(2000):
        t = time.perf_counter()
        reference_draw(counts, strengths, np_rng)
        reference.append(time.perf_counter() - t)
    return {"agents": 200, "ours": summary(ours), "numpy_reference": summary(reference)}


def reference_duplicate_check(text: str, earlier: list[str]) -> float:
    def grams(s: str) -> set:
        words = s.lower().split()
        return {tuple(words[i : i + 3]) for i in range(max(1, len(words) - 2))}

    mine = grams(text)
    return max((len(mine & grams(e)) / len(mine | grams(e)) for e in earlier), default=0.0)


def bench_admission() -> dict:
    from django.contrib.auth import get_user_model

    from accounts.services import consent_accept, consent_terms_publish, team_create
    from agents.models import Arena
    from agents.services import roster_install_builtins
    from battles.admission_db import trigram_cache
    from battles.models import Task
    from battles.services import task_submit

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    team_create(name="bench", owner=user)
    consent_accept(user=user, terms=consent_terms_publish(text="bench"))
    roster_install_builtins(arena=Arena.objects.public())
    words = [
        "open",
        "find",
        "list",
        "the",
        "a",
        "page",
        "file",
        "title",
        "report",
        "check",
        "count",
        "write",
        "read",
        "site",
    ]
    rng = random.Random(3)

    def instruction() -> str:
        return " ".join(rng.choice(words) for _ in range(14)) + f" #{rng.random():.12f}"

    times = []
    with mock.patch("battles.services.admission.battle_enqueue"):  # Redis enqueue is not admission
        for _ in range(200):  # the 200 recent tasks the check compares against
            task_submit(user=user, instruction=instruction(), rng=rng)
        for _ in range(300):
            text = instruction()
            t = time.perf_counter()
            task_submit(user=user, instruction=text, rng=rng)
            times.append(time.perf_counter() - t)
        cold = []
        for _ in range(100):
            text = instruction()
            trigram_cache.clear()
            t = time.perf_counter()
            task_submit(user=user, instruction=text, rng=rng)
            cold.append(time.perf_counter() - t)
    earlier = list(Task.objects.order_by("-created_at").values_list("instruction", flat=True)[:200])
    ref = []
    for _ in range(300):
        text = instruction()
        t = time.perf_counter()
        reference_duplicate_check(text, earlier)
        ref.append(time.perf_counter() - t)
    return {
        "database": django.db.connection.vendor,
        "recent_tasks_compared": 200,
        "task_submit": summary(times),
        "task_submit_cold_trigram_cache": summary(cold),
        "reference_duplicate_check_only": summary(ref),
    }


def main() -> None:
    from django.conf import settings

    settings.ARENA = settings.ARENA.replace(queue_max=10**6, team_queue_quota=10**6)
    report = {"matchmaker": bench_matchmaker()}
    config = setup_databases(verbosity=0, interactive=False)
    try:
        report["admission"] = bench_admission()
    finally:
        teardown_databases(config, verbosity=0)
    report["targets"] = {"admission_p50_ms": 10, "matchmaker_draw_ms": 2}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

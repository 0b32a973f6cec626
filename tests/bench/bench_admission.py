"""Benchmark: admission and matchmaking. Prints one JSON document.

- admission: ``task_submit`` end to end (consent, classifier, near-duplicate check
  against the submitter's 200 most recent tasks, the locked queue bound, the draw, the
  rows) on the database of DATABASE_URL (a throwaway test database is created and
  dropped). The near-duplicate check is MinHash/LSH candidates from the signatures
  stored with the tasks + exact Jaccard on them; the same-run reference is
  ``task_submit`` with the previous check (exact Jaccard against every one of the 200,
  trigram sets cached per process), interleaved call by call. Measured warm (this
  process has cached the earlier tasks' trigrams) and cold (the cache emptied before
  every call, as in a freshly started worker); cold again with the 200 earlier tasks
  stored without signatures (as before migration 0013, or created by an import); the
  check alone is timed too;
- matchmaker: one draw for 200 agents, ours against a numpy reference of the same
  distribution.
Targets (issue #13): admission p50 ≤ 3 ms; a draw ≤ 1.5 × the numpy reference.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \
     .venv/bin/python tests/bench/bench_admission.py
"""

import functools
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
    counts = np.array([c.rated_battles for c in pool], dtype=float)
    strengths = np.array([c.strength for c in pool])
    np_rng = np.random.default_rng(7)
    ours, reference = [], []
    for _ in range(3000):  # interleaved: both see the same load
        t = time.perf_counter()
        draw_pair(pool, rng)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        reference_draw(counts, strengths, np_rng)
        reference.append(time.perf_counter() - t)
    return {"agents": 200, "ours": summary(ours), "numpy_reference": summary(reference)}


_old_cache: dict = {}


def old_near_duplicate_check(*, user_id: int, grams: frozenset, similar=None) -> None:
    """The check before MinHash/LSH (the same-run reference): the ids of the 200 recent
    tasks by a query of its own (``similar``, the LSH candidates, is not used), their
    trigram sets from a per-process cache (instructions read for misses), exact Jaccard
    against every one."""
    from datetime import timedelta

    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from arena_site.exceptions import ApplicationError
    from battles.similarity import most_similar, trigrams

    arena = settings.ARENA
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, created_at FROM battles_task WHERE submitter_id = %s AND "
            "created_at >= %s ORDER BY created_at DESC LIMIT %s",
            [user_id, timezone.now() - timedelta(days=arena.dup_window_days), arena.dup_max_tasks],
        )
        rows = cursor.fetchall()
        known = {key: _old_cache.get(key) for key in rows}
        missing = [task_id for (task_id, _), got in known.items() if got is None]
        if missing:
            marks = ", ".join(["%s"] * len(missing))
            sql = f"SELECT id, instruction FROM battles_task WHERE id IN ({marks})"  # noqa: S608
            cursor.execute(sql, missing)
            texts = dict(cursor.fetchall())
            for key in rows:
                if known[key] is None:
                    known[key] = _old_cache[key] = trigrams(texts[key[0]])
    earlier, score = most_similar(grams, ((key[0], got) for key, got in known.items()))
    if earlier is not None and score >= arena.dup_theta:
        raise ApplicationError("near duplicate", code="near_duplicate", status=409)


def bench_admission() -> dict:
    from django.contrib.auth import get_user_model

    from accounts.services import consent_accept, consent_terms_publish, team_create
    from agents.models import Arena
    from agents.services import roster_install_builtins
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

    from datetime import timedelta

    from django.utils import timezone

    import battles.services.admission as admission
    from battles.admission_db import near_duplicate_cache, submitter_context
    from battles.models import Task
    from battles.similarity import signature, trigrams

    new_check = admission._near_duplicate_check
    old_check = functools.partial(old_near_duplicate_check, user_id=user.pk)
    samples: dict[str, list[float]] = {
        k: []
        for k in ("warm", "warm_old", "cold", "cold_old", "cold_unsigned", "check", "check_old")
    }

    def submit(check, key: str, clear) -> None:
        admission._near_duplicate_check = check
        clear()
        text = instruction()
        t = time.perf_counter()
        task_submit(user=user, instruction=text, rng=rng)
        samples[key].append(time.perf_counter() - t)

    def nothing() -> None:
        pass

    with mock.patch("battles.services.admission.battle_enqueue"):  # Redis enqueue is not admission
        try:
            for _ in range(200):  # the 200 recent tasks the check compares against
                task_submit(user=user, instruction=instruction(), rng=rng)
            with django.db.connection.cursor() as cursor:
                # Planner statistics, as a live database has them (autovacuum would
                # otherwise gather them at some point of the run, changing the plans).
                cursor.execute("ANALYZE")
            for _ in range(20):  # both paths warm
                submit(new_check, "warm", nothing)
                submit(old_check, "warm_old", nothing)
            for key in samples:
                samples[key].clear()
            for _ in range(300):  # interleaved: both see the same load
                submit(new_check, "warm", nothing)
                submit(old_check, "warm_old", nothing)
            for _ in range(60):
                submit(new_check, "cold", near_duplicate_cache().clear)
                submit(old_check, "cold_old", _old_cache.clear)
        finally:
            admission._near_duplicate_check = new_check
        for _ in range(300):  # the check alone, warm (the new one with its context statement)
            grams = trigrams(instruction())
            t = time.perf_counter()
            similar = submitter_context(
                user_id=user.pk,
                cap=3,
                since=timezone.now() - timedelta(days=7),
                limit=200,
                minhash=signature(grams),
            ).similar
            new_check(grams=grams, similar=similar)
            samples["check"].append(time.perf_counter() - t)
            t = time.perf_counter()
            old_check(grams=grams)
            samples["check_old"].append(time.perf_counter() - t)

        def unsigned_cold() -> None:
            Task.objects.filter(submitter=user, minhash__isnull=False).update(minhash=None)
            near_duplicate_cache().clear()

        for _ in range(30):  # last: the earlier tasks lose their signatures
            submit(new_check, "cold_unsigned", unsigned_cold)
    index = near_duplicate_cache()
    return {
        "database": django.db.connection.vendor,
        "recent_tasks_compared": 200,
        "task_submit_warm": summary(samples["warm"]),
        "task_submit_warm_old_check": summary(samples["warm_old"]),
        "task_submit_cold": summary(samples["cold"]),
        "task_submit_cold_old_check": summary(samples["cold_old"]),
        "task_submit_cold_no_stored_signatures": summary(samples["cold_unsigned"]),
        # The new check's window query is the submitter-context statement (merged with it
        # in task_submit), timed here with the check, and so is the new task's signature.
        "near_duplicate_check_only_warm": summary(samples["check"]),
        "near_duplicate_check_only_warm_old": summary(samples["check_old"]),
        "trigram_cache_entries": len(index),
        "trigram_cache_bytes": index.nbytes,
        "trigram_cache_bound_bytes": index.max_bytes,
    }


def main() -> None:
    from django.conf import settings

    settings.ARENA = settings.ARENA.replace(queue_max=10**6, team_queue_quota=10**6)
    report = {"load_average_1_5_15_start": [round(x, 2) for x in os.getloadavg()]}
    report["matchmaker"] = bench_matchmaker()
    config = setup_databases(verbosity=0, interactive=False)
    try:
        report["admission"] = bench_admission()
    finally:
        teardown_databases(config, verbosity=0)
    report["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    report["cpus"] = os.cpu_count()
    report["targets"] = {"admission_p50_ms": 3, "matchmaker_draw_vs_numpy": 1.5}
    mm = report["matchmaker"]
    report["matchmaker"]["ratio_p50"] = round(
        mm["ours"]["p50_ms"] / mm["numpy_reference"]["p50_ms"], 2
    )
    report["meets_target"] = {
        "admission": report["admission"]["task_submit_warm"]["p50_ms"] <= 3,
        "matchmaker": report["matchmaker"]["ratio_p50"] <= 1.5,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

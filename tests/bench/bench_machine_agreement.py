"""The human–machine agreement table of a seeded live arena (issue 16 point 6), as JSON.

Seeds battles in the public arena of a throwaway database (made from DATABASE_URL):
each battle's two sides end with final messages, the right answer ("42") on side A, on
side B or on neither; the arena's machine judge — a scripted fake Anthropic server on
127.0.0.1 (tests/judging/machine_script.py) behind the real SDK client — judges each
battle while it is open, through the real job's service (``battle_machine_judge``);
then simulated people vote through the real vote service (``vote_cast``: the right side
with probability 0.8, else another choice; "both bad" is their word for neither),
which decides each battle. Prints the verdict counts, the judge's calls and time, and
``judging.machine_reads.machine_agreement``: n, agreement, Cohen's κ and the confusion
table per judge model × task category. Seeded: the same numbers on every run.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \\
     .venv/bin/python tests/bench/bench_machine_agreement.py [battles]
"""

import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

SEED = 16
CATEGORY_OF = ("browsing", "files_and_data", "general")


def main(battles: int) -> dict:
    from accounts.services import consent_terms_publish
    from agents.models import Arena
    from agents.services import roster_install_builtins
    from battles.models import Task
    from judging.machine_reads import machine_agreement, machine_verdict_counts
    from judging.services.machine import battle_machine_judge
    from tests.agents.fake_providers import FakeAnthropic
    from tests.conftest import make_person
    from tests.judging.battle_factories import READ, T0, ended_battle, judge_on
    from tests.judging.machine_script import (
        KEY,
        KEY_ENV,
        RUBRIC,
        arena_judge_on,
        judge_policy,
        machine_judge_agent,
    )

    # loopback for the fake judge; votes final at once (no undo window to wait out)
    settings.ARENA = settings.ARENA.replace(internal_allowlist="127.0.0.0/8", vote_undo_window_s=0)
    os.environ[KEY_ENV] = KEY
    rng = random.Random(SEED)
    terms = consent_terms_publish(text="You agree to publication.")
    submitter = make_person("submitter", "Bench", terms)
    crowd = make_person("crowd", None, terms)
    roster_install_builtins(arena=Arena.objects.public())
    messages = {"A": ("It is 42.", "I could not."), "B": ("No idea.", "42"),
                "neither": ("No idea.", "Nothing found.")}  # fmt: skip
    with FakeAnthropic(api_key=KEY, policy=judge_policy) as fake:
        arena_judge_on(machine_judge_agent(fake.base_url), pairwise=True, rubric=RUBRIC)
        seeded, started = [], time.perf_counter()
        for i in range(battles):
            right = rng.choice(["A", "B", "neither"])
            battle = ended_battle(submitter, messages=messages[right])
            Task.objects.filter(pk=battle.task_id).update(category=CATEGORY_OF[i % 3])
            battle_machine_judge(battle_id=battle.pk)  # as the job does when it opens
            seeded.append((battle, right))
        judging_s = time.perf_counter() - started
        calls = len(fake.requests)
    people = {"A": "A", "B": "B", "neither": "both_bad"}
    for i, (battle, right) in enumerate(seeded):
        choice = people[right]
        if rng.random() >= 0.8:
            choice = rng.choice([c for c in ("A", "B", "tie", "both_bad") if c != choice])
        judge_on(crowd, battle, choice, at=T0 + i * 2 * READ)
    arena = Arena.objects.public()
    return {
        "battles": battles,
        "seed": SEED,
        "verdicts": machine_verdict_counts(arena_id=arena.pk),
        "judge_calls": calls,
        "judging_s": round(judging_s, 3),
        "judging_ms_per_battle": round(1000 * judging_s / battles, 1),
        "agreement": machine_agreement(arena_id=arena.pk),
    }


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 45
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"bench_machine_{database['NAME']}"
    config = setup_databases(verbosity=0, interactive=False)
    try:
        report = main(count)
    finally:
        teardown_databases(config, verbosity=0)
    print(json.dumps(report, indent=2))

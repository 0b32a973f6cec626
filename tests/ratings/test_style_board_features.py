"""Each battle side's raw style (ratings.style_features): what is measured, where it is
not known, markdown counted in PostgreSQL exactly as in Python, one query per table
whatever the number of battles, and the coding diff size on the coding board."""

import math
import random
from datetime import timedelta

import numpy as np
import pytest
from django.test import Client
from django.utils import timezone

from agents.models import Arena
from battles.coding_models import CodingOutcome
from battles.models import Battle, Run, Step, Task
from ratings.jobs import ratings_refit
from ratings.models import RunStyle
from ratings.refit import run_styles_record
from ratings.selectors import rated_battles
from ratings.style_features import FEATURES, markdown_elements, side_features, style_battles
from tests.ratings.factories import decided_battle, judges

MARKDOWN = [
    ("plain words, no markup at all", 0),
    ("# Title\n## Part\n####### not a header\n#no space", 2),
    ("- one\n* two\n+ three\n1. four\n2) five\n-not an item\n  - nested", 6),
    ("**bold** and __also__ but *not* counted, nor **unclosed", 2),
    ("```python\nprint(1)\n```\ntext\n```\nunclosed fence", 2),
    ("[a link](https://example.com) and [not a link] (x) and [x](no space here)", 1),
    ("| a | b |\n|---|:---:|\n| 1 | 2 |\n\n--- not a table\n:--- | ---", 2),
    ("# Report\n\n- **Found**: [the page](https://e.com)\n\n```\ncode\n```", 5),
    ("ünïcødé **gras** ✓\r\n# titre\r\n", 2),
]


@pytest.mark.parametrize(("text", "expected"), MARKDOWN)
def test_markdown_elements_are_counted_by_kind(text, expected):
    assert markdown_elements(text) == expected


def side_run(battle, side, agent, *, message="", steps=0, seconds=None, files=0, diff=None):
    started = timezone.now() - timedelta(hours=1)
    run = Run.objects.create(
        battle=battle, side=side, agent=agent, status="ended", step_budget=50,
        wall_budget_s=600, final_message=message, end_reason="delivered",
        delivered_files=[{"name": f"f{i}.txt", "size": 1, "sha256": ""} for i in range(files)],
        started_at=started if seconds is not None else None,
        ended_at=started + timedelta(seconds=seconds) if seconds is not None else None,
    )  # fmt: skip
    Step.objects.bulk_create(
        Step(run=run, index=i, tool="shell", started_at=started, duration_ms=5)
        for i in range(steps)
    )
    if diff is not None:
        files_, error = diff
        CodingOutcome.objects.create(run=run, files=files_, diff_error=error)
    return run


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


def test_each_feature_is_read_from_its_table_and_unknown_is_nan(alice, agents):
    rule, idle = agents["rulebook"], agents["idle"]
    coding = decided_battle(submitter=alice, a=rule, b=idle, outcome="A")
    side_run(coding, "A", rule, message="**Done**: fixed\n- a\n- b", steps=3, seconds=42.5,
             files=2, diff=([{"path": "a.py", "added": 5, "removed": 2, "binary": False},
                             {"path": "b.png", "binary": True}], ""))  # fmt: skip
    side_run(coding, "B", idle, message="", steps=0, seconds=None, files=0,
             diff=([{"path": "a.py", "added": 1, "removed": 0}], "diff too large"))  # fmt: skip
    desktop = decided_battle(submitter=alice, a=idle, b=rule, outcome="B")
    side_run(desktop, "A", idle, message="ok", steps=1, seconds=10)
    imported = decided_battle(submitter=alice, a=rule, b=idle, outcome="tie")  # no runs
    ids = np.array([coding.pk, desktop.pk, imported.pk])
    features_a, features_b = side_features(Battle.objects.all(), ids)
    col = {name: j for j, name in enumerate(FEATURES)}
    expected_a = {"length": len("**Done**: fixed\n- a\n- b"), "markdown": 3, "steps": 3,
                  "wall_time": 42.5, "files": 2, "diff_size": 7}  # fmt: skip
    assert {n: features_a[0, col[n]] for n in FEATURES} == expected_a
    row = features_b[0]
    assert (row[col["length"]], row[col["steps"]], row[col["files"]]) == (0, 0, 0)
    assert math.isnan(row[col["wall_time"]]) and math.isnan(row[col["diff_size"]])  # unknown
    assert features_a[1, col["length"]] == 2 and math.isnan(features_a[1, col["diff_size"]])
    assert np.isnan(features_b[1]).all() and np.isnan(features_a[2]).all()
    assert np.isnan(features_b[2]).all()


def test_postgres_counts_markdown_exactly_as_python(alice, agents):
    rule, idle = agents["rulebook"], agents["idle"]
    texts = [text for text, _ in MARKDOWN]
    battles = []
    for i in range(0, len(texts), 2):
        battle = decided_battle(submitter=alice, a=rule, b=idle, outcome="A")
        side_run(battle, "A", rule, message=texts[i])
        if i + 1 < len(texts):
            side_run(battle, "B", idle, message=texts[i + 1])
        battles.append(battle.pk)
    features_a, features_b = side_features(Battle.objects.all(), np.array(battles))
    j = FEATURES.index("markdown")
    counted = [v for pair in zip(features_a[:, j], features_b[:, j], strict=True) for v in pair]
    assert counted[: len(texts)] == [markdown_elements(t) for t in texts]
    assert counted[: len(texts)] == [expected for _, expected in MARKDOWN]


def test_the_read_is_one_query_per_table_whatever_the_battles(
    alice, agents, django_assert_num_queries
):
    rule, idle = agents["rulebook"], agents["idle"]
    arena_id = Arena.objects.public().pk
    decided_battle(submitter=alice, a=rule, b=idle, outcome="A")
    with django_assert_num_queries(2):  # stored runs, runs: none, so no battle is read
        assert style_battles(arena_id=arena_id) is None
    for count in (3, 12):
        while Battle.objects.count() < count:
            battle = decided_battle(submitter=alice, a=rule, b=idle, outcome="B")
            side_run(battle, "A", rule, message="hi", steps=2, seconds=5,
                     diff=([{"added": 1, "removed": 1}], ""))  # fmt: skip
            side_run(battle, "B", idle, message="**x**", steps=1, seconds=7)
        # stored runs, runs not stored yet, their steps, their coding outcomes, battles
        with django_assert_num_queries(5):
            measured = style_battles(arena_id=arena_id)
        assert len(measured.ids) == count
        assert measured.measured["steps"] == count - 1  # the first battle has no runs
        # once the refit has stored every run's style: stored runs, runs not stored, battles
        assert run_styles_record(battles=rated_battles(arena_id=arena_id)) == 2 * (count - 1)
        assert RunStyle.objects.count() == 2 * (count - 1)
        with django_assert_num_queries(3):
            stored = style_battles(arena_id=arena_id)
        np.testing.assert_array_equal(stored.features_a, measured.features_a)
        np.testing.assert_array_equal(stored.features_b, measured.features_b)
        assert np.isnan(stored.features_a[0]).all()
        RunStyle.objects.all().delete()  # the next round measures its battles anew


def test_the_coding_board_controls_for_the_diff_size(alice, agents, settings):
    """Coding battles are rated on the overall board and on the coding board; both
    fits carry the diff size as a covariate (desktop battles leave it unknown)."""
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20, n0=10)
    crowd = judges(4)
    rng = random.Random(3)
    slugs = ["rulebook", "surveyor", "idle"]
    for i, first in enumerate(slugs):
        for second in slugs[i + 1 :]:
            for k in range(20):
                big = rng.randint(1, 400)
                small = rng.randint(1, 400)
                battle = decided_battle(
                    submitter=alice, a=agents[first], b=agents[second],
                    outcome="A" if (big > small) != (k % 4 == 0) else "B",
                    judge=crowd[k % 4], instruction="fix the failing test",
                )  # fmt: skip
                Task.objects.filter(pk=battle.task_id).update(kind=Task.Kind.REPO,
                                                              category="coding")  # fmt: skip
                for side, slug, lines in (("A", first, big), ("B", second, small)):
                    changed = [{"path": "x.py", "added": lines, "removed": 1}]
                    side_run(battle, side, agents[slug], message="done", steps=rng.randint(1, 9),
                             seconds=rng.uniform(10, 90), diff=(changed, ""))  # fmt: skip
    ratings_refit(Arena.objects.public().pk)
    coding = Client().get("/api/leaderboard/", {"category": "coding"}).json()
    assert coding["category"]["battles"] == 60 and coding["style"]["status"] == "fitted"
    diff = next(c for c in coding["style"]["coefficients"] if c["name"] == "diff_size")
    assert diff["n"] == 60 and diff["lower"] > 0  # the bigger diff won three times in four
    overall = Client().get("/api/leaderboard/").json()
    assert "diff_size" in [c["name"] for c in overall["style"]["coefficients"]]
    page = Client().get("/method/", {"category": "coding"}).content.decode()
    row = page.split('data-covariate="diff_size"')[1].split("</tr>")[0]
    assert f"{diff['coef']:.1f}" in row and ">60<" in row

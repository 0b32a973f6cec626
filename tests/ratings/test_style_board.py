"""Style control on the boards (issue 38, item 1): the refit stores a style-controlled
rating, interval and rank per agent and the covariates' table per snapshot, beside a
plain board it leaves exactly as it was; the page shows the column and orders by it on
request; the method page shows the weights; the category and machine boards and the
APIs carry the same; a board with nothing measured says so instead of printing numbers.

The planted world: Rulebook writes long final messages (2,000–6,000 characters, a
short one now and then), Surveyor and Idle short ones (300–1,500); the judges' verdicts
follow the agents' strengths (Surveyor the best, then Rulebook, then Idle) *and* the
length difference, strongly. By plain rating Rulebook is first; with length held equal
Surveyor is.
"""

import json
import math
import random
from datetime import timedelta

import numpy as np
import pytest
from django.test import Client
from django.utils import timezone

from agents.models import Arena
from battles.models import Battle, Run
from judging.models import MachineVerdict
from ratings.jobs import ratings_refit
from ratings.models import RatingPoint, RatingSnapshot
from ratings.refit import FitParams, arena_refit, fit, refit_input
from ratings.style_board import NO_RUNS
from tests.ratings.factories import decided_battle, judges, round_robin

SKILL = {"rulebook": 0.0, "surveyor": 0.5, "idle": -0.6}  # logits
LENGTH = {"rulebook": (2000, 6000), "surveyor": (300, 1500), "idle": (300, 1500)}
LENGTH_EFFECT = 2.5  # logits per unit of (len_a − len_b) / (len_a + len_b)
INSTRUCTION = "write a haiku about autumn"  # a general task: the general board's


@pytest.fixture(autouse=True)
def _small_fits(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20, n0=10)


def strict(response) -> dict:
    """The body, refusing NaN and Infinity as a strict JSON reader does."""

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(response.content, parse_constant=refuse)


@pytest.fixture
def styled(alice, roster):
    """100 battles per pair of the built-ins, each side with a run whose final message
    length follows ``LENGTH`` and whose wall time is random (no effect)."""
    agents = {a.slug: a for a in roster}
    crowd = judges(4)
    rng = np.random.default_rng(38)
    now = timezone.now()
    runs, differences = [], []
    slugs = list(SKILL)
    for i, first in enumerate(slugs):
        for second in slugs[i + 1 :]:
            for k in range(100):
                x, z = (first, second) if rng.random() < 0.5 else (second, first)
                lengths = []
                for slug in (x, z):
                    low, high = LENGTH[slug]
                    if slug == "rulebook" and rng.random() < 0.3:
                        low, high = LENGTH["idle"]
                    lengths.append(int(rng.uniform(low, high)))
                d = (lengths[0] - lengths[1]) / sum(lengths)
                differences.append(d)
                p = 1 / (1 + math.exp(-(SKILL[x] - SKILL[z] + LENGTH_EFFECT * d)))
                battle = decided_battle(
                    submitter=alice, a=agents[x], b=agents[z],
                    outcome="A" if rng.random() < p else "B", judge=crowd[k % 4],
                    instruction=INSTRUCTION,
                )  # fmt: skip
                for side, slug, length in (("A", x, lengths[0]), ("B", z, lengths[1])):
                    started = now - timedelta(minutes=30)
                    runs.append(
                        Run(
                            battle=battle, side=side, agent=agents[slug], status="ended",
                            step_budget=50, wall_budget_s=600, final_message="x" * length,
                            end_reason="delivered", started_at=started,
                            ended_at=started + timedelta(seconds=float(rng.uniform(30, 300))),
                        )
                    )  # fmt: skip
    Run.objects.bulk_create(runs)
    return {"agents": agents, "differences": np.array(differences)}


def rows(body: dict) -> dict[str, dict]:
    return {row["slug"]: row for row in body["rows"]}


def test_the_refit_stores_style_control_and_the_long_writer_drops(styled):
    arena_id = Arena.objects.public().pk
    result = arena_refit(arena_id=arena_id)
    snapshot = result.snapshot
    style = snapshot.style
    assert style["status"] == "fitted" and style["battles"] == 300
    coefficients = {c["name"]: c for c in style["coefficients"]}
    length = coefficients["length"]
    # the planted effect on the published scale: Elo per sd of the side difference
    planted = LENGTH_EFFECT * styled["differences"].std() * 400 / math.log(10)
    assert 0 < length["lower"] < planted < length["upper"]
    assert length["n"] == 300
    assert coefficients["wall_time"]["lower"] < 0 < coefficients["wall_time"]["upper"]
    dropped = {d["name"]: d["reason"] for d in style["dropped"]}
    assert dropped == {"markdown": "constant", "steps": "constant", "files": "constant",
                       "diff_size": "not measured"}  # fmt: skip
    points = {p.agent.slug: p for p in RatingPoint.objects.filter(snapshot=snapshot)
              .select_related("agent")}  # fmt: skip
    plain = sorted(points, key=lambda slug: -points[slug].rating)
    controlled = sorted(points, key=lambda slug: points[slug].style_rank)
    assert plain == ["rulebook", "surveyor", "idle"]
    assert controlled == ["surveyor", "rulebook", "idle"]
    for point in points.values():
        assert point.style_lower < point.style_rating < point.style_upper
    # the plain board is the plain fit's, to the last bit
    params = FitParams.for_arena(arena_id)
    data = refit_input(arena_id=arena_id, params=params)
    expected = fit(data, params)
    for estimate in expected.agents:
        point = next(p for p in points.values() if p.agent_id == data.agent_ids[estimate.index])
        assert (point.rating, point.lower, point.upper) == (
            estimate.rating, estimate.lower, estimate.upper)  # fmt: skip
        assert (point.rank_lower, point.rank_upper) == (estimate.rank_lower, estimate.rank_upper)


def test_a_snapshot_from_before_style_control_gets_it_at_the_next_refit(styled):
    arena_id = Arena.objects.public().pk
    snapshot = arena_refit(arena_id=arena_id).snapshot
    RatingSnapshot.objects.filter(pk=snapshot.pk).update(style=None)
    RatingPoint.objects.filter(snapshot=snapshot).update(style_rating=None, style_rank=None)
    assert arena_refit(arena_id=arena_id).snapshot is None  # nothing new: no new snapshot
    snapshot.refresh_from_db()
    assert snapshot.style["status"] == "fitted"
    assert RatingPoint.objects.filter(snapshot=snapshot, style_rank=1).get().agent.slug == (
        "surveyor"
    )


def test_the_page_shows_the_column_and_the_toggle_orders_by_it(styled):
    arena_refit(arena_id=Arena.objects.public().pk)
    page = Client().get("/").content.decode()
    assert "Style-controlled" in page and 'id="style-method-link"' in page
    order = [chunk.split('"')[0] for chunk in page.split('<tr data-agent="')[1:]]
    assert order == ["rulebook", "surveyor", "idle"]
    first = page.split('data-agent="rulebook"')[1].split("</tr>")[0]
    assert 'class="style-value"' in first and 'class="style-rank"' in first and "#2" in first
    assert 'href="/?style=controlled"' in page and 'aria-current="true">rating</a>' in page

    page = Client().get("/", {"style": "controlled", "kind": "builtin"}).content.decode()
    order = [chunk.split('"')[0] for chunk in page.split('<tr data-agent="')[1:]]
    assert order == ["surveyor", "rulebook", "idle"]
    assert 'aria-sort="descending"' in page and "ordered by their style-controlled" in page
    assert '<input type="hidden" name="style" value="controlled">' in page  # filters keep it
    assert "ws-connect" not in page  # a push would bring the plain order back
    # the other boards' links keep the order
    assert 'href="/?category=general&amp;kind=builtin&amp;style=controlled"' in page

    response = Client().get("/", {"style": "sideways"})
    assert response.status_code == 400 and "style &#x27;sideways&#x27; is unknown" in (
        response.content.decode()
    )


def test_the_api_carries_the_style_fields_in_strict_json(styled):
    arena_refit(arena_id=Arena.objects.public().pk)
    body = strict(Client().get("/api/leaderboard/"))
    by_slug = rows(body)
    assert {slug: row["style_rank"] for slug, row in by_slug.items()} == {
        "surveyor": 1, "rulebook": 2, "idle": 3}  # fmt: skip
    assert all(r["style_lower"] < r["style_rating"] < r["style_upper"] for r in body["rows"])
    assert body["style"]["status"] == "fitted"
    assert [c["name"] for c in body["style"]["coefficients"]] == ["length", "wall_time"]
    ordered = strict(Client().get("/api/leaderboard/", {"style": "controlled"}))
    assert [r["slug"] for r in ordered["rows"]] == ["surveyor", "rulebook", "idle"]
    assert [r["rank"] for r in ordered["rows"]] == [2, 1, 3]  # plain ranks stay


def test_the_method_page_shows_the_weights_and_nothing_private(styled, alice):
    arena_refit(arena_id=Arena.objects.public().pk)
    page = Client().get("/method/").content.decode()
    length = page.split('data-covariate="length"')[1].split("</tr>")[0]
    coefficient = next(c for c in RatingSnapshot.objects.latest().style["coefficients"]
                       if c["name"] == "length")  # fmt: skip
    assert f"{coefficient['coef']:.1f}" in length
    assert f"[{coefficient['lower']:.1f}, {coefficient['upper']:.1f}]" in length
    diff = page.split('data-covariate="diff_size"')[1].split("</tr>")[0]
    assert "not measured on any battle" in diff
    assert "never varied" in page.split('data-covariate="markdown"')[1].split("</tr>")[0]
    assert "What it does not do" in page and "docs/intervals.md" in page
    for private in ("Acme", "alice", "crowd0", INSTRUCTION, "xxxxxxxxxx"):
        assert private not in page
    board = Client().get("/").content.decode()
    assert 'href="/method/"' in board


def test_the_category_board_has_its_own_style_control(styled):
    ratings_refit(Arena.objects.public().pk)  # the overall refit, then the categories
    body = strict(Client().get("/api/leaderboard/", {"category": "general"}))
    assert body["category"]["battles"] == 300 and body["style"]["status"] == "fitted"
    assert {s: r["style_rank"] for s, r in rows(body).items()} == {
        "surveyor": 1, "rulebook": 2, "idle": 3}  # fmt: skip
    page = Client().get("/", {"category": "general", "style": "controlled"}).content.decode()
    order = [chunk.split('"')[0] for chunk in page.split('<tr data-agent="')[1:]]
    assert order == ["surveyor", "rulebook", "idle"] and 'class="style-value"' in page
    method = Client().get("/method/", {"category": "general"}).content.decode()
    assert 'data-covariate="length"' in method and "general tasks" in method


def test_the_machine_board_has_style_control_too(styled):
    MachineVerdict.objects.bulk_create(
        MachineVerdict(battle_id=pk, judge_model="judge-x", method="pairwise",
                       status="resolved", outcome=outcome)
        for pk, outcome in Battle.objects.values_list("pk", "outcome")
    )  # fmt: skip
    body = strict(Client().get("/api/machine-board/"))
    assert body["style"]["status"] == "fitted" and body["style"]["interval"] == "battle"
    assert {s: r["style_rank"] for s, r in rows(body).items()} == {
        "surveyor": 1, "rulebook": 2, "idle": 3}  # fmt: skip
    assert [r["slug"] for r in body["rows"]] == ["rulebook", "surveyor", "idle"]
    ordered = strict(Client().get("/api/machine-board/", {"style": "controlled"}))
    assert [r["slug"] for r in ordered["rows"]] == ["surveyor", "rulebook", "idle"]
    page = Client().get("/machine-board/", {"style": "controlled"}).content.decode()
    order = [chunk.split('"')[0] for chunk in page.split('<tr data-agent="')[1:]]
    assert order == ["surveyor", "rulebook", "idle"]
    assert 'id="style-weights"' in page and 'data-covariate="length"' in page
    assert "style=controlled" in page.split('class="board-nav"')[1].split("</nav>")[0]


def test_a_board_with_nothing_measured_says_not_enough(alice, roster):
    round_robin(alice, list(roster), judges(3), rounds=12, rng=random.Random(5))  # no runs
    arena_refit(arena_id=Arena.objects.public().pk)
    style = RatingSnapshot.objects.latest().style
    assert style.pop("compute_ms") >= 0
    assert style == {"status": "not_enough", "reason": NO_RUNS, "battles": 0,
                     "coefficients": [], "dropped": [], "rated_agents": 0}  # fmt: skip
    body = strict(Client().get("/api/leaderboard/"))
    assert body["style"]["status"] == "not_enough"
    assert all(r["rating"] is not None and r["style_rating"] is None for r in body["rows"])
    page = Client().get("/").content.decode()
    assert 'id="style-not-enough"' in page and "Not enough for style control yet" in page
    assert 'class="style-value"' not in page
    method = Client().get("/method/").content.decode()
    assert 'id="style-not-enough"' in method and "imported votes carry none" in method
    assert 'class="num coef"' not in method

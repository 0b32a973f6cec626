"""Machine verdicts as people read them: never through any door a judge (or the
submitting team) is served while the battle can still be voted on, then on the battle's
own API and the vote's reveal; the machine-judged board (its own fit, the human board's
numbers untouched); the human–machine agreement with Cohen's κ and the confusion table
the scripted judge and the votes imply."""

import json

import numpy as np
import pytest
from django.test import Client

from agents.models import Agent, Arena
from battles.models import Battle, Task
from judging.machine_board import machine_board
from judging.models import MachineVerdict
from judging.services.machine import battle_machine_judge
from ratings.bradley_terry import rate
from ratings.category_boards import category_board_build
from ratings.refit import arena_refit
from ratings.services import leaderboard_current
from tests.agents.conftest import _loopback_allowlisted  # noqa: F401 - the fake is on loopback
from tests.agents.fake_providers import FakeAnthropic
from tests.judging.battle_factories import READ, T0, ended_battle, judge_on, people, serve
from tests.judging.machine_script import (
    JUDGE_MODEL,
    KEY,
    KEY_ENV,
    MARK,
    arena_judge_on,
    judge_policy,
    machine_judge_agent,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def judge_agent(roster, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeAnthropic(api_key=KEY, policy=judge_policy) as fake:
        agent = machine_judge_agent(fake.base_url)
        arena_judge_on(agent)
        yield agent


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_no_door_shows_the_verdict_while_the_battle_can_be_voted_on(
    alice, charlie, judge_agent, api
):
    first, second = people(2)
    battle = ended_battle(alice, messages=("It is 42", "no"), target=2)
    [verdict] = battle_machine_judge(battle_id=battle.pk)
    assert verdict.outcome == "A" and MARK in verdict.ab_reason
    verdicts_url = f"/api/battles/{battle.pk}/machine-verdicts/"

    def closed_everywhere() -> None:
        pages = [
            logged_in(first).get(f"/judge/{battle.pk}/vote/status/"),
            logged_in(alice).get(f"/battles/{battle.pk}/"),  # the submitting team's page
            logged_in(alice).get(f"/battles/{battle.pk}/panel/"),
            api(alice).get(f"/api/battles/{battle.pk}/"),
            api(first).get(f"/api/battles/{battle.pk}/votes/mine/"),
        ]
        for page in pages:
            assert page.status_code == 200 and MARK not in page.content.decode()
        for reader in (alice, first, second):
            early = api(reader).get(verdicts_url)
            assert early.status_code == 409, early.content
            assert early.json()["error"] == {
                "code": "verdicts_not_public",
                "message": f"Battle {battle.pk} is judging: its machine verdicts are shown "
                "once it is decided or excluded.",
            }

    # the judge page and the judge API serve the battle blind, without it
    assert serve(first).pk == serve(second).pk == battle.pk  # served an hour ago (T0)
    page = logged_in(first).get("/judge/")
    assert "It is 42" in page.text and MARK not in page.text
    served = api(second).get("/api/judge/next/")
    assert served.json()["id"] == battle.pk and MARK not in served.content.decode()
    assert api(charlie).get(verdicts_url).status_code == 404
    with_vote = logged_in(first).post(f"/judge/{battle.pk}/vote/", {"choice": "A"})
    assert with_vote.status_code == 201 and MARK not in with_vote.text
    closed_everywhere()  # one vote of two: still open

    voted = api(second).post(f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json")
    assert voted.status_code == 201
    assert Battle.objects.get(pk=battle.pk).status == "decided"
    shown = api(alice).get(verdicts_url)
    assert shown.status_code == 200
    [row] = shown.json()["verdicts"]
    assert (row["method"], row["judge_model"], row["status"], row["outcome"]) == (
        "pairwise", JUDGE_MODEL, "resolved", "A")  # fmt: skip
    said = json.dumps({"winner": "A", "reason": f"{MARK} scripted"})
    assert (row["ab_reason"], row["ab_raw"]) == (f"{MARK} scripted", [said])
    assert api(charlie).get(verdicts_url).status_code == 404
    reveal = logged_in(first).get(f"/judge/{battle.pk}/vote/status/")
    assert 'id="machine-verdicts"' in reveal.text and f"{MARK} scripted" in reveal.text
    assert Battle.objects.get(pk=battle.pk).outcome == "A"  # the votes', not the machine's


def test_an_excluded_battle_shows_its_verdict(alice, judge_agent, api):
    battle = ended_battle(alice, messages=("no", "42"))
    battle_machine_judge(battle_id=battle.pk)
    Battle.objects.filter(pk=battle.pk).update(status="excluded", exclusion_reason="no_run")
    body = api(alice).get(f"/api/battles/{battle.pk}/machine-verdicts/").json()
    assert [v["outcome"] for v in body["verdicts"]] == ["B"]


def _decided(submitter, a: Agent, b: Agent, human: str, machine: str, category: str = "") -> None:
    """A battle decided ``human`` by the crowd, with a resolved pairwise verdict ``machine``."""
    task = Task.objects.create(team=submitter.memberships.first().team, submitter=submitter,
                               instruction="compare", category=category)  # fmt: skip
    battle = Battle.objects.create(
        arena=a.arena, team=task.team, task=task, agent_a=a, agent_b=b, status="decided",
        outcome=human, evidence_weight=1.0, decision_source="crowd", submitted_at=T0,
        ended_at=T0, decided_at=T0,
    )  # fmt: skip
    MachineVerdict.objects.create(battle=battle, judge_model=JUDGE_MODEL, method="pairwise",
                                  status="resolved", outcome=machine, agreement=True)  # fmt: skip


def test_the_machine_board_is_its_own_fit_and_the_human_board_does_not_move(
    alice, roster, settings, api
):
    settings.ARENA = settings.ARENA.replace(n0=3, bootstrap_replicates=20)
    arena = Arena.objects.public()
    rulebook, surveyor, idle = (Agent.objects.get(slug=s) for s in ("rulebook", "surveyor", "idle"))
    # (a, b, human outcome, machine outcome): the machine prefers surveyor where people
    # prefer rulebook
    plan = [(rulebook, surveyor, "A", "B")] * 3 + [(surveyor, rulebook, "B", "tie")] * 2
    plan += [(rulebook, idle, "A", "A")] * 3 + [(idle, surveyor, "B", "B")] * 3
    plan += [(idle, rulebook, "tie", "B"), (surveyor, idle, "A", "tie")]
    for a, b, human, _ in plan:
        _decided(alice, a, b, human, human)  # placeholder verdicts, replaced below
    MachineVerdict.objects.all().delete()
    before = arena_refit(arena_id=arena.pk)
    rows_before = leaderboard_current(arena_id=arena.pk)["rows"]
    general_before = category_board_build(arena_id=arena.pk, category="general")

    for battle, (_, _, _, machine) in zip(Battle.objects.order_by("pk"), plan, strict=True):
        MachineVerdict.objects.create(battle=battle, judge_model=JUDGE_MODEL, method="pairwise",
                                      status="resolved", outcome=machine)  # fmt: skip
    after = arena_refit(arena_id=arena.pk)
    assert before.snapshot is not None and after.snapshot is None  # the input did not change
    assert leaderboard_current(arena_id=arena.pk)["rows"] == rows_before
    general_after = category_board_build(arena_id=arena.pk, category="general")
    assert general_after["digest"] == general_before["digest"]
    assert general_after["points"] == general_before["points"]

    board = machine_board(arena_id=arena.pk, judge_model=JUDGE_MODEL, method="pairwise")
    assert board["battles"] == len(plan) and board["interval"] == "battle"
    ids = sorted(a.pk for a in (rulebook, surveyor, idle))
    y = {"A": 1.0, "B": 0.0, "tie": 0.5}
    expected = rate(
        np.array([ids.index(a.pk) for a, *_ in plan]),
        np.array([ids.index(b.pk) for _, b, *_ in plan]),
        np.array([y[m] for *_, m in plan]),
        n_agents=3, reference=np.array([True, True, True]), ridge=settings.ARENA.ridge,
        r0=settings.ARENA.r0,
    )  # fmt: skip
    for estimate in expected.agents:
        point = board["points"][ids[estimate.index]]
        assert point["rating"] == pytest.approx(estimate.rating, abs=1e-6)
        assert point["lower"] == pytest.approx(estimate.lower, abs=1e-6)
    records = {Agent.objects.get(pk=k).slug: (p["wins"], p["draws"], p["losses"])
               for k, p in board["points"].items()}  # fmt: skip
    assert records == {"surveyor": (6, 3, 0), "rulebook": (4, 2, 3), "idle": (0, 1, 7)}
    assert board["points"][surveyor.pk]["rating"] > board["points"][rulebook.pk]["rating"]
    human = {r["slug"]: r["rating"] for r in rows_before}
    assert human["rulebook"] > human["surveyor"]  # people said otherwise
    # the page and the API show the same board
    api_rows = api(alice).get("/api/machine-board/").json()["rows"]
    assert Client().get("/api/machine-board/").json()["rows"] == api_rows  # public
    assert [(r["slug"], r["rank"], r["wins"], r["draws"], r["losses"]) for r in api_rows] == [
        ("surveyor", 1, 6, 3, 0), ("rulebook", 2, 4, 2, 3), ("idle", 3, 0, 1, 7)]  # fmt: skip
    page = Client().get("/machine-board/")
    assert page.status_code == 200 and 'data-agent="surveyor"' in page.text
    assert 'href="/machine-board/"' in Client().get("/").text  # linked from the leaderboard
    bad = api(alice).get("/api/machine-board/?method=vibes")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_method"
    missing = api(alice).get("/api/machine-board/?judge_model=other")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == (
        f"No machine board for that judge model and method (boards: {JUDGE_MODEL} pairwise)."
    )


def test_agreement_and_kappa_are_what_the_votes_and_the_script_imply(alice, judge_agent, api):
    crowd = people(1)[0]
    # (the sides' messages → the machine's verdict, the crowd's vote, the category)
    messages = {"A": ("42", "no"), "B": ("no", "42"), "tie": ("no", "none")}
    plan = [("A", "A", "browsing"), ("A", "A", "browsing"), ("B", "B", "browsing"),
            ("A", "B", "browsing"), ("tie", "tie", "general"), ("tie", "both_bad", "general"),
            ("B", "A", "general"), ("B", "B", "general")]  # fmt: skip
    battles = []
    for machine, _, category in plan:
        battle = ended_battle(alice, messages=messages[machine])
        Task.objects.filter(pk=battle.task_id).update(category=category)
        battles.append(battle)
        battle_machine_judge(battle_id=battle.pk)  # while it is open, as the job does
    left_out = [ended_battle(alice, messages=messages["A"]) for _ in range(3)]
    for battle in left_out:
        battle_machine_judge(battle_id=battle.pk)
    for i, (battle, (_, human, _)) in enumerate(zip(battles, plan, strict=True)):
        judge_on(crowd, battle, human, at=T0 + i * 2 * READ)
    # not decided by people: an import, a battle still open, and an excluded one
    Battle.objects.filter(pk=left_out[0].pk).update(
        status="decided", outcome="B", decision_source="import"
    )
    Battle.objects.filter(pk=left_out[2].pk).update(status="excluded", exclusion_reason="no_run")
    assert serve(crowd, T0 + 20 * READ).pk == left_out[1].pk  # still open for judging

    body = api(alice).get("/api/machine-agreement/").json()
    assert Client().get("/api/machine-agreement/").json() == body  # public, as the board is
    [judge] = body["judges"]
    assert (judge["judge_model"], judge["method"]) == (JUDGE_MODEL, "pairwise")
    overall = judge["overall"]
    assert (overall["n"], overall["agreed"], overall["agreement"]) == (8, 6, 0.75)
    assert overall["kappa"] == pytest.approx(13 / 21, abs=1e-12)
    assert overall["confusion"] == {
        "A": {"A": 2, "B": 1, "tie": 0},
        "B": {"A": 1, "B": 2, "tie": 0},
        "tie": {"A": 0, "B": 0, "tie": 1},
        "both_bad": {"A": 0, "B": 0, "tie": 1},
    }
    cells = {c["category"]: (c["n"], c["agreed"], c["kappa"]) for c in judge["categories"]}
    assert cells == {"browsing": (4, 3, 0.5), "general": (4, 3, pytest.approx(0.6, abs=1e-12))}
    assert [c["category"] for c in judge["categories"]] == ["browsing", "general"]
    page = Client().get("/judging/machine-agreement/")
    assert page.status_code == 200
    assert '<td class="num kappa">0.619</td>' in page.text
    assert '<td class="num" data-machine="tie">1</td>' in page.text

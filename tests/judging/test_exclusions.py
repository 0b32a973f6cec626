"""Exclusion rules in order (docs/method.md §7; first match wins), each battle's reason
stored, excluded battles never served, counts per reason in rule order. Doing nothing
is an outcome: only a side the arena failed voids its battle."""

import datetime as dt

import pytest
from django.utils import timezone

from agents.models import Arena
from battles.models import Battle, Run
from judging.services import battle_resolve, battle_screen, judge_next
from ratings.selectors import exclusion_counts, rated_battles, self_judged_tally
from tests.judging.battle_factories import T0, cast, ended_battle, judge_on, serve

SCREENING = Battle.Status.SCREENING

RULES = [
    "named_model",
    "no_run",
    "arena_fault",
    "forged_grade",
    "ended_by_submitter",
    "budget_mismatch",
    "no_admissible_vote",
]


def test_the_reason_codes_in_rule_order_and_the_retired_one_last():
    assert Battle.ExclusionReason.values == [*RULES, "no_trajectory"]
    assert Battle.RETIRED_EXCLUSIONS == ("no_trajectory",)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({}, ""),
        ({"messages": ("Rulebook says 42", "no")}, "named_model"),
        # a side that took no step and delivered nothing ran: judges weigh it
        ({"steps": (0, 1)}, ""),
        ({"steps": (0, 0), "end_reasons": ("gave_up", "time_budget")}, ""),
        # a side that ended in the arena's error did not get to run
        ({"steps": (1, 0), "end_reasons": ("delivered", "error")}, "arena_fault"),
        ({"end_reasons": ("", "delivered")}, "arena_fault"),
        ({"end_reasons": ("delivered", "ended_by_submitter")}, "ended_by_submitter"),
        ({"budgets": (20, 10)}, "budget_mismatch"),
        # rules 3 and 6 both match: counted under 3
        ({"end_reasons": ("error", "gave_up"), "budgets": (5, 6)}, "arena_fault"),
        # a side its submitter ended (even with no step) is rule 5's, not an outage
        ({"steps": (0, 1), "end_reasons": ("ended_by_submitter", "gave_up")}, "ended_by_submitter"),
        # rules 1, 3, 5 and 6 all match: 1 wins
        (
            {
                "messages": ("I am rulebook", ""),
                "steps": (0, 1),
                "end_reasons": ("error", "ended_by_submitter"),
                "budgets": (5, 6),
            },
            "named_model",
        ),
        # rules 4 and 5: 4 wins
        (
            {"end_reasons": ("ended_by_submitter", "gave_up"), "budgets": (5, 6)},
            "ended_by_submitter",
        ),
        # zero steps but a delivery is a trajectory
        ({"steps": (0, 1), "files": ([{"name": "out.txt", "size": 1}], [])}, ""),
    ],
)
def test_rules_apply_in_order_first_match_wins(alice, roster, kwargs, reason):
    battle = ended_battle(alice, status=SCREENING, **kwargs)
    assert battle_screen(battle_id=battle.pk) == reason
    battle.refresh_from_db()
    assert battle.exclusion_reason == reason
    assert battle.status == (Battle.Status.EXCLUDED if reason else Battle.Status.JUDGING)


def test_a_missing_run_is_rule_2_and_beats_rules_3_to_6(alice, roster):
    battle = ended_battle(alice, end_reasons=("error", "gave_up"), budgets=(3, 4), status=SCREENING)
    Run.objects.filter(battle=battle, side="B").delete()
    assert battle_screen(battle_id=battle.pk) == "no_run"


def test_an_agents_own_failure_is_no_arena_fault(alice, roster):
    # (such a battle is failed and run again before screening: battles.services.failures)
    battle = ended_battle(alice, end_reasons=("delivered", "error"), status=SCREENING)
    Run.objects.filter(battle=battle, side="B").update(agent_fault=True)
    assert battle_screen(battle_id=battle.pk) == ""


def test_an_end_requested_by_the_submitter_is_rule_5(alice, roster):
    battle = ended_battle(alice, end_reasons=("delivered", "step_budget"), status=SCREENING)
    Run.objects.filter(battle=battle, side="B").update(end_requested_at=timezone.now())
    assert battle_screen(battle_id=battle.pk) == "ended_by_submitter"


@pytest.mark.parametrize("status", [Battle.Status.JUDGING, Battle.Status.DECIDED])
def test_screening_only_touches_a_battle_in_screening(alice, roster, status):
    battle = ended_battle(alice, steps=(0, 0), status=status)
    assert battle_screen(battle_id=battle.pk) == ""
    battle.refresh_from_db()
    assert battle.status == status and battle.exclusion_reason == ""


def test_a_battle_in_screening_is_never_served(alice, judge, roster):
    ended_battle(alice, status=SCREENING)
    assert serve(judge) is None


def test_excluded_battles_are_never_served_and_take_no_votes(alice, judge, roster):
    battle = ended_battle(alice, budgets=(20, 10), status=SCREENING)
    battle_screen(battle_id=battle.pk)
    assert serve(judge) is None
    from judging.models import Assignment

    Assignment.objects.create(judge=judge, battle=battle, served_at=T0)
    from arena_site.exceptions import ApplicationError

    with pytest.raises(ApplicationError) as raised:
        cast(judge, battle, "A")
    assert raised.value.status == 409 and raised.value.code == "not_judging"


def test_excluded_battle_keeps_its_replay_for_its_team(alice, api, roster):
    battle = ended_battle(alice, budgets=(20, 10), status=SCREENING)
    battle_screen(battle_id=battle.pk)
    response = api(alice).get(f"/api/battles/{battle.pk}/")
    assert response.status_code == 200
    assert response.json()["sides"]["A"]["final_message"] == "6*7 = 42"


def test_inadmissible_votes_of_the_target_leave_the_battle_open(alice, roster):
    """Rule 6 is bounded (see test_cheap_votes.py): three inadmissible judgments on a
    three-judge battle consume nothing; it stays in the pool."""
    from tests.judging.battle_factories import people

    j1, j2, j3 = people(3)
    battle = ended_battle(alice, target=3)
    judge_on(j1, battle, "abstain")
    serve(j2)
    cast(j2, battle, "A", at=T0 + dt.timedelta(seconds=1))  # too fast
    judge_on(j3, battle, "abstain")
    battle_resolve(battle_id=battle.pk)
    battle.refresh_from_db()
    assert (battle.status, battle.exclusion_reason) == ("judging", "")


def test_exclusion_counts_have_every_reason_in_order_and_count_only_excluded(alice, judge, roster):
    for kwargs in [
        {"budgets": (1, 2)},
        {"budgets": (3, 2)},
        {"end_reasons": ("error", "error")},
        {"steps": (0, 0)},  # judged: doing nothing is an outcome
        {"messages": ("rulebook", "x")},
        {},
    ]:
        battle_screen(battle_id=ended_battle(alice, status=SCREENING, **kwargs).pk)
    arena = Arena.objects.public()

    counts = exclusion_counts(arena_id=arena.pk)

    assert list(counts) == RULES
    assert counts == {
        "named_model": 1,
        "no_run": 0,
        "arena_fault": 1,
        "forged_grade": 0,
        "ended_by_submitter": 0,
        "budget_mismatch": 2,
        "no_admissible_vote": 0,
    }
    assert exclusion_counts(arena_id=arena.pk + 999) == dict.fromkeys(RULES, 0)
    assert self_judged_tally(arena_id=arena.pk) == 0


def test_rated_battles_are_decided_with_an_outcome_and_not_excluded(alice, judge, roster):
    arena = Arena.objects.public()
    decided = ended_battle(alice)
    judge_on(judge, decided, "B")
    battle_resolve(battle_id=decided.pk)
    ended_battle(alice)  # still judging
    battle_screen(battle_id=ended_battle(alice, budgets=(1, 2), status=SCREENING).pk)
    assert list(rated_battles(arena_id=arena.pk).values_list("pk", "outcome")) == [
        (decided.pk, "B")
    ]


def test_the_served_queue_skips_excluded_battles(alice, judge, roster):
    bad = ended_battle(alice, end_reasons=("error", "gave_up"), status=SCREENING)
    good = ended_battle(alice, status=SCREENING)
    battle_screen(battle_id=bad.pk)
    battle_screen(battle_id=good.pk)
    assert judge_next(judge=judge).pk == good.pk


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("message", "status", "reason"),
    [("As Rulebook, I say 42.", "excluded", "named_model"), ("42.", "judging", "")],
)
def test_battle_run_leaves_the_battle_to_screening_when_its_lanes_end(
    alice, judge, roster, monkeypatch, message, status, reason
):
    """The hook in battle_run: the lanes (faked: no sandbox) end, the battle waits in
    screening (never served) with the judging job enqueued, and the job opens it for
    judging or excludes it."""
    import django_rq

    import battles.services.orchestration
    from battles.models import Step
    from battles.services import battle_run
    from judging import jobs

    def lane(*, run_id, inputs, barrier=None):
        run = Run.objects.get(pk=run_id)
        Step.objects.create(
            run=run, index=0, tool="shell", args={"command": "true"}, started_at=T0, duration_ms=1
        )
        Run.objects.filter(pk=run_id).update(
            status=Run.Status.ENDED, end_reason="delivered", final_message=message
        )
        return run

    monkeypatch.setattr(battles.services.orchestration, "run_lane", lane)
    battle = ended_battle(alice, steps=(0, 0), status=Battle.Status.QUEUED)

    battle_run(battle_id=battle.pk)

    battle.refresh_from_db()
    assert battle.status == SCREENING and judge_next(judge=judge) is None
    job = django_rq.get_queue("judging").fetch_job(f"screen-{battle.pk}")
    assert (job.func_name, job.args) == ("judging.jobs.battle_screen", (battle.pk,))
    jobs.battle_screen(battle.pk)
    battle.refresh_from_db()
    assert (battle.status, battle.exclusion_reason) == (status, reason)
    assert (judge_next(judge=judge) is None) == (status == "excluded")

"""The candidate picker's rules (environments.picking), on battles written straight into
the database (tests.judging.battle_factories): which runs are failures, of which mode,
with which reference, known when, and that each battle is looked at once per stage."""

import pytest
from django.utils import timezone

from battles.models import Battle, Run, RunSnapshot
from environments.building import candidates_collect
from environments.models import BattleScan, Environment
from judging.models import MachineVerdict
from tests.judging.battle_factories import ended_battle

pytestmark = pytest.mark.django_db


def snapshotted(battle: Battle) -> Battle:
    snapshot = RunSnapshot.objects.create(
        digest=f"{battle.pk:064d}", manifest={"attachments": []}, last_used_at=timezone.now()
    )
    battle.runs.update(snapshot=snapshot, started_at=battle.ended_at, ended_at=battle.ended_at)
    return battle


def picked(battle: Battle) -> dict[str, tuple]:
    return {
        e.run.side: (e.failure_mode, e.reference_run.side if e.reference_run else None)
        for e in Environment.objects.filter(battle=battle).select_related("run", "reference_run")
    }


def test_a_machine_verdict_for_the_opponent_makes_a_delivered_run_machine_wrong(alice, roster):
    battle = snapshotted(ended_battle(alice, end_reasons=("delivered", "delivered")))
    verdict = MachineVerdict.objects.create(
        battle=battle, judge_model="m", method="pairwise", status="resolved", outcome="B"
    )
    candidates_collect()
    assert picked(battle) == {"A": ("machine_wrong", "B")}
    env = Environment.objects.get(battle=battle)
    assert env.failed_at == verdict.created_at


def test_a_run_that_gave_up_is_picked_at_once_and_without_reference_when_both_failed(alice, roster):
    battle = snapshotted(ended_battle(alice, end_reasons=("gave_up", "step_budget")))
    candidates_collect()
    assert picked(battle) == {"A": ("gave_up", None), "B": ("budget", None)}
    assert BattleScan.objects.get(battle=battle).stage == "ended"


def test_errors_and_the_submitters_stop_are_no_failures_of_the_task(alice, roster):
    battle = snapshotted(ended_battle(alice, end_reasons=("error", "ended_by_submitter")))
    candidates_collect()
    assert picked(battle) == {}


@pytest.mark.parametrize("status", ["excluded", "failed", "running", "queued"])
def test_battles_that_did_not_end_as_judged_are_never_looked_at(alice, roster, status):
    battle = snapshotted(ended_battle(alice, status=status))
    assert candidates_collect() == []
    assert not BattleScan.objects.filter(battle=battle).exists()


def test_a_battle_from_before_snapshots_is_never_looked_at(alice, roster):
    battle = ended_battle(alice)  # its runs kept no initial state (before snapshots)
    assert candidates_collect() == []
    assert not BattleScan.objects.filter(battle=battle).exists()


def test_each_battle_is_looked_at_once_per_stage(alice, roster):
    battle = snapshotted(ended_battle(alice, end_reasons=("delivered", "delivered")))
    assert candidates_collect() == []
    assert candidates_collect() == []  # nothing new: not looked at again while judging
    Battle.objects.filter(pk=battle.pk).update(
        status="decided", outcome="B", decided_at=timezone.now()
    )
    created = candidates_collect()
    assert picked(battle) == {"A": ("judged_worse", "B")}
    assert len(created) == 1
    assert BattleScan.objects.get(battle=battle).stage == "decided"
    assert candidates_collect() == []


def test_a_tie_or_both_bad_decision_makes_no_delivered_run_a_failure(alice, roster):
    for outcome in ("tie", "both_bad"):
        battle = snapshotted(
            ended_battle(alice, end_reasons=("delivered", "delivered"), status="decided")
        )
        Battle.objects.filter(pk=battle.pk).update(outcome=outcome, decided_at=timezone.now())
        candidates_collect()
        assert picked(battle) == {}
    assert Run.objects.filter(environment__isnull=False).count() == 0

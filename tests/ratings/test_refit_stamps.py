"""r (SPEC §6) is stamped by the refit whose read counted the battle, on exactly the
battles it counted, with its snapshot's time and in its transaction: never on a battle
decided while the refit ran (battle ids follow submission, not decision, so a battle
decided late may have any id), and never by a refit that did not publish."""

import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from agents.models import Arena
from battles.models import Battle
from ratings import refit
from ratings.models import Incorporation, RatingSnapshot, RefitState
from ratings.refit import PENDING_LOOKBACK, arena_refit
from ratings.selectors import (
    rated_battles_pending,
    rated_battles_pending_everywhere,
    refit_status,
)
from ratings.services import leaderboard_served
from tests.ratings.factories import decided_battle, judges, round_robin
from tests.ratings.stamps import stamps_of, unstamp


@pytest.fixture(autouse=True)
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20, n0=5)


@pytest.fixture
def three(roster):
    return list(roster)[:3]


def stamps(battles) -> dict[int, object]:
    ids = [battle.pk for battle in battles]
    return {pk: r for pk, (r, _) in stamps_of(ids).items()}


def in_another_transaction(work) -> None:
    """Runs ``work`` on a connection of its own and commits it, as a judge's vote
    committed while the refit runs would be."""
    errors = []

    def run():
        try:
            work()
        except Exception as exc:  # surfaced below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_a_battle_decided_during_the_refit_is_stamped_by_the_next_one(
    alice, three, rng, monkeypatch
):
    # Given a battle still being judged, submitted before the battles already decided
    # (so its id is below every counted one), and the decided battles
    crowd = judges(3)
    older = decided_battle(
        submitter=alice, a=three[0], b=three[1], outcome="", status=Battle.Status.JUDGING
    )
    counted = round_robin(alice, three, crowd, rounds=6, rng=rng)
    assert older.pk < min(b.pk for b in counted)
    late = []

    def decide_after_the_read():
        # its vote decides it now; and a new battle is submitted and decided too
        Battle.objects.filter(pk=older.pk).update(
            status=Battle.Status.DECIDED,
            outcome="A",
            decided_at=timezone.now(),
            decision_source=Battle.DecisionSource.CROWD,
            cluster_judge=crowd[0],
        )
        late.append(
            decided_battle(submitter=alice, a=three[1], b=three[2], outcome="B", judge=crowd[1])
        )

    real_fit = refit.fit

    def fit_while_a_vote_commits(data, params):
        in_another_transaction(decide_after_the_read)
        return real_fit(data, params)

    monkeypatch.setattr(refit, "fit", fit_while_a_vote_commits)
    arena_id = Arena.objects.public().pk
    # When the refit runs, the two decisions committing between its read and its stamp
    first = arena_refit(arena_id=arena_id)
    # Then it counted and stamped exactly the battles its read saw, at its snapshot's time
    assert first.snapshot.battles == first.stamped == len(counted)
    assert set(stamps(counted).values()) == {first.snapshot.computed_at}
    # and neither battle decided after the read: not the late one, not the low id
    assert stamps([older, *late]) == {older.pk: None, late[0].pk: None}
    monkeypatch.setattr(refit, "fit", real_fit)
    # When the next refit runs, it counts them and stamps them, and only them
    second = arena_refit(arena_id=arena_id)
    assert second.snapshot.battles == len(counted) + 2 and second.stamped == 2
    assert set(stamps([older, *late]).values()) == {second.snapshot.computed_at}
    assert set(stamps(counted).values()) == {first.snapshot.computed_at}


def test_a_refit_that_fails_stamps_nothing(alice, three, rng, monkeypatch):
    # Given decided battles no refit has counted
    battles = round_robin(alice, three, judges(3), rounds=4, rng=rng)

    def broken(data, params):
        raise RuntimeError("the fit failed")

    monkeypatch.setattr(refit, "fit", broken)
    arena_id = Arena.objects.public().pk
    # When the refit fails after its read
    with pytest.raises(RuntimeError, match="the fit failed"):
        arena_refit(arena_id=arena_id)
    # Then no battle is stamped, and no snapshot or run is on record
    assert set(stamps(battles).values()) == {None}
    assert not RatingSnapshot.objects.exists()
    assert RefitState.objects.get(arena_id=arena_id).runs == 0


def test_an_unchanged_input_stamps_what_its_published_snapshot_counts(alice, three, rng):
    # Given a published refit, and a counted battle whose stamp went missing
    battles = round_robin(alice, three, judges(3), rounds=4, rng=rng)
    arena_id = Arena.objects.public().pk
    first = arena_refit(arena_id=arena_id)
    unstamp(battles[5])
    # When the refit runs on the same input
    again = arena_refit(arena_id=arena_id)
    # Then it publishes nothing new, and stamps that battle with the time of its run
    assert again.snapshot is None and again.stamped == 1
    state = RefitState.objects.get(arena_id=arena_id)
    assert state.snapshot_id == first.snapshot.pk
    assert stamps([battles[5]]) == {battles[5].pk: state.last_run_at}


def test_l_is_the_first_serve_after_each_run_on_all_its_battles(alice, three, rng):
    # Given a refit run whose board was served, then battles a later run counts
    arena_id = Arena.objects.public().pk
    crowd = judges(3)
    early = round_robin(alice, three, crowd, rounds=4, rng=rng)
    first = arena_refit(arena_id=arena_id)  # its push serves the board: ℓ for the run
    late = round_robin(alice, three, crowd, rounds=2, rng=rng)
    with time_machine.travel(timezone.now() + timedelta(minutes=5), tick=False):
        second = arena_refit(arena_id=arena_id)
        served = timezone.now()
    # Then each battle carries the r of the run that first counted it and the ℓ of the
    # first serve after that run; the earlier run's ℓ is left as it was
    runs = Incorporation.objects.order_by("incorporated_at")
    assert [run.snapshot_id for run in runs] == [first.snapshot.pk, second.snapshot.pk]
    assert set(stamps_of(early).values()) == {
        (first.snapshot.computed_at, runs[0].leaderboard_served_at)
    }
    assert runs[0].leaderboard_served_at < served
    assert set(stamps_of(late).values()) == {(second.snapshot.computed_at, served)}
    # and a board served again stamps nothing
    assert leaderboard_served(arena_id=arena_id) == 0


def test_the_boards_pending_battles_are_those_decided_since_the_last_read(alice, three, rng):
    # Given a published refit, then a battle decided after it
    arena_id = Arena.objects.public().pk
    crowd = judges(3)
    round_robin(alice, three, crowd, rounds=4, rng=rng)
    arena_refit(arena_id=arena_id)
    state = RefitState.objects.get(arena_id=arena_id)
    # (the run's read time less the lookback: the read precedes the run's record)
    assert state.last_run_at - PENDING_LOOKBACK - timedelta(seconds=30) < state.pending_floor
    assert state.pending_floor <= state.last_run_at - PENDING_LOOKBACK
    fresh = decided_battle(submitter=alice, a=three[0], b=three[1], outcome="A", judge=crowd[0])
    # and one whose decision is stamped earlier than the floor (a decision committed
    # more than PENDING_LOOKBACK after the refit's read)
    slow = decided_battle(submitter=alice, a=three[1], b=three[2], outcome="B", judge=crowd[1])
    Battle.objects.filter(pk=slow.pk).update(decided_at=state.pending_floor - timedelta(seconds=1))
    # Then the board counts the one decided since the floor
    assert refit_status(arena_id=arena_id)["pending_battles"] == 1
    assert list(rated_battles_pending_everywhere()) == [fresh]  # (the operators' figure)
    assert set(rated_battles_pending(arena_id=arena_id)) == {fresh, slow}
    # and the next refit counts and stamps both (its read has no floor)
    again = arena_refit(arena_id=arena_id)
    assert again.stamped == 2
    assert refit_status(arena_id=arena_id)["pending_battles"] == 0

"""The precomputed leaderboard (ratings.services.leaderboard_current): one document per
arena, read from the cache until a writer of one of its inputs moves its version.
Every test commits for real (``transaction=True``): a board built inside a transaction
is never stored (it could show rows that are not committed), and the version moves in
each writer's on_commit hook."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from accounts.models import Team
from agents.models import Agent, Arena
from battles.models import Battle
from judging.services.exclusions import battle_exclude_locked, battle_readmit_locked
from ratings.refit import arena_refit
from ratings.services import leaderboard_current, rating_apply_battle, rating_revert_battle
from tests.ratings.factories import decided_battle, judges, round_robin

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20)


def board() -> dict:
    response = Client().get("/api/leaderboard/")
    assert response.status_code == 200
    return response.json()


def row(body: dict, slug: str) -> dict | None:
    return next((r for r in body["rows"] if r["slug"] == slug), None)


def test_the_board_is_read_from_its_document_until_the_version_moves(
    roster, django_assert_max_num_queries
):
    board()  # builds it (outside any transaction: stored)
    with django_assert_max_num_queries(1):  # the public arena's row; the board none
        body = board()
    assert row(body, "idle")["streaming_rating"] == 1000.0
    # a write that skips the door is not seen: the document is what is served
    Agent.objects.filter(slug="idle").update(display_name="Renamed behind its back")
    assert row(board(), "idle")["agent"] == "Idle baseline"


def test_a_streaming_update_and_its_revert_make_the_next_read_fresh(alice, roster):
    agents = {a.slug: a for a in roster}
    battle = decided_battle(submitter=alice, a=agents["idle"], b=agents["rulebook"], outcome="B")
    before = board()
    assert row(before, "rulebook")["votes"] == 0
    with transaction.atomic():
        rating_apply_battle(battle=battle, push=False)  # a bulk import's path: no push
    after = board()
    assert row(after, "rulebook")["votes"] == 1 and row(after, "rulebook")["wins"] == 1
    assert row(after, "rulebook")["streaming_rating"] > 1000.0
    battle.refresh_from_db()
    with transaction.atomic():
        rating_revert_battle(battle=battle)
    reverted = board()
    assert row(reverted, "rulebook")["votes"] == 0
    assert row(reverted, "rulebook")["streaming_rating"] == 1000.0


def test_an_exclusion_and_a_readmission_make_the_next_read_fresh(alice, roster):
    agents = {a.slug: a for a in roster}
    battle = decided_battle(
        submitter=alice, a=agents["idle"], b=agents["surveyor"], outcome="", status="judging"
    )
    assert board()["exclusions"]["named_model"] == 0
    with transaction.atomic():
        locked = Battle.objects.select_for_update().get(pk=battle.pk)
        battle_exclude_locked(locked, reason="named_model", note="", actor=None)
    assert board()["exclusions"]["named_model"] == 1
    with transaction.atomic():
        locked = Battle.objects.select_for_update().get(pk=battle.pk)
        battle_readmit_locked(locked, note="", actor=None)
    assert board()["exclusions"]["named_model"] == 0


def test_a_refit_makes_the_next_read_fresh(alice, roster, rng):
    round_robin(alice, roster, judges(2), rounds=16, rng=rng)
    before = board()
    assert before["refit"]["snapshot_id"] is None and before["refit"]["last_run_at"] is None
    assert all(r["rating"] is None for r in before["rows"])
    arena_refit(arena_id=Arena.objects.public().pk)
    after = board()
    assert after["refit"]["snapshot_id"] is not None and after["refit"]["battles"] == 48
    assert after["refit"]["pending_battles"] == 0
    assert sum(r["rating"] is not None for r in after["rows"]) == 3
    # an unchanged input writes no snapshot, but the run itself is shown
    arena_refit(arena_id=Arena.objects.public().pk)
    again = board()
    assert again["refit"]["snapshot_id"] == after["refit"]["snapshot_id"]
    assert again["refit"]["last_run_at"] > after["refit"]["last_run_at"]


def test_roster_changes_make_the_next_read_fresh(roster):
    assert row(board(), "newcomer") is None
    newcomer = Agent.objects.create(
        arena=roster[0].arena, slug="newcomer", display_name="Newcomer",
        kind="builtin", builtin_policy="idle",
    )  # fmt: skip
    assert row(board(), "newcomer")["agent"] == "Newcomer"
    newcomer.display_name = "Renamed"
    newcomer.save()
    assert row(board(), "newcomer")["agent"] == "Renamed"
    newcomer.retired_at = timezone.now()
    newcomer.save()
    assert row(board(), "newcomer") is None
    newcomer.delete()
    assert row(board(), "newcomer") is None


def test_a_private_arena_board_never_reaches_the_public_one(alice, roster):
    team = Team.objects.get(name="Acme")
    private = Arena.objects.create(slug="acme-private", name="Acme private", team=team)
    secret = Agent.objects.create(
        arena=private, slug="acme-secret", display_name="Acme Secret Agent",
        kind="builtin", builtin_policy="idle",
    )  # fmt: skip
    public_before = board()
    mine = leaderboard_current(arena_id=private.pk)
    assert [r["slug"] for r in mine["rows"]] == ["acme-secret"]
    # both documents are cached now; neither leaks into the other
    public = board()
    assert public == public_before
    assert row(public, "acme-secret") is None and "Acme Secret" not in str(public)
    assert {r["slug"] for r in leaderboard_current(arena_id=private.pk)["rows"]} == {secret.slug}
    page = Client().get("/").content.decode()
    assert "Acme Secret" not in page and "acme-secret" not in page


def test_the_staleness_age_moves_with_the_clock_not_the_document(alice, roster):
    agents = {a.slug: a for a in roster}
    decided_battle(submitter=alice, a=agents["idle"], b=agents["rulebook"], outcome="A")
    arena_id = Arena.objects.public().pk
    now = timezone.now()
    first = leaderboard_current(arena_id=arena_id, now=now)["refit"]
    later = leaderboard_current(arena_id=arena_id, now=now + timedelta(seconds=30))["refit"]
    assert first["pending_battles"] == later["pending_battles"] == 1
    assert later["oldest_pending_age_s"] == pytest.approx(first["oldest_pending_age_s"] + 30)


def test_the_first_serve_after_a_refit_stamps_l_once(alice, roster, rng):
    round_robin(alice, roster, judges(2), rounds=4, rng=rng)
    arena_refit(arena_id=Arena.objects.public().pk)  # its push serves the board: ℓ
    assert not Battle.objects.filter(
        incorporation__incorporation__leaderboard_served_at=None
    ).exists()
    stamped = set(
        Battle.objects.values_list("incorporation__incorporation__leaderboard_served_at", flat=True)
    )
    board()
    board()
    assert (
        set(
            Battle.objects.values_list(
                "incorporation__incorporation__leaderboard_served_at", flat=True
            )
        )
        == stamped
    )

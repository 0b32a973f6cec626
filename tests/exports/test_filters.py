"""What an export may hold: decided (or excluded) battles of consenting submitters past
the publication delay, their final votes, never a retracted one."""

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.services import consent_accept, consent_terms_publish
from battles.models import Battle
from judging.models import Vote
from tests.conftest import make_person
from tests.exports.factories import days_ago, excluded_battle, export, old_battle, rows
from tests.ratings.factories import decided_battle, judges


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


@pytest.fixture
def crowd(db):
    return judges(2)


def test_only_consented_battles_past_the_delay_are_exported(
    tmp_path, terms, alice, agents, crowd, settings
):
    settings.ARENA = settings.ARENA.replace(export_delay_days=7)
    rulebook, idle = agents["rulebook"], agents["idle"]
    # Given a battle decided 30 days ago by a consenting submitter
    kept = old_battle(alice, rulebook, idle, judge=crowd[0], days=30)
    # a battle decided 2 days ago (inside the 7-day delay)
    recent = old_battle(alice, rulebook, idle, judge=crowd[0], days=2)
    # a battle of a submitter who never accepted the terms
    dave = make_person("dave", "Dodgy", None)
    unconsented = old_battle(dave, rulebook, idle, judge=crowd[1], days=30)
    # and undecided battles (judging, queued) with votes on them
    undecided = decided_battle(
        submitter=alice,
        a=rulebook,
        b=idle,
        outcome="",
        judge=crowd[1],
        status=Battle.Status.JUDGING,
        judged_at=days_ago(30),
    )

    # When the export runs with the settings' delay
    out, manifest = export(tmp_path)

    # Then only the first battle and its vote are in it
    assert [r["battle_id"] for r in rows(out, "battles")] == [kept.pk]
    assert [r["battle_id"] for r in rows(out, "votes")] == [kept.pk]
    assert manifest["filters"]["delay_days"] == 7
    assert manifest["counts"]["battles"] == 1
    ids = {recent.pk, unconsented.pk, undecided.pk}
    for table in ("battles", "votes", "exclusions"):
        assert not ids & {r["battle_id"] for r in rows(out, table)}


def test_consent_to_older_terms_is_not_current(tmp_path, terms, alice, agents, crowd):
    old_battle(alice, agents["rulebook"], agents["idle"], judge=crowd[0])
    # When new terms are published that alice has not accepted
    newer = consent_terms_publish(text="New terms.")
    _, manifest = export(tmp_path, "before")
    assert manifest["counts"]["battles"] == 0
    assert manifest["filters"]["consent_terms_version"] == newer.version
    # Then once she accepts them her battles are published again
    consent_accept(user=alice, terms=newer)
    _, manifest = export(tmp_path, "after")
    assert manifest["counts"]["battles"] == 1


def test_without_any_terms_nothing_is_exportable(tmp_path, agents, crowd):
    submitter = make_person("erin", "Erin", None)
    old_battle(submitter, agents["rulebook"], agents["idle"], judge=crowd[0])
    _, manifest = export(tmp_path)
    assert manifest["counts"]["battles"] == 0


def test_the_delay_counts_from_the_decision(tmp_path, alice, agents, crowd):
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=crowd[0], days=3)
    assert export(tmp_path, "a", delay_days=4)[1]["counts"]["battles"] == 0
    assert export(tmp_path, "b", delay_days=2)[1]["counts"]["battles"] == 1
    # and "now" is the export's own time
    later = timezone.now() + timedelta(days=2)
    assert export(tmp_path, "c", delay_days=4, now=later)[1]["counts"]["battles"] == 1
    assert battle.decided_at < later


def test_retracted_and_not_yet_final_votes_are_never_exported(tmp_path, alice, agents, crowd):
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=crowd[0])
    live = Vote.objects.get(battle=battle)
    # a vote taken back inside its window (then the same judge voted again: `live`)
    Vote.objects.create(
        judge=crowd[0],
        battle=battle,
        choice="B",
        served_at=live.served_at,
        voted_at=live.served_at,
        final_at=live.voted_at,
        retracted=True,
        retracted_at=live.voted_at,
        admissible=True,
    )
    # and a vote still inside its undo window at export time
    soon = timezone.now() + timedelta(minutes=5)
    Vote.objects.create(
        judge=crowd[1],
        battle=battle,
        choice="tie",
        served_at=timezone.now(),
        voted_at=timezone.now(),
        final_at=soon,
        admissible=False,
        inadmissible_reason="identities_public",
    )
    out, _ = export(tmp_path, delay_days=0)
    votes = rows(out, "votes")
    assert [(v["choice"], v["admissible"]) for v in votes] == [("A", True)]


def test_exclusions_carry_their_rule_and_who_excluded(tmp_path, alice, agents, crowd):
    battle = excluded_battle(alice, agents["rulebook"], agents["idle"], reason="no_trajectory")
    recent = excluded_battle(alice, agents["rulebook"], agents["idle"], days=1)
    out, _ = export(tmp_path, delay_days=7)
    assert rows(out, "exclusions") == [
        {
            "battle_id": battle.pk,
            "arena": "public",
            "agent_a": "rulebook",
            "agent_b": "idle",
            "reason": "no_trajectory",
            "rule": 3,
            "by": "rule",
            "excluded_at": battle.exclusion_log.get().at.isoformat(),
        }
    ]
    assert recent.pk != battle.pk  # excluded a day ago: inside the delay, not listed

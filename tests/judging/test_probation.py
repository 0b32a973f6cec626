"""Sybil resistance (SPEC §5.4): a new judge is on probation (ω at most 0.5, cannot decide
alone, cannot outvote an established judge) until PROBATION_VOTES of their votes were
compared on redundancy battles, or an operator ends it; with ARENA_JUDGE_APPROVAL on, an
account judges only once an operator approved it. Operators' changes are logged."""

import datetime as dt

import pytest
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from judging.models import JudgeProfile, JudgeTrustLogEntry
from judging.services import judge_next, judge_standing_set
from tests.judging.battle_factories import T0, ended_battle, judge_on, people, serve


def established(user) -> JudgeProfile:
    profile, _ = JudgeProfile.objects.get_or_create(user=user)
    profile.established_at = timezone.now()
    profile.trust = 0.8
    profile.save()
    return profile


def decided(battle) -> tuple[str, str]:
    battle.refresh_from_db()
    return battle.status, battle.outcome


def test_a_fresh_account_cannot_decide_once_the_arena_has_an_established_judge(alice, roster):
    veteran, fresh = people(2)
    established(veteran)
    battle = ended_battle(alice)
    judge_on(fresh, battle, "A")
    assert decided(battle) == ("judging", "")
    judge_on(veteran, battle, "B", at=T0 + dt.timedelta(minutes=1))
    # both in V_b; the established vote leads: probationers cannot overturn it
    assert decided(battle) == ("decided", "B")
    battle.refresh_from_db()
    assert battle.evidence_weight == pytest.approx((0.5 + 0.8) / 2)


def test_a_ring_of_fresh_accounts_cannot_outvote_one_established_judge(alice, roster):
    veteran, *ring = people(6)
    established(veteran)
    battle = ended_battle(alice)
    for i, sybil in enumerate(ring):
        judge_on(sybil, battle, "A", at=T0 + dt.timedelta(minutes=i))
    assert decided(battle) == ("judging", "")
    judge_on(veteran, battle, "B", at=T0 + dt.timedelta(minutes=10))
    assert decided(battle) == ("decided", "B")


def test_before_anyone_is_established_new_judges_decide(alice, roster):
    (first,) = people(1)
    battle = ended_battle(alice)
    judge_on(first, battle, "A")
    assert decided(battle) == ("decided", "A")


def test_an_operator_can_end_a_probation_with_a_reason(alice, roster, admin_user):
    veteran, newcomer = people(2)
    established(veteran)
    entry = judge_standing_set(
        judge_id=newcomer.pk, action="establish", note="known annotator", actor=admin_user
    )
    assert (entry.action, entry.note, entry.actor) == ("establish", "known annotator", admin_user)
    battle = ended_battle(alice)
    judge_on(newcomer, battle, "A")
    assert decided(battle) == ("decided", "A")
    with pytest.raises(ApplicationError) as again:
        judge_standing_set(judge_id=newcomer.pk, action="establish", note="x", actor=admin_user)
    assert again.value.status == 409
    with pytest.raises(ApplicationError) as silent:
        judge_standing_set(judge_id=veteran.pk, action="approve", note=" ", actor=admin_user)
    assert silent.value.code == "note_required"


def test_with_approval_required_an_account_waits_for_an_operator(
    alice, roster, settings, admin_user, api
):
    settings.ARENA = settings.ARENA.replace(judge_approval=True)
    (newcomer,) = people(1)
    battle = ended_battle(alice)
    with pytest.raises(ApplicationError) as waiting:
        serve(newcomer)
    assert (waiting.value.status, waiting.value.code) == (403, "judge_not_approved")
    response = api(newcomer).get("/api/judge/next/")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "judge_not_approved"
    # a vote is refused too, even on a battle served before the setting came on
    from judging.models import Assignment

    Assignment.objects.create(judge=newcomer, battle=battle, served_at=T0)
    response = api(newcomer).post(
        f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json"
    )
    assert response.status_code == 403

    judge_standing_set(judge_id=newcomer.pk, action="approve", note="checked id", actor=admin_user)
    assert serve(newcomer).pk == battle.pk
    assert JudgeTrustLogEntry.objects.filter(judge=newcomer, action="approve").count() == 1


def test_staff_need_no_approval(alice, roster, settings, admin_user, terms):
    from accounts.services import consent_accept

    consent_accept(user=admin_user, terms=terms)
    settings.ARENA = settings.ARENA.replace(judge_approval=True)
    battle = ended_battle(alice)
    assert judge_next(judge=admin_user).pk == battle.pk


def test_the_judge_page_says_the_account_awaits_approval(client, alice, roster, settings):
    settings.ARENA = settings.ARENA.replace(judge_approval=True)
    (newcomer,) = people(1)
    ended_battle(alice)
    client.force_login(newcomer)
    response = client.get("/judge/")
    assert response.status_code == 403
    assert "awaits an operator" in response.content.decode()

"""Admin: excluding / re-admitting a battle and untrusting a judge go through audited
log entries (who, when, why); the logs cannot be edited or deleted."""

import pytest

from battles.models import Battle
from judging.models import ExclusionLogEntry, JudgeProfile, JudgeTrustLogEntry, Vote
from judging.services import battle_exclude, battle_resolve
from ratings.models import AgentRating
from tests.judging.battle_factories import ended_battle, judge_on

EXCLUSION_ADD = "/admin/judging/exclusionlogentry/add/"
TRUST_ADD = "/admin/judging/judgetrustlogentry/add/"


def test_admin_excludes_a_decided_battle_with_a_reason(
    admin_client, admin_user, alice, judge, roster
):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    battle_resolve(battle_id=battle.pk)

    response = admin_client.post(
        EXCLUSION_ADD,
        {
            "battle": battle.pk,
            "action": "exclude",
            "reason": "named_model",
            "note": "name in screenshot",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    battle.refresh_from_db()
    assert (battle.status, battle.exclusion_reason, battle.outcome) == (
        "excluded",
        "named_model",
        "",
    )
    entry = ExclusionLogEntry.objects.get()
    assert (entry.action, entry.reason, entry.note, entry.actor) == (
        "exclude",
        "named_model",
        "name in screenshot",
        admin_user,
    )
    assert entry.at is not None
    # its streaming update is taken back
    assert set(AgentRating.objects.values_list("rated_battles", flat=True)) == {0}
    # the log lists it
    assert (
        "name in screenshot"
        in admin_client.get("/admin/judging/exclusionlogentry/").content.decode()
    )


def test_admin_readmits_and_the_battle_is_decided_again(
    admin_client, admin_user, alice, judge, roster
):
    battle = ended_battle(alice)
    judge_on(judge, battle, "B")
    battle_resolve(battle_id=battle.pk)
    battle_exclude(battle_id=battle.pk, reason="budget_mismatch", note="oops", actor=admin_user)

    response = admin_client.post(
        EXCLUSION_ADD,
        {"battle": battle.pk, "action": "readmit", "reason": "", "note": "wrong call"},
    )

    assert response.status_code == 302
    battle.refresh_from_db()
    assert (battle.status, battle.exclusion_reason, battle.outcome) == ("decided", "", "B")
    log = list(ExclusionLogEntry.objects.order_by("pk").values_list("action", "reason", "note"))
    assert log == [
        ("exclude", "budget_mismatch", "oops"),
        ("readmit", "budget_mismatch", "wrong call"),
    ]
    assert set(AgentRating.objects.values_list("rated_battles", flat=True)) == {1}


def test_a_readmitted_battle_without_votes_goes_back_to_judging(
    admin_client, admin_user, alice, roster
):
    battle = ended_battle(alice, steps=(0, 1))
    battle_exclude(battle_id=battle.pk, reason="no_trajectory", note="outage", actor=admin_user)
    admin_client.post(EXCLUSION_ADD, {"battle": battle.pk, "action": "readmit", "note": "it ran"})
    battle.refresh_from_db()
    assert (battle.status, battle.exclusion_reason) == ("judging", "")


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"action": "readmit", "note": "x"}, "is judging, not excluded"),
        ({"action": "exclude", "reason": "", "note": "x"}, "reason must be one of"),
        ({"action": "exclude", "reason": "named_model", "note": ""}, "Say why."),
    ],
)
def test_refused_admin_actions_say_why_and_change_nothing(admin_client, alice, roster, data, error):
    battle = ended_battle(alice)
    response = admin_client.post(EXCLUSION_ADD, {"battle": battle.pk, **data})
    assert response.status_code == 200
    assert error in response.content.decode()
    assert ExclusionLogEntry.objects.count() == 0
    battle.refresh_from_db()
    assert battle.status == Battle.Status.JUDGING


def test_the_logs_are_read_only(admin_client, admin_user, alice, roster):
    battle = ended_battle(alice)
    entry = battle_exclude(battle_id=battle.pk, reason="no_run", note="gone", actor=admin_user)
    change = f"/admin/judging/exclusionlogentry/{entry.pk}/change/"
    assert admin_client.get(change).status_code == 200  # viewable
    admin_client.post(change, {"battle": battle.pk, "action": "readmit", "note": "sneaky"})
    assert (
        admin_client.post(f"/admin/judging/exclusionlogentry/{entry.pk}/delete/").status_code == 403
    )
    entry.refresh_from_db()
    assert (entry.action, entry.note) == ("exclude", "gone")
    assert ExclusionLogEntry.objects.count() == 1


def test_admin_marks_a_judge_untrusted_with_a_reason(
    admin_client, admin_user, alice, judge, roster
):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    response = admin_client.post(
        TRUST_ADD, {"judge": judge.pk, "action": "untrust", "note": "votes in 1 s"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert JudgeProfile.objects.get(user=judge).is_untrusted is True
    entry = JudgeTrustLogEntry.objects.get()
    assert (entry.judge, entry.action, entry.note, entry.actor) == (
        judge,
        "untrust",
        "votes in 1 s",
        admin_user,
    )
    assert Vote.objects.get().inadmissible_reason == "untrusted_judge"
    # twice is refused
    again = admin_client.post(TRUST_ADD, {"judge": judge.pk, "action": "untrust", "note": "again"})
    assert again.status_code == 200 and "already untrusted" in again.content.decode()
    assert JudgeTrustLogEntry.objects.count() == 1


def test_the_profile_action_leads_to_the_audited_form(admin_client, judge, roster):
    profile = JudgeProfile.objects.create(user=judge)
    response = admin_client.post(
        "/admin/judging/judgeprofile/",
        {"action": "mark_untrusted", "_selected_action": [profile.pk]},
    )
    assert response.status_code == 302
    assert response["Location"] == f"{TRUST_ADD}?judge={judge.pk}&action=untrust"
    assert JudgeProfile.objects.get().is_untrusted is False  # nothing happens without a reason
    form = admin_client.get(response["Location"]).content.decode()
    assert 'name="note"' in form


def test_trust_cannot_be_edited_directly(admin_client, judge, roster):
    profile = JudgeProfile.objects.create(user=judge)
    admin_client.post(
        f"/admin/judging/judgeprofile/{profile.pk}/change/", {"trust": "1.0", "is_untrusted": "on"}
    )
    profile.refresh_from_db()
    assert (profile.trust, profile.is_untrusted) == (0.5, False)


def test_non_staff_cannot_reach_the_admin(client, judge, alice, roster):
    battle = ended_battle(alice)
    client.force_login(judge)
    response = client.post(
        EXCLUSION_ADD, {"battle": battle.pk, "action": "exclude", "reason": "no_run", "note": "x"}
    )
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    battle.refresh_from_db()
    assert battle.status == Battle.Status.JUDGING


def test_the_battle_admin_shows_but_does_not_edit_judging_state(admin_client, alice, roster):
    battle = ended_battle(alice)
    page = admin_client.get(f"/admin/battles/battle/{battle.pk}/change/")
    assert page.status_code == 200
    listing = admin_client.get("/admin/battles/battle/?exclusion_reason=no_run")
    assert listing.status_code == 200
    form = page.context["adminform"].form
    assert not {"status", "exclusion_reason", "outcome", "decision_source"} & set(form.fields)


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/admin/battles/battle/{battle}/change/", {"agent_a": "{agent}", "redundancy_target": 9}),
        ("/admin/battles/run/{run}/change/", {"step_budget": 999}),
        ("/admin/ratings/agentrating/{rating}/change/", {"streaming_rating": 3000}),
    ],
)
def test_evidence_and_rating_rows_cannot_be_edited_or_deleted(
    admin_client, alice, judge, roster, url, field
):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    rating = AgentRating.objects.order_by("pk").first()
    run = battle.runs.first()
    ids = {"battle": battle.pk, "run": run.pk, "rating": rating.pk, "agent": battle.agent_b_id}
    target = url.format(**ids)
    data = {k: str(v).format(**ids) for k, v in field.items()}
    before = (battle.agent_a_id, run.step_budget, rating.streaming_rating)

    assert admin_client.post(target, data).status_code == 403
    assert (
        admin_client.post(target.replace("/change/", "/delete/"), {"post": "yes"}).status_code
        == 403
    )

    battle.refresh_from_db()
    run.refresh_from_db()
    rating.refresh_from_db()
    assert (battle.agent_a_id, run.step_budget, rating.streaming_rating) == before


def test_admin_approves_a_judge_through_the_audited_form(admin_client, admin_user, judge, roster):
    response = admin_client.post(
        TRUST_ADD, {"judge": judge.pk, "action": "approve", "note": "met at the workshop"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    profile = JudgeProfile.objects.get(user=judge)
    assert profile.approved_at is not None and profile.established_at is None
    entry = JudgeTrustLogEntry.objects.get()
    assert (entry.action, entry.note, entry.actor) == ("approve", "met at the workshop", admin_user)
    again = admin_client.post(TRUST_ADD, {"judge": judge.pk, "action": "approve", "note": "x"})
    assert again.status_code == 200 and "already approved" in again.content.decode()

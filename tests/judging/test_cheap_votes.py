"""Cheap votes cannot remove evidence (SPEC §5.3 rule 7, bounded): an instant vote, a skip
or an untrusted judge's vote consumes nothing; the battle goes back to the pool and
another judge decides it. Exclusion needs 6 × target distinct judges refusing it, or the
judging window passing with no admissible vote. A vote on a battle decided while the
judge held it says it does not count."""

import datetime as dt

import time_machine

from judging.models import Vote
from judging.services import battle_resolve, battles_resolve_pending, judge_trust_set
from tests.judging.battle_factories import READ, T0, cast, ended_battle, judge_on, people, serve


def status(battle) -> tuple[str, str, str]:
    battle.refresh_from_db()
    return battle.status, battle.outcome, battle.exclusion_reason


def test_an_instant_vote_sends_the_battle_back_to_the_pool(alice, roster):
    rusher, careful = people(2)
    battle = ended_battle(alice)
    serve(rusher)
    vote = cast(rusher, battle, "A", at=T0 + dt.timedelta(seconds=1))
    assert vote.inadmissible_reason == "too_fast"
    assert status(battle) == ("judging", "", "")
    judge_on(careful, battle, "B", at=T0 + dt.timedelta(minutes=1))
    assert status(battle) == ("decided", "B", "")


def test_a_skip_gives_the_judge_the_next_battle_and_leaves_this_one_open(alice, roster):
    skipper, other = people(2)
    first = ended_battle(alice)
    second = ended_battle(alice)
    judge_on(skipper, first, "abstain")
    assert serve(skipper, T0 + dt.timedelta(minutes=1)).pk == second.pk
    assert status(first) == ("judging", "", "")
    judge_on(other, first, "A", at=T0 + dt.timedelta(minutes=2))
    assert status(first) == ("decided", "A", "")


def test_a_held_battle_comes_back_on_reload_no_shopping(alice, roster):
    (judge,) = people(1)
    first = ended_battle(alice)
    ended_battle(alice)
    assert serve(judge).pk == first.pk
    assert serve(judge, T0 + dt.timedelta(seconds=5)).pk == first.pk


def test_an_untrusted_judges_vote_consumes_nothing(alice, roster, admin_user):
    bad, good = people(2)
    judge_trust_set(judge_id=bad.pk, untrusted=True, note="bot", actor=admin_user)
    battle = ended_battle(alice)
    judge_on(bad, battle, "A")
    assert status(battle) == ("judging", "", "")
    judge_on(good, battle, "B", at=T0 + dt.timedelta(minutes=1))
    assert status(battle) == ("decided", "B", "")


def test_one_account_cannot_exclude_a_battle(alice, roster):
    (attacker,) = people(1)
    battle = ended_battle(alice)
    judge_on(attacker, battle, "abstain")
    # a second live vote is refused; undoing and re-voting leaves one live vote
    assert Vote.objects.filter(battle=battle, retracted=False).count() == 1
    battle_resolve(battle_id=battle.pk)
    assert status(battle) == ("judging", "", "")


def test_six_distinct_judges_refusing_a_battle_exclude_it(alice, roster):
    crowd = people(6)
    battle = ended_battle(alice)
    for i, person in enumerate(crowd):
        start = T0 + dt.timedelta(minutes=i)
        if i % 2:
            judge_on(person, battle, "abstain", at=start)
        else:
            serve(person, start)
            cast(person, battle, "A", at=start + dt.timedelta(seconds=1))  # too fast
        expected = "excluded" if i == 5 else "judging"
        assert status(battle)[0] == expected, i
    assert status(battle) == ("excluded", "", "no_admissible_vote")
    (entry,) = battle.exclusion_log.all()
    assert entry.actor is None and "6 judges abstained or voted too fast" in entry.note


def test_the_judging_window_closing_with_nothing_admissible_excludes(alice, roster):
    (rusher,) = people(1)
    battle = ended_battle(alice)
    serve(rusher)
    cast(rusher, battle, "A", at=T0 + dt.timedelta(seconds=1))
    ttl = dt.timedelta(days=1)
    with time_machine.travel(T0 + ttl - dt.timedelta(minutes=2), tick=False):
        assert battles_resolve_pending() == []
    with time_machine.travel(T0 + ttl, tick=False):
        assert battles_resolve_pending() == [battle.pk]
    assert status(battle) == ("excluded", "", "no_admissible_vote")


def test_a_vote_on_a_battle_decided_while_the_judge_held_it_says_it_does_not_count(
    api, alice, roster
):
    holder, decider = people(2)
    battle = ended_battle(alice)
    serve(holder)
    judge_on(decider, battle, "A", at=T0 + dt.timedelta(seconds=1))
    assert status(battle)[0] == "decided"
    with time_machine.travel(T0 + READ, tick=False):
        response = api(holder).post(
            f"/api/battles/{battle.pk}/votes/", {"choice": "B"}, format="json"
        )
    assert response.status_code == 201
    body = response.json()
    assert (body["counts"], body["inadmissible_reason"]) == (False, "identities_public")
    assert body["message"].startswith("Recorded, does not count")
    assert "Your vote counts" not in body["message"]
    assert status(battle) == ("decided", "A", "")  # nothing moved
    # a reopening later does not make it count: the assignment stays voided
    from judging.models import Assignment

    assert Assignment.objects.get(judge=holder, battle=battle).voided_at is not None

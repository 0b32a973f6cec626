"""Votes under real concurrency: threads with their own PostgreSQL connections, real
transactions and commits (so the in-process resolve after commit runs too)."""

import datetime as dt
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.utils import timezone

from judging.models import Assignment, Vote
from ratings.models import AgentRating
from tests.conftest import api_client_for, make_person
from tests.judging.battle_factories import ended_battle

THREADS = 16  # connections are shared with other test runs on this server
CHOICES = ["A", "B", "tie", "both_bad", "abstain"]


def _post_vote(user, battle_id: int, choice: str, barrier: threading.Barrier | None):
    try:
        if barrier is not None:
            barrier.wait(timeout=30)
        response = api_client_for(user).post(
            f"/api/battles/{battle_id}/votes/", {"choice": choice}, format="json"
        )
        return response.status_code, response.json()
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_hundred_parallel_votes_leave_one_live_vote_each_and_exact_tallies(alice, terms, roster):
    battle = ended_battle(alice, target=3)
    crowd = [make_person(f"crowd{i}", None, terms) for i in range(100)]
    served = timezone.now() - dt.timedelta(minutes=2)
    Assignment.objects.bulk_create(
        Assignment(judge=person, battle=battle, served_at=served) for person in crowd
    )
    sent = {person.pk: CHOICES[i % len(CHOICES)] for i, person in enumerate(crowd)}

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        results = list(pool.map(lambda p: _post_vote(p, battle.pk, sent[p.pk], None), crowd))

    assert [code for code, _ in results] == [201] * 100
    live = Vote.objects.filter(battle=battle, retracted=False)
    assert live.count() == 100
    assert dict(live.values_list("judge_id", "choice")) == sent
    assert Counter(live.values_list("choice", flat=True)) == dict.fromkeys(CHOICES, 20)
    # decided exactly once, however many resolves raced (in the vote's own transaction)
    battle.refresh_from_db()
    assert battle.status == "decided" and battle.outcome
    assert sorted(AgentRating.objects.values_list("rated_battles", flat=True)) == [1, 1]
    counted = set(live.filter(counted=True))
    # V_b: every admissible vote cast before the decision; after it, the holders' votes
    # are recorded as not counting (the result was public), and abstentions never count
    assert counted == set(live.filter(admissible=True)) and len(counted) >= 3
    reasons = Counter(live.filter(admissible=False).values_list("inadmissible_reason", flat=True))
    assert set(reasons) <= {"abstain", "identities_public"}
    late = live.filter(inadmissible_reason="identities_public")
    assert all(v.voted_at >= battle.decided_at for v in late)
    assert len(counted) + sum(reasons.values()) == 100
    assert battle.cluster_judge_id == min(counted, key=lambda v: (v.voted_at, v.pk)).judge_id


@pytest.mark.django_db(transaction=True)
def test_the_same_judge_double_submitting_in_parallel_gets_one_vote(alice, judge, roster):
    battle = ended_battle(alice)
    Assignment.objects.create(
        judge=judge, battle=battle, served_at=timezone.now() - dt.timedelta(minutes=2)
    )
    attempts = 10
    barrier = threading.Barrier(attempts)

    with ThreadPoolExecutor(max_workers=attempts) as pool:
        results = list(
            pool.map(lambda i: _post_vote(judge, battle.pk, "AB"[i % 2], barrier), range(attempts))
        )

    codes = Counter(code for code, _ in results)
    assert codes == {201: 1, 409: attempts - 1}
    assert {body["error"]["code"] for code, body in results if code == 409} == {"already_voted"}
    (vote,) = Vote.objects.filter(battle=battle)
    winner = next(body for code, body in results if code == 201)
    assert vote.pk == winner["vote"] and vote.choice == winner["choice"]
    battle.refresh_from_db()
    assert battle.outcome == vote.choice
    assert sorted(AgentRating.objects.values_list("rated_battles", flat=True)) == [1, 1]

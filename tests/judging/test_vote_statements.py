"""What a vote costs the database, pinned: a change that adds a statement to the
hottest paths shows here (each statement is a round trip while the vote's locks are
held). The vote's own transaction is a savepoint inside the test's."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from judging.models import Assignment, Vote
from judging.services import vote_cast
from ratings.models import AgentRating
from ratings.services import agent_rating
from tests.judging.battle_factories import ended_battle

pytestmark = pytest.mark.django_db


def served_long_ago(judge, battle):
    Assignment.objects.create(
        judge=judge, battle=battle, served_at=timezone.now() - dt.timedelta(minutes=1)
    )


def statements_of(call) -> tuple[object, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        result = call()
    return result, [q["sql"] for q in queries.captured_queries]


def test_a_deciding_vote_takes_fifteen_statements(alice, judge, roster, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=0)
    for agent in roster:  # rated before (their rows exist: the steady state)
        agent_rating(agent)
    battle = ended_battle(alice)
    served_long_ago(judge, battle)
    vote, sql = statements_of(lambda: vote_cast(judge=judge, battle_id=battle.pk, choice="A"))
    assert vote.counted and vote.battle.status == "decided"
    assert Vote.objects.get(pk=vote.pk).counted  # what the answer says is what is stored
    assert sum(AgentRating.objects.values_list("rated_battles", flat=True)) == 2
    # the savepoint pair, the locking read, the insert, the tally, the agents, the
    # resolution's savepoint pair, its votes (probation in the same statement), the
    # counted flags, the open assignments, the two rating rows locked and updated, the
    # battle row
    assert len(sql) <= 15, "\n".join(sql)
    assert not any("judging_judgeprofile" in s and s.startswith("SELECT 1") for s in sql)


def test_a_vote_inside_its_undo_window_takes_five_statements(alice, judge, roster, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=10)
    battle = ended_battle(alice)
    served_long_ago(judge, battle)
    vote, sql = statements_of(lambda: vote_cast(judge=judge, battle_id=battle.pk, choice="A"))
    assert not vote.counted and vote.battle.status == "judging"
    # the savepoint pair, the locking read, the insert, the tally
    assert len(sql) <= 5, "\n".join(sql)

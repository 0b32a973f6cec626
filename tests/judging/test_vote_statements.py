"""What a vote costs the database, pinned: a change that adds a statement to the
hottest paths shows here (each statement is a round trip while the vote's locks are
held). The vote's own transaction is a savepoint inside the test's. Through the API
with a bearer token, the request adds nothing while the token's entry is cached
(before: the token's SELECT on every vote, and its last-used UPDATE once a minute);
tests/judging/test_vote_round_trips.py pins its Redis side."""

import datetime as dt

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.services import api_token_create
from battles.models import Battle
from judging import vote_db
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
    # the savepoint pair, the locking read, the insert with the tally, the agents, the
    # resolution's savepoint pair, its votes (probation in the same statement), the
    # counted flags, the open assignments, the two rating rows locked and updated, the
    # battle row
    assert len(sql) <= 14, "\n".join(sql)
    assert not any("judging_judgeprofile" in s and s.startswith("SELECT 1") for s in sql)


def test_a_vote_inside_its_undo_window_takes_four_statements(alice, judge, roster, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=10)
    battle = ended_battle(alice)
    served_long_ago(judge, battle)
    vote, sql = statements_of(lambda: vote_cast(judge=judge, battle_id=battle.pk, choice="A"))
    assert not vote.counted and vote.battle.status == "judging"
    # the savepoint pair, the locking read, the insert with the tally (one statement)
    assert len(sql) <= 4, "\n".join(sql)


def test_a_vote_post_with_a_cached_token_is_the_votes_four_statements(
    alice, judge, roster, settings
):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=10)
    first, second = ended_battle(alice), ended_battle(alice)
    served_long_ago(judge, first)
    served_long_ago(judge, second)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=judge)[1]}")

    def post(battle):
        return lambda: client.post(
            f"/api/battles/{battle.pk}/votes/", {"choice": "A"}, format="json"
        )

    cold, cold_sql = statements_of(post(first))
    warm, sql = statements_of(post(second))

    assert cold.status_code == warm.status_code == 201
    # the token's first use reads it (and its user) once; it is cached from then on
    assert len(cold_sql) == 5 and "accounts_apitoken" in cold_sql[0], "\n".join(cold_sql)
    # the savepoint pair, the locking read, the insert with the tally: nothing before
    assert len(sql) == 4 and sql[0].startswith("SAVEPOINT"), "\n".join(sql)


def test_the_votes_locking_read_builds_the_battle_the_orm_would(alice, judge, roster):
    """``vote_db.battle_for_vote`` builds the battle from its own SQL: every field must
    come out as the ORM's read gives it (a JSON column is text from the driver, times
    are aware), with what it adds about the judge."""
    battle = ended_battle(alice, calibration=True)
    served_long_ago(judge, battle)
    Battle.objects.filter(pk=battle.pk).update(
        streaming_applied={"a": 12.5, "b": -12.5}, decided_at=timezone.now(), outcome="A"
    )
    with transaction.atomic():
        read = vote_db.battle_for_vote(battle_id=battle.pk, judge_id=judge.pk)
    stored = Battle.objects.get(pk=battle.pk)
    for field in Battle._meta.concrete_fields:
        assert getattr(read, field.attname) == getattr(stored, field.attname), field.name
        assert type(getattr(read, field.attname)) is type(getattr(stored, field.attname))
    assert read.streaming_applied == {"a": 12.5, "b": -12.5}
    assert read.served_at.tzinfo is not None and read.task_submitter_id == alice.pk
    assert (read.judge_in_team, read.judge_entrant, read.held_voided) == (False, False, False)
    assert read.final_a == "6*7 = 42" and read._state.adding is False
    with transaction.atomic():
        assert vote_db.battle_for_vote(battle_id=battle.pk + 1000, judge_id=judge.pk) is None

"""A burst of votes well beyond what one small Daphne can take at once: every request is
answered, nothing but 201 or a 503 with Retry-After and the JSON envelope comes back,
every 201 is a stored vote (and each vote stored was answered 201), and a 503'd vote
sent again is taken. The short version of tests/bench/bench_votes.py.

Real Daphne on the test database with a pool of 2 connections and at most 2 requests in
flight, 24 client threads sending at once (each its own connection, as browsers do)."""

import datetime as dt
import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.utils import timezone

from accounts.services import api_token_create
from battles.models import Battle
from judging.models import Assignment, Vote
from ratings.models import AgentRating
from tests.judging.battle_factories import ended_battle, people
from tests.servers import (
    START_TIMEOUT_S,
    ServerProcess,
    child_env,
    ensure_public_arena,
    free_port,
    http_answers,
    poll_until,
    vote_over_http,
    wait_for_child_sessions_to_end,
    web_command,
)

JUDGES = 24
VOTES_EACH = 2
CAPACITY_ENV = {
    "ARENA_DB_POOL_MIN": "1",
    "ARENA_DB_POOL_MAX": "2",
    "ARENA_DB_POOL_TIMEOUT_S": "0.5",
    "ARENA_MAX_INFLIGHT": "2",
    "ARENA_VOTE_RATE_PER_MIN": "100000",
}


def _post(port: int, token: str, battle_id: int, barrier: threading.Barrier | None) -> dict:
    wait = None if barrier is None else (lambda: barrier.wait(timeout=60))
    return vote_over_http(port, token, battle_id, timeout=60, before_send=wait)


@pytest.mark.django_db(transaction=True)
def test_a_burst_beyond_capacity_gets_201_or_503_and_loses_nothing(
    alice, roster, sandbox_root, tmp_path
):
    ensure_public_arena()
    judges = people(JUDGES, prefix="loadjudge")
    served = timezone.now() - dt.timedelta(minutes=1)
    work: list[tuple[str, int]] = []  # (token, battle id): each judge votes on their own
    for judge in judges:
        _, token = api_token_create(user=judge, name="load")
        for _ in range(VOTES_EACH):
            battle = ended_battle(alice)
            Assignment.objects.create(judge=judge, battle=battle, served_at=served)
            work.append((token, battle.pk))
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    env.update(CAPACITY_ENV)
    port = free_port()
    web = ServerProcess.start(
        "daphne",
        web_command(port),
        env,
        tmp_path / "logs",
    )
    try:
        poll_until(
            lambda: http_answers(f"http://127.0.0.1:{port}/accounts/login/"),
            timeout=START_TIMEOUT_S,
            what="the web server",
            processes=[web],
        )
        # When every judge sends their votes at once, each on its own connection
        barrier = threading.Barrier(JUDGES)
        by_judge = [work[i * VOTES_EACH : (i + 1) * VOTES_EACH] for i in range(JUDGES)]

        def judge_sends(mine: list[tuple[str, int]]) -> list[dict]:
            token = mine[0][0]
            first = _post(port, token, mine[0][1], barrier)
            return [first, *(_post(port, token, b, None) for _, b in mine[1:])]

        with ThreadPoolExecutor(max_workers=JUDGES) as pool:
            answers = [a for batch in pool.map(judge_sends, by_judge) for a in batch]

        # Then each request was answered: 201, or 503 with Retry-After and the envelope
        statuses = Counter(a["status"] for a in answers)
        assert len(answers) == len(work)
        assert set(statuses) <= {201, 503}, (statuses, web.tail())
        assert statuses[201] > 0 and statuses[503] > 0, statuses  # beyond capacity indeed
        for answer in answers:
            if answer["status"] == 503:
                error = json.loads(answer["body"])["error"]
                assert answer["retry_after"] in {"1", "5"}, answer
                assert answer["content_type"] == "application/json", answer
                assert error["code"] in {"overloaded", "unavailable"}, error
                assert error["retry_after"] == int(answer["retry_after"])
        # every 201 is a stored vote, and every stored vote was answered 201
        taken = {a["battle"]: json.loads(a["body"])["vote"] for a in answers if a["status"] == 201}
        stored = dict(Vote.objects.values_list("battle_id", "pk"))
        assert stored == taken
        # And the votes shed are taken when sent again, one at a time
        token_of = {battle_id: token for token, battle_id in work}
        shed = [(token_of[a["battle"]], a["battle"]) for a in answers if a["status"] == 503]
        again = [_post(port, token, battle_id, None) for token, battle_id in shed]
        assert [a["status"] for a in again] == [201] * len(shed)
        assert Vote.objects.count() == len(work)
        # each battle was decided by its vote, its streaming rating moved exactly once
        assert Battle.objects.filter(status=Battle.Status.DECIDED).count() == len(work)
        assert sum(AgentRating.objects.values_list("rated_battles", flat=True)) == 2 * len(work)
        assert web.alive()
        print(json.dumps({"load_burst": {"requests": len(answers), "statuses": statuses}}))
    finally:
        web.stop()
        wait_for_child_sessions_to_end()

"""Redis, then PostgreSQL, killed and started again under a real Daphne while a judge
keeps voting: while either is down every vote is answered 503 with Retry-After and the
JSON envelope (never a 500, never an HTML page); once it is back the same Daphne process
answers 201 again without a restart; every 201 is a stored vote and no 503 left one.
The recovery time of each is printed (JSON), not asserted.

Daphne runs against a throwaway Redis and a throwaway PostgreSQL cluster
(tests/throwaway.py) with a database migrated and seeded by a child process."""

import json
import os
import subprocess
import threading
import time
from collections import Counter

import psycopg
import pytest

from tests.servers import (
    PYTHON,
    ROOT,
    START_TIMEOUT_S,
    ServerProcess,
    child_env,
    free_port,
    http_answers,
    poll_until,
    vote_over_http,
    web_command,
)
from tests.throwaway import throwaway_postgres, throwaway_redis

BATTLES = 60  # more than the voter uses up in the test
DOWN_S = 2.0
RECOVERY_BOUND_S = 60.0

# Migrates the throwaway database and seeds it: consent terms, a submitting team, one
# judge with an API token, the roster and BATTLES battles judging, served to the judge a
# minute ago (every vote admissible). Prints {"token": ..., "battles": [...]}.
SEED = """
import json, os, sys
from datetime import timedelta
import django
django.setup()
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
from django.contrib.auth import get_user_model
from django.utils import timezone
from accounts.services import api_token_create, consent_accept, consent_terms_publish, team_create
from agents.models import PUBLIC_ARENA_SLUG, Arena
from agents.services import roster_install_builtins
from battles.models import Battle, Task
from judging.models import Assignment
User = get_user_model()
terms = consent_terms_publish(text="outage test")
submitter = User.objects.create_user("outage-submitter", password="outage-password-1")
judge = User.objects.create_user("outage-judge", password="outage-password-1")
team = team_create(name="outage-acme", owner=submitter)
team_create(name="outage-judges", owner=judge)
for user in (submitter, judge):
    consent_accept(user=user, terms=terms)
arena, _ = Arena.objects.get_or_create(slug=PUBLIC_ARENA_SLUG, defaults={"name": "Public arena"})
roster = roster_install_builtins(arena=arena)
now = timezone.now()
ids = []
for i in range(int(sys.argv[1])):
    a, b = roster[i % len(roster)], roster[(i + 1) % len(roster)]
    task = Task.objects.create(team=team, submitter=submitter, instruction=f"outage task {i}")
    battle = Battle.objects.create(
        arena=arena, team=team, task=task, agent_a=a, agent_b=b,
        status=Battle.Status.JUDGING, redundancy_target=1,
        submitted_at=now - timedelta(minutes=10), ended_at=now - timedelta(minutes=2),
    )
    Assignment.objects.create(judge=judge, battle=battle, served_at=now - timedelta(minutes=1))
    ids.append(battle.pk)
_, token = api_token_create(user=judge, name="outage")
print(json.dumps({"token": token, "battles": ids}))
"""


class Voter(threading.Thread):
    """Votes on one battle after another, as fast as answers come; a battle answered
    anything but 201 is voted on again. Every answer is kept, stamped."""

    def __init__(self, port: int, token: str, battles: list[int]) -> None:
        super().__init__(daemon=True)
        self.port, self.token, self.battles = port, token, list(battles)
        self.answers: list[dict] = []
        self.halt = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set() and self.battles:
                battle = self.battles[0]
                answer = self.vote(battle)
                self.answers.append(answer)
                if answer["status"] == 201:
                    self.battles.pop(0)
                else:
                    time.sleep(0.05)
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def vote(self, battle: int) -> dict:
        answer = vote_over_http(self.port, self.token, battle)
        return {"at": time.monotonic(), **answer}

    def wait_for(self, condition, what: str, web: ServerProcess, timeout: float) -> dict:
        """The first answer from now on that meets ``condition``."""
        start = len(self.answers)

        def found():
            return next((a for a in self.answers[start:] if condition(a)), None)

        return poll_until(found, timeout=timeout, what=what, processes=[web], interval=0.05)


def _stored_votes(url: str) -> Counter:
    with psycopg.connect(url, connect_timeout=5) as conn:
        rows = conn.execute("SELECT battle_id FROM judging_vote WHERE NOT retracted").fetchall()
    return Counter(battle_id for (battle_id,) in rows)


# Long (two outages, servers of their own): `make soak`. make test keeps the workers'
# recovery from a PostgreSQL restart (tests/faults/test_postgres_restart.py).
@pytest.mark.soak
def test_votes_get_503_while_redis_or_postgres_is_down_and_201_once_back(sandbox_root, tmp_path):
    with throwaway_redis() as cache_server, throwaway_postgres() as db_server:
        with psycopg.connect(db_server.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE arena")
        url = db_server.url("arena")
        env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
        env.update(
            DATABASE_URL=url,
            REDIS_URL=cache_server.url,
            ARENA_VOTE_RATE_PER_MIN="1000000",
            ARENA_DB_POOL_TIMEOUT_S="1",
        )
        seeded = subprocess.run(
            [PYTHON, "-c", SEED, str(BATTLES)],
            cwd=ROOT, env=env, check=True, timeout=300, capture_output=True, text=True,
        )  # fmt: skip
        seed = json.loads(seeded.stdout.strip().splitlines()[-1])
        port = free_port()
        web = ServerProcess.start(
            "daphne",
            web_command(port),
            env,
            tmp_path / "logs",
        )
        voter = Voter(port, seed["token"], seed["battles"])
        try:
            poll_until(
                lambda: http_answers(f"http://127.0.0.1:{port}/accounts/login/"),
                timeout=START_TIMEOUT_S,
                what="the web server",
                processes=[web],
            )
            voter.start()
            created = lambda a: a["status"] == 201  # noqa: E731
            refused = lambda a: a["status"] != 201  # noqa: E731
            voter.wait_for(created, "a first vote", web, timeout=60)
            recovery = {}
            for name, server in (("redis", cache_server), ("postgres", db_server)):
                # When the server goes away, votes are refused
                server.stop()
                voter.wait_for(refused, f"a vote refused with {name} down", web, timeout=30)
                time.sleep(DOWN_S)
                # And once it is back, the same Daphne takes them again
                server.start()
                up = time.monotonic()
                first = voter.wait_for(created, f"a vote after {name}", web, RECOVERY_BOUND_S)
                recovery[name] = round(first["at"] - up, 3)
                voter.wait_for(created, f"votes after {name}", web, timeout=30)
            voter.halt.set()
            voter.join(30)
            assert voter.failure is None, voter.failure
            assert web.alive()

            answers = voter.answers
            statuses = Counter(a["status"] for a in answers)
            # Then nothing but 201 and 503 came back, each 503 with Retry-After and the
            # envelope
            assert set(statuses) == {201, 503}, (statuses, web.tail())
            for answer in answers:
                if answer["status"] == 503:
                    assert answer["content_type"] == "application/json", answer
                    error = json.loads(answer["body"])["error"]
                    assert error["code"] in {"overloaded", "unavailable"}, error
                    assert answer["retry_after"] == str(error["retry_after"]), answer
            # every 201 is a stored vote; no refused vote was stored
            created_on = Counter(a["battle"] for a in answers if a["status"] == 201)
            assert max(created_on.values()) == 1
            assert _stored_votes(url) == created_on
            print(
                json.dumps(
                    {
                        "outage_recovery_s": recovery,
                        "down_s": DOWN_S,
                        "answers": dict(statuses),
                        "loadavg": [round(x, 2) for x in os.getloadavg()],
                    }
                )
            )
        finally:
            voter.halt.set()
            web.stop()

"""The machine judge on committed data: screening opens a battle, the job goes on the
``evals`` queue after commit and a real RQ worker runs it against the fake judge; the
verdict never reaches a socket; the machine board is cached and refitted only when its
input changes."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from rq import SimpleWorker

from arena_site.asgi import application
from arena_site.redis import queue
from battles.models import Battle
from battles.services.live import battle_publish
from judging.machine_board import machine_board
from judging.models import MachineVerdict
from judging.services import battle_screen
from judging.services.machine import battle_machine_judge
from tests.agents.conftest import _loopback_allowlisted  # noqa: F401 - the fake is on loopback
from tests.agents.fake_providers import FakeAnthropic
from tests.judging.battle_factories import ended_battle, people
from tests.judging.machine_script import (
    JUDGE_MODEL,
    KEY,
    KEY_ENV,
    MARK,
    arena_judge_on,
    judge_policy,
    machine_judge_agent,
)
from tests.judging.test_judge_socket import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake_judge(roster, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeAnthropic(api_key=KEY, policy=judge_policy) as fake:
        arena_judge_on(machine_judge_agent(fake.base_url))
        yield fake


def test_a_real_worker_judges_the_battle_screening_opened(alice, fake_judge):
    battle = ended_battle(alice, messages=("no", "It is 42"), status=Battle.Status.SCREENING)
    assert battle_screen(battle_id=battle.pk) == ""
    evals = queue("evals")
    assert evals.count == 1

    SimpleWorker([evals], connection=evals.connection).work(burst=True)

    verdict = MachineVerdict.objects.get(battle=battle)
    assert (verdict.judge_model, verdict.method, verdict.status, verdict.outcome) == (
        JUDGE_MODEL, "pairwise", "resolved", "B")  # fmt: skip
    assert len(fake_judge.requests) == 2
    assert Battle.objects.get(pk=battle.pk).status == "judging"  # still the humans' to decide


def test_no_socket_frame_carries_the_verdict(alice, fake_judge):
    crowd = people(1)[0]
    battle = ended_battle(alice, messages=("It is 42", "no"))

    def socket(path: str, user) -> WebsocketCommunicator:
        headers = [(b"origin", b"http://127.0.0.1"), (b"cookie", session_cookie(user))]
        return WebsocketCommunicator(application, path, headers=headers)

    team, judge = socket(f"/ws/battles/{battle.pk}/", alice), socket("/ws/judge/", crowd)

    def publish() -> None:
        with transaction.atomic():
            battle_publish(battle_id=battle.pk)

    async def scenario():
        assert (await team.connect())[0] and (await judge.connect())[0]
        assert MARK not in await team.receive_from(timeout=5)  # the panel sent on connect
        verdicts = await database_sync_to_async(battle_machine_judge)(battle_id=battle.pk)
        assert [v.outcome for v in verdicts] == ["A"]
        assert await team.receive_nothing(timeout=0.3)
        assert await judge.receive_nothing(timeout=0.3)
        await database_sync_to_async(publish)()  # the next change the live page hears
        frame = await team.receive_from(timeout=5)
        assert "It is 42" in frame and MARK not in frame
        await team.disconnect()
        await judge.disconnect()

    async_to_sync(scenario)()


def test_the_board_is_cached_until_its_input_changes(alice, fake_judge):
    first = ended_battle(alice, messages=("42", "no"))
    battle_machine_judge(battle_id=first.pk)
    Battle.objects.filter(pk=first.pk).update(
        status="decided", outcome="A", decision_source="crowd"
    )
    board = machine_board(arena_id=first.arena_id, judge_model=JUDGE_MODEL, method="pairwise")
    again = machine_board(arena_id=first.arena_id, judge_model=JUDGE_MODEL, method="pairwise")
    assert board["battles"] == 1 and again["computed_at"] == board["computed_at"]
    second = ended_battle(alice, messages=("no", "42"))
    battle_machine_judge(battle_id=second.pk)
    still = machine_board(arena_id=first.arena_id, judge_model=JUDGE_MODEL, method="pairwise")
    assert still["computed_at"] == board["computed_at"]  # an open battle's verdict is not in it
    Battle.objects.filter(pk=second.pk).update(
        status="decided", outcome="B", decision_source="crowd"
    )
    moved = machine_board(arena_id=first.arena_id, judge_model=JUDGE_MODEL, method="pairwise")
    assert moved["battles"] == 2 and moved["digest"] != board["digest"]
    assert moved["points"][first.agent_a_id]["wins"] == 1
    assert moved["points"][first.agent_a_id]["losses"] == 1

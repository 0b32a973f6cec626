"""The Server-Sent Events of a coding battle (``GET /battles/<id>/events/``) through
Daphne, as a command-line client reads them: the battle's status, then each phase as it
starts and ends, then ``end`` once the battle left running and every phase ended; the
same access as the battle page (an outsider gets 404, and nothing of the stream)."""

import http.client
import json
import queue
import threading
from urllib.parse import urlsplit

import pytest

from accounts.services import api_token_create
from battles.coding_models import CodingPhase
from battles.models import Battle
from battles.services.coding_phases import phase
from tests.coding.page_factories import coding_battle
from tests.servers import live_arena

pytestmark = pytest.mark.django_db(transaction=True)
WAIT_S = 15


@pytest.fixture
def web(transactional_db, tmp_path, sandbox_root):
    with live_arena(tmp_path, sandbox_root) as arena:
        yield arena


def connect(base_url: str, battle_id: int, token: str) -> http.client.HTTPResponse:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT_S)
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    conn.request("GET", f"/battles/{battle_id}/events/", headers=headers)
    return conn.getresponse()


def read_events(response: http.client.HTTPResponse, into: queue.Queue) -> None:
    """Each event as (name, data) into ``into``; ("closed", None) when the stream ends."""
    event, data = None, []
    try:
        while line := response.readline():
            line = line.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
            elif line == "" and event:
                into.put((event, json.loads("\n".join(data))))
                event, data = None, []
    finally:
        into.put(("closed", None))


def next_event(events: queue.Queue) -> tuple[str, dict | None]:
    return events.get(timeout=WAIT_S)


def test_a_client_reads_each_phase_as_it_is_written_until_the_end(web, alice, bob, roster):
    battle = coding_battle(alice, status=Battle.Status.RUNNING)
    CodingPhase.objects.filter(battle=battle).delete()
    _, token = api_token_create(user=bob)
    events: queue.Queue = queue.Queue()

    response = connect(web.base_url, battle.pk, token)
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/event-stream"
    assert response.getheader("Cache-Control") == "no-store"
    threading.Thread(target=read_events, args=(response, events), daemon=True).start()
    assert next_event(events) == ("status", {"battle": battle.pk, "status": "running"})

    # A phase starts: its event arrives while it runs, then again when it ends.
    with phase(battle.pk, "clone") as said:
        name, started = next_event(events)
        assert (name, started["name"], started["status"]) == ("phase", "clone", "running")
        assert started["ended_at"] is None and started["seconds"] is None
        said.detail = "bundle of 3 files"
    name, ended = next_event(events)
    assert (name, ended["id"], ended["status"], ended["detail"]) == (
        "phase", started["id"], "ok", "bundle of 3 files",
    )  # fmt: skip
    assert ended["seconds"] >= 0 and ended["side"] == ""
    run_a = battle.runs.get(side="A")
    with phase(battle.pk, "agent A", run_id=run_a.pk):
        assert next_event(events)[1]["side"] == "A"
    assert next_event(events)[1]["status"] == "ok"

    # The battle leaves running with every phase ended: status, end, and the stream closes.
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.SCREENING)
    assert next_event(events) == ("status", {"battle": battle.pk, "status": "screening"})
    assert next_event(events) == ("end", {"battle": battle.pk, "status": "screening"})
    assert next_event(events) == ("closed", None)


def test_a_stream_opened_late_replays_every_phase_so_far_then_ends_and_outsiders_get_404(
    web, alice, charlie, roster
):
    battle = coding_battle(alice)  # judged: every phase ended
    _, token = api_token_create(user=alice)
    _, outsider = api_token_create(user=charlie)
    events: queue.Queue = queue.Queue()

    refused = connect(web.base_url, battle.pk, outsider)
    assert refused.status == 404 and b"event:" not in refused.read()

    response = connect(web.base_url, battle.pk, token)
    read_events(response, events)

    received = [events.get_nowait() for _ in range(events.qsize())]
    assert received[0] == ("status", {"battle": battle.pk, "status": "judging"})
    phases = [data["name"] for name, data in received if name == "phase"]
    assert phases == list(
        CodingPhase.objects.filter(battle=battle).order_by("pk").values_list("name", flat=True)
    )
    assert received[-2:] == [("end", {"battle": battle.pk, "status": "judging"}), ("closed", None)]

"""The battle's live phases as Server-Sent Events, for command-line clients
(docs/api.md, "A coding battle's events"): ``GET /battles/<id>/events/``.

The view itself is an ordinary (synchronous) Django view: it authenticates and checks
access like the battle page (the battle's team, the judges it was served to, staff;
404 for anyone else; a bearer token works as for the API) and returns a streaming
response whose body is an async generator. Daphne's ASGI handler
(``arena_site.handlers``) runs the view in a thread, then drives that generator on the
event loop, so an open stream holds no thread. Each poll reads the rows in a worker
thread and gives its database connection back before sleeping (``connection.close()``
returns it to the pool): an open stream holds no connection either.

Events: ``status`` (the battle's status, first and on every change), ``phase`` (a phase
as ``battles.coding_presenters.phase_payload`` shows it: first every phase so far, then
each one that starts or changes), ``end`` once the battle is past running and every
phase has ended. Comment lines keep idle connections open; a stream ends after
``STREAM_MAX_S`` (a client reconnects and is sent everything again)."""

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET

from accounts.views import consent_required_or_token
from arena_site import strict_json
from battles.coding_models import CodingPhase
from battles.coding_presenters import phase_payload
from battles.models import Battle
from battles.presenters import Redactor
from battles.selectors import access_battle

POLL_S = 0.5
HEARTBEAT_S = 15.0
STREAM_MAX_S = 30 * 60
# Open streams per web process: each polls the database twice a second.
MAX_STREAMS = 200
LIVE = (Battle.Status.QUEUED, Battle.Status.RUNNING)

_open = [0]
_open_lock = threading.Lock()


def sse(event: str, data: Any) -> bytes:
    """One event: its name and its data as one line of JSON."""
    line = strict_json.dumps(data, separators=(",", ":"))  # a non-finite number: null
    return f"event: {event}\ndata: {line}\n\n".encode()


def _snapshot(battle_id: int, redactor: Redactor) -> tuple[str, list[dict[str, Any]]]:
    """The battle's status and phases now; the connection goes back before returning."""
    try:
        status = Battle.objects.filter(pk=battle_id).values_list("status", flat=True).first()
        rows = CodingPhase.objects.filter(battle_id=battle_id).select_related("run").order_by("pk")
        return status or "", [phase_payload(row, redactor, status=status or "") for row in rows]
    finally:
        connection.close()


async def battle_events_stream(
    battle_id: int, redactor: Redactor, *, poll_s: float = POLL_S, max_s: float = STREAM_MAX_S
) -> AsyncIterator[bytes]:
    """The events of one battle until it is done or ``max_s`` passed. Counted among the
    open streams from its first step (a body never started holds nothing)."""
    with _open_lock:
        _open[0] += 1
    try:
        yield b"retry: 2000\n\n"
        started = last_sent = time.monotonic()
        status_sent = None
        phases_sent: dict[int, dict[str, Any]] = {}
        read = sync_to_async(_snapshot, thread_sensitive=False)
        while time.monotonic() - started < max_s:
            status, phases = await read(battle_id, redactor)
            if status != status_sent:
                yield sse("status", {"battle": battle_id, "status": status})
                status_sent, last_sent = status, time.monotonic()
            for phase in phases:
                if phases_sent.get(phase["id"]) != phase:
                    yield sse("phase", phase)
                    phases_sent[phase["id"]], last_sent = phase, time.monotonic()
            if status not in LIVE and all(p["status"] != "running" for p in phases):
                yield sse("end", {"battle": battle_id, "status": status})
                return
            if time.monotonic() - last_sent >= HEARTBEAT_S:
                yield b": keep-alive\n\n"
                last_sent = time.monotonic()
            await asyncio.sleep(poll_s)
    finally:
        with _open_lock:
            _open[0] -= 1


@consent_required_or_token
@require_GET
def battle_events(request: HttpRequest, battle_id: int) -> HttpResponse:
    battle = access_battle(request.user, battle_id)
    if _open[0] >= MAX_STREAMS:
        return HttpResponse(
            "Too many open event streams; try again soon.\n",
            status=503,
            content_type="text/plain; charset=utf-8",
            headers={"Retry-After": "10"},
        )
    # The roster's names, read once: every detail is redacted as on the battle page.
    redactor = Redactor.for_roster()
    response = StreamingHttpResponse(
        battle_events_stream(battle.pk, redactor), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not hold events back
    return response

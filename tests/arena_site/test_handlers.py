"""The HTTP handler's kept threads (arena_site/handlers.py): every thread-sensitive hop
of one request runs on one thread, a kept thread serves one request at a time and is
reused by the next, a burst beyond the kept threads gets threads of its own (nothing
waits for a kept one), and the request's database connection goes back to the pool.

Driven through the arena's real ASGI application (Channels' router, the handler, the
whole middleware chain), without a server: the ASGI messages are what a server sends."""

import asyncio
import json
import subprocess
import threading

import pytest
from django.core.signals import request_finished, request_started
from django.db import connection
from django.http import HttpResponse
from django.test import override_settings
from django.urls import path

from arena_site.handlers import SPARE_THREADS, OneHopASGIHandler
from tests.servers import PYTHON, ROOT, child_env

seen: list[tuple[str, int]] = []
gate = threading.Event()
inside = threading.Semaphore(0)


def where(request):
    seen.append(("view", threading.get_ident()))
    with connection.cursor() as cursor:  # takes a connection from the pool
        cursor.execute("SELECT 1")
    return HttpResponse(threading.current_thread().name)


def held(request):
    inside.release()
    gate.wait(10)
    return HttpResponse(threading.current_thread().name)


urlpatterns = [path("where/", where), path("held/", held)]


def scope(path_: str) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path_, "raw_path": path_.encode(), "query_string": b"",
        "root_path": "", "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 40000), "server": ("testserver", 80),
    }  # fmt: skip


async def call(app, path_: str) -> tuple[int, bytes]:
    sent: list[dict] = []
    first = [True]

    async def receive():
        if first[0]:
            first[0] = False
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # no disconnect while the request runs

    async def send(message):
        sent.append(message)

    await app(scope(path_), receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


def on_signal(name):
    def receiver(**kwargs):
        seen.append((name, threading.get_ident()))

    return receiver


@pytest.fixture
def app(settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    started, finished = on_signal("started"), on_signal("finished")
    request_started.connect(started)
    request_finished.connect(finished)
    seen.clear()
    with override_settings(ROOT_URLCONF=__name__):
        yield OneHopASGIHandler()
    request_started.disconnect(started)
    request_finished.disconnect(finished)


@pytest.mark.django_db(transaction=True)
def test_a_request_runs_on_one_kept_thread_and_the_next_reuses_it(app):
    async def two():
        return [await call(app, "/where/"), await call(app, "/where/")]

    (s1, name1), (s2, name2) = asyncio.run(two())
    assert (s1, s2) == (200, 200)
    assert name1.startswith(b"arena-request") and name1 == name2
    # started, view and finished of each request on one thread, the same for both
    threads = {ident for _, ident in seen}
    assert [kind for kind, _ in seen] == ["started", "view", "finished"] * 2
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert len(app._idle) == 1  # given back


@pytest.mark.django_db(transaction=True)
def test_a_burst_beyond_the_kept_threads_gets_threads_of_its_own(settings):
    # without the middleware: shedding would answer the burst beyond the in-flight
    # bound, and this is about the threads under it
    settings.ALLOWED_HOSTS = ["testserver"]
    overridden = override_settings(ROOT_URLCONF=__name__, MIDDLEWARE=[])
    overridden.enable()
    app = OneHopASGIHandler()
    keep = settings.ARENA.max_inflight + SPARE_THREADS
    burst = keep + 3
    gate.clear()

    async def many():
        tasks = [asyncio.create_task(call(app, "/held/")) for _ in range(burst)]
        # every request is inside its view at once: none waited for a kept thread
        entered = 0
        for _ in range(burst):
            if not await asyncio.to_thread(inside.acquire, timeout=10):
                break
            entered += 1
        gate.set()
        return entered, await asyncio.gather(*tasks)

    try:
        entered, answers = asyncio.run(many())
    finally:
        gate.set()
        overridden.disable()
    assert entered == burst
    names = [body.decode() for status, body in answers]
    assert all(status == 200 for status, _ in answers)
    kept = [n for n in names if n.startswith("arena-request")]
    assert len(kept) == keep and len(set(kept)) == keep  # one request per kept thread
    assert len(names) - len(kept) == 3  # Django's own thread each
    assert len(app._idle) == keep


def test_the_web_process_freezes_what_it_loaded_at_start_up(tmp_path):
    """A full collection of the objects every web process loads stopped all its requests
    for 240-440 ms at a time under votes (docs/performance.md): arena_site.asgi freezes
    them once loaded, so the collector never scans them again."""
    code = (
        "import gc, json, arena_site.asgi; "
        "print(json.dumps([gc.get_freeze_count(), len(gc.get_objects())]))"
    )
    env = child_env(sandbox_root=tmp_path / "sandboxes", private_media_root=tmp_path / "media")
    done = subprocess.run(
        [PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    frozen, scanned = json.loads(done.stdout.strip().splitlines()[-1])
    assert frozen > 100_000  # Django, the URLconf, the SDKs
    assert scanned < frozen / 20  # what the collector still scans after start-up

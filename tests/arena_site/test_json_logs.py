"""Structured logs (arena_site/logs.py): one JSON object per line from every logger, with
the request, user, host and battle ids; provider keys redacted; a traceback in one
field. Lines are read from the configured console handler and parsed with json.loads."""

import io
import json
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
from django.conf import settings
from rest_framework.test import APIClient

from agents.providers.redaction import register_secret
from arena_site import logs
from arena_site.hosts import host_id
from battles import jobs
from battles.models import Battle
from tests.battles.pairing import submitted_between

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def log_lines():
    """The console handler of LOGGING, writing into a buffer for the test; returns a
    function giving the JSON objects written so far (each line parsed on its own)."""
    handler = next(h for h in logging.getLogger().handlers if h.name == "console")
    assert any(isinstance(f, logs.RedactingFilter) for f in handler.filters)
    buffer = io.StringIO()
    previous_stream, previous_formatter = handler.setStream(buffer), handler.formatter
    if settings.ARENA.log_format != "json":  # a developer's shell may ask for plain
        handler.setFormatter(logs.formatter("json"))

    def lines() -> list[dict]:
        return [json.loads(line) for line in buffer.getvalue().splitlines()]

    lines.raw = buffer.getvalue  # type: ignore[attr-defined]
    yield lines
    handler.setStream(previous_stream)
    handler.setFormatter(previous_formatter)


def test_a_request_logs_its_id_and_the_user(db, alice, log_lines):
    client = APIClient()
    client.force_login(alice)

    response = client.get("/api/battles/999999999/", HTTP_X_REQUEST_ID="req-0123456789abcdef")

    assert response.status_code == 404
    assert response["X-Request-ID"] == "req-0123456789abcdef"
    [line] = [line for line in log_lines() if line["logger"] == "django.request"]
    assert line == {
        "timestamp": line["timestamp"],
        "level": "warning",
        "logger": "django.request",
        "event": "Not Found: /api/battles/999999999/",
        "request_id": "req-0123456789abcdef",
        "user_id": alice.pk,
        "host_id": host_id(),
        "status_code": 404,
    }
    assert line["timestamp"].endswith("Z") and "T" in line["timestamp"]


def test_an_anonymous_request_gets_a_new_id_and_no_user(db, log_lines):
    response = APIClient().get("/api/battles/999999999/")

    assert response.status_code in (401, 403)
    request_id = response["X-Request-ID"]
    assert len(request_id) == 32 and int(request_id, 16) >= 0
    [line] = [line for line in log_lines() if line["logger"] == "django.request"]
    assert line["request_id"] == request_id and "user_id" not in line


@pytest.mark.parametrize(
    "sent",
    [
        "a" * 65,  # too long
        "short",  # too short to tell requests apart
        "id with spaces",
        'id"quoted"',
        "id\nINFO forged line",  # newline injection
        "id\r\nX-Injected: 1",
        "ïd-ünicode-12345",
    ],
)
def test_a_bad_request_id_is_replaced_and_never_logged(db, alice, log_lines, sent):
    client = APIClient()
    client.force_login(alice)

    response = client.get("/api/battles/999999999/", HTTP_X_REQUEST_ID=sent)

    request_id = response["X-Request-ID"]
    assert request_id != sent and len(request_id) == 32
    [line] = [line for line in log_lines() if line["logger"] == "django.request"]
    assert line["request_id"] == request_id
    assert sent not in log_lines.raw() and "forged" not in log_lines.raw()
    assert "X-Injected" not in log_lines.raw()


def test_the_probes_stay_on_their_fast_path(db, log_lines):
    response = APIClient().get("/healthz")

    assert response.status_code == 200
    assert "X-Request-ID" not in response  # answered before the request-id middleware
    assert log_lines() == []


def test_lines_outside_a_request_carry_no_request_id(log_lines):
    logging.getLogger("arena.test").info("no request here")

    [line] = log_lines()
    assert line["event"] == "no request here" and "request_id" not in line
    assert line["host_id"] == host_id()


def test_a_battle_job_logs_with_its_battle_id(db, log_lines):
    """The real job function, on the path that logs without a sandbox: no battle queued."""
    jobs.battle_run(987654)

    [line] = [line for line in log_lines() if line["logger"] == "battles.jobs"]
    assert line["event"] == "job for battle 987654: no battle queued (already run or claimed)"
    assert line["battle_id"] == 987654 and line["level"] == "info"
    logging.getLogger("arena.test").info("after the job")
    assert "battle_id" not in log_lines()[-1]  # unbound when the job returned


@pytest.mark.django_db(transaction=True)  # lanes run in threads with their own connections
def test_a_battle_run_by_an_older_job_logs_the_battle_it_runs(alice, roster, log_lines):
    """FIFO: the job of the newer battle runs the older one; while it does, its lines
    (rq's among them) carry the older battle's id, the job's own line its own."""
    older, newer = (
        submitted_between(alice, f"list the files ({n})", "rulebook", "idle") for n in (1, 2)
    )
    rq_log = logging.getLogger("rq.queue")  # its debug line: the screening job enqueued
    rq_log.setLevel(logging.DEBUG)
    try:
        jobs.battle_run(newer.pk)
    finally:
        rq_log.setLevel(logging.NOTSET)

    older.refresh_from_db()
    assert older.status == Battle.Status.SCREENING
    lines = log_lines()
    [job_line] = [line for line in lines if line["logger"] == "battles.jobs"]
    assert job_line["event"] == f"job for battle {newer.pk} ran the older battle {older.pk} (FIFO)"
    assert job_line["battle_id"] == newer.pk
    [enqueued] = [line for line in lines if line["event"].startswith("Enqueueing job screen-")]
    assert enqueued["logger"] == "rq.queue" and enqueued["battle_id"] == older.pk
    assert enqueued["event"].startswith(f"Enqueueing job screen-{older.pk} ")


def test_provider_keys_are_redacted_in_the_json(log_lines):
    registered = "vllm-token-" + secrets.token_hex(12)  # no known shape: found by value
    register_secret(registered)
    shaped = "sk-ant-" + secrets.token_hex(12)  # never registered: found by its shape
    log = logging.getLogger("agents.providers.test")

    log.warning("calling with %s and key=%s", registered, shaped)
    try:
        raise RuntimeError(f"401 for {shaped}")
    except RuntimeError:
        log.exception("provider refused %s", registered)
    structlog.get_logger("agents.providers.native").info("native", key=registered, n=1)

    raw = log_lines.raw()
    assert registered not in raw and shaped not in raw
    plain, failed, native = log_lines()
    assert plain["event"] == "calling with [REDACTED] and key=[REDACTED]"
    assert failed["event"] == "provider refused [REDACTED]"
    assert failed["exception"].endswith("RuntimeError: 401 for [REDACTED]")
    assert (native["event"], native["key"], native["n"]) == ("native", "[REDACTED]", 1)


def test_a_traceback_is_one_field_of_one_line(log_lines):
    try:
        raise ValueError("first line\nsecond line")
    except ValueError:
        logging.getLogger("arena.test").exception("it broke\nacross lines")

    raw = log_lines.raw()
    assert raw.count("\n") == 1 and raw.endswith("\n")  # one record, one line
    [line] = log_lines()
    assert line["level"] == "error" and line["event"] == "it broke\nacross lines"
    assert line["exception"].startswith("Traceback (most recent call last):\n")
    assert line["exception"].endswith("ValueError: first line\nsecond line")
    assert list(line)[-1] == "exception"


def test_plain_format_keeps_the_context_as_text():
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logs.formatter("plain"))
    record = logging.makeLogRecord(
        {"name": "arena.test", "levelno": logging.INFO, "levelname": "INFO", "msg": "hi %s",
         "args": ("there",)}
    )  # fmt: skip

    with structlog.contextvars.bound_contextvars(battle_id=7):
        handler.handle(record)

    text = handler.stream.getvalue()
    assert text.endswith(" INFO arena.test: hi there battle_id=7\n"), text


def test_a_management_command_logs_json():
    """A process of its own (as an rq worker or the cron is): Django's LOGGING makes its
    lines JSON on stderr."""
    env = {**os.environ, "ARENA_LOG_FORMAT": "json", "ARENA_HOST_ID": "logs-test-host"}
    code = "import logging; logging.getLogger('arena.cmd').warning('from a command')"
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    [line] = [line for line in lines if line["logger"] == "arena.cmd"]
    assert (line["event"], line["level"], line["host_id"]) == (
        "from a command",
        "warning",
        "logs-test-host",
    )

"""The API against its own OpenAPI schema, fuzzed (schemathesis): every operation of
/api/schema/ gets schema-derived boundary cases and generated valid and invalid
requests, sent to the real app (Django's WSGI handler: every middleware, URL and
view) on real PostgreSQL and Redis, as a real user with a team, consent and an API
token. No answer may be a 5xx, and every answer must be documented: its status code,
content type, headers and body schema.

Bounded and reproducible: a fixed seed, derandomised generation, a fixed number of
examples per operation, and a timeout per operation (each takes about a second; the
whole module about ten on a 2-core machine). Nothing is excluded:
every operation in the schema is a JSON API (the schema view itself is not in the
schema). POST /api/tasks/ admits tasks and creates battles; no battle worker runs here,
so they stay queued, and the queue bounds are raised so that the fuzz explores input
handling rather than the queue's 429."""

import json

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from accounts.services import api_token_create
from accounts.throttling import AnonymousAddressThrottle
from tests.conftest import make_person
from tests.judging.battle_factories import ended_battle

SEED = 20261201
EXAMPLES_PER_OPERATION = 100

CONFIG = {
    "seed": SEED,
    "generation": {
        "mode": "all",  # valid and invalid requests
        "max-examples": EXAMPLES_PER_OPERATION,
        "deterministic": True,
        # the test sends its own bearer token; generated ones would only count as
        # failed tokens against the client address (accounts.throttling.BAD_TOKENS)
        "with-security-parameters": False,
    },
    "phases": {
        "examples": {"enabled": True},
        "coverage": {"enabled": True},  # boundary values of every documented constraint
        "fuzzing": {"enabled": True},
        "stateful": {"enabled": False},
    },
    "checks": {
        "enabled": False,
        "not_a_server_error": {"enabled": True},
        "status_code_conformance": {"enabled": True},
        "content_type_conformance": {"enabled": True},
        "response_headers_conformance": {"enabled": True},
        "response_schema_conformance": {"enabled": True},
        "unsupported_method": {"enabled": True},
        # Not run: negative_data_rejection. Text limits count the trimmed text (a
        # 20000-character instruction plus a newline is admitted), which JSON Schema's
        # maxLength cannot say; every other invalid input it generated was refused.
    },
}


@pytest.fixture
def fuzzer(terms, roster, settings, monkeypatch):
    """A submitter and judge with a team and consent, and the limits lifted that would
    otherwise turn most of the run into 429s."""
    settings.ARENA = settings.ARENA.replace(
        queue_max=100_000,
        team_queue_quota=100_000,
        vote_rate_per_min=100_000,
        judge_next_rate_per_min=100_000,
        submit_account_rate_per_hour=100_000,
        submit_address_rate_per_hour=100_000,
    )
    monkeypatch.setattr(AnonymousAddressThrottle, "THROTTLE_RATES", {"anon": "100000/min"})
    user = make_person("fuzzer", "Fuzzers", terms)
    _, token = api_token_create(user=user, name="fuzz")
    return token


def _arena_schema() -> schemathesis.BaseSchema:
    """The schema /api/schema/ serves (the same generator, without a request: loading it
    needs no database), bound to the app that answers the calls."""
    document = json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(public=True)))
    loaded = schemathesis.openapi.from_dict(document, config=schemathesis.Config.from_dict(CONFIG))
    loaded.app = WSGIHandler()
    return loaded


schema = _arena_schema()


@pytest.fixture(autouse=True)
def _keep_the_test_transaction():
    """As Django's test client does: the handler's request signals would close the
    connection that holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.django_db
def test_generating_the_schema_runs_no_query():
    """This module generates the schema at import, before pytest-django makes the test
    database: a query then would open the connection pool on the settings' own database,
    and every later connection of the process would go there (Django closes the pool
    only when it clones or destroys a test database, not when it creates one)."""
    with CaptureQueriesContext(connection) as queries:
        SchemaGenerator().get_schema(public=True)
    assert [q["sql"] for q in queries.captured_queries] == []


def test_every_operation_documents_its_errors_in_the_envelope():
    document = schema.raw_schema
    envelope = {"$ref": "#/components/schemas/ErrorOutput"}
    assert document["components"]["schemas"]["ErrorOutput"]["required"] == ["error"]
    assert document["components"]["schemas"]["ErrorDetailOutput"]["required"] == [
        "code",
        "message",
    ]
    public = {
        "/api/leaderboard/",
        "/api/metrics/",
        "/api/agent-protocol/",
        "/api/machine-board/",
        "/api/machine-agreement/",
        "/api/open-data/",
        "/api/open-data/battles.jsonl",
        "/api/open-data/votes.jsonl",
        "/api/open-data/vote_reasons.jsonl",
        "/api/open-data/follow_ups.jsonl",
        "/api/open-data/exclusions.jsonl",
        "/api/open-data/ratings.jsonl",
        "/api/open-data/archive.tar.gz",
        "/api/environments/",
        "/api/environments/{id}/package.tar.gz",
    }
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            expected = {"405", "429"}
            expected |= set() if path in public else {"401", "403"}
            expected |= {"404"} if "{id}" in path else set()
            expected |= {"400", "413", "415"} if "requestBody" in operation else set()
            expected |= (
                {"400"}
                if any(p["in"] == "query" for p in operation.get("parameters", []))
                else set()
            )
            assert expected <= set(responses), (method, path, sorted(responses))
            for status, response in responses.items():
                if status >= "400":
                    assert response["content"]["application/json"]["schema"] == envelope
                    assert response["description"], (method, path, status)
            assert responses["429"]["headers"]["Retry-After"]["schema"]["type"] == "integer"
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path":
                    assert parameter["schema"] == {
                        "type": "integer", "format": "int64", "minimum": 1,
                        "maximum": 2**63 - 1,
                    }  # fmt: skip
                if parameter["name"] in ("limit", "offset"):
                    assert {"minimum", "maximum"} <= set(parameter["schema"])


@pytest.mark.timeout(20)
@schema.parametrize()
@hypothesis_settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_answers_as_documented(case, fuzzer):
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzzer}"})


def test_real_objects_answer_as_documented(fuzzer, terms, settings):
    """What random ids rarely reach: the fuzzer's own task and battle, a battle served
    to it as a judge, its vote, the status and the undo of that vote, a conversation
    and a near-duplicate, each answer checked against the schema the same way."""
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=120)
    headers = {"Authorization": f"Bearer {fuzzer}"}

    def call(path: str, method: str, status: int, **case):
        response = schema[path][method].Case(**case).call_and_validate(headers=headers)
        assert response.status_code == status, (method, path, response.text[:300])
        return response.json() if response.content else None

    task = {"instruction": "Create a file named notes.txt containing the word hello"}
    created = call("/api/tasks/", "POST", 201, body=task, media_type="application/json")
    call("/api/tasks/", "POST", 409, body=task, media_type="application/json")
    call("/api/tasks/", "POST", 200, body={"instruction": "hello!"}, media_type="application/json")
    call("/api/tasks/", "GET", 200, query={"limit": 1})
    call("/api/tasks/{id}/", "GET", 200, path_parameters={"id": created["task"]})
    call("/api/battles/", "GET", 200)
    call("/api/battles/{id}/", "GET", 200, path_parameters={"id": created["battle"]})

    other = make_person("other", "Others", terms)
    theirs = ended_battle(other)
    served = call("/api/judge/next/", "GET", 200)
    assert served["id"] == theirs.pk
    mine = {"id": theirs.pk}
    call("/api/battles/{id}/", "GET", 200, path_parameters=mine)
    call("/api/battles/{id}/votes/", "POST", 201, path_parameters=mine, body={"choice": "A"},
         media_type="application/json")  # fmt: skip
    call("/api/battles/{id}/votes/", "POST", 409, path_parameters=mine, body={"choice": "B"},
         media_type="application/json")  # fmt: skip
    call("/api/battles/{id}/votes/mine/", "GET", 200, path_parameters=mine)
    call("/api/battles/{id}/votes/mine/", "DELETE", 200, path_parameters=mine)
    call("/api/battles/{id}/votes/mine/", "GET", 404, path_parameters=mine)
    call("/api/metrics/", "GET", 200)  # with battles queued, ended and judged
    call("/api/leaderboard/", "GET", 200)

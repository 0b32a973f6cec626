"""The evaluations API on real PostgreSQL and Redis: create starts a job on the evals
queue, a real RQ worker runs it against the fake provider servers, the record comes
back through the API; another team sees nothing and changes nothing."""

import django_rq
import pytest
from rq import SimpleWorker

from evals.models import EvalRun, Evaluation
from tests.evals.scripted import RUBRIC, suite_bytes

pytestmark = pytest.mark.django_db(transaction=True)


def body(**extra) -> dict:
    return {
        "suite": {"name": "arith.yaml", "content": suite_bytes().decode()},
        "agents": ["alpha", "beta"],
        **extra,
    }


def test_create_runs_on_the_evals_queue_and_the_record_comes_back(
    alice,
    api,
    arena_agents,
):
    client = api(alice)
    created = client.post(
        "/api/evaluations/",
        body(rubric={"name": "r.yaml", "content": RUBRIC.decode()}, judge="judge"),
        format="json",
    )
    assert created.status_code == 201, created.content
    evaluation_id = created.json()["id"]
    assert created.json()["status"] == "pending"
    assert created.json()["agents"] == ["alpha", "beta"]
    queue = django_rq.get_queue("evals")
    assert queue.count == 1

    SimpleWorker([queue], connection=queue.connection).work(burst=True)

    record = client.get(f"/api/evaluations/{evaluation_id}/").json()
    assert record["run"]["status"] == "done" and len(record["results"]) == 40
    assert record["statistics"]["win_rates"]["alpha"]["beta"] == 0.75
    listed = client.get("/api/evaluations/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["id"] for row in rows] == [evaluation_id]


def test_another_team_sees_nothing_and_cannot_cancel(alice, charlie, api, arena_agents):
    created = api(alice).post("/api/evaluations/", body(), format="json").json()
    outsider = api(charlie)
    assert outsider.get(f"/api/evaluations/{created['id']}/").status_code == 404
    assert outsider.post(f"/api/evaluations/{created['id']}/cancel/").status_code == 404
    listed = outsider.get("/api/evaluations/").json()
    assert (listed["results"] if isinstance(listed, dict) else listed) == []
    assert Evaluation.objects.get(pk=created["id"]).status == "pending"


def test_a_cancelled_evaluation_runs_nothing(alice, api, arena_agents):
    client = api(alice)
    created = client.post("/api/evaluations/", body(), format="json").json()
    cancelled = client.post(f"/api/evaluations/{created['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    queue = django_rq.get_queue("evals")
    SimpleWorker([queue], connection=queue.connection).work(burst=True)
    assert EvalRun.objects.count() == 0
    assert sum(len(fake.requests) for fake in arena_agents.values()) == 0


@pytest.mark.parametrize(
    ("change", "code", "says"),
    [
        ({"suite": {"name": "s.yaml", "content": "- {id: t1, promt: x}\n"}}, "invalid_suite",
         "s.yaml: task 't1': field 'promt'"),
        ({"agents": ["alpha", "alpha"]}, "duplicate_agent", "once"),
        ({"agents": ["alpha"], "pairwise": True, "judge": "alpha"}, "judge_is_candidate",
         "must not be one of the candidates"),
        ({"rubric": {"name": "r.yaml", "content": RUBRIC.decode()}}, "no_judge", "--judge"),
        ({"agents": ["nobody"]}, "unknown_agent", "no agent 'nobody'"),
        ({"agents": []}, None, ""),
        ({"max_tokens": 0}, None, ""),
    ],
)  # fmt: skip
def test_bad_input_gets_a_clear_error_and_creates_nothing(
    alice,
    api,
    arena_agents,
    change,
    code,
    says,
):
    response = api(alice).post("/api/evaluations/", body(**change), format="json")
    assert response.status_code in (400, 404), response.content
    error = response.json()["error"]
    if code:
        assert error["code"] == code and says in error["message"]
    assert Evaluation.objects.count() == 0
    assert django_rq.get_queue("evals").count == 0


def test_signed_out_is_refused(client):
    assert client.get("/api/evaluations/").status_code in (401, 403)

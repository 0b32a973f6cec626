"""/metrics/prometheus (arena_site/prometheus.py): the arena's figures read at scrape
time, the HTTP latency histogram by route, who may read it, and nothing private in it.
Parsed with prometheus-client's own parser."""

import datetime as dt
import os
import secrets
import subprocess
import sys
from pathlib import Path

import django_rq
import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rq import Queue

from accounts.services import team_create
from agents.models import Agent, Arena
from battles.models import Battle, Run, Task
from ratings.models import RefitState
from sandboxes.models import SandboxLease, WorkerHost
from tests.conftest import make_person
from tests.judging.battle_factories import ended_battle, judge_on, people
from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
FAMILIES = {
    "arena_figures_up",
    "arena_battles",
    "arena_oldest_queued_battle_age_seconds",
    "arena_decided_battles",
    "arena_failed_battles",
    "arena_votes",
    "arena_votes_cast",
    "arena_rated_battles_awaiting_refit",
    "arena_oldest_awaiting_refit_age_seconds",
    "arena_refit_last_run_age_seconds",
    "arena_worker_host_heartbeat_age_seconds",
    "arena_worker_host_lost",
    "arena_sandbox_leases_busy",
    "arena_rq_queue_depth",
    "arena_rq_started_jobs",
    "arena_rq_failed_jobs",
    "arena_http_request_duration_seconds",
}


def scrape(client: Client | None = None, **extra) -> str:
    response = (client or Client()).get("/metrics/prometheus", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return response.content.decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample by (name, sorted labels), parsed by prometheus-client."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(parsed: dict, name: str, **labels) -> float:
    return parsed[(name, tuple(sorted(labels.items())))]


def _battle(user, status: str, *, submitted_ago_s: float = 0, **fields) -> Battle:
    team = user.memberships.first().team
    agent_a, agent_b = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="idle")
    task = Task.objects.create(team=team, submitter=user, instruction="what is 6*7")
    return Battle.objects.create(
        arena=fields.pop("arena", None) or Arena.objects.public(),
        team=team,
        task=task,
        agent_a=agent_a,
        agent_b=agent_b,
        status=status,
        submitted_at=timezone.now() - dt.timedelta(seconds=submitted_ago_s),
        **fields,
    )


def _failed_with_lane_error(user, *, agent_fault: bool) -> Battle:
    battle = _battle(user, Battle.Status.FAILED, failure_reason="a lane ended in error")
    Run.objects.create(
        battle=battle,
        side="A",
        agent=battle.agent_a,
        status=Run.Status.ENDED,
        step_budget=20,
        wall_budget_s=300,
        end_reason=Run.EndReason.ERROR,
        agent_fault=agent_fault,
    )
    return battle


def test_the_arena_figures(alice, roster):
    now = timezone.now()
    # battles: two queued (the oldest 300 s ago), one judging with a vote, failures
    _battle(alice, Battle.Status.QUEUED, submitted_ago_s=300)
    _battle(alice, Battle.Status.QUEUED, submitted_ago_s=10)
    judging = ended_battle(alice, target=3)
    (judge,) = people(1)
    judge_on(judge, judging, "A")
    _failed_with_lane_error(alice, agent_fault=True)
    _failed_with_lane_error(alice, agent_fault=False)
    _battle(alice, Battle.Status.FAILED, failure_reason="orchestrator error")
    _battle(
        alice, Battle.Status.DECIDED, outcome="A", decision_source="crowd",
        decided_at=now - dt.timedelta(seconds=600),
    )  # fmt: skip
    _battle(alice, Battle.Status.DECIDED, outcome="B", decision_source="submitter", decided_at=now)
    RefitState.objects.create(
        arena=Arena.objects.public(), last_run_at=now - dt.timedelta(seconds=120)
    )
    # worker hosts: one beat 30 s ago holding two live leases (a third released), one lost
    WorkerHost.objects.create(
        host_id="host-a", started_at=now, heartbeat_at=now - dt.timedelta(seconds=30)
    )
    WorkerHost.objects.create(
        host_id="host-b", started_at=now, heartbeat_at=now - dt.timedelta(seconds=90), lost_at=now
    )
    for slot in (1, 2, 3):
        SandboxLease.objects.create(slot=slot, backend="local", host="host-a", worker_pid=7)
    SandboxLease.objects.filter(slot=3).update(released_at=now)
    # queues: two battle jobs waiting (rq's own queue: django-rq's waits for the commit)
    battles_queue = Queue("battles", connection=django_rq.get_connection("battles"))
    battles_queue.enqueue("builtins.len", "x")
    battles_queue.enqueue("builtins.len", "y")

    text = scrape()
    parsed = samples(text)
    assert {family.name for family in text_string_to_metric_families(text)} >= FAMILIES
    assert value(parsed, "arena_figures_up", source="database") == 1
    assert value(parsed, "arena_figures_up", source="redis") == 1
    assert {s: value(parsed, "arena_battles", status=s) for s in Battle.Status.values} == {
        "queued": 2, "running": 0, "screening": 0, "judging": 1, "decided": 2, "excluded": 0,
        "failed": 3,
    }  # fmt: skip
    assert 300 <= value(parsed, "arena_oldest_queued_battle_age_seconds") < 330
    assert value(parsed, "arena_decided_battles", source="crowd") == 1
    assert value(parsed, "arena_decided_battles", source="submitter") == 1
    assert value(parsed, "arena_decided_battles", source="import") == 0
    assert value(parsed, "arena_failed_battles", cause="agent") == 1
    assert value(parsed, "arena_failed_battles", cause="arena") == 1
    assert value(parsed, "arena_failed_battles", cause="other") == 1
    assert value(parsed, "arena_votes", state="admissible") == 1
    assert value(parsed, "arena_votes", state="inadmissible") == 0
    assert value(parsed, "arena_votes", state="retracted") == 0
    assert value(parsed, "arena_votes_cast_total") == 1
    assert value(parsed, "arena_rated_battles_awaiting_refit") == 2
    assert 600 <= value(parsed, "arena_oldest_awaiting_refit_age_seconds") < 630
    assert 120 <= value(parsed, "arena_refit_last_run_age_seconds") < 150
    assert 30 <= value(parsed, "arena_worker_host_heartbeat_age_seconds", host="host-a") < 60
    assert 90 <= value(parsed, "arena_worker_host_heartbeat_age_seconds", host="host-b") < 120
    assert value(parsed, "arena_worker_host_lost", host="host-a") == 0
    assert value(parsed, "arena_worker_host_lost", host="host-b") == 1
    assert value(parsed, "arena_sandbox_leases_busy", host="host-a") == 2
    assert value(parsed, "arena_sandbox_leases_busy", host="host-b") == 0
    assert value(parsed, "arena_rq_queue_depth", queue="battles") == 2
    assert value(parsed, "arena_rq_queue_depth", queue="judging") == 0
    assert value(parsed, "arena_rq_failed_jobs", queue="battles") == 0


def test_no_refit_yet_and_nothing_queued(db):
    parsed = samples(scrape())
    assert value(parsed, "arena_refit_last_run_age_seconds") == -1
    assert value(parsed, "arena_oldest_queued_battle_age_seconds") == 0
    assert value(parsed, "arena_battles", status="queued") == 0


def test_latency_histogram_counts_a_request_by_route_name(db):
    client = Client()
    key = ("arena_http_request_duration_seconds_count",
           (("method", "GET"), ("route", "accounts:login"), ("status", "2xx")))  # fmt: skip
    before = samples(scrape(client)).get(key, 0)
    assert client.get("/accounts/login/").status_code == 200
    assert client.get("/no/such/page-4242/").status_code == 404
    text = scrape(client)
    assert samples(text)[key] == before + 1
    # an unknown path counts under one label, never its own
    assert "page-4242" not in text
    unresolved = ("arena_http_request_duration_seconds_count",
                  (("method", "GET"), ("route", "<unresolved>"), ("status", "4xx")))  # fmt: skip
    assert samples(text)[unresolved] >= 1


def test_nothing_private_in_the_figures(charlie, roster):
    """A private arena's and a team's names, slugs and members appear nowhere."""
    lab = make_person("lab-owner-quokka", None, None)
    team = team_create(name="Quokka Skunkworks", owner=lab)
    arena = Arena.objects.create(slug="quokka-private", name="Quokka Private Arena", team=team)
    _battle(lab, Battle.Status.QUEUED, arena=arena)
    _battle(charlie, Battle.Status.JUDGING)
    text = scrape().lower()
    for secret in ("quokka", "skunkworks", "umbrella", "charlie", "lab-owner"):
        assert secret not in text


def test_redis_away_leaves_the_database_figures(db, settings):
    url = f"redis://127.0.0.1:{free_port()}/0"
    settings.RQ_QUEUES = {name: {**c, "URL": url} for name, c in settings.RQ_QUEUES.items()}
    text = scrape()
    parsed = samples(text)
    assert value(parsed, "arena_figures_up", source="redis") == 0
    assert value(parsed, "arena_figures_up", source="database") == 1
    assert "arena_rq_queue_depth" not in text
    assert value(parsed, "arena_battles", status="queued") == 0


def test_without_a_token_only_direct_local_requests(db, settings):
    settings.METRICS_TOKEN = None
    scrape()  # the test client's peer is 127.0.0.1
    for extra in ({"REMOTE_ADDR": "203.0.113.9"}, {"HTTP_X_FORWARDED_FOR": "203.0.113.9"}):
        response = Client().get("/metrics/prometheus", **extra)
        assert response.status_code == 403
        assert "ARENA_METRICS_TOKEN" in response.content.decode()
        assert "arena_battles" not in response.content.decode()


@pytest.mark.parametrize("remote", ["127.0.0.1", "203.0.113.9"])
def test_with_a_token_it_is_required_from_anywhere(db, settings, remote):
    settings.METRICS_TOKEN = "metrics-token-0123456789"
    for header in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"},
                   {"HTTP_AUTHORIZATION": "metrics-token-0123456789"}):  # fmt: skip
        response = Client().get("/metrics/prometheus", REMOTE_ADDR=remote, **header)
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    scrape(REMOTE_ADDR=remote, HTTP_AUTHORIZATION="Bearer metrics-token-0123456789")


def _settings_token(tmp_path, **env) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "ARENA_SECRET_KEY": secrets.token_urlsafe(50),
        "ARENA_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "arena_site.settings",
        **env,
    }
    code = "from django.conf import settings; print(settings.METRICS_TOKEN)"
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, cwd=ROOT,
        timeout=60, check=False,
    )  # fmt: skip


def test_the_token_setting(tmp_path):
    (tmp_path / "token").write_text("from-a-mounted-file-0123\n")
    done = _settings_token(tmp_path, ARENA_METRICS_TOKEN_FILE=str(tmp_path / "token"))
    assert (done.returncode, done.stdout) == (0, "from-a-mounted-file-0123\n"), done.stderr
    done = _settings_token(tmp_path, ARENA_METRICS_TOKEN="short")
    assert done.returncode != 0
    assert "ARENA_METRICS_TOKEN must be at least 16 characters long" in done.stderr

"""/metrics/prometheus, the recent figures (arena_site/ops_selectors.py
``recent_phase_figures``, ``recent_failure_figures``): battle phase latencies as a gauge
histogram and failures by cause over the last hour; and the HTTP latency histogram's
counting. Parsed with prometheus-client's own parsers (classic and OpenMetrics)."""

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from agents.models import Agent, Arena
from battles.models import Battle, Run, Task
from battles.services.failures import FAILED_RERUN
from battles.services.orchestration import DIED_REASON, LOST_REASON, STUCK_REASON
from tests.arena_site.test_prometheus import samples, scrape, value

PHASE = "arena_recent_battle_phase_seconds"
BOUNDS = ("0.5", "1.0", "2.5", "5.0", "10.0", "30.0", "60.0", "120.0", "300.0", "600.0",
          "1800.0", "3600.0", "10800.0", "21600.0", "86400.0", "+Inf")  # fmt: skip


def _battle(user, status: str, **fields) -> Battle:
    team = user.memberships.first().team
    task = Task.objects.create(team=team, submitter=user, instruction="what is 6*7")
    fields.setdefault("submitted_at", timezone.now() - dt.timedelta(hours=5))
    return Battle.objects.create(
        arena=Arena.objects.public(),
        team=team,
        task=task,
        agent_a=Agent.objects.get(slug="rulebook"),
        agent_b=Agent.objects.get(slug="idle"),
        status=status,
        **fields,
    )


def _lane(battle: Battle, side: str, *, error: bool, agent_fault: bool = False) -> Run:
    return Run.objects.create(
        battle=battle,
        side=side,
        agent=battle.agent_for(side),
        status=Run.Status.ENDED,
        step_budget=20,
        wall_budget_s=300,
        end_reason=Run.EndReason.ERROR if error else Run.EndReason.DELIVERED,
        agent_fault=agent_fault,
        error="boom" if error else "",
    )


def _stamped(user, status: str, ended: dt.datetime, **phase_seconds: float) -> Battle:
    """A battle whose lanes ended at ``ended`` and whose phases took ``phase_seconds``
    (queue, provisioning, lanes; judgment and decision counted from ``ended``)."""
    s = {phase: dt.timedelta(seconds=v) for phase, v in phase_seconds.items()}
    lanes = ended - s["lanes"]
    dequeued = lanes - s["provisioning"]
    return _battle(
        user,
        status,
        submitted_at=dequeued - s["queue"],
        dequeued_at=dequeued,
        lanes_started_at=lanes,
        ended_at=ended,
        first_judgment_at=ended + s["judgment"] if "judgment" in s else None,
        decided_at=ended + s["decision"] if "decision" in s else None,
        decision_source="crowd" if status == Battle.Status.DECIDED else "",
    )


def _buckets(parsed: dict, phase: str) -> list[float]:
    return [value(parsed, f"{PHASE}_bucket", phase=phase, le=le) for le in BOUNDS]


def test_phase_latencies_of_the_last_hour(alice, roster):
    now = timezone.now()
    # given: a decided battle and a judging one inside the window, with known phases
    _stamped(alice, Battle.Status.DECIDED, now - dt.timedelta(minutes=20),
             queue=0.2, provisioning=3, lanes=100, judgment=400, decision=700)  # fmt: skip
    _stamped(alice, Battle.Status.JUDGING, now - dt.timedelta(minutes=5),
             queue=40, provisioning=0.7, lanes=1000)  # fmt: skip
    # a dequeue stamped before the submission (two clocks): a queue of 0 s
    submitted = now - dt.timedelta(minutes=10)
    _battle(alice, Battle.Status.RUNNING, submitted_at=submitted,
            dequeued_at=submitted - dt.timedelta(seconds=1))  # fmt: skip
    # left out: a battle whose every phase closed three hours ago, and an imported one
    _stamped(alice, Battle.Status.DECIDED, now - dt.timedelta(hours=3),
             queue=1, provisioning=1, lanes=1, judgment=1, decision=1)  # fmt: skip
    imported = _stamped(alice, Battle.Status.DECIDED, now - dt.timedelta(minutes=30),
                        queue=1, provisioning=1, lanes=1, judgment=1, decision=1)  # fmt: skip
    Battle.objects.filter(pk=imported.pk).update(decision_source=Battle.DecisionSource.IMPORT)

    # when
    parsed = samples(scrape())

    # then: cumulative buckets, the count (+Inf, _gcount) and the sum of each phase
    assert value(parsed, "arena_recent_window_seconds") == 3600
    assert _buckets(parsed, "queue") == [2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]
    assert value(parsed, f"{PHASE}_gcount", phase="queue") == 3
    assert value(parsed, f"{PHASE}_gsum", phase="queue") == pytest.approx(40.2)
    assert _buckets(parsed, "provisioning") == [0, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    assert value(parsed, f"{PHASE}_gsum", phase="provisioning") == pytest.approx(3.7)
    assert _buckets(parsed, "lanes") == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert value(parsed, f"{PHASE}_gsum", phase="lanes") == pytest.approx(1100)
    assert _buckets(parsed, "judgment") == [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1]
    assert value(parsed, f"{PHASE}_gsum", phase="judgment") == pytest.approx(400)
    assert _buckets(parsed, "decision") == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert value(parsed, f"{PHASE}_gcount", phase="decision") == 1
    assert value(parsed, f"{PHASE}_gsum", phase="decision") == pytest.approx(700)


def test_no_battle_yet_gives_empty_histograms(db):
    parsed = samples(scrape())
    for phase in ("queue", "provisioning", "lanes", "judgment", "decision"):
        assert _buckets(parsed, phase) == [0] * len(BOUNDS)
        assert value(parsed, f"{PHASE}_gsum", phase=phase) == 0
    assert value(parsed, "arena_recent_battle_failures", cause="other") == 0


def test_failures_of_the_last_hour_by_cause(alice, roster):
    recently = timezone.now() - dt.timedelta(minutes=15)
    failed = Battle.Status.FAILED

    def fail(reason: str, *, ended: dt.datetime = recently) -> Battle:
        return _battle(alice, failed, failure_reason=reason, ended_at=ended)

    # given: one battle per reason the arena writes
    fail(LOST_REASON.format(attempts=2))
    fail(DIED_REASON.format(attempts=2))
    fail(STUCK_REASON.format(seconds=60))
    fail("the task's repository could not be prepared: git clone exited 128")
    _lane(fail(FAILED_RERUN.format(sides="A", rerun=99)), "A", error=True, agent_fault=True)
    fail("orchestrator error: KeyError('x')")
    # an agent's lane error under another reason is the agent's
    _lane(fail("a lane ended in error"), "B", error=True, agent_fault=True)
    # a lane ended in error through the arena: a failure, and an exclusion (rule 3)
    _lane(fail("a lane ended in error"), "A", error=True)
    _battle(alice, Battle.Status.EXCLUDED, ended_at=recently,
            exclusion_reason=Battle.ExclusionReason.ARENA_FAULT)  # fmt: skip
    fail("something nobody foresaw")
    # left out: a failure two hours ago, an exclusion of another rule, a decided battle
    fail(LOST_REASON.format(attempts=2), ended=timezone.now() - dt.timedelta(hours=2))
    _battle(alice, Battle.Status.EXCLUDED, ended_at=recently,
            exclusion_reason=Battle.ExclusionReason.NAMED_MODEL)  # fmt: skip
    _lane(_battle(alice, Battle.Status.DECIDED, ended_at=recently), "A", error=True)

    # when
    text = scrape()
    parsed = samples(text)

    # then: every cause of the fixed set, and never a reason's text
    causes = {
        dict(key[1])["cause"]: v
        for key, v in parsed.items()
        if key[0] == "arena_recent_battle_failures"
    }
    assert causes == {
        "sandbox_lost": 1, "worker_died": 1, "worker_stuck": 1, "repository": 1,
        "agent": 2, "orchestrator": 1, "lane_error": 2, "other": 1,
    }  # fmt: skip
    for text_of_a_reason in ("KeyError", "git clone", "nobody foresaw"):
        assert text_of_a_reason not in text


def _latency_counts(client: Client) -> dict[tuple, float]:
    return {
        key: v
        for key, v in samples(scrape(client)).items()
        if key[0] == "arena_http_request_duration_seconds_count"
    }


def test_route_latency_counts_two_requests_and_not_the_operator_paths(db):
    client = Client()
    login = ("arena_http_request_duration_seconds_count",
             (("method", "GET"), ("route", "accounts:login"), ("status", "2xx")))  # fmt: skip
    unresolved = ("arena_http_request_duration_seconds_count",
                  (("method", "GET"), ("route", "<unresolved>"), ("status", "4xx")))  # fmt: skip
    before = _latency_counts(client)

    # when: two requests to a routed page, one to an unknown path
    assert client.get("/accounts/login/").status_code == 200
    assert client.get("/accounts/login/?next=/x").status_code == 200
    assert client.get("/no/such/route-31337/").status_code == 404
    after = _latency_counts(client)

    # then
    assert after[login] == before.get(login, 0) + 2
    assert after[unresolved] == before.get(unresolved, 0) + 1
    assert not any("31337" in str(key) for key in after)

    # and the probes and the scrape itself are observed nowhere
    client.get("/healthz")
    client.get("/readyz")
    assert _latency_counts(client) == after


def test_the_whole_exposition_parses_in_both_formats(alice, roster):
    _stamped(alice, Battle.Status.DECIDED, timezone.now() - dt.timedelta(minutes=2),
             queue=1, provisioning=1, lanes=1, judgment=1, decision=1)  # fmt: skip
    _battle(alice, Battle.Status.FAILED, failure_reason="x", ended_at=timezone.now())
    classic = {f.name: f.type for f in text_string_to_metric_families(scrape())}
    assert classic[PHASE] == "histogram"
    assert classic[f"{PHASE}_gsum"] == classic[f"{PHASE}_gcount"] == "gauge"
    assert classic["arena_recent_battle_failures"] == "gauge"
    assert classic["arena_recent_window_seconds"] == "gauge"

    response = Client().get(
        "/metrics/prometheus", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0"
    )
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = response.content.decode()
    families = {f.name: f for f in openmetrics_families(text)}
    assert families[PHASE].type == "gaugehistogram"
    decision = {
        (s.name, s.labels.get("le")): s.value
        for s in families[PHASE].samples
        if s.labels["phase"] == "decision"
    }
    assert decision[(f"{PHASE}_bucket", "0.5")] == 0
    assert decision[(f"{PHASE}_bucket", "1.0")] == 1
    assert decision[(f"{PHASE}_gcount", None)] == 1
    assert families["arena_http_request_duration_seconds"].type == "histogram"

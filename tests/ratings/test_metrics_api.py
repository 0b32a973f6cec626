"""The metrics selector, API and page (SPEC §6) on rows made through the ORM.

Doubles as a URLconf (``pytest.mark.urls``): ``urlpatterns`` below is the site's with
the two routes the metrics views need, exactly as they are to be wired."""

import json
import random
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import AnonymousUser
from django.test import Client, RequestFactory
from django.urls import include, path
from rest_framework.test import APIRequestFactory

from agents.models import Agent, Arena
from arena_site import urls as site_urls
from battles.models import Battle, Task
from battles.services import task_submit
from ratings import metrics
from ratings.metrics_selectors import arena_metrics
from ratings.metrics_views import MetricsApi, metrics_page
from tests.ratings.stamps import stamp

api = [*site_urls.api, path("metrics/", MetricsApi.as_view(), name="metrics")]
urlpatterns = [
    path("api/", include((api, "api"))),
    path("metrics/", metrics_page, name="metrics"),
    *(p for p in site_urls.urlpatterns if getattr(p, "namespace", None) != "api"),
]

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOUR = 3600
DUPLICATED = "summarise the README of the django repository in five bullet points"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def after(start: datetime, *offsets: float) -> list[datetime]:
    return [start + timedelta(seconds=o) for o in offsets]


def make_battle(user, n: int, *, instruction: str | None = None, **fields) -> Battle:
    """A battle admitted through the real service, then given known event times."""
    battle = task_submit(
        user=user,
        instruction=f"compute {n} times {n} and write the result to out{n}.txt",
        rng=random.Random(n),
    )
    if instruction is not None:
        Task.objects.filter(pk=battle.task_id).update(instruction=instruction)
    Battle.objects.filter(pk=battle.pk).update(**fields)
    return battle


@pytest.fixture
def arena_day(alice, roster, settings):
    """Given one arena day as of NOW (window 24 h, α = 1 h, C = 4):

    b1 decided 10 h ago (w 0.5): wait 10 s, δ 2 s, execution 60 s, judgment 300 s
    b2 decided 50 min ago (w unset = 1): wait 20 s, δ 3 s, execution 60 s, judgment 600 s;
       its task nearly repeats b3's
    b3 decided 3 days ago (w 1): outside the window, still in the rated corpus
    b4 running: submitted 2 min ago, wait 60 s, δ 5 s
    b5 queued 30 s ago; b6 excluded, submitted 30 h ago
    and a queued battle of another arena, which no figure may count."""
    settings.ARENA = settings.ARENA.replace(battle_slots=4, dup_theta=0.55)
    s1, s2, s3 = ago(10 * HOUR), ago(50 * 60), ago(3 * 86400)
    q1, p1, e1, h1 = after(s1, 10, 12, 72, 372)
    q2, p2, e2, h2 = after(s2, 20, 23, 83, 683)
    q3, p3, e3, h3 = after(s3, 5, 6, 66, 400)
    decided = Battle.Status.DECIDED
    battles = {
        "b3": make_battle(
            alice,
            3,
            instruction=DUPLICATED,
            status=decided,
            evidence_weight=1.0,
            submitted_at=s3,
            dequeued_at=q3,
            lanes_started_at=p3,
            ended_at=e3,
            first_judgment_at=h3,
        ),
        "b1": make_battle(
            alice,
            1,
            status=decided,
            evidence_weight=0.5,
            submitted_at=s1,
            dequeued_at=q1,
            lanes_started_at=p1,
            ended_at=e1,
            first_judgment_at=h1,
        ),
        "b2": make_battle(
            alice,
            2,
            instruction=DUPLICATED + " please",
            status=decided,
            submitted_at=s2,
            dequeued_at=q2,
            lanes_started_at=p2,
            ended_at=e2,
            first_judgment_at=h2,
        ),
        "b4": make_battle(
            alice,
            4,
            status=Battle.Status.RUNNING,
            submitted_at=ago(120),
            dequeued_at=ago(60),
            lanes_started_at=ago(55),
        ),
        "b5": make_battle(alice, 5, submitted_at=ago(30)),
        "b6": make_battle(alice, 6, status=Battle.Status.EXCLUDED, submitted_at=ago(30 * HOUR)),
    }
    elsewhere = Arena.objects.create(slug="elsewhere", name="Elsewhere")
    other = make_battle(alice, 7, submitted_at=ago(10), dequeued_at=ago(5))
    Battle.objects.filter(pk=other.pk).update(arena=elsewhere)
    return battles


def public_metrics(**kwargs):
    return arena_metrics(arena_id=Arena.objects.public().pk, now=NOW, **kwargs)


def test_latency_summaries_cover_the_window(arena_day):
    latencies = public_metrics()["latencies"]
    assert list(latencies) == [latency.name for latency in metrics.LATENCIES]
    wait = latencies["wait"]
    assert wait["label"] == "Wait" and wait["formula"] == "q − s"
    assert {k: wait[k] for k in ("n", "p50", "p95", "p99", "mean", "min", "max")} == {
        "n": 3,
        "p50": 20.0,
        "p95": pytest.approx(56.0),
        "p99": pytest.approx(59.2),
        "mean": 30.0,
        "min": 10.0,
        "max": 60.0,
    }
    assert (latencies["provisioning"]["n"], latencies["provisioning"]["mean"]) == (3, 10 / 3)
    assert (latencies["execution"]["n"], latencies["execution"]["p50"]) == (2, 60.0)
    assert (latencies["judgment"]["n"], latencies["judgment"]["mean"]) == (2, 450.0)
    for name in ("incorporation", "service", "machine", "end_to_end"):
        assert latencies[name]["n"] == 0
        assert latencies[name]["p50"] is None and latencies[name]["mean"] is None


def test_queue_capacity_and_load(arena_day):
    figures = public_metrics()
    assert figures["queue_depth"] == 1
    assert figures["slots_busy"] == 1
    assert figures["slots"] == 4
    assert figures["arrivals"] == 4  # b1, b2, b4, b5: b3 and b6 came before the window
    assert figures["arrival_rate_per_s"] == 4 / 86400
    assert (figures["mean_service_s"], figures["service_n"]) == (62.5, 2)
    assert figures["offered_load"] == pytest.approx(62.5 / 86400, rel=1e-12)
    assert figures["stable"] is True
    assert figures["mean_time_in_system_s"] == 77.5
    assert figures["in_system_expected"] == pytest.approx(4 / 86400 * 77.5, rel=1e-12)
    assert figures["in_system_now"] == 2
    assert figures["status_counts"] == {
        "queued": 1,
        "running": 1,
        "screening": 0,
        "judging": 0,
        "decided": 3,
        "excluded": 1,
        "failed": 0,
    }


def test_freshness_weighs_decided_battles_by_evidence(arena_day):
    assert public_metrics()["freshness"] == {
        "alpha_s": 3600,
        "value": 0.4,  # b2 (weight 1 by default) of 0.5 + 1 + 1
        "fresh_weight": 1.0,
        "total_weight": 2.5,
        "battles": 3,
    }
    assert public_metrics(alpha_s=11 * HOUR)["freshness"]["value"] == 0.6


def test_duplicate_rate_compares_each_rated_task_with_earlier_ones(arena_day):
    assert public_metrics()["duplicate_rate"] == {
        "theta": 0.55,
        "value": 1 / 3,  # b2 repeats b3, which was judged earlier; b1 is new
        "duplicates": 1,
        "battles": 3,
        "corpus_cap": metrics.DUPLICATE_CORPUS_MAX,
        "capped": False,
    }


def test_duplicate_rate_keeps_the_newest_rated_battles_under_its_cap(arena_day, monkeypatch):
    monkeypatch.setattr(metrics, "DUPLICATE_CORPUS_MAX", 2)
    figures = public_metrics()["duplicate_rate"]
    # b1 and b2 remain; b2's earlier twin b3 fell outside the cap
    assert (figures["battles"], figures["duplicates"], figures["capped"]) == (2, 0, True)


def test_hourly_counts_of_submitted_and_ended_battles(arena_day):
    hourly = public_metrics()["hourly"]
    assert hourly["bin_s"] == 3600 and hourly["start"] == ago(86400).isoformat()
    assert hourly["submitted"] == [0] * 13 + [1] + [0] * 9 + [3]
    assert hourly["ended"] == [0] * 14 + [1] + [0] * 8 + [1]


def test_stamps_not_produced_yet_are_named_with_their_reason(arena_day):
    figures = public_metrics()
    assert [(s["field"], s["battles"]) for s in figures["stamps"]] == [
        ("submitted_at", 6),
        ("dequeued_at", 4),
        ("lanes_started_at", 4),
        ("ended_at", 3),
        ("first_judgment_at", 3),
        ("incorporated_at", 0),
        ("leaderboard_served_at", 0),
    ]
    pending = figures["stamps_not_produced"]
    assert [(p["field"], p["symbol"]) for p in pending] == [
        ("incorporated_at", "r"),
        ("leaderboard_served_at", "ℓ"),
    ]
    assert [p["note"] for p in pending] == [
        metrics.PENDING_STAMP_NOTES["incorporated_at"],
        metrics.PENDING_STAMP_NOTES["leaderboard_served_at"],
    ]
    (caveat,) = figures["stamp_caveats"]
    assert caveat["field"] == "incorporated_at" and "streaming" in caveat["note"]


def test_latencies_of_r_and_l_appear_once_the_refit_stamps_them(arena_day):
    b1 = arena_day["b1"]
    r, ell = ago(10 * HOUR - 400), ago(10 * HOUR - 405)
    stamp(b1, r=r, ell=ell)
    figures = public_metrics()
    latencies = figures["latencies"]
    assert latencies["incorporation"]["p50"] == 28.0  # 400 − 372
    assert latencies["service"]["p50"] == 5.0
    assert latencies["machine"]["p50"] == 105.0  # 405 − (372 − 72)
    assert latencies["end_to_end"]["p50"] == 405.0
    assert figures["stamps_not_produced"] == []


def test_an_empty_arena_has_figures_but_no_numbers(db):
    figures = public_metrics()
    assert figures["queue_depth"] == 0 and figures["arrival_rate_per_s"] == 0.0
    assert figures["mean_service_s"] is None and figures["offered_load"] is None
    assert figures["stable"] is None and figures["in_system_expected"] is None
    assert figures["freshness"]["value"] is None
    assert figures["duplicate_rate"]["value"] is None
    assert all(entry["n"] == 0 for entry in figures["latencies"].values())
    assert figures["hourly"]["submitted"] == [0] * 24
    assert len(figures["stamps_not_produced"]) == 7
    json.dumps(figures)


def test_the_selector_reads_in_three_queries(arena_day, django_assert_max_num_queries):
    arena_id = Arena.objects.public().pk
    with django_assert_max_num_queries(3):  # (the third: the hosts' capacity)
        arena_metrics(arena_id=arena_id, now=NOW)


# --- API ---------------------------------------------------------------------------------


def get_api():
    request = APIRequestFactory().get("/api/metrics/")
    response = MetricsApi.as_view()(request)
    response.render()
    return response


def test_api_returns_the_figures_as_json(arena_day, django_assert_max_num_queries):
    with time_machine.travel(NOW, tick=False), django_assert_max_num_queries(4):
        response = get_api()
    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["arena"] == Arena.objects.public().slug
    assert body["now"] == "2026-11-30T12:00:00+00:00"
    assert {
        "latencies",
        "queue_depth",
        "slots_busy",
        "slots",
        "arrival_rate_per_s",
        "mean_service_s",
        "offered_load",
        "freshness",
        "duplicate_rate",
        "status_counts",
        "hourly",
        "stamps_not_produced",
    } <= set(body)
    for entry in body["latencies"].values():
        assert {"n", "p50", "p95", "p99", "mean"} <= set(entry)
    assert body["latencies"]["wait"]["n"] == 3
    assert body["freshness"]["value"] == 0.4
    assert body["offered_load"] == pytest.approx(62.5 / 86400)


def test_api_is_public_and_names_no_task_and_no_agent(arena_day):
    with time_machine.travel(NOW, tick=False):
        text = get_api().content.decode()
    assert "compute" not in text and "README" not in text
    for agent in Agent.objects.all():
        assert agent.slug not in text and agent.display_name not in text
    assert "alice" not in text and "Acme" not in text


# --- page ----------------------------------------------------------------------------------


def get_page():
    request = RequestFactory().get("/metrics/")
    request.user = AnonymousUser()
    return metrics_page(request)


def svgs(page: str) -> list[ET.Element]:
    return [
        ET.fromstring(chunk)  # noqa: S314 - our own SVG; raises when malformed
        for chunk in re.findall(r"<svg\b.*?</svg>", page, flags=re.DOTALL)
    ]


def with_class(root: ET.Element, tag: str, css: str) -> list[ET.Element]:
    ns = "{http://www.w3.org/2000/svg}"
    return [el for el in root.iter(f"{ns}{tag}") if css in el.get("class", "").split()]


def test_page_shows_the_figures_and_two_charts(arena_day, django_assert_max_num_queries):
    with time_machine.travel(NOW, tick=False), django_assert_max_num_queries(4):
        response = get_page()
    assert response.status_code == 200
    page = response.content.decode()
    assert '<div class="figure" id="queue-depth"' in page
    assert re.search(r'id="slots-busy"[^>]*>1 / 4<', page)
    assert re.search(r'id="freshness"[^>]*>40.0%<', page)
    assert re.search(r'id="duplicate-rate"[^>]*>33.3%<', page)
    assert re.search(r'id="offered-load"[^>]*>0.00072<', page)  # 62.5 / 86400
    wait_row = page.split('data-latency="wait"')[1].split("</tr>")[0]
    assert '<td class="n">3</td>' in wait_row and "20 s" in wait_row and "30 s" in wait_row
    service_row = page.split('data-latency="service"')[1].split("</tr>")[0]
    assert (
        "No battle has reached this yet: included in the published ratings; first shown "
        "on a leaderboard" in service_row
    )
    assert "From submission until a worker takes the battle" in wait_row
    assert "q − s" not in page and "ℓ" not in page and "ρ" not in page  # words, not symbols
    assert 'id="pending-stamps"' in page and "no battle has been rated yet" in page
    assert 'data-stamp="incorporated_at"' in page and "first published refit" in page

    latency_plot, hourly_plot = svgs(page)
    assert len(with_class(latency_plot, "rect", "mx-box")) == 4  # wait, δ, execution, h − e
    assert len(with_class(hourly_plot, "rect", "mx-bar")) == 48  # 24 hours × 2 series


def test_page_of_an_empty_arena(db):
    with time_machine.travel(NOW, tick=False):
        page = get_page().content.decode()
    latency_plot, hourly_plot = svgs(page)
    assert with_class(latency_plot, "rect", "mx-box") == []
    assert len(with_class(hourly_plot, "rect", "mx-bar")) == 48
    assert "no battle timed yet" in page


@pytest.mark.urls(__name__)
def test_the_routes_to_wire(arena_day):
    with time_machine.travel(NOW, tick=False):
        api_response = Client().get("/api/metrics/")
        page = Client().get("/metrics/").content.decode()
    assert api_response.status_code == 200 and api_response.json()["queue_depth"] == 1
    assert '<a href="/api/metrics/"><code>/api/metrics/</code></a>' in page

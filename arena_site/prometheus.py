"""``/metrics/prometheus``: the arena's figures and this process's HTTP latency in
Prometheus' exposition format, written by ``prometheus-client`` (docs/deployment.md,
"Probes and metrics", lists the families; docs/operations.md, "Metrics: the last hour's
battles", the ``arena_recent_*`` ones).

- The arena's figures (battles, votes, decisions, queues, refit, worker hosts) are read
  at scrape time from PostgreSQL and Redis by ``ArenaCollector`` through
  ``arena_site.ops_selectors``: the same answer from every replica. Their labels are
  statuses, sources, causes, queue names and host ids: never a team, a user or an arena,
  so nothing private can show. The ``arena_recent_*`` figures (phase latencies as a
  gauge histogram, failures by cause) cover the battles of the last hour.
- ``arena_http_request_duration_seconds`` is this process's own histogram, kept by
  ``RequestLatencyMiddleware``, labelled by the resolved route's name (never the raw
  path, whose values are unbounded), the method and the status class. With several web
  processes each is scraped on its own (per-process scraping, the ``instance`` label
  tells them apart), not through prometheus-client's multiprocess mode: one uvicorn
  process serves each replica (``--processes 1`` in the image and the manifests), so no
  two processes share a port. ``make run``'s several processes share one port: a scrape
  there reads one of them.

Who may read it: with ``ARENA_METRICS_TOKEN`` set, a request bearing it
(``Authorization: Bearer …``) from anywhere; without, only a request made on this
machine directly (loopback peer, no proxy's forwarding header), so a public proxy in
front of the arena does not publish it by mistake."""

import ipaddress
import logging
import time
from collections.abc import Iterable, Iterator
from datetime import datetime

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from prometheus_client import REGISTRY, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from arena_site import ops_selectors

logger = logging.getLogger(__name__)

REQUEST_LATENCY = Histogram(
    "arena_http_request_duration_seconds",
    "Time from a request entering Django to its response leaving it (a stream: to its "
    "headers), by the route's name, the method and the status class.",
    ["route", "method", "status"],
)
# Any other method (clients may send anything) is counted as "other": bounded labels.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Requests that reached no route: unknown paths (404), and requests refused before
# routing (shed under load, a bad Host header).
UNRESOLVED = "<unresolved>"
_FORWARDING_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-Ip")


def route_label(request: HttpRequest) -> str:
    """The resolved route's name ("api:battle", "battles:detail"), or for a route
    without a name the dotted path of its view; never the requested path."""
    match = getattr(request, "resolver_match", None)
    return match.view_name if match is not None else UNRESOLVED


class RequestLatencyMiddleware:
    """Observes every request's duration into ``REQUEST_LATENCY``. Goes before
    ``CapacityMiddleware`` so that shed requests count too."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        start = time.perf_counter()
        response = self.get_response(request)
        method = request.method if request.method in METHODS else "other"
        status = f"{response.status_code // 100}xx"
        REQUEST_LATENCY.labels(route_label(request), method, status).observe(
            time.perf_counter() - start
        )
        return response


def _age_s(then: datetime | None, now: datetime) -> float:
    return max(0.0, (now - then).total_seconds()) if then is not None else 0.0


def _family(
    name: str, help: str, label: str, items: Iterable[tuple[str, float]]
) -> GaugeMetricFamily:
    """A gauge with one label: one sample per ``(label value, value)`` of ``items``."""
    family = GaugeMetricFamily(name, help, labels=[label])
    for label_value, value in items:
        family.add_metric([label_value], value)
    return family


def _recent_families() -> Iterator[Metric]:
    """The last hour's battles: how long each phase took, and why battles failed. A
    gauge histogram (OpenMetrics ``gaugehistogram``; in the classic text format a
    ``histogram`` with ``_gcount``/``_gsum`` gauges): its buckets count the window's
    battles, so they go down as well as up and need no ``rate()``."""
    window = ops_selectors.RECENT_WINDOW_S
    phases = ops_selectors.recent_phase_figures()
    failures = ops_selectors.recent_failure_figures()
    yield GaugeMetricFamily(
        "arena_recent_window_seconds",
        "The window of the arena_recent_* figures: battles whose event fell this long ago or less.",
        value=window,
    )
    histogram = GaugeHistogramMetricFamily(
        "arena_recent_battle_phase_seconds",
        "How long the phases of battles took, over the battles whose phase ended in the "
        "window: queue (submitted to dequeued), provisioning (dequeued to lanes started), "
        "lanes (lanes started to ended), judgment (ended to the first human judgment), "
        "decision (ended to decided or excluded). Imported battles are left out.",
        labels=["phase"],
    )
    for name, figures in phases.items():
        buckets = [(floatToGoString(bound), n) for bound, n in figures.buckets]
        histogram.add_metric([name], [*buckets, ("+Inf", figures.count)], figures.sum_s)
    yield histogram
    yield _family(
        "arena_recent_battle_failures",
        "Battles whose lanes ended in the window and that failed, or were excluded because "
        "a side could not run through the arena's fault, by cause: sandbox_lost, "
        "worker_died, worker_stuck, repository, agent, orchestrator, lane_error, other.",
        "cause",
        failures.items(),
    )


class ArenaCollector(Collector):
    """The arena's figures, read when scraped. A part that cannot be read (PostgreSQL or
    Redis away) is left out and ``arena_figures_up`` says which."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        try:
            families = list(self._database_families(now))
        except Exception:
            logger.warning("metrics: the database figures could not be read", exc_info=True)
            families = []
        try:
            queue_families = list(self._queue_families())
        except Exception:
            logger.warning("metrics: the queue figures could not be read", exc_info=True)
            queue_families = []
        yield _family(
            "arena_figures_up",
            "1 when this scrape could read the figures from the source, else 0.",
            "source",
            [
                ("database", 1.0 if families else 0.0),
                ("redis", 1.0 if queue_families else 0.0),
            ],
        )
        yield from families
        yield from queue_families

    def _database_families(self, now: datetime) -> Iterator[Metric]:
        battles = ops_selectors.battle_figures()
        votes = ops_selectors.vote_figures()
        refit_at = ops_selectors.public_refit_last_run_at()
        hosts = ops_selectors.host_figures()

        yield _family(
            "arena_battles",
            "Battles of every arena by status.",
            "status",
            battles.by_status.items(),
        )
        yield GaugeMetricFamily(
            "arena_oldest_queued_battle_age_seconds",
            "How long the oldest queued battle has waited (0: none queued).",
            value=_age_s(battles.oldest_queued_at, now),
        )
        yield _family(
            "arena_decided_battles",
            "Decided battles by who decided them (crowd, submitter: self-judged only, import).",
            "source",
            battles.decided_by_source.items(),
        )
        yield _family(
            "arena_failed_battles",
            "Failed battles by cause: agent (a lane's agent failed), arena (a lane ended "
            "in error through the sandbox, worker or engine), other (no lane error).",
            "cause",
            battles.failed_by_cause.items(),
        )

        yield from _recent_families()

        yield _family(
            "arena_votes",
            "Votes of every arena: standing admissible, standing inadmissible, taken back.",
            "state",
            ((state, votes[state]) for state in ops_selectors.VOTE_STATES),
        )
        yield CounterMetricFamily(
            "arena_votes_cast", "Votes ever cast (taken back ones too).", value=sum(votes.values())
        )

        yield GaugeMetricFamily(
            "arena_rated_battles_awaiting_refit",
            "Decided, rated battles no refit of the board includes yet.",
            value=battles.awaiting_refit,
        )
        yield GaugeMetricFamily(
            "arena_oldest_awaiting_refit_age_seconds",
            "Since the decision of the oldest rated battle no refit includes (0: none).",
            value=_age_s(battles.oldest_awaiting_refit_at, now),
        )
        yield GaugeMetricFamily(
            "arena_refit_last_run_age_seconds",
            "Since the public arena's refit last ran (-1: it never ran).",
            value=_age_s(refit_at, now) if refit_at is not None else -1.0,
        )

        yield _family(
            "arena_worker_host_heartbeat_age_seconds",
            "Since each worker host last beat (-1: it holds leases but never beat).",
            "host",
            (
                (h.host_id, _age_s(h.heartbeat_at, now) if h.heartbeat_at is not None else -1.0)
                for h in hosts
            ),
        )
        yield _family(
            "arena_worker_host_lost",
            "1 when a janitor has taken the worker host for dead (until it beats again).",
            "host",
            ((h.host_id, 1.0 if h.lost else 0.0) for h in hosts),
        )
        yield _family(
            "arena_sandbox_leases_busy",
            "Sandbox slots each worker host holds now (live leases).",
            "host",
            ((h.host_id, h.leases_busy) for h in hosts),
        )

    def _queue_families(self) -> Iterator[Metric]:
        queues = ops_selectors.queue_figures()
        yield _family(
            "arena_rq_queue_depth",
            "Jobs waiting in each rq queue.",
            "queue",
            ((q.name, q.queued) for q in queues),
        )
        yield _family(
            "arena_rq_started_jobs",
            "Jobs a worker runs now, per rq queue.",
            "queue",
            ((q.name, q.started) for q in queues),
        )
        yield _family(
            "arena_rq_failed_jobs",
            "Jobs in each rq queue's failed registry.",
            "queue",
            ((q.name, q.failed) for q in queues),
        )


class _Scrape(Collector):
    """This process's registry (the latency histogram, process and GC figures) and the
    arena's figures, which are registered nowhere else: only a scrape reads them."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()
        yield from ArenaCollector().collect()


def _direct_local(request: HttpRequest) -> bool:
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return peer.is_loopback and not any(h in request.headers for h in _FORWARDING_HEADERS)


def _refused(status: int, message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    response["Cache-Control"] = "no-store"
    return response


def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "")
        if not constant_time_compare(given, f"Bearer {token}"):
            return _refused(401, "Send the metrics token: Authorization: Bearer <token>.")
    elif not _direct_local(request):
        return _refused(
            403,
            "Metrics are served to this machine only; set ARENA_METRICS_TOKEN to scrape "
            "from elsewhere.",
        )
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = HttpResponse(encoder(_Scrape()), content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response

"""The metrics page and API (SPEC §6). Public: the figures are aggregates of the public
arena, with no team data and no agent identities."""

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Arena
from ratings.metrics import LATENCIES, format_duration
from ratings.metrics_selectors import HOUR_S, arena_metrics
from ratings.svg import BoxRow, Series, bar_chart, box_plot


class MetricsApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(
        responses={200: OpenApiTypes.OBJECT},
        description=(
            "Latency percentiles (seconds) of SPEC §6 over the last 24 h, queue depth, "
            "busy slots, offered load ρ, freshness F(α) and duplicate rate D(θ) of the "
            "public arena."
        ),
    )
    def get(self, request):
        arena = Arena.objects.public()
        figures = arena_metrics(arena_id=arena.pk, now=timezone.now())
        return Response({"arena": arena.slug, **figures})


@require_GET
def metrics_page(request: HttpRequest) -> HttpResponse:
    arena = Arena.objects.public()
    figures = arena_metrics(arena_id=arena.pk, now=timezone.now())
    return render(request, "ratings/metrics.html", {"arena": arena, **metrics_context(figures)})


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _figure(value: float | None) -> str:
    """Two significant digits: loads and counts span 0.0007 to 12."""
    return "—" if value is None else f"{value:.2g}"


def _hours_ago(hours: int) -> str:
    return "now" if hours == 0 else f"−{hours} h"


def metrics_context(figures: Mapping[str, Any]) -> dict[str, Any]:
    """What the template shows, formatted, and the two charts (SVG strings built from
    escaped text only, hence safe to mark so)."""
    pending = {p["field"]: p["symbol"] for p in figures["stamps_not_produced"]}
    rows = []
    for latency in LATENCIES:
        entry = figures["latencies"][latency.name]
        missing = [pending[f] for f in latency.needs if f in pending]
        note = f"no battle has {', '.join(missing)} yet" if missing else ""
        rows.append(
            {
                "name": latency.name,
                "label": entry["label"],
                "formula": entry["formula"],
                "n": entry["n"],
                **{key: format_duration(entry[key]) for key in ("p50", "p95", "p99", "mean")},
                "note": note,
                "box": BoxRow(
                    entry["label"], entry if entry["n"] else None, note or "no data in window"
                ),
            }
        )

    hourly = figures["hourly"]
    n_bins = len(hourly["submitted"])
    bins_per_tick = 6 if n_bins > 12 else 1
    boundary_labels = {
        b: _hours_ago(n_bins - b) for b in range(n_bins + 1) if (n_bins - b) % bins_per_tick == 0
    }
    bin_titles = [
        f"{_hours_ago(n_bins - b)} to {_hours_ago(n_bins - b - 1)}" for b in range(n_bins)
    ]
    hourly_svg = bar_chart(
        [Series("Submitted", hourly["submitted"]), Series("Ended", hourly["ended"])],
        title=f"Battles submitted and ended per hour, last {n_bins} h",
        bin_titles=bin_titles,
        boundary_labels=boundary_labels,
        y_label="battles per hour",
    )
    latency_svg = box_plot(
        [row["box"] for row in rows],
        title=f"Latency distributions, last {figures['window_s'] // HOUR_S} h",
    )

    rho = figures["offered_load"]
    freshness = figures["freshness"]
    duplicates = figures["duplicate_rate"]
    now = datetime.fromisoformat(figures["now"]).astimezone(UTC)
    return {
        "figures": figures,
        "now_text": f"{now:%Y-%m-%d %H:%M}",
        "latency_rows": rows,
        "window_h": figures["window_s"] // HOUR_S,
        "latency_svg": mark_safe(latency_svg),  # noqa: S308 - every text is escaped in svg.py
        "hourly_svg": mark_safe(hourly_svg),  # noqa: S308 - every text is escaped in svg.py
        "arrivals_per_hour": f"{figures['arrival_rate_per_s'] * HOUR_S:.2f}",
        "mean_service": format_duration(figures["mean_service_s"]),
        "rho": _figure(rho),
        "in_system_expected": _figure(figures["in_system_expected"]),
        "freshness_value": _percent(freshness["value"]),
        "alpha": format_duration(freshness["alpha_s"]),
        "duplicate_value": _percent(duplicates["value"]),
        "pending_stamps": figures["stamps_not_produced"],
        "stamp_caveats": figures["stamp_caveats"],
    }

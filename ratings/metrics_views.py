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
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Arena
from ratings.metrics import LATENCIES, STAMP_CAVEAT_WORDS, STAMPS, format_duration
from ratings.metrics_selectors import HOUR_S, arena_metrics
from ratings.svg import BoxRow, Series, bar_chart, box_plot


class LatencyOutput(serializers.Serializer):
    label = serializers.CharField()
    formula = serializers.CharField(help_text="How it is measured, in words.")
    n = serializers.IntegerField(min_value=0, help_text="Battles measured in the window.")
    p50 = serializers.FloatField(allow_null=True, help_text="Seconds; null when n = 0.")
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)
    mean = serializers.FloatField(allow_null=True)
    min = serializers.FloatField(allow_null=True)
    p25 = serializers.FloatField(allow_null=True)
    p75 = serializers.FloatField(allow_null=True)
    max = serializers.FloatField(allow_null=True)


class FreshnessOutput(serializers.Serializer):
    alpha_s = serializers.FloatField(help_text="α: judgments at most this old are fresh.")
    value = serializers.FloatField(allow_null=True, help_text="F(α); null with no weight.")
    fresh_weight = serializers.FloatField()
    total_weight = serializers.FloatField()
    battles = serializers.IntegerField(min_value=0)


class DuplicateRateOutput(serializers.Serializer):
    theta = serializers.FloatField(help_text="θ, the near-duplicate threshold.")
    value = serializers.FloatField(allow_null=True, help_text="D(θ); null with no battles.")
    duplicates = serializers.IntegerField(min_value=0)
    battles = serializers.IntegerField(min_value=0)
    corpus_cap = serializers.IntegerField(min_value=0)
    capped = serializers.BooleanField()


class HourlyOutput(serializers.Serializer):
    bin_s = serializers.FloatField()
    start = serializers.DateTimeField()
    submitted = serializers.ListField(child=serializers.IntegerField(min_value=0))
    ended = serializers.ListField(child=serializers.IntegerField(min_value=0))


class StampOutput(serializers.Serializer):
    field = serializers.CharField()
    symbol = serializers.CharField()
    label = serializers.CharField()
    battles = serializers.IntegerField(min_value=0)


class PendingStampOutput(serializers.Serializer):
    field = serializers.CharField()
    symbol = serializers.CharField()
    label = serializers.CharField()
    note = serializers.CharField()


class StampCaveatOutput(serializers.Serializer):
    field = serializers.CharField()
    symbol = serializers.CharField()
    note = serializers.CharField()


class RefitOutput(serializers.Serializer):
    latest_at = serializers.DateTimeField(
        allow_null=True, help_text="When the newest rating snapshot was computed; null: none."
    )
    converged = serializers.BooleanField(
        allow_null=True,
        help_text="The newest snapshot's fit converged; false: it stopped at its iteration "
        "cap and the published board may be off. Null: no snapshot.",
    )
    iterations = serializers.IntegerField(
        min_value=0, allow_null=True, help_text="Iterations of the newest snapshot's fit."
    )
    window_days = serializers.IntegerField(min_value=1)
    snapshots = serializers.IntegerField(
        min_value=0, help_text="Snapshots computed in the last window_days days."
    )
    not_converged = serializers.IntegerField(
        min_value=0, help_text="Of them, those whose fit did not converge."
    )
    problem = serializers.BooleanField(help_text="The newest snapshot did not converge.")


class HostOutput(serializers.Serializer):
    host = serializers.CharField()
    backend = serializers.CharField(allow_blank=True)
    version = serializers.CharField(allow_blank=True)
    load_1m = serializers.FloatField(allow_null=True)
    workers = serializers.IntegerField(min_value=0, help_text="Its live battle workers.")
    cordoned = serializers.BooleanField()
    draining = serializers.BooleanField()


class MetricsOutput(serializers.Serializer):
    arena = serializers.CharField()
    now = serializers.DateTimeField()
    window_s = serializers.FloatField(help_text="The window the latencies cover.")
    latencies = serializers.DictField(child=LatencyOutput(), help_text="By latency name.")
    queue_depth = serializers.IntegerField(min_value=0)
    slots_busy = serializers.IntegerField(min_value=0)
    slots = serializers.IntegerField(
        min_value=1,
        help_text="C, the battle slots: the live battle workers of the hosts that take "
        "battles (their rows), or ARENA_BATTLE_SLOTS while no worker host beats.",
    )
    slots_source = serializers.ChoiceField(choices=["hosts", "setting"])
    hosts = HostOutput(many=True, help_text="The live worker hosts and what they run.")
    arrivals = serializers.IntegerField(min_value=0)
    arrival_rate_per_s = serializers.FloatField(min_value=0, help_text="λ.")
    mean_service_s = serializers.FloatField(allow_null=True, help_text="E[S].")
    service_n = serializers.IntegerField(min_value=0)
    offered_load = serializers.FloatField(allow_null=True, help_text="ρ = λ E[S] / C.")
    stable = serializers.BooleanField(allow_null=True, help_text="ρ < 1.")
    in_system_now = serializers.IntegerField(min_value=0)
    in_system_expected = serializers.FloatField(allow_null=True, help_text="λ E[T].")
    mean_time_in_system_s = serializers.FloatField(allow_null=True, help_text="E[T].")
    freshness = FreshnessOutput()
    duplicate_rate = DuplicateRateOutput()
    status_counts = serializers.DictField(
        child=serializers.IntegerField(min_value=0), help_text="Battles per status."
    )
    refit = RefitOutput(help_text="Convergence of the rating refits.")
    hourly = HourlyOutput()
    stamps = StampOutput(many=True)
    stamps_not_produced = PendingStampOutput(many=True)
    stamp_caveats = StampCaveatOutput(many=True)


class MetricsApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(
        responses={200: MetricsOutput},
        description=(
            "Latency percentiles (seconds) over the last 24 h, queue depth, "
            "busy slots, offered load ρ, freshness F(α), duplicate rate D(θ) and the "
            "refits' convergence of the public arena."
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
    return "now" if hours == 0 else f"{hours} h ago"


def metrics_context(figures: Mapping[str, Any]) -> dict[str, Any]:
    """What the template shows, formatted, and the two charts (SVG strings built from
    escaped text only, hence safe to mark so)."""
    # The page names events and latencies in words; the API keeps their symbols.
    pending = {p["field"]: p["label"] for p in figures["stamps_not_produced"]}
    rows = []
    for latency in LATENCIES:
        entry = figures["latencies"][latency.name]
        missing = [pending[f] for f in latency.needs if f in pending]
        note = f"no battle has reached this yet: {'; '.join(missing)}" if missing else ""
        rows.append(
            {
                "name": latency.name,
                "label": entry["label"],
                "meaning": latency.meaning,
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

    labels = {stamp.field: stamp.label for stamp in STAMPS}
    rho = figures["offered_load"]
    freshness = figures["freshness"]
    duplicates = figures["duplicate_rate"]
    now = datetime.fromisoformat(figures["now"]).astimezone(UTC)
    refit = figures["refit"]
    latest_at = refit["latest_at"]
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
        "stamp_caveats": [
            {
                "field": c["field"],
                "label": labels[c["field"]],
                "note": STAMP_CAVEAT_WORDS[c["field"]],
            }
            for c in figures["stamp_caveats"]
            if c["field"] in STAMP_CAVEAT_WORDS
        ],
        "refit": refit,
        "refit_at_text": (
            f"{datetime.fromisoformat(latest_at).astimezone(UTC):%Y-%m-%d %H:%M}"
            if latest_at
            else ""
        ),
    }

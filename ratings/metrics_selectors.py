"""Reads for the metrics page and API (SPEC §6): latency, capacity, freshness and
duplicate figures of one arena. Aggregate only: no team data, no agent identities."""

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, F, FloatField, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from battles.models import Battle
from ratings import metrics
from ratings.models import RatingSnapshot
from sandboxes.selectors import fleet_capacity

HOUR_S = 3600
# The refit figures count the snapshots of this many days back.
REFIT_WINDOW_DAYS = 7


class _Scalar(Subquery):
    """An uncorrelated one-value subquery among ``aggregate()``'s aggregates (the ORM
    takes only aggregates there): like them, one value for the whole statement, and
    there also when the aggregated rows are none."""

    contains_aggregate = True


def with_stamps(battles: QuerySet[Battle]) -> QuerySet[Battle]:
    """The battles with r and ℓ of SPEC §6 beside the stamps on their rows, under the
    names ``metrics.STAMP_FIELDS`` gives them: those of the refit run that first
    included the battle (``ratings.models.Incorporation``), None for a battle in no
    published refit yet (two left joins, one row each)."""
    return battles.annotate(
        incorporated_at=F("incorporation__incorporation__incorporated_at"),
        leaderboard_served_at=F("incorporation__incorporation__leaderboard_served_at"),
    )


def _refit_figures(*, arena_id: int, now: datetime) -> dict[str, Any]:
    """The newest snapshot's convergence and the snapshots of the last
    REFIT_WINDOW_DAYS days that did not converge, as subqueries of the battle totals'
    statement (``refit_*`` keys; ``_refit_output`` shapes them)."""
    snapshots = RatingSnapshot.objects.filter(arena_id=arena_id)
    newest = snapshots.order_by("-computed_at", "-pk")
    recent = (
        snapshots.filter(computed_at__gte=now - timedelta(days=REFIT_WINDOW_DAYS))
        .order_by()
        .values("arena_id")
    )
    return {
        "refit_at": _Scalar(newest.values("computed_at")[:1]),
        "refit_converged": _Scalar(newest.values("converged")[:1]),
        "refit_iterations": _Scalar(newest.values("iterations")[:1]),
        "refit_recent": Coalesce(_Scalar(recent.annotate(n=Count("pk")).values("n")), 0),
        "refit_recent_not_converged": Coalesce(
            _Scalar(recent.filter(converged=False).annotate(n=Count("pk")).values("n")), 0
        ),
    }


def _refit_output(totals: dict[str, Any]) -> dict[str, Any]:
    at = totals["refit_at"]
    return {
        "latest_at": at.isoformat() if at else None,
        "converged": totals["refit_converged"],
        "iterations": totals["refit_iterations"],
        "window_days": REFIT_WINDOW_DAYS,
        "snapshots": totals["refit_recent"],
        "not_converged": totals["refit_recent_not_converged"],
        # The problem to show: the published board rests on a fit that did not converge.
        "problem": totals["refit_converged"] is False,
    }


def arena_metrics(
    *, arena_id: int, now: datetime, window_s: int = 86400, alpha_s: int = 3600
) -> dict[str, Any]:
    """The figures of SPEC §6 for ``arena_id`` as of ``now``, JSON-safe. Two queries.
    Live figures only: battles decided by an import of historical votes are left out
    (and h, the first admissible judgment, is stamped only by a vote that became final,
    so an undone vote never counts as a judgment).

    - Latencies: observed in the window ``(now − window_s, now]`` (a latency counts when
      its closing stamp falls in the window; see ``ratings.metrics``).
    - λ: battles submitted in the window per second; E[S] and E[T] over battles that
      ended in the window; ρ = λ E[S] / C with C the live battle workers of the hosts
      that take battles (``sandboxes.selectors.fleet_capacity``), or ``ARENA.battle_slots``
      while no worker host beats.
    - F(α): over every decided battle, age = now − first_judgment_at, weight =
      evidence_weight (1 when unset); a decided battle without h has no age and is left
      out (of F and D alike).
    - D(θ): over the newest ``DUPLICATE_CORPUS_MAX`` decided battles in
      first_judgment_at order (an earlier task outside that cap is not compared).
    - Refit: whether the newest rating snapshot's fit converged and in how many
      iterations, and how many snapshots of the last REFIT_WINDOW_DAYS days did not
      (imported battles' refits included: a snapshot is the published board).
    """
    since = now - timedelta(seconds=window_s)
    fresh_since = now - timedelta(seconds=alpha_s)
    theta = settings.ARENA.dup_theta
    capacity = fleet_capacity()
    slots = capacity["slots"] or settings.ARENA.battle_slots
    cap = metrics.DUPLICATE_CORPUS_MAX

    # Live figures: battles decided by an import of historical votes are not live.
    battles = with_stamps(
        Battle.objects.filter(arena_id=arena_id).exclude(
            decision_source=Battle.DecisionSource.IMPORT
        )
    )
    rated = Q(status=Battle.Status.DECIDED, first_judgment_at__isnull=False)
    weight = Coalesce("evidence_weight", Value(1.0), output_field=FloatField())
    totals = battles.aggregate(
        **{f"status_{s}": Count("pk", filter=Q(status=s)) for s in Battle.Status.values},
        **{f"stamped_{f}": Count(f) for f in metrics.STAMP_FIELDS},
        arrivals=Count("pk", filter=Q(submitted_at__gt=since, submitted_at__lte=now)),
        rated_weight=Sum(weight, filter=rated, default=0.0),
        fresh_weight=Sum(
            weight,
            filter=rated & Q(first_judgment_at__gte=fresh_since, first_judgment_at__lte=now),
            default=0.0,
        ),
        rated_battles=Count("pk", filter=rated),
        **_refit_figures(arena_id=arena_id, now=now),
    )

    # One query for the rows: every battle with an event in the window, plus the newest
    # `cap` rated battles for D(θ) (the subquery keeps it one statement). The OR over the
    # stamps scans the arena's battles; rows carry their task text (for D) either way.
    newest_rated = battles.filter(rated).order_by("-first_judgment_at", "-pk").values("pk")[:cap]
    active = Q()
    for field in metrics.STAMP_FIELDS:
        active |= Q(**{f"{field}__gt": since})
    rows = list(
        battles.filter(active | Q(pk__in=Subquery(newest_rated))).values(
            "pk", "status", *metrics.STAMP_FIELDS, instruction=F("task__instruction")
        )
    )

    latencies = {}
    for latency in metrics.LATENCIES:
        values = metrics.durations(rows, latency, since=since, until=now)
        latencies[latency.name] = {
            "label": latency.label,
            "formula": latency.formula,
            **metrics.summary(values),
            **metrics.spread(values),
        }

    service = metrics.durations(rows, metrics.SERVICE_TIME, since=since, until=now)
    in_system = metrics.durations(rows, metrics.TIME_IN_SYSTEM, since=since, until=now)
    arrival_rate = totals["arrivals"] / window_s
    mean_service = metrics.mean_or_none(service)
    mean_in_system = metrics.mean_or_none(in_system)
    rho = metrics.offered_load(arrival_rate, mean_service, slots)

    corpus = sorted(
        (r for r in rows if r["status"] == Battle.Status.DECIDED and r["first_judgment_at"]),
        key=lambda r: (r["first_judgment_at"], r["pk"]),
    )[-cap:]
    flags = metrics.duplicate_flags([r["instruction"] for r in corpus], theta)

    status_counts = {s: totals[f"status_{s}"] for s in Battle.Status.values}
    return {
        "now": now.isoformat(),
        "window_s": window_s,
        "latencies": latencies,
        "queue_depth": status_counts[Battle.Status.QUEUED],
        "slots_busy": status_counts[Battle.Status.RUNNING],
        "slots": slots,
        "slots_source": "hosts" if capacity["slots"] else "setting",
        "hosts": capacity["hosts"],
        "arrivals": totals["arrivals"],
        "arrival_rate_per_s": arrival_rate,
        "mean_service_s": mean_service,
        "service_n": len(service),
        "offered_load": rho,
        "stable": None if rho is None else rho < 1,
        # Little's law: E[N] = λ E[T], battles present (waiting or executing).
        "in_system_now": status_counts[Battle.Status.QUEUED] + status_counts[Battle.Status.RUNNING],
        "in_system_expected": None if mean_in_system is None else arrival_rate * mean_in_system,
        "mean_time_in_system_s": mean_in_system,
        "freshness": {
            "alpha_s": alpha_s,
            "value": metrics.weight_share(totals["fresh_weight"], totals["rated_weight"]),
            "fresh_weight": totals["fresh_weight"],
            "total_weight": totals["rated_weight"],
            "battles": totals["rated_battles"],
        },
        "duplicate_rate": {
            "theta": theta,
            "value": sum(flags) / len(flags) if flags else None,
            "duplicates": sum(flags),
            "battles": len(flags),
            "corpus_cap": cap,
            "capped": totals["rated_battles"] > cap,
        },
        "status_counts": status_counts,
        "refit": _refit_output(totals),
        "hourly": {
            "bin_s": HOUR_S,
            "start": since.isoformat(),
            "submitted": metrics.binned_counts(
                (r["submitted_at"] for r in rows), until=now, window_s=window_s, bin_s=HOUR_S
            ),
            "ended": metrics.binned_counts(
                (r["ended_at"] for r in rows), until=now, window_s=window_s, bin_s=HOUR_S
            ),
        },
        "stamps": [
            {
                "field": stamp.field,
                "symbol": stamp.symbol,
                "label": stamp.label,
                "battles": totals[f"stamped_{stamp.field}"],
            }
            for stamp in metrics.STAMPS
        ],
        "stamps_not_produced": [
            {
                "field": stamp.field,
                "symbol": stamp.symbol,
                "label": stamp.label,
                "note": metrics.PENDING_STAMP_NOTES.get(stamp.field, metrics.NO_BATTLE_YET_NOTE),
            }
            for stamp in metrics.STAMPS
            if totals[f"stamped_{stamp.field}"] == 0
        ],
        "stamp_caveats": [
            {
                "field": stamp.field,
                "symbol": stamp.symbol,
                "note": metrics.STAMP_CAVEATS[stamp.field],
            }
            for stamp in metrics.STAMPS
            if stamp.field in metrics.STAMP_CAVEATS
        ],
    }

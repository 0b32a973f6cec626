"""Pages of training environments (docs/environments.md): the list,
one environment (its redacted instruction, grader checks, replays and package), and
the conversion latency as a fragment the metrics page loads. Public like the open
data: anyone sees the validated environments whose source battle is published; staff
see all. Any other environment is a 404."""

from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from environments.models import Environment
from environments.selectors import (
    access_environment,
    conversion_latency,
    environment_row,
    environments_on_the_way,
    visible_environments,
)
from environments.words import check_label, field_label, status_label, status_sentence
from ratings.metrics import format_duration

ENVIRONMENTS_PER_PAGE = 50
# The list and an environment's page re-read themselves this often (htmx polling, not a
# socket: what a viewer may see depends on who they are and on time passing, as a
# source battle's publication delay ends, which no write announces).
POLL_S = 5
# htmx's answer code for "stop polling" (it swaps the body, then polls no more).
HTMX_STOP_POLLING = 286


def _row(environment: Environment, user) -> dict:
    row = environment_row(environment, user)
    row["conversion"] = format_duration(row["conversion_s"])
    row["target"] = format_duration(row["conversion_target_s"])
    row["status_label"] = status_label(row["status"])
    row["status_sentence"] = status_sentence(row["status"])
    return row


@require_GET
def environment_list(request: HttpRequest) -> HttpResponse:
    environments = visible_environments(request.user)
    page = Paginator(environments, ENVIRONMENTS_PER_PAGE).get_page(request.GET.get("page"))
    rows = [_row(environment, request.user) for environment in page.object_list]
    context = {
        "page": page,
        "rows": rows,
        "staff": request.user.is_staff,
        "on_the_way": None if rows else environments_on_the_way(),
        "delay_days": settings.ARENA.export_delay_days,
        "poll_s": POLL_S,
    }
    return render(request, "environments/list.html", context)


def _check_rows(grader: dict | None) -> list[dict]:
    """Each check: its type (and its label) and its other fields (labelled), in the
    grader's order."""
    checks = [c for c in (grader or {}).get("checks", []) if isinstance(c, dict)]
    return [
        {
            "type": c.get("type", ""),
            "label": check_label(str(c.get("type", ""))),
            "fields": sorted((field_label(k), v) for k, v in c.items() if k != "type"),
        }
        for c in checks
    ]


def _replay_rows(replays: list) -> list[dict]:
    """Each replay (``environments.validation``): which trajectory, what it had to do,
    what it did, and the grader's checks on it."""
    rows = []
    for replay in (r for r in replays or [] if isinstance(r, dict)):
        grader = replay.get("grader") if isinstance(replay.get("grader"), dict) else {}
        checks = [c for c in grader.get("checks", []) if isinstance(c, dict)]
        rows.append(
            {
                "role": replay.get("role", ""),
                "expected_pass": replay.get("expected_pass"),
                "passed": replay.get("passed"),
                "agreed": replay.get("passed") == replay.get("expected_pass"),
                "steps": replay.get("steps_replayed"),
                "duration": format_duration((replay.get("duration_ms") or 0) / 1000),
                "error": replay.get("error") or grader.get("error", ""),
                "checks": [{**c, "label": check_label(str(c.get("type", "")))} for c in checks],
            }
        )
    return rows


@require_GET
def environment_page(request: HttpRequest, environment_id: int) -> HttpResponse:
    try:
        environment = access_environment(request.user, environment_id)
    except Environment.DoesNotExist:
        if request.headers.get("HX-Request") == "true":
            # the page's own re-read (it was shown, then rejected or hidden): say so, and
            # stop it (htmx stops polling on 286), instead of a 404 it would poll forever
            return render(request, "environments/_gone.html", status=HTMX_STOP_POLLING)
        raise Http404("No such environment.") from None
    row = _row(environment, request.user)
    downloadable = environment.status == Environment.Status.VALIDATED
    context = {
        "environment": environment,
        "row": row,
        "instruction": (environment.state or {}).get("instruction", ""),
        "state": environment.state or {},
        "checks": _check_rows(environment.grader),
        "replays": _replay_rows(environment.replays),
        "package_url": reverse("api:environment-package", kwargs={"pk": environment.pk})
        if downloadable
        else None,
        "staff": request.user.is_staff,
        "poll_s": POLL_S,
    }
    return render(request, "environments/detail.html", context)


@require_GET
def environment_latency(request: HttpRequest) -> HttpResponse:
    """The metrics page's block (loaded by htmx): n, p50, p95 of the conversion
    latency of validated environments and the share within their own target."""
    figures = conversion_latency()
    share = figures["within_target"]
    context = {
        "figures": figures,
        "p50": format_duration(figures["p50"]),
        "p95": format_duration(figures["p95"]),
        "within": "—" if share is None else f"{share:.0%}",
    }
    return render(request, "environments/_latency.html", context)

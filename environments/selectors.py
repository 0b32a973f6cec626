"""Reads of training environments (docs/environments.md): which a
user may see, whether an environment's source battle is published, and the conversion
latency (SPEC §8: failed_at → validated_at, target 2 × the run's duration + 5 min).

Visibility: staff see every environment; anyone else (signed in or not) sees the
validated ones whose source battle the open data publishes (``exports.selectors``: a
public arena's battle, decided and rated or excluded, at least ARENA_EXPORT_DELAY_DAYS
ago, its submitter's consent current). A rejected environment is not validated, so it
is never listed publicly."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import BooleanField, ExpressionWrapper, F, Q, QuerySet
from django.utils import timezone

from environments.models import Environment
from exports.selectors import exportable_battles, exportable_exclusions
from ratings.metrics import summary


def published_battles(*, now: datetime | None = None) -> Q:
    """A filter on ``battle_id``: the battles the open data publishes as of ``now``, in
    every public arena. Lazy (subqueries): building it runs no query, so the API's
    schema, generated at import, never touches the database."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.ARENA.export_delay_days)
    rated = exportable_battles(arena_id=None, cutoff=cutoff).values("pk")
    excluded = exportable_exclusions(arena_id=None, cutoff=cutoff).values("pk")
    return Q(battle_id__in=rated) | Q(battle_id__in=excluded)


def _with_publication(environments: QuerySet, now: datetime | None) -> QuerySet:
    published = ExpressionWrapper(published_battles(now=now), output_field=BooleanField())
    return environments.annotate(battle_published=published)


def visible_environments(user, *, now: datetime | None = None) -> QuerySet:
    """The environments ``user`` (possibly anonymous) may see, newest first, each
    annotated with ``battle_published``."""
    environments = _with_publication(Environment.objects.all(), now).order_by("-pk")
    if getattr(user, "is_staff", False):
        return environments
    return environments.filter(status=Environment.Status.VALIDATED, battle_published=True)


def access_environment(user, environment_id: int, *, now: datetime | None = None) -> Environment:
    """The environment if ``user`` may see it; ``Environment.DoesNotExist`` otherwise
    (the caller answers 404, as for one that does not exist)."""
    return visible_environments(user, now=now).get(pk=environment_id)


def downloadable_environment(
    user, environment_id: int, *, now: datetime | None = None
) -> Environment:
    """A visible *validated* environment (its package is only ever served once both
    replays agreed with its grader); ``Environment.DoesNotExist`` otherwise."""
    return (
        visible_environments(user, now=now)
        .filter(status=Environment.Status.VALIDATED)
        .get(pk=environment_id)
    )


def source_battle_id(environment: Environment, user=None) -> int | None:
    """The source battle's id as ``user`` may see it: once published, or for staff;
    None otherwise. ``environment`` must come from ``visible_environments`` (annotated)."""
    if environment.battle_published or getattr(user, "is_staff", False):
        return environment.battle_id
    return None


def environment_battle_published(environment: Environment, *, now: datetime | None = None) -> bool:
    """Whether the open data publishes ``environment``'s source battle (one query)."""
    return Environment.objects.filter(published_battles(now=now), pk=environment.pk).exists()


def environments_on_the_way(*, now: datetime | None = None) -> dict:
    """What a visitor's list does not show yet, as counts (nothing else of them):
    ``building`` (picked, graded or awaiting a grader), ``waiting`` (validated, their
    source battle not published yet), and ``next_at``, the earliest moment one of the
    waiting ones may appear (its battle's decision + ARENA_EXPORT_DELAY_DAYS), None
    when none is due (no consent, or nothing waiting)."""
    now = now or timezone.now()
    building = Environment.objects.filter(
        status__in=[
            Environment.Status.CANDIDATE,
            Environment.Status.GRADED,
            Environment.Status.NEEDS_GRADER,
        ]
    ).count()
    waiting = _with_publication(
        Environment.objects.filter(status=Environment.Status.VALIDATED), now
    ).filter(battle_published=False)
    decided = waiting.filter(battle__decided_at__isnull=False).order_by("battle__decided_at")
    first = decided.values_list("battle__decided_at", flat=True).first()
    next_at = first + timedelta(days=settings.ARENA.export_delay_days) if first else None
    return {
        "building": building,
        "waiting": waiting.count(),
        "next_at": next_at if next_at and next_at > now else None,
    }


def conversion_latency() -> dict:
    """Over validated environments: ``n``, ``p50`` and ``p95`` of ``conversion_s``
    (None when n = 0), and ``within_target``: the share converted within their own
    target, ``conversion_s <= 2 * run_duration_s + 300`` (None when n = 0)."""
    validated = Environment.objects.filter(
        status=Environment.Status.VALIDATED, conversion_s__isnull=False
    )
    values = list(validated.values_list("conversion_s", flat=True))
    figures = summary(values)
    within = validated.filter(conversion_s__lte=2 * F("run_duration_s") + 300).count()
    return {
        "n": len(values),
        "p50": figures["p50"],
        "p95": figures["p95"],
        "within_target": within / len(values) if values else None,
        "within_target_n": within,
    }


def environment_row(environment: Environment, user=None) -> dict:
    """One environment as the list page and the API show it. ``environment`` must come
    from ``visible_environments`` (annotated with ``battle_published``)."""
    conversion_s = environment.conversion_s
    target_s = environment.conversion_target_s
    return {
        "id": environment.pk,
        "failure_mode": environment.failure_mode,
        "failure_mode_label": environment.get_failure_mode_display(),
        "status": environment.status,
        "battle": source_battle_id(environment, user),
        "battle_published": bool(environment.battle_published),
        "validated_at": environment.validated_at,
        "conversion_s": conversion_s,
        "conversion_target_s": target_s,
        "within_target": None if conversion_s is None else conversion_s <= target_s,
    }

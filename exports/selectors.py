"""What the open-data export may publish (docs/open-data.md), read as rows of the tables
of ``exports.schema``.

A battle is exportable when (1) it is decided and rated (``ratings.selectors.rated_battles``:
the refit's own input) or excluded, (2) its task's submitter has accepted the *current*
consent terms (SPEC §2; with no terms published, nobody has consented and nothing is
exportable), and (3) it was decided (or excluded) at least the publication delay ago.
Nothing of any other battle is read. Votes: final and not retracted, on exportable
battles only. Judges appear only as pseudonyms; no user id, name, email, team or
attachment content is ever selected."""

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import (
    BigIntegerField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce, Greatest, Least

from accounts.models import Consent, ConsentTerms
from battles.models import Battle, FollowUp, FollowUpReceipt, Run, Step
from exports.redaction import redact_text
from judging.models import ExclusionLogEntry, Vote, VoteReason
from judging.services.trust import probation_applies
from ratings.models import RefitState
from ratings.selectors import rated_battles
from sandboxes.tools import ASK_USER

Pseudonym = Callable[[int], str]
# Each reason's rule number, in the order the rules apply; the retired no_trajectory keeps
# the third place it had (docs/open-data.md).
EXCLUSION_RULES = {
    reason: i
    for i, reason in enumerate(
        (r for r in Battle.ExclusionReason.values if r not in Battle.RETIRED_EXCLUSIONS), start=1
    )
} | {Battle.ExclusionReason.NO_TRAJECTORY.value: 3}
CHUNK = 2000  # rows fetched per round trip (server-side cursor on PostgreSQL)


def _consented() -> Exists:
    """The task's submitter accepted the newest consent terms."""
    newest = ConsentTerms.objects.order_by("-version").values("pk")[:1]
    return Exists(
        Consent.objects.filter(user_id=OuterRef("task__submitter_id"), terms_id=Subquery(newest))
    )


def exportable_battles(*, arena_id: int | None, cutoff: datetime) -> QuerySet:
    """Rated battles of the arena decided at or before ``cutoff`` whose submitter has
    current consent, in id order (``arena_id`` None: of every public arena). Lazy: no
    query runs until it is read."""
    return (
        rated_battles(arena_id=arena_id).filter(_consented(), decided_at__lte=cutoff).order_by("pk")
    )


def publication_outlook(*, arena_id: int, cutoff: datetime, delay_days: int) -> dict[str, Any]:
    """Why an export may be empty, as counts and a time (nothing else of the battles):
    ``published``, the battles (rated or excluded) an export as of ``cutoff`` holds;
    ``waiting``, those that will be once the delay has passed (their submitter consents);
    ``next_at``, when the first of them is published (its decision or exclusion plus
    ``delay_days``), None when none waits."""
    now = cutoff + timedelta(days=delay_days)
    published = (
        exportable_battles(arena_id=arena_id, cutoff=cutoff).count()
        + exportable_exclusions(arena_id=arena_id, cutoff=cutoff).count()
    )
    rated = exportable_battles(arena_id=arena_id, cutoff=now).filter(decided_at__gt=cutoff)
    excluded = exportable_exclusions(arena_id=arena_id, cutoff=now).filter(excluded_at__gt=cutoff)
    firsts = [
        first
        for first in (
            rated.order_by("decided_at").values_list("decided_at", flat=True).first(),
            excluded.order_by("excluded_at").values_list("excluded_at", flat=True).first(),
        )
        if first is not None
    ]
    return {
        "published": published,
        "waiting": rated.count() + excluded.count(),
        "next_at": min(firsts) + timedelta(days=delay_days) if firsts else None,
    }


def publication_note(outlook: dict[str, Any], *, delay_days: int) -> str:
    """The outlook in a sentence for a person reading an index or a command's output."""
    rule = (
        f"Battles are published {delay_days} day{'s' if delay_days != 1 else ''} after they "
        "are decided (or excluded), if the person who submitted the task agreed to "
        "publication."
    )
    if outlook["published"]:
        return rule
    if outlook["next_at"] is not None:
        return (
            f"Nothing is published yet. {rule} {outlook['waiting']} battle"
            f"{'s' if outlook['waiting'] != 1 else ''} will be; the first on "
            f"{outlook['next_at']:%Y-%m-%d %H:%M} UTC."
        )
    return f"Nothing is published yet: no battle has been decided. {rule}"


def _excluded_at() -> Coalesce:
    last = (
        ExclusionLogEntry.objects.filter(
            battle_id=OuterRef("pk"), action=ExclusionLogEntry.Action.EXCLUDE
        )
        .order_by("-at", "-pk")
        .values("at")[:1]
    )
    return Coalesce(Subquery(last), F("ended_at"), F("submitted_at"))


def exportable_exclusions(*, arena_id: int | None, cutoff: datetime) -> QuerySet:
    """Excluded battles of the arena, excluded at or before ``cutoff``, whose submitter
    has current consent, in id order, annotated with ``excluded_at`` and ``by_operator``
    (``arena_id`` None: of every public arena)."""
    operator = ExclusionLogEntry.objects.filter(
        battle_id=OuterRef("pk"), action=ExclusionLogEntry.Action.EXCLUDE, actor__isnull=False
    ).order_by("-at", "-pk")
    last_by_operator = Subquery(operator.values("at")[:1])
    return (
        Battle.objects.filter(
            Q(arena__team=None, arena__demo=False) if arena_id is None else Q(arena_id=arena_id),
            status=Battle.Status.EXCLUDED,
        )
        .exclude(exclusion_reason="")
        .annotate(excluded_at=_excluded_at(), operator_at=last_by_operator)
        .filter(_consented(), excluded_at__lte=cutoff)
        .order_by("pk")
    )


def _instant(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _published_instruction(row: dict) -> str:
    """The instruction as published: its stored redaction (exports.instructions makes
    them before an export); one still missing is redacted here, never published raw."""
    if row["task__redacted__text"] is not None:
        return row["task__redacted__text"]
    return redact_text(row["task__instruction"]).text


def cluster_numbers(battles: QuerySet) -> dict[int, int]:
    """The refit's number of each cluster of ``battles`` (``ratings.refit``: the deciding
    judge's id, or minus the battle's id without one), as a refit of exactly these
    battles numbers them: in order of first appearance among its rows sorted by (lower
    agent id, higher agent id, cluster key), that is by each cluster's first pair, then
    by key. One row per cluster is read, never one per battle."""
    shift = 1 << 32  # agent ids below 2³²: lo · 2³² + hi orders pairs as (lo, hi) does
    firsts = (
        battles.order_by()
        .annotate(
            c=Coalesce(F("cluster_judge_id"), -F("pk"), output_field=BigIntegerField()),
            pair=ExpressionWrapper(
                Least("agent_a_id", "agent_b_id") * Value(shift)
                + Greatest("agent_a_id", "agent_b_id"),
                output_field=BigIntegerField(),
            ),
        )
        .values("c")
        .annotate(first=Min("pair"))
        .values_list("first", "c")
    )
    return {c: k for k, (_, c) in enumerate(sorted(firsts))}


def battle_rows(
    battles: QuerySet,
    *,
    arena_slug: str,
    pseudonym: Pseudonym,
    clusters: dict[int, int] | None = None,
) -> Iterator[dict]:
    """The battles' rows; ``clusters`` (``cluster_numbers``) the refit's numbering of
    their clusters, computed from ``battles`` when None."""
    if clusters is None:
        clusters = cluster_numbers(battles)
    rows = battles.annotate(attachment_count=Count("task__attachments")).values(
        "pk",
        "task_id",
        "agent_a__slug",
        "agent_b__slug",
        "outcome",
        "evidence_weight",
        "decision_source",
        "is_calibration",
        "redundancy_target",
        "task__category",
        "task__kind",
        "task__instruction",
        "task__redacted__text",
        "task__start_url",
        "attachment_count",
        "submitted_at",
        "ended_at",
        "decided_at",
        "cluster_judge_id",
    )
    for b in rows.iterator(chunk_size=CHUNK):
        judge = b["cluster_judge_id"]
        yield {
            "battle_id": b["pk"],
            "arena": arena_slug,
            "task_id": b["task_id"],
            "agent_a": b["agent_a__slug"],
            "agent_b": b["agent_b__slug"],
            "winner": b["outcome"],
            "weight": 1.0 if b["evidence_weight"] is None else float(b["evidence_weight"]),
            "decision_source": b["decision_source"],
            "calibration": b["is_calibration"],
            "redundancy_target": b["redundancy_target"],
            "category": b["task__category"],
            "task_kind": b["task__kind"],
            "instruction": _published_instruction(b),
            "start_url": b["task__start_url"],
            "attachments": b["attachment_count"],
            "submitted_at": _instant(b["submitted_at"]),
            "ended_at": _instant(b["ended_at"]),
            "decided_at": _instant(b["decided_at"]),
            "judge": None if judge is None else pseudonym(judge),
            "cluster": f"b{b['pk']}" if judge is None else pseudonym(judge),
            "cluster_index": clusters[-b["pk"] if judge is None else judge],
        }


def vote_rows(on_battles: Q, *, now: datetime, pseudonym: Pseudonym) -> Iterator[dict]:
    """Final, not retracted votes on the battles ``on_battles`` selects (a filter on
    ``battle_id``). A retracted vote was undone inside its window before any name showed:
    never a judgment, so never published; a vote still inside its window is not final."""
    votes = (
        Vote.objects.filter(on_battles, retracted=False, final_at__lte=now)
        .order_by("battle_id", "voted_at", "pk")
        .values(
            "battle_id",
            "judge_id",
            "choice",
            "is_submitter",
            "admissible",
            "inadmissible_reason",
            "counted",
            "served_at",
            "voted_at",
            "final_at",
        )
    )
    for v in votes.iterator(chunk_size=CHUNK):
        yield {
            "battle_id": v["battle_id"],
            "judge": pseudonym(v["judge_id"]),
            "choice": v["choice"],
            "is_submitter": v["is_submitter"],
            "admissible": v["admissible"],
            "inadmissible_reason": v["inadmissible_reason"],
            "counted": v["counted"],
            "served_at": _instant(v["served_at"]),
            "voted_at": _instant(v["voted_at"]),
            "final_at": _instant(v["final_at"]),
        }


def vote_reason_rows(on_battles: Q, *, now: datetime, pseudonym: Pseudonym) -> Iterator[dict]:
    """The tags judges gave each side with their votes (``judging.services.reasons``),
    for exactly the votes ``vote_rows`` publishes (final, not retracted, on the battles
    ``on_battles`` selects), one row per vote and side with at least one tag. The
    judges' notes are never selected: free text may hold personal data
    (docs/open-data.md). ``counted``: the set counts in the arena's tallies now
    (``VoteReasonQuerySet.counted``)."""
    counted = VoteReason.objects.counted(now=now, probation_applies=probation_applies())
    vote_filter = Q(
        vote__in=Vote.objects.filter(on_battles, retracted=False, final_at__lte=now).values("pk")
    )
    rows = (
        VoteReason.objects.filter(vote_filter)
        .exclude(tags=[])
        .annotate(is_counted=Exists(counted.filter(pk=OuterRef("pk"))))
        .order_by("vote__battle_id", "vote__voted_at", "vote_id", "side")
        .values(
            "vote__battle_id",
            "vote__judge_id",
            "side",
            "vote__battle__agent_a__slug",
            "vote__battle__agent_b__slug",
            "tags",
            "is_counted",
        )
    )
    codes = VoteReason.Tag.values
    for r in rows.iterator(chunk_size=CHUNK):
        a_side = r["side"] == VoteReason.Side.A
        yield {
            "battle_id": r["vote__battle_id"],
            "judge": pseudonym(r["vote__judge_id"]),
            "side": r["side"],
            "agent": r["vote__battle__agent_a__slug" if a_side else "vote__battle__agent_b__slug"],
            "tags": [code for code in codes if code in r["tags"]],
            "counted": r["is_counted"],
        }


def follow_up_rows(on_battles: Q) -> Iterator[dict]:
    """The follow-ups of the battles ``on_battles`` selects, in battle and send order,
    each with its redaction (``exports.instructions.follow_ups_redact`` makes them
    first; one still missing is redacted here, never published raw) and the step at
    which each side received it."""
    follow_ups = FollowUp.objects.filter(on_battles).order_by("battle_id", "seq")
    receipts = FollowUpReceipt.objects.filter(follow_up__in=follow_ups.values("pk"))
    steps: dict[tuple[int, str], int] = {
        (follow_up, side): step
        for follow_up, side, step in receipts.values_list("follow_up_id", "run__side", "step_index")
    }
    rows = follow_ups.values("pk", "battle_id", "seq", "text", "redacted__text", "created_at")
    for f in rows.iterator(chunk_size=CHUNK):
        text = f["redacted__text"]
        yield {
            "battle_id": f["battle_id"],
            "seq": f["seq"],
            "text": redact_text(f["text"]).text if text is None else text,
            "sent_at": _instant(f["created_at"]),
            "received_at_step_a": steps.get((f["pk"], "A")),
            "received_at_step_b": steps.get((f["pk"], "B")),
        }


def exclusion_rows(exclusions: QuerySet, *, arena_slug: str) -> Iterator[dict]:
    rows = exclusions.values(
        "pk", "agent_a__slug", "agent_b__slug", "exclusion_reason", "excluded_at", "operator_at"
    )
    for e in rows.iterator(chunk_size=CHUNK):
        by_operator = e["operator_at"] is not None and e["operator_at"] == e["excluded_at"]
        yield {
            "battle_id": e["pk"],
            "arena": arena_slug,
            "agent_a": e["agent_a__slug"],
            "agent_b": e["agent_b__slug"],
            "reason": e["exclusion_reason"],
            "rule": EXCLUSION_RULES.get(e["exclusion_reason"], 0),
            "by": "operator" if by_operator else "rule",
            "excluded_at": _instant(e["excluded_at"]),
        }


def published_snapshot_id(*, arena_id: int) -> int | None:
    return (
        RefitState.objects.filter(arena_id=arena_id).values_list("snapshot_id", flat=True).first()
    )


def rating_rows(*, arena_id: int, arena_slug: str) -> Iterator[dict]:
    """The published snapshot's points (the board), best first; none before a refit."""
    from ratings.models import RatingPoint

    snapshot_id = published_snapshot_id(arena_id=arena_id)
    if snapshot_id is None:
        return
    points = (
        RatingPoint.objects.filter(snapshot_id=snapshot_id)
        .select_related("snapshot", "agent")
        .order_by(F("rating").desc(nulls_last=True), "agent__slug")
    )
    # The refit numbers the agents of its fit in the order of their ids (ratings.refit),
    # and writes a point for each of them.
    fit_index = {
        agent: k
        for k, agent in enumerate(
            RatingPoint.objects.filter(snapshot_id=snapshot_id)
            .order_by("agent_id")
            .values_list("agent_id", flat=True)
        )
    }
    r0 = float(settings.ARENA.r0)
    for p in points:
        s = p.snapshot
        yield {
            "arena": arena_slug,
            "snapshot_id": s.pk,
            "computed_at": _instant(s.computed_at),
            "agent": p.agent.slug,
            "agent_name": p.agent.display_name,
            "rating": p.rating,
            "lower": p.lower,
            "upper": p.upper,
            "rank_lower": p.rank_lower,
            "rank_upper": p.rank_upper,
            "provisional": p.provisional,
            "unavailable": p.unavailable,
            "battles": p.battles,
            "weight": float(p.weight),
            "snapshot_battles": s.battles,
            "ridge": float(s.ridge),
            "r0": r0,
            "min_battles": s.min_battles,
            "bootstrap_replicates": s.bootstrap_replicates,
            "interval": s.interval,
            "converged": s.converged,
            "fit_index": fit_index[p.agent_id],
            "seed": s.seed,
            "bootstrap_unit": s.bootstrap_unit,
            "critical_value": float(s.critical_value),
        }


def run_rows(battle_ids: QuerySet) -> Iterator[dict]:
    runs = (
        Run.objects.filter(battle_id__in=battle_ids)
        .annotate(step_count=Count("steps"))
        .order_by("battle_id", "side")
        .values(
            "battle_id",
            "side",
            "agent__slug",
            "end_reason",
            "final_message",
            "step_count",
            "delivered_files",
        )
    )
    for r in runs.iterator(chunk_size=CHUNK):
        files = r["delivered_files"] if isinstance(r["delivered_files"], list) else []
        yield {
            "battle_id": r["battle_id"],
            "side": r["side"],
            "agent": r["agent__slug"],
            "end_reason": r["end_reason"],
            "final_message": r["final_message"],
            "steps": r["step_count"],
            "delivered_files": [_file_entry(f) for f in files],
        }


def _file_entry(entry: Any) -> dict:
    """A delivered file's name and size only (never where it is stored)."""
    if not isinstance(entry, dict):
        return {"name": str(entry), "size": None}
    size = entry.get("size")
    return {"name": str(entry.get("name", "")), "size": size if isinstance(size, int) else None}


def step_rows(battle_ids: QuerySet) -> Iterator[dict]:
    """Steps of the battles' runs in trajectory order, each with ``_screenshot_name``
    (its private storage name, or empty) for the service to read and then drop."""
    steps = (
        Step.objects.filter(run__battle_id__in=battle_ids)
        .order_by("run__battle_id", "run__side", "index")
        .values(
            "run__battle_id",
            "run__side",
            "index",
            "tool",
            "args",
            "result",
            "duration_ms",
            "screenshot",
        )
    )
    for s in steps.iterator(chunk_size=CHUNK):
        yield {
            "battle_id": s["run__battle_id"],
            "side": s["run__side"],
            "index": s["index"],
            "tool": s["tool"],
            "args": s["args"],
            "result": _answer_redacted(s["result"]) if s["tool"] == ASK_USER else s["result"],
            "duration_ms": s["duration_ms"],
            "_screenshot_name": s["screenshot"],
        }


def _answer_redacted(result: object) -> object:
    """An ``ask_user`` step's result with the submitter's answer redacted as instructions
    are (it is their own words, not the agent's): ``stdout`` and ``data.answer``."""
    if not isinstance(result, dict):
        return result
    redacted = dict(result)
    if isinstance(redacted.get("stdout"), str):
        redacted["stdout"] = redact_text(redacted["stdout"]).text
    data = redacted.get("data")
    if isinstance(data, dict) and isinstance(data.get("answer"), str):
        redacted["data"] = {**data, "answer": redact_text(data["answer"]).text}
    return redacted

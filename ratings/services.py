"""Writes for ratings: the streaming update on every decided battle, the board push,
the precomputed board (one document per arena, rebuilt when its version moves)."""

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.template.loader import render_to_string
from django.utils import timezone

from agents.models import PUBLIC_ARENA_SLUG, Agent, Arena
from arena_site.realtime import group_send
from arena_site.redis import queue, redis_client
from battles.models import Battle
from ratings import elo
from ratings.models import AgentRating, Incorporation

LEADERBOARD_GROUP = "leaderboard"

logger = logging.getLogger(__name__)

# Outcome → y from side A's view; both_bad enters as a half like tie (SPEC §7).
OUTCOME_Y = {"A": 1.0, "B": 0.0, "tie": 0.5, "both_bad": 0.5}


def elo_params() -> elo.EloParams:
    arena = settings.ARENA
    return elo.EloParams(k_max=arena.k_max, k_min=arena.k_min, n0=arena.n0)


def agent_rating(agent: Agent, *, lock: bool = False) -> AgentRating:
    rows = AgentRating.objects.select_for_update() if lock else AgentRating.objects
    rating, _ = rows.get_or_create(
        agent=agent, defaults={"arena_id": agent.arena_id, "streaming_rating": settings.ARENA.r0}
    )
    return rating


RATING_FIELDS = ["streaming_rating", "rated_battles", "wins", "losses", "draws", "updated_at"]


def _ratings_locked(*agents: Agent) -> dict[int, AgentRating]:
    """The agents' rating rows, locked in agent-id order (two battles sharing agents
    cannot deadlock), created at R0 when missing. One query when all exist."""
    ids = sorted({agent.pk for agent in agents})
    rows = {
        row.agent_id: row
        for row in AgentRating.objects.select_for_update()
        .filter(agent_id__in=ids)
        .order_by("agent_id")
    }
    if len(rows) < len(ids):
        for agent in sorted({a.pk: a for a in agents}.values(), key=lambda a: a.pk):
            rows[agent.pk] = agent_rating(agent, lock=True)
    return rows


def rating_apply_battle(*, battle: Battle, push: bool = True, record: bool = True) -> None:
    """Moves both agents' streaming ratings by the battle's outcome; after commit the
    board is pushed, unless ``push`` is off (a bulk import pushes once, at its end).
    The deltas are set on ``battle.streaming_applied`` and written to its row, unless
    ``record`` is off (the caller saves the battle with them).
    Precondition: called inside the transaction that decided the battle (row locked)."""
    ratings_apply_battles([battle], push=push)
    if record:
        Battle.objects.filter(pk=battle.pk).update(streaming_applied=battle.streaming_applied)


def ratings_apply_battles(battles: list[Battle], *, push: bool = True) -> None:
    """``rating_apply_battle`` for several decided battles, in the order given (the
    streaming Elo is sequential): every agent's row locked once (agent-id order) and
    written once, however many of the battles it played; the deltas set on each
    battle's ``streaming_applied`` (the caller writes the battle rows). One board
    version bump and one push per arena. Precondition: inside the transaction that
    decided them (their rows locked), after every other lock it takes."""
    if not battles:
        return
    ratings = _ratings_locked(*(agent for b in battles for agent in (b.agent_a, b.agent_b)))
    params = elo_params()
    now = timezone.now()
    for battle in battles:
        y = OUTCOME_Y[battle.outcome]
        ra, rb = ratings[battle.agent_a_id], ratings[battle.agent_b_id]
        before_a, before_b = ra.streaming_rating, rb.streaming_rating
        ra.streaming_rating, rb.streaming_rating = elo.update(
            ra.streaming_rating, rb.streaming_rating, y, ra.rated_battles, rb.rated_battles, params
        )
        # Recorded so a retraction or exclusion can take exactly this back.
        battle.streaming_applied = {
            "a": ra.streaming_rating - before_a,
            "b": rb.streaming_rating - before_b,
            "y": y,
        }
        for row, score in ((ra, y), (rb, 1.0 - y)):
            row.rated_battles += 1
            if score == 1.0:
                row.wins += 1
            elif score == 0.0:
                row.losses += 1
            else:
                row.draws += 1
            row.updated_at = now
    moved = {a.pk: a for b in battles for a in (b.agent_a, b.agent_b)}
    for agent_id in sorted(moved):
        # (one plain UPDATE each: bulk_update's CASE expressions cost more to build here)
        ratings[agent_id].save(update_fields=RATING_FIELDS)
    # r (SPEC §6) is not stamped here: the streaming value is not the published rating.
    # The refit that first includes the battle stamps it (ratings.refit.arena_refit).
    for arena_id in sorted({b.arena_id for b in battles}):
        leaderboard_changed(arena_id=arena_id)  # pushed or not (a bulk import)
        if push:
            streaming_changed(
                arena_id=arena_id,
                ratings=[
                    (agent.slug, ratings[agent_id])
                    for agent_id, agent in sorted(moved.items())
                    if agent.arena_id == arena_id
                ],
            )


def streaming_changed(*, arena_id: int, ratings: list[tuple[str, AgentRating]]) -> None:
    """After commit: the new streaming values of these agents go out at once as a small
    frame (their streaming, votes and record cells, swapped in by id; rendered from the
    rows in hand, no query), and the whole board (order, refit columns, counts) follows
    from the ``ratings`` queue. Pushes requested while one is pending coalesce."""
    cells = [
        {
            "slug": slug,
            "streaming_rating": round(row.streaming_rating, 1),
            "votes": row.rated_battles,
            "wins": row.wins,
            "draws": row.draws,
            "losses": row.losses,
        }
        for slug, row in ratings
    ]

    def send() -> None:
        html = render_to_string("ratings/_streaming_cells.html", {"cells": cells})
        group_send(LEADERBOARD_GROUP, {"type": "leaderboard.update", "html": html})
        leaderboard_push_later(arena_id=arena_id)

    transaction.on_commit(send, robust=True)  # Redis away: the committed vote still stands


# The full board follows a streaming change by this much: a burst of votes costs one
# render, not one per vote, and the render does not compete with the next vote.
FULL_PUSH_DELAY = timedelta(milliseconds=500)


def leaderboard_push_later(*, arena_id: int) -> None:
    """Schedules one full board push for the arena (FULL_PUSH_DELAY from now; the
    worker's scheduler runs it) unless one is already waiting."""
    if redis_client().set(_push_pending_key(arena_id), "1", nx=True, ex=60):
        queue("ratings").enqueue_in(FULL_PUSH_DELAY, "ratings.jobs.leaderboard_push", arena_id)


def _push_pending_key(arena_id: int) -> str:
    return f"{settings.CACHES['default'].get('KEY_PREFIX', 'arena')}:leaderboard-push:{arena_id}"


def leaderboard_push_pending_clear(*, arena_id: int) -> None:
    """Called by the push job before it renders, so a change after this point enqueues
    another push (the last change is never left unrendered)."""
    redis_client().delete(_push_pending_key(arena_id))


def leaderboard_html(*, arena_id: int) -> str:
    """The board fragment every socket frame carries: the rows plus the refit status and
    the exclusion counts, swapped in by id (htmx out-of-band)."""
    from ratings.selectors import board_context

    return render_to_string(
        "ratings/_leaderboard_frame.html", board_context(leaderboard_current(arena_id=arena_id))
    )


def leaderboard_push(*, arena_id: int) -> None:
    # The socket relays the public board (ratings.consumers) and no other: neither the
    # demo board's rows (simulated votes, docs/leaderboard.md) nor a team's own arena's
    # (private to it) may reach it.
    if not Arena.objects.filter(pk=arena_id, slug=PUBLIC_ARENA_SLUG).exists():
        return
    html = leaderboard_html(arena_id=arena_id)
    group_send(LEADERBOARD_GROUP, {"type": "leaderboard.update", "html": html})


def leaderboard_served(*, arena_id: int) -> int:
    """Stamps ℓ (SPEC §6) on the battles whose rating the board now reflects for the
    first time: called whenever a page, the API or the socket serves the board. A board
    reflects every committed refit run, so ℓ goes on each run (``Incorporation``) not
    served yet, for all its battles at once: a handful of rows, never a battle row.
    Returns how many runs it stamped."""
    return Incorporation.objects.filter(arena_id=arena_id, leaderboard_served_at=None).update(
        leaderboard_served_at=timezone.now()
    )


def rating_revert_battle(*, battle: Battle) -> None:
    """Takes back what ``rating_apply_battle`` did for this battle (its deciding vote was
    retracted, or it was excluded after being decided): both ratings move back by the
    recorded deltas, and the counts and record lose the battle. Nothing recorded,
    nothing done. Precondition: inside the transaction that reopens the battle (row
    locked). Later battles keep the updates they got meanwhile (streaming Elo)."""
    applied = battle.streaming_applied
    if not applied:
        return
    ratings = _ratings_locked(battle.agent_a, battle.agent_b)
    sides = (
        (ratings[battle.agent_a_id], applied["a"], applied["y"]),
        (ratings[battle.agent_b_id], applied["b"], 1.0 - applied["y"]),
    )
    for row, delta, score in sides:
        row.streaming_rating -= delta
        row.rated_battles = max(0, row.rated_battles - 1)
        if score == 1.0:
            row.wins = max(0, row.wins - 1)
        elif score == 0.0:
            row.losses = max(0, row.losses - 1)
        else:
            row.draws = max(0, row.draws - 1)
        row.updated_at = timezone.now()
        row.save(update_fields=RATING_FIELDS)
    battle.streaming_applied = None
    Battle.objects.filter(pk=battle.pk).update(streaming_applied=None)
    leaderboard_changed(arena_id=battle.arena_id)
    streaming_changed(
        arena_id=battle.arena_id,
        ratings=[(battle.agent_a.slug, sides[0][0]), (battle.agent_b.slug, sides[1][0])],
    )


# --- The precomputed board -------------------------------------------------------------
#
# What the API, the page and every socket frame show is one document per arena, built
# once per version and kept in the cache. The version is a random token in the cache:
# every writer of an input of the board (streaming values, exclusions and re-admissions,
# a refit run, the roster) calls ``leaderboard_changed`` in its transaction, and the
# token changes when that transaction commits, before the writer returns. A read takes
# the token, then the document stored under it, and builds it when there is none: a
# document built from older rows is stored under a token nobody asks for any more.
# The board is public (no team, no task, no battle; no viewer-dependent cell), so the
# only key is the arena; a private arena's board is a different document.

# A document outlives its version by at most this long (a bump lost to a Redis outage
# is bounded by it; a rebuild costs a handful of queries).
BOARD_DOCUMENT_TTL_S = 60


def _board_version_key(arena_id: int) -> str:
    return f"leaderboard-version:{arena_id}"


def _board_document_key(arena_id: int, version: str) -> str:
    return f"leaderboard-document:{arena_id}:{version}"


def leaderboard_changed(*, arena_id: int) -> None:
    """The one door for every writer of what the board shows: after the current
    transaction commits (at once outside one) the arena's board version moves, so the
    next read builds the board afresh. Redis away: logged; the committed write stands,
    and the document it leaves behind expires within BOARD_DOCUMENT_TTL_S."""
    transaction.on_commit(lambda: _board_version_bump(arena_id), robust=True)


def _board_version_bump(arena_id: int) -> None:
    cache.set(_board_version_key(arena_id), uuid.uuid4().hex, timeout=None)


def leaderboard_current(*, arena_id: int, now=None) -> dict[str, Any]:
    """The arena's published board as ``ratings.selectors.leaderboard`` returns it: the
    stored document of the current version, else built now (stamping ℓ, SPEC §6, on
    the battles it shows for the first time: only a build can show one; stored only
    when built outside a transaction). The staleness age is computed at each read from
    the stored oldest pending time. Without the cache (Redis away) the board is built
    on every read."""
    from ratings.selectors import leaderboard, leaderboard_aged

    try:
        version = cache.get(_board_version_key(arena_id))
        if version is None:
            version = uuid.uuid4().hex
            if not cache.add(_board_version_key(arena_id), version, timeout=None):
                version = cache.get(_board_version_key(arena_id)) or version
        document = cache.get(_board_document_key(arena_id, version))
    except Exception:  # any cache failure: serve from the database
        logger.warning("leaderboard cache unavailable; building the board", exc_info=True)
        version = document = None
    if document is None:
        leaderboard_served(arena_id=arena_id)
        document = leaderboard(arena_id=arena_id)
        # Built inside a transaction, the board may show rows that never commit: it is
        # served, not stored.
        if version is not None and not transaction.get_connection().in_atomic_block:
            try:
                cache.set(_board_document_key(arena_id, version), document, BOARD_DOCUMENT_TTL_S)
            except Exception:
                logger.warning("leaderboard document not stored", exc_info=True)
    return leaderboard_aged(document, now=now)


@receiver(post_save, sender=Agent, dispatch_uid="ratings-board-roster-saved")
@receiver(post_delete, sender=Agent, dispatch_uid="ratings-board-roster-deleted")
def _roster_changed(sender, instance: Agent, **kwargs) -> None:
    """The roster is written in many places (admin, builtins, imports, factories): any
    saved or deleted agent moves its arena's board version."""
    leaderboard_changed(arena_id=instance.arena_id)

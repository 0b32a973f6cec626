"""A refit whose fit did not converge is never shown as a sound one: the board page (and
the fragment its socket pushes), the board API, a category's board and the metrics page
and API all say so; a converged refit shows no warning.

The published snapshots come from the real refit; a fit that stops at its iteration cap
does not happen on these battles, so the snapshot that did not converge is a row written
as the refit writes one (its points copied from the real snapshot)."""

import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from agents.models import Arena
from ratings import category_boards
from ratings.category_boards import category_board, category_boards_refresh
from ratings.models import RatingPoint, RatingSnapshot, RefitState
from ratings.refit import arena_refit
from ratings.services import leaderboard_html
from tests.ratings.factories import judges, round_robin

WARNING = 'id="refit-not-converged"'


@pytest.fixture(autouse=True)
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=20)


@pytest.fixture
def refitted(alice, roster, rng) -> RatingSnapshot:
    """Given 48 rated battles between the three built-ins and the real refit over them."""
    round_robin(alice, roster, judges(3), rounds=16, rng=rng)
    snapshot = arena_refit(arena_id=Arena.objects.public().pk).snapshot
    assert snapshot is not None and snapshot.converged is True and snapshot.iterations > 0
    return snapshot


def snapshot_like(
    source: RatingSnapshot, *, ago: timedelta, converged: bool, iterations: int, publish: bool
) -> RatingSnapshot:
    """A snapshot as the refit writes one, computed ``ago``, with ``source``'s points;
    ``publish``: the arena's published snapshot from now on."""
    snapshot = RatingSnapshot.objects.get(pk=source.pk)
    snapshot.pk = None
    snapshot.computed_at = timezone.now() - ago
    snapshot.converged = converged
    snapshot.iterations = iterations
    snapshot.save()
    points = list(RatingPoint.objects.filter(snapshot=source))
    for point in points:
        point.pk = None
        point.snapshot = snapshot
    RatingPoint.objects.bulk_create(points)
    if publish:
        RefitState.objects.filter(arena_id=source.arena_id).update(snapshot=snapshot)
    return snapshot


def page(path: str = "/", **params) -> str:
    response = Client().get(path, params)
    assert response.status_code == 200, response.content
    return response.content.decode()


def api(path: str, **params) -> dict:
    response = Client().get(path, params)
    assert response.status_code == 200, response.content
    return response.json()


def warning_text(html: str) -> str:
    match = re.search(r'<p id="refit-not-converged"[^>]*>(.*?)</p>', html, flags=re.DOTALL)
    assert match, "no convergence warning"
    return re.sub(r"<[^>]+>", "", match.group(1))


def test_a_converged_refit_shows_no_warning_anywhere(refitted):
    board = page()
    assert "Bradley–Terry refit of 48 rated battles" in board
    assert WARNING not in board and "did not converge" not in board
    assert WARNING not in leaderboard_html(arena_id=refitted.arena_id)

    refit = api("/api/leaderboard/")["refit"]
    assert refit["snapshot_id"] == refitted.pk
    assert (refit["converged"], refit["iterations"]) == (True, refitted.iterations)

    metrics = api("/api/metrics/")["refit"]
    assert metrics == {
        "latest_at": refitted.computed_at.isoformat(),
        "converged": True,
        "iterations": refitted.iterations,
        "window_days": 7,
        "snapshots": 1,
        "not_converged": 0,
        "problem": False,
    }
    tile = page("/metrics/").split('id="refit-convergence"')[1].split("</div></div>")[0]
    assert '<span class="ok">converged</span>' in tile
    assert f"{refitted.iterations} iterations" in tile
    assert '<span id="refit-not-converged-count">0 of 1</span> snapshot in 7 days' in tile
    assert "error" not in tile


def test_a_published_refit_that_did_not_converge_is_flagged_everywhere(refitted):
    # Given, besides the real refit: one that did not converge 8 days ago (outside the
    # week), one 3 days ago, and the published one now, stopped at 100 iterations
    snapshot_like(refitted, ago=timedelta(days=8), converged=False, iterations=100, publish=False)
    snapshot_like(refitted, ago=timedelta(days=3), converged=False, iterations=100, publish=False)
    latest = snapshot_like(
        refitted, ago=timedelta(seconds=0), converged=False, iterations=100, publish=True
    )
    RatingSnapshot.objects.filter(pk=refitted.pk).update(
        computed_at=timezone.now() - timedelta(hours=1)
    )

    board = page()
    text = warning_text(board)
    assert "The latest refit did not converge" in text
    assert "stopped after 100 iterations" in text and "may be off" in text
    assert "Operators have been alerted" in text
    # the ratings stay on the board, with the warning above them
    assert re.search(r'<span class="value">\d+</span>', board)
    # the fragment every socket push carries has it too
    assert "stopped after 100 iterations" in warning_text(
        leaderboard_html(arena_id=refitted.arena_id)
    )

    refit = api("/api/leaderboard/")["refit"]
    assert refit["snapshot_id"] == latest.pk
    assert (refit["converged"], refit["iterations"]) == (False, 100)

    metrics = api("/api/metrics/")["refit"]
    assert metrics["latest_at"] == latest.computed_at.isoformat()
    assert (metrics["converged"], metrics["iterations"], metrics["problem"]) == (False, 100, True)
    assert (metrics["snapshots"], metrics["not_converged"]) == (3, 2)  # 8 days ago is out
    tile = page("/metrics/").split('id="refit-convergence"')[1].split("</div></div>")[0]
    assert '<span class="error">did not converge</span>' in tile
    assert "100 iterations" in tile and "the published board may be off" in tile
    assert '<span id="refit-not-converged-count" class="error">2 of 3</span>' in tile


def test_a_newer_converged_refit_clears_the_warning_but_not_the_weeks_count(refitted):
    snapshot_like(refitted, ago=timedelta(days=1), converged=False, iterations=100, publish=True)
    assert WARNING in page()
    RatingSnapshot.objects.filter(pk=refitted.pk).update(computed_at=timezone.now())
    RefitState.objects.filter(arena_id=refitted.arena_id).update(snapshot=refitted)

    assert WARNING not in page()
    assert api("/api/leaderboard/")["refit"]["converged"] is True
    metrics = api("/api/metrics/")["refit"]
    assert (metrics["converged"], metrics["problem"]) == (True, False)
    assert (metrics["snapshots"], metrics["not_converged"]) == (2, 1)
    tile = page("/metrics/").split('id="refit-convergence"')[1].split("</div></div>")[0]
    assert '<span class="ok">converged</span>' in tile
    assert '<span id="refit-not-converged-count" class="error">1 of 2</span>' in tile


def test_an_arena_without_a_refit_has_no_warning_and_null_convergence(roster):
    assert WARNING not in page()
    refit = api("/api/leaderboard/")["refit"]
    assert refit["snapshot_id"] is None
    assert (refit["converged"], refit["iterations"]) == (None, None)
    metrics = api("/api/metrics/")["refit"]
    assert metrics["latest_at"] is None and metrics["converged"] is None
    assert (metrics["snapshots"], metrics["not_converged"], metrics["problem"]) == (0, 0, False)
    tile = page("/metrics/").split('id="refit-convergence"')[1].split("</div></div>")[0]
    assert "no snapshot yet" in tile and "error" not in tile


def test_a_category_board_keeps_its_fits_convergence_and_shows_a_failed_one(refitted):
    arena_id = refitted.arena_id
    category_boards_refresh(arena_id=arena_id)
    document = category_board(arena_id=arena_id, category="general")
    assert document["enough"] is True
    assert document["converged"] is True and document["iterations"] > 0
    body = api("/api/leaderboard/", category="general")
    assert (body["category"]["converged"], body["category"]["iterations"]) == (
        True,
        document["iterations"],
    )
    assert WARNING not in page(category="general")

    # Given the stored board of a fit that stopped at its cap (the document the refit
    # job keeps, with the flag as such a fit leaves it)
    cache.set(
        category_boards._key(arena_id, "general"),
        {**document, "converged": False, "iterations": 100},
        timeout=300,
    )
    text = warning_text(page(category="general"))
    assert "did not converge" in text and "stopped after 100 iterations" in text
    body = api("/api/leaderboard/", category="general")
    assert (body["category"]["converged"], body["category"]["iterations"]) == (False, 100)
    # the overall board's own refit converged: no warning there
    assert WARNING not in page()


def test_a_category_with_too_few_battles_has_no_fit_and_no_warning(refitted):
    category_boards_refresh(arena_id=refitted.arena_id)
    body = api("/api/leaderboard/", category="browsing")
    assert body["category"]["enough"] is False
    assert (body["category"]["converged"], body["category"]["iterations"]) == (None, None)
    assert WARNING not in page(category="browsing")


def test_a_board_stored_before_the_flag_existed_still_serves(refitted):
    # A category document stored by the previous release has no convergence keys.
    arena_id = refitted.arena_id
    category_boards_refresh(arena_id=arena_id)
    document = category_board(arena_id=arena_id, category="general")
    old = {k: v for k, v in document.items() if k not in ("converged", "iterations")}
    cache.set(category_boards._key(arena_id, "general"), old, timeout=300)
    body = api("/api/leaderboard/", category="general")
    assert (body["category"]["converged"], body["category"]["iterations"]) == (None, None)
    assert WARNING not in page(category="general")

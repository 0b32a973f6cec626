"""What a set of judged games says (003 "Coverage", "Judging", "Ratings"): coverage
counted in games, the orientation agreement, per-candidate statistics and the ratings
with their bootstrap metadata, as the run record states them. Pure: no ORM.

A game is resolved ("A", "B" or "tie" from its first candidate's view, with whether
the two orientations agreed) or failed for good (never a draw). Seeded-fallback
advances are not games and never reach this module.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from ratings.task_bootstrap import LEVEL, METHOD, METHOD_NAME, METHOD_SENTENCE, rate_games

Y = {"A": 1.0, "B": 0.0, "tie": 0.5}


@dataclass(frozen=True)
class GameResult:
    task_id: str
    a: str
    b: str
    game: int = 1
    winner: str | None = None  # "A", "B", "tie"; None: failed
    agreement: bool | None = None
    failure: str = ""
    epoch: int | None = None  # with epochs, whose replies it judged; its cluster is the task

    @property
    def resolved(self) -> bool:
        return self.winner is not None


def coverage(games: Sequence[GameResult], *, expected: int | None = None) -> dict:
    """expected/resolved/failed games, and ``complete``. ``expected`` is the number of
    games submitted to the judge when the caller counts it apart (a tournament's
    schedule); a mismatch with resolved + failed is reported, not rewritten."""
    resolved = sum(1 for g in games if g.resolved)
    failed = len(games) - resolved
    expected = len(games) if expected is None else expected
    out = {
        "expected_pairs": expected,
        "resolved_pairs": resolved,
        "failed_pairs": failed,
        "complete": resolved == expected and failed == 0,
    }
    if resolved + failed != expected:
        out["coverage_error"] = f"{resolved} resolved + {failed} failed games ≠ {expected} expected"
    return out


def orientation_agreement(games: Sequence[GameResult]) -> dict:
    """Each resolved game counted once; the rate is agreeing / resolved (0.0 if none)."""
    resolved = [g for g in games if g.resolved]
    agreeing = sum(1 for g in resolved if g.agreement)
    return {
        "resolved_pairs": len(resolved),
        "orientation_agreeing_pairs": agreeing,
        "orientation_disagreeing_pairs": len(resolved) - agreeing,
        "agreement_rate": agreeing / len(resolved) if resolved else 0.0,
    }


def statistics(games: Sequence[GameResult], candidates: Sequence[str]) -> list[dict]:
    """Per candidate, ordered by id: wins, losses, draws among its resolved games, and
    its agreement/disagreement counts (a game counts for both of its candidates)."""
    rows = {
        c: {"model": c, "wins": 0, "losses": 0, "draws": 0, "agreement_count": 0,
            "disagreement_count": 0}
        for c in candidates
    }  # fmt: skip
    for g in games:
        if not g.resolved:
            continue
        for me, side in ((g.a, "A"), (g.b, "B")):
            row = rows[me]
            if g.winner == "tie":
                row["draws"] += 1
            elif g.winner == side:
                row["wins"] += 1
            else:
                row["losses"] += 1
            row["agreement_count" if g.agreement else "disagreement_count"] += 1
    return [rows[c] for c in sorted(rows)]


def interval_method() -> dict:
    """Which method makes the bounds, in the record's words (``run.interval``)."""
    return {"method": METHOD, "name": METHOD_NAME, "description": METHOD_SENTENCE, "level": LEVEL}


def ratings(
    games: Sequence[GameResult],
    candidates: Sequence[str],
    *,
    seed: int = 0,
    replicates: int = 1000,
) -> tuple[list[dict], dict]:
    """(one rating row per requested candidate ordered by id, the interval's metadata
    for ``run``) from the resolved games; tasks are the clusters. The metadata keep
    003's bootstrap fields (the resampling of whole tasks is the bounds' check) and,
    once every candidate is rated on two tasks or more, ``interval``: the method that
    makes the bounds with its settings (``interval_method``)."""
    index = {c: k for k, c in enumerate(candidates)}
    resolved = [g for g in games if g.resolved]
    tasks = {t: k for k, t in enumerate(dict.fromkeys(g.task_id for g in resolved))}
    fitted = rate_games(
        [index[g.a] for g in resolved],
        [index[g.b] for g in resolved],
        [Y[g.winner] for g in resolved],
        [tasks[g.task_id] for g in resolved],
        n_candidates=len(candidates),
        replicates=replicates,
        seed=seed,
    )
    rows = []
    for c in sorted(candidates):
        estimate = fitted.candidates[index[c]]
        row: dict = {"model": c, "rating": estimate.rating}
        if estimate.lower is not None:
            row["rating_lower"], row["rating_upper"] = estimate.lower, estimate.upper
        if estimate.rating is None:
            row["unavailable"] = estimate.unavailable
        rows.append(row)
    meta: dict = {
        "bootstrap_seed": seed,
        "bootstrap_replicates": replicates,
        "bootstrap_clusters": fitted.clusters,
        "bootstrap_ran": fitted.ran,
    }
    if fitted.ran:
        meta["bootstrap_valid"] = fitted.valid
    if fitted.unavailable:
        meta["bootstrap_unavailable"] = fitted.unavailable
    if fitted.effective_clusters is not None:
        meta["interval"] = {
            **interval_method(),
            "clusters": fitted.clusters,
            "effective_clusters": fitted.effective_clusters,
            "degrees_of_freedom": fitted.degrees_of_freedom,
        }
        if fitted.critical_value is not None:
            meta["interval"]["critical_value"] = fitted.critical_value
    return rows, meta

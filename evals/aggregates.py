"""Aggregates over scored runs ("000" §4): weighted scores, win rates, bootstrap intervals;
and pass@k over repeated runs of repo tasks.

Pure functions over plain numbers, so the report pages and the command line compute the
same figures, and the bootstrap reproduces the reference's numbers draw for draw.
"""

import math
import random
from collections.abc import Iterable, Mapping, Sequence

from coding.metrics import pass_at_k

TIE_TOLERANCE = 1e-9


def weighted_score(judgements: Sequence[tuple[float, int, float]]) -> float:
    """Σ weight·(score/scale) / Σ weight over a run's criterion judgements, in [0, 1].

    Each judgement is ``(score, scale, weight)``. Scores must lie in ``0..scale``, scales be
    positive and weights non-negative with a positive total, so the result is a proper
    weighted mean of fractions in [0, 1] (floating-point rounding is monotone, so the
    numerator never exceeds the denominator and the result never exceeds 1).
    """
    if not judgements:
        raise ValueError("weighted_score needs at least one judgement, got none")
    numerator = 0.0
    denominator = 0.0
    for index, (score, scale, weight) in enumerate(judgements):
        if not all(math.isfinite(x) for x in (score, scale, weight)):
            raise ValueError(f"judgement {index} has a non-finite number: {(score, scale, weight)}")
        if scale <= 0:
            raise ValueError(f"judgement {index} has scale {scale}; a scale must be positive")
        if not 0 <= score <= scale:
            raise ValueError(f"judgement {index} has score {score} outside 0..{scale}")
        if weight < 0:
            raise ValueError(f"judgement {index} has negative weight {weight}")
        numerator += weight * (score / scale)
        denominator += weight
    if denominator <= 0:
        raise ValueError("the judgements' weights sum to zero; give some criterion a weight")
    return numerator / denominator


def _rate(wins: int, ties: int, total: int) -> float:
    """(wins + 0.5·ties) / total, as the reference writes it.

    The numerator is exact (a half-integer) and the division is correctly rounded, so a's
    rate and b's are the roundings of p and 1 − p; two such roundings always add to exactly
    1.0 in binary64 with round-half-even, hence no "1 − rate" patch-up is needed.
    """
    return (wins + 0.5 * ties) / total


def win_rates(
    per_task: Mapping[str, Mapping[str, float]], agents: Sequence[str]
) -> dict[str, dict[str, float | None]]:
    """Every ordered pair's win rate: ``result[a][b]`` is a's win rate against b.

    ``per_task[task_id][agent]`` is the agent's weighted score on the task (a missing agent or
    ``None`` means no score). a wins a task against b if its score is higher by more than
    ``TIE_TOLERANCE``; scores within it (``|a − b| <= 1e-9``) are a tie, half to each side.
    The rate is (wins + 0.5·ties) / the tasks both have scores for; ``None`` when there is no
    such task. An agent against itself is always 0.5. ``result[a][b] + result[b][a]`` is
    exactly 1.0 whenever both are defined.
    """
    rates: dict[str, dict[str, float | None]] = {a: {} for a in agents}
    for i, a in enumerate(agents):
        rates[a][a] = 0.5
        for b in agents[i + 1 :]:
            if b == a:
                continue
            wins = ties = losses = 0
            for scores in per_task.values():
                sa, sb = scores.get(a), scores.get(b)
                if sa is None or sb is None:
                    continue
                if abs(sa - sb) <= TIE_TOLERANCE:
                    ties += 1
                elif sa > sb:
                    wins += 1
                else:
                    losses += 1
            if wins + ties + losses == 0:
                rates[a][b] = rates[b][a] = None
            else:
                total = wins + ties + losses
                rates[a][b] = _rate(wins, ties, total)
                rates[b][a] = _rate(losses, ties, total)
    return rates


def _bootstrap_ci(values, n_iter=1000, alpha=0.05, seed=42):
    # The reference algorithm verbatim (same draws, same indices): do not "improve" it, the
    # published intervals are checked against it number for number.
    rng = random.Random(seed)  # noqa: S311 - resampling, not secrecy
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(n_iter))
    return means[int(alpha / 2 * n_iter)], means[int((1 - alpha / 2) * n_iter) - 1]


def bootstrap_ci(
    values: Sequence[float], *, n_iter: int = 1000, alpha: float = 0.05, seed: int = 42
) -> tuple[float, float]:
    """The (lower, upper) percentile bootstrap interval of the mean of ``values``.

    Exactly the reference algorithm: ``n_iter`` resamples with replacement from
    ``random.Random(seed)``, their means sorted, the ``int(alpha/2·n_iter)``-th and the
    ``int((1 − alpha/2)·n_iter) − 1``-th taken. One value gives (v, v).
    """
    if not values:
        raise ValueError("bootstrap_ci needs at least one value, got none")
    if isinstance(n_iter, bool) or not isinstance(n_iter, int) or n_iter < 1:
        raise ValueError(f"n_iter must be a positive integer, got {n_iter!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    lower, upper = _bootstrap_ci(list(values), n_iter=n_iter, alpha=alpha, seed=seed)
    return float(lower), float(upper)


def criterion_means(rows: Iterable[tuple[str, str, float]]) -> dict[str, dict[str, dict]]:
    """Per agent and criterion: the mean score, its bootstrap interval and the count.

    ``rows`` are ``(agent, criterion, score)``; the result is
    ``{agent: {criterion: {"mean": m, "lower": lo, "upper": hi, "n": k}}}`` with agents and
    criteria in order of first appearance and the interval from ``bootstrap_ci``'s defaults.
    """
    grouped: dict[str, dict[str, list[float]]] = {}
    for agent, criterion, score in rows:
        grouped.setdefault(agent, {}).setdefault(criterion, []).append(score)
    result: dict[str, dict[str, dict]] = {}
    for agent, criteria in grouped.items():
        result[agent] = {}
        for criterion, scores in criteria.items():
            lower, upper = bootstrap_ci(scores)
            result[agent][criterion] = {
                "mean": sum(scores) / len(scores),
                "lower": lower,
                "upper": upper,
                "n": len(scores),
            }
    return result


def pass_at_ks(replicates: int) -> list[int]:
    """The k reported for ``replicates`` runs of a task: 1 and min(n, 5)."""
    return sorted({1, min(replicates, 5)})


def pass_at_k_table(
    functional: Mapping[str, Sequence[float]], ks: Sequence[int]
) -> dict[str, object]:
    """pass@k of one agent: per task (``functional`` maps a task to its runs' functional
    scores) n runs, c of them correct (functional 1) and the unbiased estimate for each
    k (``coding.metrics.pass_at_k``; None for k > n); and per k the mean over the tasks
    where it is defined (None where it is nowhere)."""
    tasks = []
    for task_id, scores in functional.items():
        n, c = len(scores), sum(1 for s in scores if s == 1.0)
        estimates = {str(k): pass_at_k(n, c, k) if k <= n else None for k in ks}
        tasks.append({"task_id": task_id, "n": n, "c": c, "pass_at_k": estimates})
    mean = {}
    for k in ks:
        values = [t["pass_at_k"][str(k)] for t in tasks if t["pass_at_k"][str(k)] is not None]
        mean[str(k)] = sum(values) / len(values) if values else None
    return {"tasks": tasks, "mean": mean}

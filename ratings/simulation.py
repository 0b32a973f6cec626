"""The interval-narrowing study of SPEC §9 (paper Fig. 3). Pure: numpy, no ORM.

Five agents with known true Elo; each vote picks one of the 10 pairs uniformly (sides
in random order) and draws a binary outcome from the Bradley-Terry model. Every
``every`` votes the batch refit runs on all votes so far (centred on all five agents,
model-based 95% intervals), and the streaming Elo of SPEC §7.1 runs on the same
sequence.
"""

from dataclasses import dataclass

import numpy as np

from ratings import bradley_terry, elo, intervals

TRUE_ELO = (1139.7, 1049.5, 1000.0, 950.0, 860.8)
REPORT_AT = (100, 300, 600)
COVERAGE_DEFINITION = (
    "share of (checkpoint, agent) cells, over every refit checkpoint (every 20 votes) "
    "and all five agents with an interval, whose published 95% interval contains the "
    "agent's true Elo re-centred like the estimate (on the mean of the fitted agents)"
)


@dataclass(frozen=True)
class Checkpoint:
    votes: int
    rating: list[float | None]  # refit, per agent
    lower: list[float | None]
    upper: list[float | None]
    halfwidth: list[float | None]  # model-based
    halfwidth_vs_others: float | None  # agent 0's, centred on the other agents' mean
    streaming: list[float]
    truth: list[float]  # true Elo centred like the refit (R0 + deviation from the mean)
    iterations: int


@dataclass(frozen=True)
class Study:
    seed: int
    true_elo: tuple[float, ...]
    checkpoints: list[Checkpoint]
    streaming_trace: list[list[float]]  # the streaming Elo of every agent after each vote

    def at(self, votes: int) -> Checkpoint:
        return next(c for c in self.checkpoints if c.votes == votes)

    def coverage(self) -> tuple[int, int]:
        """(intervals that contain the truth, intervals) over all checkpoints × agents."""
        covered = total = 0
        for c in self.checkpoints:
            for lo, hi, truth in zip(c.lower, c.upper, c.truth, strict=True):
                if lo is None:
                    continue
                total += 1
                covered += int(lo <= truth <= hi)
        return covered, total


def interval_narrowing(
    seed: int,
    *,
    true_elo: tuple[float, ...] = TRUE_ELO,
    votes: int = 600,
    every: int = 20,
    ridge: float = bradley_terry.RIDGE,
    r0: float = bradley_terry.R0,
    elo_params: elo.EloParams | None = None,
) -> Study:
    """One seeded run of the study; same seed, same numbers."""
    if votes < 1 or every < 1:
        raise ValueError("votes and every must be positive")
    params = elo_params or elo.EloParams()
    rng = np.random.default_rng(seed)
    true = np.asarray(true_elo, dtype=float)
    n = len(true)
    theta = (true - true.mean()) / intervals.ELO_SCALE
    first, second = np.triu_indices(n, 1)
    pick = rng.integers(0, len(first), votes)
    swap = rng.random(votes) < 0.5
    a = np.where(swap, second[pick], first[pick])
    b = np.where(swap, first[pick], second[pick])
    p_a = 1.0 / (1.0 + np.exp(-(theta[a] - theta[b])))
    y = (rng.random(votes) < p_a).astype(float)

    streaming = [r0] * n
    played = [0] * n
    others = np.ones(n, dtype=bool)
    others[0] = False
    checkpoints = []
    trace = []
    for t in range(votes):
        i, j = int(a[t]), int(b[t])
        streaming[i], streaming[j] = elo.update(
            streaming[i], streaming[j], float(y[t]), played[i], played[j], params
        )
        played[i] += 1
        played[j] += 1
        trace.append(list(streaming))
        if (t + 1) % every and t + 1 != votes:
            continue
        k = t + 1
        fit = bradley_terry.rate(a[:k], b[:k], y[:k], n_agents=n, ridge=ridge, r0=r0)
        fitted = np.array([e.rating is not None for e in fit.agents])
        centre = true[fitted].mean() if fitted.any() else true.mean()
        vs_others = bradley_terry.rate(
            a[:k], b[:k], y[:k], n_agents=n, ridge=ridge, r0=r0, reference=others
        ).agents[0]
        checkpoints.append(
            Checkpoint(
                votes=k,
                rating=[e.rating for e in fit.agents],
                lower=[e.lower for e in fit.agents],
                upper=[e.upper for e in fit.agents],
                halfwidth=[e.model_halfwidth for e in fit.agents],
                halfwidth_vs_others=(
                    vs_others.model_halfwidth if fit.reference_agents == n else None
                ),
                streaming=list(streaming),
                truth=[float(v) for v in r0 + true - centre],
                iterations=fit.iterations,
            )
        )
    return Study(
        seed=seed, true_elo=tuple(true_elo), checkpoints=checkpoints, streaming_trace=trace
    )

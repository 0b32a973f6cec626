"""The demo board's simulated judgments (docs/leaderboard.md "The demo board"). Pure:
numpy, no ORM.

A fixed-seed draw from the Bradley-Terry model, the model the board itself fits: each
battle picks one of the agents' pairs uniformly (sides in random order) and one of the
simulated judges uniformly; the judge calls it a tie with probability ``TIE_SHARE``,
otherwise side A wins with probability 1 / (1 + 10^((R_B - R_A) / 400)), R an agent's
true strength in Elo points (``DEMO_STRENGTHS``; ``DEFAULT_STRENGTH`` for an agent not
listed). Same agents, same seed: the same judgments."""

from dataclasses import dataclass

import numpy as np

# True strengths of the built-ins (agents/policies.py BUILTIN_ROSTER): the rule-following
# agent and the surveyor close enough that their rank bands overlap at this many battles,
# the idle baseline clearly last, so the board shows both a tie in rank and a clear gap.
DEMO_STRENGTHS = {"rulebook": 1080.0, "surveyor": 1045.0, "idle": 880.0}
DEFAULT_STRENGTH = 1000.0
DEMO_BATTLES = 360
DEMO_JUDGES = 8
DEMO_SEED = 37
TIE_SHARE = 0.1


@dataclass(frozen=True)
class DemoJudgment:
    a: int  # side A: an index into the agents given
    b: int  # side B
    outcome: str  # "A", "B" or "tie" (battles' Battle.Outcome values)
    judge: int  # an index into the simulated judges


def demo_judgments(
    slugs: list[str],
    *,
    battles: int = DEMO_BATTLES,
    judges: int = DEMO_JUDGES,
    seed: int = DEMO_SEED,
    strengths: dict[str, float] | None = None,
) -> list[DemoJudgment]:
    """``battles`` judgments between the agents named by ``slugs`` (at least two)."""
    if len(slugs) < 2:
        raise ValueError("the demo board needs at least two agents")
    if battles < 1 or judges < 1:
        raise ValueError("battles and judges must be positive")
    table = DEMO_STRENGTHS if strengths is None else strengths
    strength = np.array([table.get(slug, DEFAULT_STRENGTH) for slug in slugs], dtype=float)
    rng = np.random.default_rng(seed)
    first, second = np.triu_indices(len(slugs), 1)
    pick = rng.integers(0, len(first), battles)
    swap = rng.random(battles) < 0.5
    a = np.where(swap, second[pick], first[pick])
    b = np.where(swap, first[pick], second[pick])
    p_a = 1.0 / (1.0 + 10.0 ** ((strength[b] - strength[a]) / 400.0))
    tie = rng.random(battles) < TIE_SHARE
    a_wins = rng.random(battles) < p_a
    judge = rng.integers(0, judges, battles)
    return [
        DemoJudgment(
            a=int(a[i]),
            b=int(b[i]),
            outcome="tie" if tie[i] else ("A" if a_wins[i] else "B"),
            judge=int(judge[i]),
        )
        for i in range(battles)
    ]

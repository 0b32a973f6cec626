"""Who meets whom (SPEC §3). Pure: depends only on the eligible roster, the agents'
exposure (rated battles plus battle lanes they failed themselves), their current
strengths, and a seeded RNG.

1. First agent: P(a) ∝ (n_a + κ)^(-1/2): under-exposed agents are drawn more. n_a is
   the agent's exposure: its rated battles plus the battle lanes that failed through
   its own fault (``Run.agent_fault``). Without the second term an agent whose battles
   always fail would never gain exposure and would be favoured for ever.
2. Opponent b ≠ a: P(b | a) ∝ (n_b + κ)^(-1/2) · (ε + 4 p_ab (1 − p_ab)), with
   p_ab = σ(θ_a − θ_b) (½ when either has no rating): close matches are preferred,
   and ε > 0 keeps every pair possible.
3. Sides A/B: a fair coin.
"""

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

KAPPA = 4.0
EPSILON = 0.05


@dataclass(frozen=True)
class Candidate:
    agent_id: int
    rated_battles: int
    strength: float | None  # θ on the natural-log scale; None when unrated
    failed_lanes: int = 0  # battle lanes that failed through the agent's own fault

    @property
    def exposure(self) -> int:
        """n of the draw: every battle the agent took a slot in and was not rated for
        the arena's reasons only (rated battles, plus the lanes it failed itself)."""
        return self.rated_battles + self.failed_lanes


def exposure_weight(n: int, kappa: float = KAPPA) -> float:
    return (n + kappa) ** -0.5


def win_probability(a: Candidate, b: Candidate) -> float:
    if a.strength is None or b.strength is None:
        return 0.5
    return 1.0 / (1.0 + math.exp(-(a.strength - b.strength)))


def first_probabilities(candidates: Sequence[Candidate], kappa: float = KAPPA) -> list[float]:
    weights = [exposure_weight(c.exposure, kappa) for c in candidates]
    total = sum(weights)
    return [w / total for w in weights]


def opponent_probabilities(
    first: Candidate,
    candidates: Sequence[Candidate],
    kappa: float = KAPPA,
    epsilon: float = EPSILON,
) -> list[float]:
    """P(b | first) for every candidate (0 for ``first`` itself)."""
    weights = []
    for b in candidates:
        if b.agent_id == first.agent_id:
            weights.append(0.0)
            continue
        p = win_probability(first, b)
        weights.append(exposure_weight(b.exposure, kappa) * (epsilon + 4 * p * (1 - p)))
    total = sum(weights)
    return [w / total for w in weights]


def _arrays(pool: Sequence[Candidate]) -> tuple[np.ndarray, np.ndarray]:
    """The pool's exposures and strengths (NaN when unrated: numpy reads None as NaN in
    a float array)."""
    counts = np.array([c.exposure for c in pool], dtype=float)
    strengths = np.array([c.strength for c in pool], dtype=float)
    return counts, strengths


def _pool(candidates: Sequence[Candidate]) -> Sequence[Candidate]:
    """The distinct candidates by agent id (the last of a repeated id wins), in id order,
    so a draw does not depend on the roster's order. A roster already in strictly
    increasing id order (the admission query's) is used as it is."""
    ids = np.array([c.agent_id for c in candidates])
    if len(ids) > 1 and (ids[1:] > ids[:-1]).all():
        return candidates
    unique = {c.agent_id: c for c in candidates}
    return sorted(unique.values(), key=lambda c: c.agent_id)


def _index(rng: random.Random, weights: np.ndarray) -> int:
    """An index drawn with probability ∝ ``weights``: one ``rng.random()`` against the
    cumulative weights, as ``random.choices`` does (the same seed draws the same)."""
    cumulative = np.cumsum(weights)
    index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(index, len(weights) - 1)


def draw_pair(
    candidates: Sequence[Candidate],
    rng: random.Random,
    kappa: float = KAPPA,
    epsilon: float = EPSILON,
) -> tuple[int, int]:
    """Returns (side A, side B) agent ids. Raises ValueError with fewer than two.

    Vectorised over the pool; the probabilities are those of ``first_probabilities`` and
    ``opponent_probabilities`` (tests/battles/test_matchmaking.py compares the draw's
    frequencies with them)."""
    pool = _pool(candidates)
    if len(pool) < 2:
        raise ValueError("matchmaking needs at least two distinct eligible agents")
    counts, strengths = _arrays(pool)
    exposure = (counts + kappa) ** -0.5
    first = _index(rng, exposure)
    with np.errstate(over="ignore"):  # exp overflows to inf: p is then 0, as it should be
        p = 1.0 / (1.0 + np.exp(strengths - strengths[first]))  # σ(θ_first − θ_b)
    p[np.isnan(p)] = 0.5  # either unrated
    weights = exposure * (epsilon + 4.0 * p * (1.0 - p))
    weights[first] = 0.0
    second = _index(rng, weights)
    a, b = pool[first].agent_id, pool[second].agent_id
    return (a, b) if rng.random() < 0.5 else (b, a)


def candidates_from(
    agent_ids: Sequence[int],
    counts: Mapping[int, int],
    strengths: Mapping[int, float | None],
) -> list[Candidate]:
    return [Candidate(a, counts.get(a, 0), strengths.get(a)) for a in agent_ids]

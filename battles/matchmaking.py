"""Who meets whom (SPEC §3). Pure: depends only on the eligible roster, the agents'
rated-battle counts and their current strengths, and a seeded RNG.

1. First agent: P(a) ∝ (n_a + κ)^(-1/2): under-exposed agents are drawn more.
2. Opponent b ≠ a: P(b | a) ∝ (n_b + κ)^(-1/2) · (ε + 4 p_ab (1 − p_ab)), with
   p_ab = σ(θ_a − θ_b) (½ when either has no rating): close matches are preferred,
   and ε > 0 keeps every pair possible.
3. Sides A/B: a fair coin.
"""

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

KAPPA = 4.0
EPSILON = 0.05


@dataclass(frozen=True)
class Candidate:
    agent_id: int
    rated_battles: int
    strength: float | None  # θ on the natural-log scale; None when unrated


def exposure_weight(n: int, kappa: float = KAPPA) -> float:
    return (n + kappa) ** -0.5


def win_probability(a: Candidate, b: Candidate) -> float:
    if a.strength is None or b.strength is None:
        return 0.5
    return 1.0 / (1.0 + math.exp(-(a.strength - b.strength)))


def first_probabilities(candidates: Sequence[Candidate], kappa: float = KAPPA) -> list[float]:
    weights = [exposure_weight(c.rated_battles, kappa) for c in candidates]
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
        weights.append(exposure_weight(b.rated_battles, kappa) * (epsilon + 4 * p * (1 - p)))
    total = sum(weights)
    return [w / total for w in weights]


def _choose(rng: random.Random, items: Sequence[Candidate], probabilities: Sequence[float]):
    return rng.choices(items, weights=probabilities, k=1)[0]


def draw_pair(
    candidates: Sequence[Candidate],
    rng: random.Random,
    kappa: float = KAPPA,
    epsilon: float = EPSILON,
) -> tuple[int, int]:
    """Returns (side A, side B) agent ids. Raises ValueError with fewer than two."""
    unique = {c.agent_id: c for c in candidates}
    if len(unique) < 2:
        raise ValueError("matchmaking needs at least two distinct eligible agents")
    pool = sorted(unique.values(), key=lambda c: c.agent_id)  # order-independent draws
    first = _choose(rng, pool, first_probabilities(pool, kappa))
    second = _choose(rng, pool, opponent_probabilities(first, pool, kappa, epsilon))
    return (
        (first.agent_id, second.agent_id)
        if rng.random() < 0.5
        else (second.agent_id, first.agent_id)
    )


def candidates_from(
    agent_ids: Sequence[int],
    counts: Mapping[int, int],
    strengths: Mapping[int, float | None],
) -> list[Candidate]:
    return [Candidate(a, counts.get(a, 0), strengths.get(a)) for a in agent_ids]

"""The vectorised draw keeps SPEC §3's distribution: the empirical frequencies of the
ordered pairs (side A, side B) over many seeded draws against the intended
probabilities (``first_probabilities`` × ``opponent_probabilities``, sides a fair coin),
by a chi-square bound."""

import random
from collections import Counter

import pytest
from scipy.stats import chi2

from battles.matchmaking import Candidate, draw_pair, first_probabilities, opponent_probabilities

DRAWS = 40_000
# A correct sampler exceeds the bound with probability 0.001 (and the seed is fixed, so
# the outcome is the same on every run).
ALPHA = 0.001


def intended(pool: list[Candidate]) -> dict[tuple[int, int], float]:
    """P(side A = a, side B = b) for every ordered pair of distinct agents."""
    first = first_probabilities(pool)
    pair: dict[tuple[int, int], float] = Counter()
    for i, a in enumerate(pool):
        for j, p in enumerate(opponent_probabilities(a, pool)):
            if j != i:
                b = pool[j].agent_id
                pair[(a.agent_id, b)] += 0.5 * first[i] * p  # a drawn first, put on side A
                pair[(b, a.agent_id)] += 0.5 * first[i] * p  # … or on side B
    return pair


def chi_square(observed: Counter, expected: dict[tuple[int, int], float], n: int) -> float:
    return sum((observed[k] - n * p) ** 2 / (n * p) for k, p in expected.items())


POOLS = {
    "unrated, uneven exposure": [
        Candidate(i, n, None) for i, n in enumerate([0, 3, 10, 40, 200], 1)
    ],
    "rated, close and far": [
        Candidate(i, n, s)
        for i, (n, s) in enumerate(
            [(5, 0.0), (5, 0.2), (50, -1.5), (8, 3.0), (0, None), (120, 0.1)], 1
        )
    ],
    "out of id order, a repeated id": [
        Candidate(7, 2, 0.5),
        Candidate(3, 9, -0.5),
        Candidate(5, 1, None),
        Candidate(3, 9, -0.5),
    ],
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pair_frequencies_match_the_intended_distribution(name):
    pool = POOLS[name]
    unique = sorted({c.agent_id: c for c in pool}.values(), key=lambda c: c.agent_id)
    expected = intended(unique)
    rng = random.Random(20261201)
    observed = Counter(draw_pair(pool, rng) for _ in range(DRAWS))

    assert set(observed) <= set(expected)  # never an agent against itself
    statistic = chi_square(observed, expected, DRAWS)
    assert statistic < chi2.ppf(1 - ALPHA, df=len(expected) - 1)


def test_the_bound_rejects_a_sampler_that_ignores_closeness():
    """The bound has power: the same draws judged against a distribution without the
    closeness term (opponent ∝ exposure only) fail it."""
    pool = POOLS["rated, close and far"]
    rng = random.Random(20261201)
    observed = Counter(draw_pair(pool, rng) for _ in range(DRAWS))
    no_closeness = intended([Candidate(c.agent_id, c.rated_battles, None) for c in pool])

    statistic = chi_square(observed, no_closeness, DRAWS)
    assert statistic > chi2.ppf(1 - ALPHA, df=len(no_closeness) - 1)

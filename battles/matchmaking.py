"""Who meets whom. Pure: depends only on the eligible roster and a seeded RNG.

The skeleton draws a uniform pair of distinct agents; SPEC §3's exposure- and
closeness-weighted sampler replaces it behind the same signature."""

import random
from collections.abc import Sequence


def draw_pair(agent_ids: Sequence[int], rng: random.Random) -> tuple[int, int]:
    """Returns (side A, side B): two distinct agents, each pair equally likely, order
    a fair coin."""
    if len(set(agent_ids)) < 2:
        raise ValueError("matchmaking needs at least two distinct eligible agents")
    a, b = rng.sample(sorted(set(agent_ids)), 2)
    return a, b

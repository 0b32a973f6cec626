"""SPEC §3 properties of the sampler, exact with a seeded RNG."""

import math
import random
from collections import Counter

import pytest

from battles.matchmaking import (
    Candidate,
    draw_pair,
    first_probabilities,
    opponent_probabilities,
)


def pool_of(counts, strengths=None):
    strengths = strengths or [None] * len(counts)
    return [Candidate(i + 1, n, s) for i, (n, s) in enumerate(zip(counts, strengths, strict=True))]


@pytest.mark.parametrize(
    ("counts", "strengths"),
    [
        ([0, 0, 0], None),
        ([1000, 0, 5], None),
        ([50, 50, 50, 50], [10.0, -10.0, 0.0, 3.0]),  # wildly uneven strengths
        ([10**6, 10**6], [40.0, -40.0]),
    ],
)
def test_every_eligible_agent_and_pair_keeps_positive_probability(counts, strengths):
    pool = pool_of(counts, strengths)
    assert all(p > 0 for p in first_probabilities(pool))
    for first in pool:
        others = opponent_probabilities(first, pool)
        assert others[pool.index(first)] == 0
        assert all(p > 0 for i, p in enumerate(others) if pool[i] is not first)
        assert math.isclose(sum(others), 1.0)


def test_first_draw_probability_follows_inverse_square_root_exposure():
    pool = pool_of([0, 12, 60])
    probabilities = first_probabilities(pool)
    weights = [(n + 4) ** -0.5 for n in (0, 12, 60)]
    assert probabilities == pytest.approx([w / sum(weights) for w in weights])
    assert probabilities[0] > probabilities[1] > probabilities[2]


def test_close_opponents_are_preferred():
    pool = pool_of([10, 10, 10], [0.0, 0.1, 3.0])
    probabilities = opponent_probabilities(pool[0], pool)
    assert probabilities[1] > probabilities[2] > 0


def test_under_exposed_agents_are_drawn_more():
    pool = pool_of([0, 100, 100, 100])
    rng = random.Random(1)
    counts = Counter(a for _ in range(4000) for a in draw_pair(pool, rng))
    assert counts[1] > max(counts[2], counts[3], counts[4]) * 1.5


def test_exposure_converges_toward_equal_in_simulation():
    # Start very unequal, feed each draw back into the counts: 10,000 draws.
    counts = {1: 500, 2: 0, 3: 0, 4: 0, 5: 0}
    rng = random.Random(11)
    for _ in range(10_000):
        a, b = draw_pair([Candidate(i, n, None) for i, n in counts.items()], rng)
        counts[a] += 1
        counts[b] += 1
    spread = max(counts.values()) - min(counts.values())
    assert spread < 0.1 * (sum(counts.values()) / len(counts))


def test_sides_are_a_fair_coin():
    pool = pool_of([0, 0])
    rng = random.Random(5)
    firsts = Counter(draw_pair(pool, rng)[0] for _ in range(4000))
    assert abs(firsts[1] - 2000) < 150


def test_the_draw_is_exact_for_a_seed_and_ignores_input_order():
    pool = pool_of([3, 1, 4, 1, 5], [0.1, None, -0.2, 0.3, None])
    one = [draw_pair(pool, random.Random(42)) for _ in range(3)]
    two = [draw_pair(list(reversed(pool)), random.Random(42)) for _ in range(3)]
    assert one == two


def test_fewer_than_two_agents_is_an_error():
    with pytest.raises(ValueError, match="at least two"):
        draw_pair(pool_of([0]), random.Random(0))


def test_nothing_the_submitter_sends_changes_the_draw(alice, bob, roster):
    """Same roster state and seed, different submitters and instructions: same pair."""
    from battles.services import task_submit

    first = task_submit(user=alice, instruction="list the files", rng=random.Random(9))
    pair = (first.agent_a_id, first.agent_b_id)
    second = task_submit(
        user=bob, instruction="a very different task", start_url="", rng=random.Random(9)
    )
    assert (second.agent_a_id, second.agent_b_id) == pair


def rate_roster(values: dict[str, float], battles: int = 40) -> None:
    from agents.models import Agent
    from ratings.models import AgentRating

    for slug, value in values.items():
        agent = Agent.objects.get(slug=slug)
        AgentRating.objects.update_or_create(
            agent=agent,
            defaults={
                "arena_id": agent.arena_id,
                "streaming_rating": value,
                "rated_battles": battles,
            },
        )


def test_a_new_submitters_first_battles_are_a_contrast_showcase(alice, roster):
    """SPEC §5.4: the first CALIBRATION_TASKS battles pair a strong and a weak rated
    agent and carry the calibration flag (γ_cal); later ones are ordinary draws."""
    from agents.models import Agent
    from battles.services import task_submit

    rate_roster({"rulebook": 1200.0, "surveyor": 1000.0, "idle": 800.0})
    strong, weak = Agent.objects.get(slug="rulebook").pk, Agent.objects.get(slug="idle").pk
    battles = [
        task_submit(user=alice, instruction=f"task number {word} here", rng=random.Random(i))
        for i, word in enumerate(["one", "two", "three", "four", "five", "six"])
    ]
    for battle in battles[:3]:
        assert battle.is_calibration
        assert {battle.agent_a_id, battle.agent_b_id} == {strong, weak}
    assert not any(battle.is_calibration for battle in battles[3:])


def test_no_showcase_without_two_rated_agents_or_when_switched_off(alice, bob, roster, settings):
    from battles.services import task_submit

    rate_roster({"rulebook": 1200.0, "surveyor": 1000.0}, battles=5)  # provisional
    battle = task_submit(user=alice, instruction="list the files", rng=random.Random(1))
    assert not battle.is_calibration

    rate_roster({"rulebook": 1200.0, "surveyor": 1000.0, "idle": 800.0})
    settings.ARENA = settings.ARENA.replace(calibration_showcase=False)
    battle = task_submit(user=bob, instruction="list the files", rng=random.Random(1))
    assert not battle.is_calibration

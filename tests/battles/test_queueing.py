"""The dispatch rule (fifo_next), its stateful queue (SlotQueue) and the simulated day
of SPEC §9 (simulate)."""

import math
import random
from datetime import UTC, datetime, timedelta

import pytest

from battles.queueing import (
    RUNS_PER_BATTLE,
    SlotQueue,
    fifo_next,
    mean_lognormal,
    offered_load,
    simulate,
)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


# --- fifo_next ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queued", "running", "slots", "expected"),
    [
        ([], 0, 4, None),  # nothing waits
        ([("a", 1.0)], 4, 4, None),  # every slot busy
        ([("a", 1.0)], 5, 4, None),  # over-full (a slot taken by hand) starts nothing
        ([("a", 1.0)], 3, 4, "a"),
        ([("a", 5.0), ("b", 3.0), ("c", 4.0)], 0, 2, "b"),  # earliest submission first
        ([("a", 2.0), ("b", 2.0)], 0, 1, "a"),  # a tie goes to admission order
        ([(7, T0 + timedelta(seconds=1)), (9, T0)], 1, 4, 9),  # aware datetimes, as stored
    ],
)
def test_fifo_next(queued, running, slots, expected):
    assert fifo_next(queued, running, slots) == expected


@pytest.mark.parametrize(("running", "slots"), [(0, 0), (-1, 4)])
def test_fifo_next_refuses_nonsense(running, slots):
    with pytest.raises(ValueError):
        fifo_next([("a", 0.0)], running, slots)


# --- SlotQueue on a hand-made event list ----------------------------------------------

# C = 2. (time, event, battle); after every event the caller fills free slots.
EVENTS = [
    (0.0, "offer", "a"),
    (1.0, "offer", "b"),
    (2.0, "offer", "c"),  # both slots busy: c waits
    (3.0, "offer", "d"),  # d waits behind c
    (4.0, "finish", "a"),  # c starts, waited 2
    (5.5, "finish", "b"),  # d starts, waited 2.5
    (6.0, "offer", "e"),  # waits
    (7.0, "finish", "c"),  # e starts, waited 1
    (9.0, "finish", "d"),
    (10.0, "finish", "e"),
]


def drive(queue: SlotQueue, events) -> list[tuple[float, str]]:
    started = []
    for now, kind, battle_id in events:
        if kind == "offer":
            queue.offer(battle_id, now)
        else:
            queue.finish(battle_id, now)
        while (next_id := queue.start_next(now)) is not None:
            started.append((now, next_id))
        assert queue.busy <= queue.slots
    return started


def test_slot_queue_is_fifo_and_books_exact_waits():
    queue = SlotQueue(2)

    started = drive(queue, EVENTS)

    assert started == [(0.0, "a"), (1.0, "b"), (4.0, "c"), (5.5, "d"), (7.0, "e")]
    assert {p.battle_id: p.wait for p in queue.passages.values()} == {
        "a": 0.0,
        "b": 0.0,
        "c": 2.0,
        "d": 2.5,
        "e": 1.0,
    }
    assert queue.waits() == [0.0, 0.0, 2.0, 2.5, 1.0]
    assert queue.sojourns() == [4.0, 4.5, 5.0, 6.0, 4.0]
    assert [p.service for p in queue.passages.values()] == [4.0, 4.5, 3.0, 3.5, 3.0]
    assert queue.busy_time == 18.0  # = Σ services: the slot-time integral is exact
    assert queue.max_depth == 2
    assert (queue.busy, queue.depth, queue.clock) == (0, 0, 10.0)


def test_slot_queue_state_between_events():
    queue = SlotQueue(2)

    drive(queue, EVENTS[:4])

    assert (queue.busy, queue.depth) == (2, 2)
    assert queue.running == frozenset({"a", "b"})
    assert queue.start_next(3.5) is None  # no free slot: nothing starts
    assert queue.passages["c"].wait is None
    assert queue.busy_time == 1.0 * 1 + 2.5 * 2  # one slot over [0, 1), two over [1, 3.5)


def test_slot_queue_never_runs_more_than_its_slots():
    queue = SlotQueue(3)
    for i in range(10):
        queue.offer(i, 0.0)

    started = [queue.start_next(0.0) for _ in range(5)]

    assert started == [0, 1, 2, None, None]
    assert (queue.busy, queue.depth) == (3, 7)


@pytest.mark.parametrize(
    "misuse",
    [
        lambda q: q.offer("a", 0.5),  # offered twice
        lambda q: q.offer("z", 0.0),  # the clock went backwards
        lambda q: q.start_next(0.0),  # backwards too
        lambda q: q.finish("b", 2.0),  # queued, not running
        lambda q: q.finish("nobody", 2.0),
    ],
)
def test_slot_queue_refuses_misuse(misuse):
    queue = SlotQueue(1)
    queue.offer("a", 0.0)
    queue.start_next(0.0)
    queue.offer("b", 1.0)

    with pytest.raises(ValueError):
        misuse(queue)


def test_slot_queue_needs_a_slot():
    with pytest.raises(ValueError):
        SlotQueue(0)


# --- simulate -------------------------------------------------------------------------

DAY = {
    "arrival_rate_per_h": 12,
    "service_median_min": 6,
    "service_log_sd": 0.5,
    "slots": 4,
    "hours": 24,
}
SEEDS = range(1, 9)


def day(seed: int, **overrides):
    return simulate(**{**DAY, **overrides}, rng=random.Random(seed))


def test_simulate_is_deterministic_for_a_seed():
    assert day(11) == day(11)
    assert day(11) != day(12)


def test_offered_load_is_the_spec_figure_from_the_parameters():
    expected = 12 * 6 * math.exp(0.125) / 60 / 4

    assert mean_lognormal(6, 0.5) == pytest.approx(6 * math.exp(0.125), rel=1e-15)
    assert offered_load(12, 6, 0.5, 4) == pytest.approx(expected, rel=1e-15)
    assert day(11).rho_offered == pytest.approx(expected, rel=1e-15)
    assert round(expected, 2) == 0.34


@pytest.mark.parametrize("seed", SEEDS)
def test_a_day_matches_the_spec_figures(seed):
    result = day(seed)

    assert abs(result.arrivals - 288) < 4 * math.sqrt(288)  # Poisson(λT = 288)
    assert abs(result.rho_measured - result.rho_offered) <= 0.05
    assert result.mean_wait_min < 1.0
    assert result.max_wait_min < result.service_median_min * 2
    assert len(result.waits_min) == result.arrivals  # every arrival's wait is known
    # Runs ≈ 2 × arrivals: only the battles still in the system at midnight are missing.
    assert result.completed_runs == RUNS_PER_BATTLE * result.completed_battles
    assert 0 <= result.unfinished_battles <= 8
    assert abs(result.completed_runs / (2 * result.arrivals) - 1) < 0.03


def test_across_seeds_utilisation_centres_on_the_offered_load():
    results = [day(seed) for seed in SEEDS]

    mean_rho = sum(r.rho_measured for r in results) / len(results)
    mean_wait = sum(r.mean_wait_min for r in results) / len(results)
    assert abs(mean_rho - 0.34) < 0.02
    assert mean_wait < 0.5


def test_hourly_counts_add_up_to_the_day():
    result = day(11)

    assert len(result.arrivals_per_hour) == len(result.completed_runs_per_hour) == 24
    assert sum(result.arrivals_per_hour) == result.arrivals
    assert sum(result.completed_runs_per_hour) == result.completed_runs


def test_an_overloaded_day_saturates_the_slots():
    result = day(3, arrival_rate_per_h=60, slots=1, hours=2)  # ρ offered ≈ 6.8

    assert result.rho_offered > 6
    assert 0.97 < result.rho_measured <= 1.0  # busy time counted inside the day only
    assert result.unfinished_battles > result.completed_battles
    assert result.max_wait_min > 60


@pytest.mark.parametrize(
    "overrides",
    [{"slots": 0}, {"hours": 0}, {"arrival_rate_per_h": 0}, {"service_log_sd": -0.1}],
)
def test_simulate_refuses_bad_parameters(overrides):
    with pytest.raises(ValueError):
        day(1, **overrides)

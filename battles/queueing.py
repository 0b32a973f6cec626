"""The arena's dispatch policy as pure code, and a simulated day on it (SPEC §6, §9).

Admission puts a battle in a queue; execution has C slots (``ARENA.battle_slots``
worker processes on the "battles" queue) served first in, first out by submission time.

- ``fifo_next`` is the rule itself: which queued battle starts next, if a slot is free.
- ``SlotQueue`` keeps queue and slot state for a caller that brings its own clock (every
  method takes ``now``) and books each battle's wait and sojourn.
- ``simulate`` drives a ``SlotQueue`` with a simulated clock through a day of Poisson
  arrivals and lognormal service times.

No ORM and no wall clock here: times are whatever the caller's clock says (minutes in
``simulate``), compared and subtracted, never read from the system.
"""

import heapq
import math
import random
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

RUNS_PER_BATTLE = 2  # both lanes


def fifo_next[K: Hashable, T: (float, datetime)](
    queued: Sequence[tuple[K, T]], running: int, slots: int
) -> K | None:
    """The battle to start now: the earliest submitted of ``queued`` (ties go to the
    earlier entry of the list, i.e. admission order), or None when all ``slots`` are
    busy or nothing waits. ``running`` counts battles holding a slot."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, not {slots}")
    if running < 0:
        raise ValueError(f"running cannot be negative ({running})")
    if running >= slots or not queued:
        return None
    position = min(range(len(queued)), key=lambda i: (queued[i][1], i))
    return queued[position][0]


@dataclass
class Passage:
    """One battle's times on the queue's clock: submitted, started (dequeued onto a
    slot), finished (slot released)."""

    battle_id: Hashable
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def wait(self) -> float | None:
        """Queue wait ``q − s``; None until started."""
        return None if self.started_at is None else self.started_at - self.submitted_at

    @property
    def service(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    @property
    def sojourn(self) -> float | None:
        """Time in the system, ``e − s``; None until finished."""
        return None if self.finished_at is None else self.finished_at - self.submitted_at


class SlotQueue:
    """FIFO admission onto ``slots`` execution slots, on an injected clock.

    Every call passes ``now``; the clock may not go backwards (``ValueError``), because
    busy slot-time is integrated between calls for measured utilisation. Battle ids are
    any hashable values, each offered once.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, not {slots}")
        self.slots = slots
        self._queued: list[tuple[Hashable, float]] = []
        self._running: set[Hashable] = set()
        self._passages: dict[Hashable, Passage] = {}
        self._clock: float | None = None
        self._busy_time = 0.0
        self.max_depth = 0  # most battles left waiting after a dispatch (start_next → None)

    # --- the clock ---------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Moves the clock to ``now``, accruing busy slot-time at the current occupancy."""
        if self._clock is not None:
            if now < self._clock:
                raise ValueError(f"the clock went backwards: {now} < {self._clock}")
            self._busy_time += len(self._running) * (now - self._clock)
        self._clock = now

    @property
    def clock(self) -> float | None:
        return self._clock

    @property
    def busy_time(self) -> float:
        """Slot-time spent running battles up to the clock (Σ over slots of busy time)."""
        return self._busy_time

    # --- events ------------------------------------------------------------------------

    def offer(self, battle_id: Hashable, now: float) -> None:
        """Admits a battle submitted at ``now`` to the back of the queue."""
        if battle_id in self._passages:
            raise ValueError(f"battle {battle_id!r} was already offered")
        self.advance(now)
        self._queued.append((battle_id, now))
        self._passages[battle_id] = Passage(battle_id, submitted_at=now)

    def start_next(self, now: float) -> Hashable | None:
        """Starts the next battle by ``fifo_next`` when a slot is free; returns its id,
        or None (no free slot or empty queue). Call it until None to fill the slots."""
        self.advance(now)
        battle_id = fifo_next(self._queued, len(self._running), self.slots)
        if battle_id is None:
            self.max_depth = max(self.max_depth, len(self._queued))
            return None
        self._queued = [entry for entry in self._queued if entry[0] != battle_id]
        self._running.add(battle_id)
        self._passages[battle_id].started_at = now
        return battle_id

    def finish(self, battle_id: Hashable, now: float) -> None:
        """Releases the slot of a running battle."""
        if battle_id not in self._running:
            raise ValueError(f"battle {battle_id!r} is not running")
        self.advance(now)
        self._running.remove(battle_id)
        self._passages[battle_id].finished_at = now

    # --- state and bookkeeping ---------------------------------------------------------

    @property
    def busy(self) -> int:
        """Slots in use."""
        return len(self._running)

    @property
    def depth(self) -> int:
        """Battles waiting for a slot."""
        return len(self._queued)

    @property
    def running(self) -> frozenset[Hashable]:
        return frozenset(self._running)

    @property
    def passages(self) -> Mapping[Hashable, Passage]:
        """Every offered battle's times, in offer order (read-only)."""
        return MappingProxyType(self._passages)

    def waits(self) -> list[float]:
        """Waits of the battles started so far, in offer order."""
        return [p.wait for p in self._passages.values() if p.wait is not None]

    def sojourns(self) -> list[float]:
        """Sojourn times of the battles finished so far, in offer order."""
        return [p.sojourn for p in self._passages.values() if p.sojourn is not None]


# --- a simulated day ------------------------------------------------------------------


def mean_lognormal(median: float, log_sd: float) -> float:
    """E[S] of a lognormal service time: median · exp(σ²/2)."""
    return median * math.exp(log_sd**2 / 2)


def offered_load(
    arrival_rate_per_h: float, service_median_min: float, service_log_sd: float, slots: int
) -> float:
    """ρ = λ E[S] / C (SPEC §6), from the parameters alone."""
    mean_service_h = mean_lognormal(service_median_min, service_log_sd) / 60
    return arrival_rate_per_h * mean_service_h / slots


@dataclass(frozen=True)
class SimulationResult:
    """One simulated day. Times in minutes; the day is ``[0, 60·hours)``.

    Arrivals are those of the day. A battle counts as completed (2 runs) when its slot
    is released by the end of the day. Waits cover every arrival of the day: after the
    day ends the queue is drained without new arrivals, which under FIFO gives each
    battle exactly the wait it would have had. ``busy_min`` is slot-time within the day.
    """

    arrival_rate_per_h: float
    service_median_min: float
    service_log_sd: float
    slots: int
    hours: float
    arrivals: int
    completed_battles: int
    waits_min: tuple[float, ...]
    busy_min: float
    max_queue_depth: int
    arrivals_per_hour: tuple[int, ...]
    completed_runs_per_hour: tuple[int, ...]

    @property
    def completed_runs(self) -> int:
        return RUNS_PER_BATTLE * self.completed_battles

    @property
    def unfinished_battles(self) -> int:
        """Arrivals still queued or running when the day ended."""
        return self.arrivals - self.completed_battles

    @property
    def mean_wait_min(self) -> float:
        return statistics.fmean(self.waits_min) if self.waits_min else 0.0

    @property
    def max_wait_min(self) -> float:
        return max(self.waits_min, default=0.0)

    @property
    def wait_p95_min(self) -> float:
        if len(self.waits_min) < 2:
            return self.max_wait_min
        return statistics.quantiles(self.waits_min, n=20, method="inclusive")[-1]

    @property
    def share_waited(self) -> float:
        """Share of arrivals that found every slot busy."""
        if not self.waits_min:
            return 0.0
        return sum(1 for w in self.waits_min if w > 0) / len(self.waits_min)

    @property
    def rho_offered(self) -> float:
        return offered_load(
            self.arrival_rate_per_h, self.service_median_min, self.service_log_sd, self.slots
        )

    @property
    def rho_measured(self) -> float:
        """Busy slot-time over available slot-time, ``busy / (C·T)``."""
        return self.busy_min / (self.slots * self.hours * 60)


def simulate(
    arrival_rate_per_h: float,
    service_median_min: float,
    service_log_sd: float,
    slots: int,
    hours: float,
    rng: random.Random,
) -> SimulationResult:
    """Discrete-event simulation of one day on a ``SlotQueue``: Poisson arrivals at
    ``arrival_rate_per_h``, each battle holding a slot for a lognormal service time
    (``service_median_min``, log-scale sd ``service_log_sd``). Deterministic for a given
    ``rng`` state. Events at the same instant: a completion frees its slot before an
    arrival is admitted."""
    if arrival_rate_per_h <= 0 or service_median_min <= 0 or hours <= 0:
        raise ValueError("arrival rate, service median and hours must be positive")
    if service_log_sd < 0:
        raise ValueError("service_log_sd cannot be negative")
    if slots < 1:
        raise ValueError(f"slots must be at least 1, not {slots}")
    horizon = hours * 60
    rate_per_min = arrival_rate_per_h / 60
    log_median = math.log(service_median_min)

    # The arrival stream with each battle's service drawn at arrival, so the random
    # stream does not depend on the dispatch order.
    submitted: list[float] = []
    service: list[float] = []
    t = rng.expovariate(rate_per_min)
    while t < horizon:
        submitted.append(t)
        service.append(rng.lognormvariate(log_median, service_log_sd))
        t += rng.expovariate(rate_per_min)

    bins = math.ceil(hours)
    arrivals_per_hour = [0] * bins
    for at in submitted:
        arrivals_per_hour[int(at // 60)] += 1
    runs_per_hour = [0] * bins

    queue = SlotQueue(slots)
    completions: list[tuple[float, int]] = []  # heap of (finish time, battle id)
    busy_in_day: float | None = None
    completed = 0
    following = 0  # index of the next arrival
    while following < len(submitted) or completions:
        next_arrival = submitted[following] if following < len(submitted) else math.inf
        next_completion = completions[0][0] if completions else math.inf
        now = min(next_arrival, next_completion)
        if busy_in_day is None and now > horizon:
            queue.advance(horizon)
            busy_in_day = queue.busy_time
        if next_completion <= next_arrival:
            _, battle_id = heapq.heappop(completions)
            queue.finish(battle_id, now)
            if now <= horizon:
                completed += 1
                runs_per_hour[min(int(now // 60), bins - 1)] += RUNS_PER_BATTLE
        else:
            queue.offer(following, now)
            following += 1
        while (started := queue.start_next(now)) is not None:
            heapq.heappush(completions, (now + service[started], started))
    if busy_in_day is None:
        queue.advance(horizon)
        busy_in_day = queue.busy_time

    return SimulationResult(
        arrival_rate_per_h=arrival_rate_per_h,
        service_median_min=service_median_min,
        service_log_sd=service_log_sd,
        slots=slots,
        hours=hours,
        arrivals=len(submitted),
        completed_battles=completed,
        waits_min=tuple(queue.waits()),
        busy_min=busy_in_day,
        max_queue_depth=queue.max_depth,
        arrivals_per_hour=tuple(arrivals_per_hour),
        completed_runs_per_hour=tuple(runs_per_hour),
    )

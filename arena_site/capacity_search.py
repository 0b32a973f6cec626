"""The capacity plan's search and this machine's check (``arena_site.capacity``): the
smallest plan meeting the SLOs at a traffic, and the vote ramp predicted for this
machine against the measured one. Pure Python and numpy; no Django."""

from dataclasses import dataclass

from arena_site.capacity import CAPS, DEFAULT_SLO, Evaluation, evaluate
from arena_site.capacity_inputs import Costs, Plan, Slo, Traffic

# The plan's knobs the search sizes, in the order it shrinks them.
SEARCHED = (
    "web_processes",
    "postgres_cores",
    "pgbouncer_pool",
    "redis_cache",
    "redis_rq",
    "redis_channels",
    "deciders",
    "workers_ratings",
)
# What to change in the code once a resource no knob relieves breaks (docs/performance.md)
NEXT_STEPS = {
    "redis channels (board group)": (
        "board_frame_hz",
        10.0,
        "coalesce the board's streaming frames to 10 a second (one frame per decision today)",
    ),
    "web process": (
        "board_frame_hz",
        10.0,
        "coalesce the board's streaming frames to 10 a second (every process receives each)",
    ),
    "ratings workers": (
        "incremental_refit",
        True,
        "refit from counted cells kept up to date (today each refit scans every rated battle)",
    ),
}


@dataclass
class Search:
    evaluation: Evaluation
    unfixable: dict[str, str]  # SLO -> why no knob relieves it
    evaluations: int


def _pressure(ev: Evaluation, name: str) -> float:
    s = ev.slos[name]
    return s["value"] / s["limit"] if s["limit"] else float("inf")


def search(
    costs: Costs,
    traffic: Traffic,
    slo: Slo = DEFAULT_SLO,
    *,
    start: Plan,
    visits: int = 20_000,
    seed: int = 36,
    progress=None,
) -> Search:
    """The smallest plan meeting every SLO: double the knob of the resource behind the
    worst failing SLO until none fails (an SLO that a doubling does not relieve by 10 %
    is set aside as unfixable by size), then bisect each knob down to the least value
    that still passes, and check one less of each knob fails."""
    count = 0

    def run(plan: Plan) -> Evaluation:
        nonlocal count
        count += 1
        if progress:
            progress()
        return evaluate(costs, plan, traffic, slo, visits=visits, seed=seed)

    plan, unfixable = start, {}
    ev = run(plan)
    while failing := ev.failing(ignore={**unfixable, "postgres connections": ""}):
        # saturation first: a latency past a saturated queue says nothing of its own queue
        name = max(failing, key=lambda n: (n.endswith("utilisation"), _pressure(ev, n)))
        knob = ev.resources[ev.slos[name]["resource"]].knob
        if knob is None:
            unfixable[name] = f"{ev.slos[name]['resource']} is given, not sized"
            continue
        value = getattr(plan, knob)
        if value >= CAPS.get(knob, 100_000):
            unfixable[name] = f"{knob} at its cap ({value})"
            continue
        bigger = run(plan.with_(**{knob: min(CAPS.get(knob, 100_000), value * 2)}))
        if not bigger.slos[name]["ok"] and _pressure(bigger, name) > 0.9 * _pressure(ev, name):
            unfixable[name] = f"doubling {knob} ({value} → {value * 2}) did not relieve it"
            continue
        plan, ev = bigger.plan, bigger
    if unfixable:  # sizing the rest around a broken part would mislead
        return Search(ev, unfixable, count)
    for knob in (*SEARCHED, *SEARCHED):  # bisect each, then once more after the others
        lo, hi = 1, getattr(plan, knob)
        if knob == "pgbouncer_pool" and not hi:
            continue
        while lo < hi:
            mid = (lo + hi) // 2
            if not run(plan.with_(**{knob: mid})).failing(ignore=("postgres connections",)):
                hi = mid
            else:
                lo = mid + 1
        plan = plan.with_(**{knob: hi})
    return Search(run(plan), unfixable, count)


def validate(costs: Costs, *, visits: int = 20_000, seed: int = 36) -> dict:
    """This machine as the vote ramp ran it (bench_votes.py, two web processes): web,
    PostgreSQL, Redis and the load client on ``machine.cores`` shared cores, votes only
    (the decisions are left to the sweep after the run). A step is clean when the
    simulated vote p99 ≤ 100 ms and the cores are below 100 %; returns the predicted
    highest clean step of the same ramp, the highest clean rate between steps
    (bisected), and the measured figure to compare."""
    cores = int(costs["machine.cores"])
    plan = Plan(
        web_processes=int(costs["validate.web_processes"]),
        db_pool_per_process=int(costs["validate.db_pool_per_process"]),
        postgres_cores=cores,
    )
    slo = Slo()

    def at(rate: float) -> Evaluation:
        traffic = Traffic(
            votes_per_s=rate,
            judge_next_per_vote=0.0,
            decisions_per_vote=0.0,
            client_cpu_ms=costs["validate.client_cpu_ms_per_request"],
            refits=False,
        )
        return evaluate(
            costs,
            plan,
            traffic,
            slo,
            visits=visits,
            seed=seed,
            shared_cores=cores,
            rtt_ms=costs["network.loopback_rtt_ms"],
        )

    def clean(ev: Evaluation) -> bool:
        return ev.slos["vote p99 ms"]["ok"] and ev.resources["cpu (shared)"].utilisation < 1.0

    steps = []
    for rate in costs.ramp_steps:
        ev = at(rate)
        vote = ev.slos["vote p99 ms"]
        steps.append(
            {
                "offered_per_s": rate,
                "p50_ms": vote["p50"],
                "p99_ms": vote["value"],
                "cpu_utilisation": round(ev.resources["cpu (shared)"].utilisation, 3),
                "clean": clean(ev),
            }
        )
    lo, hi = 0.0, float(costs.ramp_steps[-1])
    while hi - lo > 1.0:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if clean(at(mid)) else (lo, mid)
    predicted = max((s["offered_per_s"] for s in steps if s["clean"]), default=0)
    measured = costs["validate.measured_highest_clean_vote_rate_per_s"]
    per_vote = (
        sum(
            costs.ops["vote"].__getattribute__(f)
            for f in ("web_cpu_ms", "db_cpu_ms", "redis_cpu_ms")
        )
        + costs["validate.client_cpu_ms_per_request"]
    )
    return {
        "cores": cores,
        "web_processes": plan.web_processes,
        "cpu_ms_per_vote_all_parts": round(per_vote, 2),
        "cpu_bound_votes_per_s": round(cores * 1000 / per_vote, 1),
        "predicted_highest_clean_step_per_s": predicted,
        "predicted_highest_clean_rate_per_s": round(lo, 1),
        "measured_highest_clean_step_per_s": measured,
        "predicted_over_measured": round(predicted / measured, 2) if measured else None,
        "steps": steps,
    }

"""A capacity plan for an arena deployment, checked by simulation (docs/performance.md,
"A capacity plan for a public arena").

Every resource is a queue: a web process (one core, its GIL), PostgreSQL's cores, the
PgBouncer server connections (held for a transaction), each Redis instance (one core),
the deciders (batched), the ratings workers (the refit, the board pushes) and the
battle hosts' slots. Each is simulated event by event with the visits the traffic mix
sends it: arrivals (Poisson, or periodic for the refit), service times drawn around the
measured costs (``arena_site.capacity_inputs``), first come first served on its
servers. A vote's latency is the sum of its visits' simulated sojourns (decomposition:
the queues are simulated one by one, each fed Poisson arrivals; see the docs for what
that leaves out). Pure Python and numpy; no Django."""

import heapq
from dataclasses import asdict, dataclass, field

import numpy as np

from arena_site.capacity_inputs import Costs, Plan, Slo, Traffic

BOARD_PUSHES_PER_S = 2.0  # ratings.services.FULL_PUSH_DELAY (0.5 s) coalesces full pushes
REFIT_CHUNK_S = 0.01  # the refit's database scan enters PostgreSQL's queue in 10 ms pieces
STATEMENT_CV = 1.0  # a statement's server time: exponential (not measured)
DEFAULT_SLO = Slo()


@dataclass
class Klass:
    name: str
    rate: float  # visits per second
    mean_ms: float
    cv: float = 0.5
    periodic: bool = False


@dataclass
class Resource:
    """One simulated queue: ``servers`` per copy, ``copies`` identical copies (web
    processes, cache shards), ``knob`` the plan field that adds to it."""

    name: str
    servers: int
    copies: int
    knob: str | None
    classes: list[Klass] = field(default_factory=list)
    utilisation: float = 0.0
    wait_p50_ms: float = 0.0
    wait_p99_ms: float = 0.0
    horizon_s: float = 0.0
    sojourn: dict = field(default_factory=dict, repr=False)  # class -> ms samples

    def add(self, name: str, rate: float, mean_ms: float, cv: float = 0.5, **kw) -> None:
        if rate > 0 and mean_ms > 0:
            self.classes.append(Klass(name, rate, mean_ms, cv, **kw))

    def summary(self) -> dict:
        return {
            "servers": self.servers,
            "copies": self.copies,
            "knob": self.knob,
            "utilisation": round(self.utilisation, 3),
            "wait_p50_ms": round(self.wait_p50_ms, 2),
            "wait_p99_ms": round(self.wait_p99_ms, 2),
            "simulated_s": round(self.horizon_s, 1),
        }


def _services(rng, mean: float, cv: float, n: int) -> np.ndarray:
    if cv <= 0:
        return np.full(n, mean)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, mean / shape, n)


def _arrivals(resource: Resource, visits: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times (s), service times (ms) and class index per visit, in time order,
    over a horizon long enough for about ``visits`` visits (at least one period of every
    periodic class)."""
    total = sum(k.rate for k in resource.classes)
    horizon = visits / total
    horizon = max([horizon] + [4.0 / k.rate for k in resource.classes if k.periodic])
    resource.horizon_s = horizon
    times, services, kinds = [], [], []
    for i, k in enumerate(resource.classes):
        if k.periodic:
            t = np.arange(rng.random() / k.rate, horizon, 1.0 / k.rate)
        else:
            t = np.sort(rng.random(rng.poisson(k.rate * horizon)) * horizon)
        times.append(t)
        services.append(_services(rng, k.mean_ms, k.cv, len(t)))
        kinds.append(np.full(len(t), i))
    order = np.argsort(np.concatenate(times), kind="stable")
    return (
        np.concatenate(times)[order],
        np.concatenate(services)[order],
        np.concatenate(kinds)[order],
    )


def fcfs_waits(arrivals_s: np.ndarray, services_ms: np.ndarray, servers: int) -> np.ndarray:
    """Waiting time (ms) of each visit in a first-come-first-served queue with
    ``servers`` servers. One server: Lindley's recursion in closed form (the departure
    D_n = C_n + max_{k≤n}(A_k − C_{k−1}), C the cumulative service); more: the
    Kiefer–Wolfowitz recursion over the servers' free times."""
    a = arrivals_s * 1000.0
    if len(a) == 0:
        return np.zeros(0)
    if servers == 1:
        c = np.cumsum(services_ms)
        departures = c + np.maximum.accumulate(a - (c - services_ms))
        return departures - services_ms - a
    free = [0.0] * servers
    waits = np.empty(len(a))
    for i, (t, s) in enumerate(zip(a.tolist(), services_ms.tolist(), strict=True)):
        start = t if t > free[0] else free[0]
        heapq.heapreplace(free, start + s)
        waits[i] = start - t
    return waits


def simulate(resource: Resource, visits: int, rng) -> Resource:
    load = sum(k.rate * k.mean_ms / 1000.0 for k in resource.classes)
    resource.utilisation = load / resource.servers
    if not resource.classes:
        return resource
    arrivals, services, kinds = _arrivals(resource, visits, rng)
    waits = fcfs_waits(arrivals, services, resource.servers)
    resource.wait_p50_ms, resource.wait_p99_ms = (float(x) for x in np.percentile(waits, [50, 99]))
    for i, k in enumerate(resource.classes):
        mine = kinds == i
        resource.sojourn[k.name] = (waits + services)[mine] if mine.any() else np.zeros(1)
    return resource


def batched_delays(
    due_s: np.ndarray, servers: int, per_item_ms: np.ndarray, overhead_ms: float, batch: int
) -> np.ndarray:
    """Delay (ms) from each decision's due time until its batch is done: a free decider
    takes every due decision (at most ``batch``) and spends the overhead once."""
    due = (due_s * 1000.0).tolist()
    per = per_item_ms.tolist()
    free = [0.0] * servers
    delays = np.empty(len(due))
    i = 0
    while i < len(due):
        start = max(due[i], heapq.heappop(free))
        j = i + 1
        while j < len(due) and j - i < batch and due[j] <= start:
            j += 1
        finish = start + overhead_ms + sum(per[i:j])
        heapq.heappush(free, finish)
        for m in range(i, j):
            delays[m] = finish - due[m]
        i = j
    return delays


@dataclass
class Evaluation:
    plan: Plan
    traffic: Traffic
    resources: dict[str, Resource]
    slos: dict[str, dict]  # name -> {"value", "limit", "ok", "resource"}
    connections: dict
    layout: dict = field(default_factory=dict)  # which queue on which Redis, slots per host

    @property
    def ok(self) -> bool:
        return all(s["ok"] for s in self.slos.values())

    def failing(self, ignore=()) -> list[str]:
        return [n for n, s in self.slos.items() if not s["ok"] and n not in ignore]

    def first_saturating(self) -> str:
        return max(self.resources.values(), key=lambda r: r.utilisation).name

    def summary(self) -> dict:
        return {
            "plan": asdict(self.plan),
            "traffic": asdict(self.traffic),
            "resources": {n: r.summary() for n, r in self.resources.items()},
            "slos": self.slos,
            "connections": self.connections,
            "first_saturating": self.first_saturating(),
            "slos_hold": self.ok,
            "layout": self.layout,
            "ceilings": self.ceilings(),
        }

    def ceilings(self) -> dict[str, float]:
        """Per resource, the multiple of this traffic at which it reaches 100 % once its
        knob is at its cap (inf: no cap; a resource no knob adds to: 1 / utilisation),
        lowest first: what breaks first as the traffic grows."""
        out = {}
        for r in self.resources.values():
            if r.utilisation <= 0 or r.knob is None:  # the battle hosts are given
                continue
            cap = CAPS.get(r.knob) if r.knob else None
            unscalable = r.name in UNSCALABLE
            if unscalable or cap:
                grow = 1.0 if unscalable else cap / getattr(self.plan, r.knob)
                out[r.name] = round(grow / r.utilisation, 2)
        return dict(sorted(out.items(), key=lambda kv: kv[1]))


def _rq_instances(costs: Costs, plan: Plan, jobs: dict[str, tuple[float, float]]) -> list:
    """Queues onto the RQ Redis instances: the decisions queue cut into ``redis_rq``
    partitions (by battle id), then every part to the least loaded instance, heaviest
    first. ``jobs``: queue -> (enqueues/s, jobs run/s). Returns per instance its parts."""
    enq_ms, run_ms = costs["rq.enqueue_redis_cpu_ms"], costs["rq.job_redis_cpu_ms"]
    parts = []
    for queue, (enq, run) in jobs.items():
        n = plan.redis_rq if queue == "decisions" else 1
        for p in range(n):
            label = f"{queue}/{p}" if n > 1 else queue
            parts.append((label, enq / n, run / n, (enq * enq_ms + run * run_ms) / n))
    loads, instances = [0.0] * plan.redis_rq, [[] for _ in range(plan.redis_rq)]
    for part in sorted(parts, key=lambda p: -p[3]):
        i = loads.index(min(loads))
        loads[i] += part[3]
        instances[i].append(part)
    return instances


def evaluate(
    costs: Costs,
    plan: Plan,
    traffic: Traffic,
    slo: Slo = DEFAULT_SLO,
    *,
    visits: int = 20_000,
    seed: int = 36,
    shared_cores: int = 0,
    rtt_ms: float | None = None,
) -> Evaluation:
    """Simulates ``plan`` under ``traffic``. ``shared_cores`` > 0: the web processes,
    PostgreSQL, Redis and the load client share that many cores (this machine), as one
    queue of CPU work. The same seed draws the same random numbers for every plan."""
    rng = np.random.default_rng(seed)
    ops, c = costs.ops, costs
    rtt = c["network.lan_rtt_ms"] if rtt_ms is None else rtt_ms
    P = plan.web_processes
    dec_rate = traffic.votes_per_s * traffic.decisions_per_vote
    rates = {
        "vote": traffic.votes_per_s,
        "judge_next": traffic.votes_per_s * traffic.judge_next_per_vote,
        "leaderboard": traffic.board_reads_per_s,
        "not_found": traffic.not_found_per_s,
    }
    frames = dec_rate * ops["decision"].board_frames
    if plan.board_frame_hz > 0:
        frames = min(frames, plan.board_frame_hz)
    battle_frames = traffic.battles_per_s * c["battle.board_frames"]
    R: dict[str, Resource] = {}

    def res(name, servers, copies=1, knob=None) -> Resource:
        R[name] = Resource(name, servers, copies, knob)
        return R[name]

    if shared_cores:
        cpu = res("cpu (shared)", shared_cores)
        web = pg = cache = cpu
        cpu.add("client", sum(rates.values()), traffic.client_cpu_ms, 0.3)
    else:
        web = res("web process", 1, P, "web_processes")
        pg = res("postgres cores", plan.postgres_cores, 1, "postgres_cores")
        cache = res("redis cache", 1, plan.redis_cache, "redis_cache")
    share = 1 if shared_cores else P
    for op, rate in rates.items():
        o = ops[op]
        web.add(f"web:{op}", rate / share, o.web_cpu_ms, o.cv)
    if not shared_cores:  # every web process receives every board frame (its hub)
        web.add("web:board_frame", frames, c["channels.process_frame_cpu_ms"], 0.3)
        web.add("web:battle_frame", battle_frames / P, c["channels.process_frame_cpu_ms"], 0.3)

    def stmt_ms(o_db_cpu, o_rts) -> float:
        if plan.postgres_statements_per_core_s > 0:
            return 1000.0 / plan.postgres_statements_per_core_s
        return o_db_cpu / o_rts if o_rts else 0.0

    db_ops = {op: (rate, ops[op].db_round_trips, ops[op].db_cpu_ms) for op, rate in rates.items()}
    db_ops["decision"] = (dec_rate, ops["decision"].db_round_trips, ops["decision"].db_cpu_ms)
    db_ops["battle"] = (traffic.battles_per_s, c["battle.db_round_trips"], c["battle.db_cpu_ms"])
    for op, (rate, rts, cpu_ms) in db_ops.items():
        pg.add(f"pg:{op}", rate * rts, stmt_ms(cpu_ms, rts), STATEMENT_CV)
    refit_s = c["refit.base_s"] + c["refit.s_per_million_battles"] * (
        (dec_rate * slo.refit_period_s if plan.incremental_refit else traffic.decided_battles) / 1e6
    )
    if traffic.refits:
        pg.add(
            "pg:refit",
            c["refit.db_share"] * refit_s / slo.refit_period_s / REFIT_CHUNK_S,
            REFIT_CHUNK_S * 1000,
            0.0,
        )
    redis_ops = {
        op: (rate, ops[op].redis_round_trips, ops[op].redis_cpu_ms) for op, rate in rates.items()
    }
    redis_ops["decision"] = (
        dec_rate,
        ops["decision"].redis_round_trips,
        ops["decision"].redis_cpu_ms,
    )
    redis_ops["battle"] = (
        traffic.battles_per_s,
        c["battle.redis_round_trips"],
        c["battle.redis_cpu_ms"],
    )
    shards = 1 if shared_cores else plan.redis_cache
    for op, (rate, rts, cpu_ms) in redis_ops.items():
        cache.add(f"redis:{op}", rate * rts / shards, cpu_ms / rts if rts else 0.0, 0.5)

    # RQ: which queue gets what (enqueues/s, jobs run/s); the decisions queue is
    # enqueued once per vote (its window's end) and run once per batch
    batch = max(1, plan.decider_batch)
    jobs = {
        "decisions": (traffic.votes_per_s * ops["vote"].rq_enqueues, dec_rate / batch),
        "ratings": (BOARD_PUSHES_PER_S, BOARD_PUSHES_PER_S + 1 / slo.refit_period_s),
        "battles": (traffic.battles_per_s, traffic.battles_per_s),
        "default": (0.1, 0.1),  # the cron jobs: janitors, sweeps, flushes
        "judging": (1 / 60, 1 / 60),  # the resolve sweep
        "evals": (0.0, 0.0),
    }
    rq_parts = _rq_instances(costs, plan, jobs) if not shared_cores else []
    for i, parts in enumerate(rq_parts):
        r = res(f"redis rq #{i + 1}", 1, 1, "redis_rq")
        rts = c["rq.job_redis_round_trips"]
        for label, enq, run, _ in parts:
            r.add(f"rq:{label}:enqueue", enq, c["rq.enqueue_redis_cpu_ms"], 0.3)
            r.add(f"rq:{label}:run", run * rts, c["rq.job_redis_cpu_ms"] / rts, 0.3)
    if not shared_cores:  # the public board's group lives on one instance (hashed by name)
        board = res("redis channels (board group)", 1, 1, "redis_channels")
        board.add(
            "frame",
            frames,
            c["channels.publish_redis_cpu_ms"] + P * c["channels.per_member_redis_cpu_ms"],
            0.3,
        )
        others = max(1, plan.redis_channels - 1)
        rest = res("redis channels (other groups)", 1, others, "redis_channels")
        rest.add(
            "frame",
            battle_frames / others,
            c["channels.publish_redis_cpu_ms"] + c["channels.per_member_redis_cpu_ms"],
            0.3,
        )
    ratings = res("ratings workers", plan.workers_ratings, 1, "workers_ratings")
    if traffic.refits:
        ratings.add("refit", 1 / slo.refit_period_s, refit_s * 1000, 0.0, periodic=True)
    if traffic.refits:  # no ratings worker runs in the vote ramp
        ratings.add("board push", BOARD_PUSHES_PER_S, c["refit.board_push_ms"], 0.5)
    slots = int(
        min(
            c["battle.host_cores"]
            // (c["battle.sandbox_cpu_cores"] * c["battle.sandboxes_per_battle"]),
            c["battle.host_memory_gib"]
            // (c["battle.sandbox_memory_gib"] * c["battle.sandboxes_per_battle"]),
        )
    )
    hosts = res("battle host slots", max(1, plan.battle_hosts * slots), 1, None)
    per_host = c["battle.battles_per_host_per_hour"]
    hosts.add("battle", traffic.battles_per_s, 3600e3 * slots / per_host if per_host else 0, 0.5)

    for r in R.values():
        simulate(r, visits, rng)

    def mean_sojourn(r: Resource, name: str) -> float:
        s = r.sojourn.get(name)
        return float(s.mean()) if s is not None else 0.0

    # PgBouncer (transaction pooling): a server connection is held for a transaction
    if plan.pgbouncer_pool and not shared_cores:
        bouncer = res("pgbouncer server connections", plan.pgbouncer_pool, 1, "pgbouncer_pool")
        for op, (rate, rts, _) in db_ops.items():
            o = ops.get(op)
            hold = rts * (rtt + mean_sojourn(pg, f"pg:{op}")) + (
                o.in_transaction_cpu_ms if o else 0.0
            )
            bouncer.add(f"tx:{op}", rate, hold, 0.5)
        simulate(bouncer, visits, rng)
    # the deciders: a decision is due when its vote's window ends
    d = ops["decision"]
    deciders = res("deciders", plan.deciders, 1, "deciders")
    per_ms = (
        d.web_cpu_ms
        + d.db_round_trips * (rtt + mean_sojourn(pg, "pg:decision"))
        + d.redis_round_trips * (rtt + mean_sojourn(cache, "redis:decision"))
    )
    decision_delay = np.zeros(1)
    if dec_rate > 0:
        deciders.add("decision", dec_rate, per_ms, d.cv)
        deciders.utilisation = (
            dec_rate * (per_ms + c["decision_batch.overhead_ms"] / batch) / (1000.0 * plan.deciders)
        )
        horizon = visits / dec_rate
        deciders.horizon_s = horizon
        due = np.sort(rng.random(rng.poisson(dec_rate * horizon)) * horizon)
        decision_delay = batched_delays(
            due,
            plan.deciders,
            _services(rng, per_ms, d.cv, len(due)),
            c["decision_batch.overhead_ms"],
            batch,
        )
        deciders.wait_p50_ms, deciders.wait_p99_ms = np.percentile(decision_delay, [50, 99])

    # a vote: its web CPU, its statements, its Redis round trips, each a sojourn drawn
    # from that queue's simulated visits of the vote's class
    n = visits

    def draws(r: Resource, name: str, k: float) -> np.ndarray:
        k = round(k)
        s = r.sojourn.get(name)
        if not k or s is None:
            return np.zeros(n)
        return s[rng.integers(0, len(s), (n, k))].sum(axis=1) + k * rtt

    v = ops["vote"]
    parts = {
        "web": draws(web, "web:vote", 1) - rtt,
        "postgres": draws(pg, "pg:vote", v.db_round_trips),
        "redis": draws(cache, "redis:vote", v.redis_round_trips),
    }
    if "pgbouncer server connections" in R:
        b = R["pgbouncer server connections"]
        hold = b.sojourn.get("tx:vote")
        mean_hold = next((k.mean_ms for k in b.classes if k.name == "tx:vote"), 0.0)
        parts["pgbouncer"] = (hold[rng.integers(0, len(hold), n)] - mean_hold).clip(0)
    total = sum(parts.values())
    p99 = float(np.percentile(total, 99))
    tail = total >= p99
    blame = {k: float(x[tail].mean()) for k, x in parts.items()}
    vote_station = {
        "web": web.name,
        "postgres": pg.name,
        "redis": cache.name,
        "pgbouncer": "pgbouncer server connections",
    }

    slos = {
        "vote p99 ms": {
            "value": round(p99, 1),
            "p50": round(float(np.percentile(total, 50)), 1),
            "limit": slo.vote_p99_ms,
            "ok": p99 <= slo.vote_p99_ms,
            "resource": vote_station[max(blame, key=blame.get)],
            "tail_ms_by_part": {k: round(x, 1) for k, x in blame.items()},
        },
        "decision done after its window, p99 s": {
            "value": round(float(np.percentile(decision_delay, 99)) / 1000, 2),
            "limit": slo.undo_window_s,
            "ok": float(np.percentile(decision_delay, 99)) / 1000 <= slo.undo_window_s,
            "resource": deciders.name,
        },
        "refit s (every period)": {
            "value": round(max(refit_s, ratings.sojourn.get("refit", np.zeros(1)).max() / 1000), 2),
            "limit": slo.refit_period_s,
            "ok": ratings.sojourn.get("refit", np.zeros(1)).max() / 1000 <= slo.refit_period_s,
            "resource": ratings.name,
        },
    }
    for r in R.values():
        slos[f"{r.name} utilisation"] = {
            "value": round(r.utilisation, 3),
            "limit": slo.max_utilisation,
            "ok": r.utilisation <= slo.max_utilisation,
            "resource": r.name,
        }
    backends = plan.pgbouncer_pool or (
        P * plan.db_pool_per_process + plan.deciders + plan.workers_ratings + plan.workers_default
    )  # through PgBouncer every process's connections share its server pool
    limit = plan.postgres_cores * c["postgres.max_connections_per_core"]
    connections = {
        "postgres_backends": backends,
        "max_connections_rule": limit,
        "backend_memory_gib": round(backends * c["postgres.memory_per_connection_mib"] / 1024, 1),
        "client_connections": P * plan.db_pool_per_process,
    }
    if not shared_cores:
        slos["postgres connections"] = {
            "value": backends,
            "limit": limit,
            "ok": backends <= limit,
            "resource": pg.name,
        }
    layout = {
        "rq_instances": [[p[0] for p in parts] for parts in rq_parts],
        "battle_slots_per_host": slots,
        "battle_hosts": plan.battle_hosts,
        "refit_s": round(refit_s, 2),
        "board_frames_per_s": round(frames, 1),
        "decisions_per_s": dec_rate,
    }
    return Evaluation(plan, traffic, R, slos, connections, layout)


# Caps on the plan's knobs (a PostgreSQL primary is one machine).
CAPS = {"postgres_cores": 192, "redis_cache": 256, "redis_rq": 64, "redis_channels": 64}
# One group lives on one channel-layer instance; one arena's refit is one job.
UNSCALABLE = {"redis channels (board group)", "ratings workers"}

"""The capacity simulation's inputs (``arena_site.capacity``): the measured costs per
operation (a JSON file, ``docs/capacity-costs.json``, every figure with the benchmark
and run it came from), a plan (what is deployed) and a traffic mix. Pure Python: no
Django, no models. Every bad field is a ``CapacityInputError`` naming the field."""

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path


class CapacityInputError(ValueError):
    """A costs or plan file the simulation cannot use; the message names the field."""


# Figures every operation has (per request, or per battle for ``decision`` and
# ``battle``): CPU of the process serving it, database statements (round trips) and the
# PostgreSQL server CPU they take together, the process CPU spent inside a transaction
# (a PgBouncer server connection is held for it), Redis round trips and their Redis
# CPU, RQ jobs it enqueues and live frames it publishes to the public board's group.
OP_FIELDS = (
    "web_cpu_ms",
    "cv",
    "db_round_trips",
    "db_cpu_ms",
    "in_transaction_cpu_ms",
    "redis_round_trips",
    "redis_cpu_ms",
    "rq_enqueues",
    "board_frames",
)
OPS = ("vote", "decision", "judge_next", "leaderboard", "not_found")
SECTIONS = {
    "machine": ("cores",),
    "network": ("loopback_rtt_ms", "lan_rtt_ms"),
    "decision_batch": ("overhead_ms",),
    "rq": ("job_redis_round_trips", "job_redis_cpu_ms", "enqueue_redis_cpu_ms"),
    "channels": ("publish_redis_cpu_ms", "per_member_redis_cpu_ms", "process_frame_cpu_ms"),
    "battle": (
        "battles_per_host_per_hour",
        "host_cores",
        "host_memory_gib",
        "sandbox_cpu_cores",
        "sandbox_memory_gib",
        "sandboxes_per_battle",
        "db_round_trips",
        "db_cpu_ms",
        "redis_round_trips",
        "redis_cpu_ms",
        "board_frames",
    ),
    "refit": ("base_s", "s_per_million_battles", "db_share", "board_push_ms"),
    "postgres": ("memory_per_connection_mib", "max_connections_per_core"),
    "validate": (
        "client_cpu_ms_per_request",
        "web_processes",
        "db_pool_per_process",
        "measured_highest_clean_vote_rate_per_s",
    ),
}
INTEGER_FIELDS = {"machine.cores", "validate.web_processes", "validate.db_pool_per_process"}


@dataclass(frozen=True)
class Op:
    web_cpu_ms: float
    cv: float  # coefficient of variation of its service times
    db_round_trips: float
    db_cpu_ms: float
    in_transaction_cpu_ms: float
    redis_round_trips: float
    redis_cpu_ms: float
    rq_enqueues: float
    board_frames: float


@dataclass(frozen=True)
class Costs:
    ops: dict[str, Op]
    figures: dict[str, float]  # "section.name" -> value
    sources: dict[str, str]  # "ops.vote.web_cpu_ms" / "section.name" -> where it came from
    placeholders: tuple[str, ...]  # figures still marked as placeholders
    ramp_steps: tuple[int, ...]

    def __getitem__(self, key: str) -> float:
        return self.figures[key]


@dataclass(frozen=True)
class Plan:
    """What is deployed. Web processes run one per core; ``pgbouncer_pool`` 0 means no
    PgBouncer (each process holds up to ``db_pool_per_process`` server connections)."""

    web_processes: int = 2
    db_pool_per_process: int = 20
    pgbouncer_pool: int = 0
    postgres_cores: int = 2
    postgres_statements_per_core_s: float = 0.0  # 0: the measured CPU per statement
    redis_cache: int = 1  # cache, rate limits, tokens: keys sharded over instances
    redis_rq: int = 1  # RQ queues; the decisions queue is partitioned over these
    redis_channels: int = 1  # the channel layer; one group lives on one instance
    deciders: int = 1  # processes taking decisions in batches (the ``decisions`` queue)
    decider_batch: int = 16
    workers_ratings: int = 1
    workers_default: int = 1
    battle_hosts: int = 1
    board_frame_hz: float = 0.0  # 0: one streaming frame per decision (the code today)
    incremental_refit: bool = False  # False: every refit scans every rated battle (today)

    def with_(self, **changes) -> "Plan":
        return replace(self, **changes)


@dataclass(frozen=True)
class Traffic:
    votes_per_s: float
    judge_next_per_vote: float = 1.0
    board_reads_per_s: float = 0.0
    not_found_per_s: float = 0.0
    battles_per_s: float = 0.0
    decisions_per_vote: float = 1.0  # each vote's window end resolves its battle (today)
    decided_battles: float = 1e6  # what each refit reads
    client_cpu_ms: float = 0.0  # a load client on the same cores (validate only)
    refits: bool = True  # a ratings worker refits every period (not in the vote ramp)


@dataclass(frozen=True)
class Slo:
    vote_p99_ms: float = 100.0
    undo_window_s: float = 10.0  # decisions done within this after their window ends
    refit_period_s: float = 60.0
    max_utilisation: float = 0.85  # headroom: no resource busier than this


def _figure(raw, path: str) -> tuple[float, str, bool]:
    if not isinstance(raw, dict):
        raise CapacityInputError(f"{path}: expected {{'value': …, 'source': …}}, got {raw!r}")
    value, source = raw.get("value"), raw.get("source")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CapacityInputError(f"{path}.value: expected a number, got {value!r}")
    if value < 0:
        raise CapacityInputError(f"{path}.value: must be ≥ 0, got {value!r}")
    if not isinstance(source, str) or not source.strip():
        raise CapacityInputError(f"{path}.source: every figure names the benchmark and run")
    return float(value), source, bool(raw.get("placeholder", False))


def costs_load(path: str | Path) -> Costs:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise CapacityInputError(f"{path}: cannot read ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise CapacityInputError(f"{path}: not JSON ({exc})") from exc
    return costs_parse(data, str(path))


def costs_parse(data, name: str = "costs") -> Costs:
    if not isinstance(data, dict):
        raise CapacityInputError(f"{name}: expected a JSON object")
    sources: dict[str, str] = {}
    placeholders: list[str] = []
    figures: dict[str, float] = {}

    def take(raw, key: str) -> float:
        value, source, placeholder = _figure(raw, f"{name}: {key}")
        sources[key] = source
        if placeholder:
            placeholders.append(key)
        if key in INTEGER_FIELDS and (value != int(value) or value < 1):
            raise CapacityInputError(f"{name}: {key}.value: expected a whole number ≥ 1")
        return value

    ops_raw = data.get("ops")
    if not isinstance(ops_raw, dict):
        raise CapacityInputError(f"{name}: ops: missing (an object with {', '.join(OPS)})")
    ops = {}
    for op in OPS:
        raw = ops_raw.get(op)
        if not isinstance(raw, dict):
            raise CapacityInputError(f"{name}: ops.{op}: missing")
        values = {}
        for f in OP_FIELDS:
            if f not in raw:
                raise CapacityInputError(f"{name}: ops.{op}.{f}: missing")
            values[f] = take(raw[f], f"ops.{op}.{f}")
        ops[op] = Op(**values)
    for section, names in SECTIONS.items():
        raw = data.get(section)
        if not isinstance(raw, dict):
            raise CapacityInputError(f"{name}: {section}: missing")
        for n in names:
            if n not in raw:
                raise CapacityInputError(f"{name}: {section}.{n}: missing")
            figures[f"{section}.{n}"] = take(raw[n], f"{section}.{n}")
    steps = data.get("validate", {}).get("ramp_steps", {}).get("value")
    if not (isinstance(steps, list) and steps and all(isinstance(s, int) for s in steps)):
        raise CapacityInputError(f"{name}: validate.ramp_steps.value: a list of whole numbers")
    sources["validate.ramp_steps"] = data["validate"]["ramp_steps"].get("source", "")
    return Costs(ops, figures, sources, tuple(placeholders), tuple(sorted(steps)))


def plan_parse(data, name: str = "plan") -> Plan:
    if not isinstance(data, dict):
        raise CapacityInputError(f"{name}: expected a JSON object")
    known = {f.name: f for f in fields(Plan)}
    values = {}
    for key, value in data.items():
        if key not in known:
            raise CapacityInputError(f"{name}: {key}: unknown field (one of {', '.join(known)})")
        kind = known[key].type
        if kind in (int, "int"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CapacityInputError(f"{name}: {key}: expected a whole number ≥ 0")
        elif kind in (bool, "bool"):
            if not isinstance(value, bool):
                raise CapacityInputError(f"{name}: {key}: expected true or false")
        elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise CapacityInputError(f"{name}: {key}: expected a number ≥ 0")
        values[key] = value
    plan = Plan(**values)
    for key in (
        "web_processes",
        "postgres_cores",
        "redis_cache",
        "redis_rq",
        "redis_channels",
        "deciders",
        "decider_batch",
        "workers_ratings",
        "db_pool_per_process",
    ):
        if getattr(plan, key) < 1:
            raise CapacityInputError(f"{name}: {key}: must be ≥ 1")
    return plan


def plan_load(path: str | Path) -> Plan:
    try:
        return plan_parse(json.loads(Path(path).read_text()), str(path))
    except OSError as exc:
        raise CapacityInputError(f"{path}: cannot read ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise CapacityInputError(f"{path}: not JSON ({exc})") from exc

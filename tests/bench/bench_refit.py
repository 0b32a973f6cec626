"""Benchmark: the whole periodic refit (``ratings.refit.arena_refit``: read, fit,
bootstrap, publish, r stamps, board push) on PostgreSQL at 100,000 and 1,000,000 decided
battles (issue #13, point 2; issue #36, item 4). Prints one JSON document.

The battles: 40 agents of Bradley-Terry strengths, 100 deciding judges, 16 evidence
weights, ties and both-bad outcomes; inserted in SQL into a throwaway database made from
DATABASE_URL, none of them in a refit yet (no r). At each size (the tables emptied
before each):

1. ``first_refit``: the first refit, every battle unstamped, timed end to end and by
   phase, measured inside that very run (the refit's own functions wrapped):
   - read: ``refit_input`` (the counts, and the unstamped ids as one array);
   - fit_and_bootstrap: ``fit`` (Newton, intervals, the configured replicates);
   - stamp_r: ``battles_stamp_incorporated`` (r for every counted battle, in the
     snapshot's transaction: one ``Incorporation`` row, an ``IncorporatedBattle`` row
     per battle);
   - push: ``leaderboard_push``, of which stamp_l is ``leaderboard_served`` (ℓ on the
     runs the pushed board shows first: the one run, here);
   - publish_other: the rest (lock, snapshot and points, commit).
2. ``stamp_statements_on_copies``: on fresh copies of the database (CREATE DATABASE …
   TEMPLATE, checkpointed before each timed statement), the stamps alone, then the
   periodic read of the battles no refit includes after 100 more are decided:
   - ``battle_row`` (the reference, the design before this one, commit da875ac): the
     copy's battle table given back the two stamp columns and their partial indexes
     (battle_rated_pending, battle_awaiting_service; ADD COLUMN rewrites nothing, the
     pages stay as full); r by one ``UPDATE … WHERE id = ANY(array) AND r IS NULL``, ℓ
     by the UPDATE of every battle with r and no ℓ, the pending ids by the partial index;
   - ``per_run`` (now): r by ``battles_stamp_incorporated``, ℓ by
     ``leaderboard_served``, the pending ids by the refit's own anti-join
     (``refit_counts``' statement for them).
3. the periodic refit that follows 100 more battles, timed end to end, and its phases
   one by one:
   - read: ``refit_input`` (the database counts the battles per pair, outcome and
     weight, and per judge and pair; the rows it returns are reported);
   - fit: ``rate`` without bootstrap (Newton, model-based and judge-clustered
     intervals);
   - bootstrap: the rest of ``rate`` with the configured replicates;
   - publish: the snapshot and its points, the r stamps, the board push (end to end
     minus the refit's own recorded compute time, which covers the three above in
     that run);
   against the per-row load measured in the same run (``tests/ratings/per_battle.py``:
   one row per rated battle into Python, as the refit read before), with the same fit
   and bootstrap on those arrays.

Other work shares the machine: load averages are printed with every size.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \
     .venv/bin/python tests/bench/bench_refit.py [replicates]
"""

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

from tests.bench.bench_reads import pick, sql_insert  # noqa: E402

SIZES = tuple(int(n) for n in os.environ.get("BENCH_REFIT_SIZES", "100000,1000000").split(","))
AGENTS = 40
JUDGES = 100
WEIGHTS = 16


def world():
    from django.contrib.auth import get_user_model

    from accounts.services import team_create
    from agents.models import Agent, Arena
    from agents.services import roster_install_builtins
    from battles.models import Task

    User = get_user_model()
    arena = Arena.objects.public()
    roster_install_builtins(arena=arena)
    agents = list(Agent.objects.filter(arena=arena).order_by("pk"))
    while len(agents) < AGENTS:
        template = Agent.objects.get(pk=agents[0].pk)
        template.pk, template.slug = None, f"bench-agent-{len(agents)}"
        template.display_name = f"Bench agent {len(agents)}"
        template.save()
        agents.append(Agent.objects.get(pk=template.pk))
    owner = User.objects.create_user("submitter", password=None)
    team = team_create(name="submitters", owner=owner)
    crowd = User.objects.bulk_create([User(username=f"j{i}", password="!") for i in range(JUDGES)])
    task = Task.objects.create(team=team, submitter=owner, instruction="bench task")
    return arena, [a.pk for a in agents[:AGENTS]], [c.pk for c in crowd], team, task


def decide(arena, agent_ids, judge_ids, team, task, *, rows: int, offset: int) -> None:
    """``rows`` decided battles: side A wins with the Bradley-Terry probability of the
    two agents' strengths (index / 8 apart), 10 % ties, 2 % both bad."""
    from battles.models import Battle

    n = len(agent_ids)
    g = f"(g::bigint + {int(offset)})"
    ia = f"(({g} * 7919) % {n})"
    ib = f"(({ia} + 1 + ({g} * 104729) % {n - 1}) % {n})"
    p = f"(1.0 / (1.0 + exp(({ib} - {ia}) / 8.0)))"
    # one roll per battle, a fixed hash of its number (repeatable, and cheap to insert)
    r = f"((({g} * 2654435761) % 1000003) / 1000003.0)"
    outcome = (
        f"CASE WHEN {r} < 0.10 THEN 'tie' WHEN {r} < 0.12 THEN 'both_bad'"
        f" WHEN {r} < 0.12 + 0.88 * {p} THEN 'A' ELSE 'B' END"
    )
    sql_insert(
        Battle,
        rows,
        {
            "arena_id": ("%s", [arena.pk]),
            "team_id": ("%s", [team.pk]),
            "task_id": ("%s", [task.pk]),
            "agent_a_id": pick(agent_ids, ia),
            "agent_b_id": pick(agent_ids, ib),
            "status": "'decided'",
            "outcome": outcome,
            "decision_source": "'crowd'",
            "evidence_weight": f"(1 + ({g} * 13) % {WEIGHTS}) / {WEIGHTS + 1}.0",
            "cluster_judge_id": pick(judge_ids, f"({g} * 31) % {len(judge_ids)}"),
            "submitted_at": "now() - interval '1 day'",
            "ended_at": "now() - interval '1 day'",
            "first_judgment_at": "now() - interval '1 hour'",
            "decided_at": "now() - interval '1 hour'",
        },
    )


def timed(fn):
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


@contextmanager
def phases(timings: dict):
    """Times, inside the refit itself, each call of its parts (``timings[name]``, s)."""
    import ratings.refit as refit_module
    import ratings.services as services_module

    parts = [
        (refit_module, "refit_input", "read"),
        (refit_module, "fit", "fit_and_bootstrap"),
        (refit_module, "battles_stamp_incorporated", "stamp_r"),
        (refit_module, "leaderboard_push", "push"),
        (services_module, "leaderboard_served", "stamp_l"),
    ]
    originals = [(module, attr, getattr(module, attr)) for module, attr, _ in parts]

    def clocked(fn, name):
        def run(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - t

        return run

    for (module, attr, name), (_, _, fn) in zip(parts, originals, strict=True):
        setattr(module, attr, clocked(fn, name))
    try:
        yield timings
    finally:
        for module, attr, fn in originals:
            setattr(module, attr, fn)


def admin(sql: str) -> None:
    """One statement on the server's maintenance database (CREATE/DROP DATABASE)."""
    conf = connection.settings_dict
    with psycopg.connect(
        dbname="postgres", host=conf["HOST"] or None, port=conf["PORT"] or None,
        user=conf["USER"] or None, password=conf["PASSWORD"] or None, autocommit=True,
    ) as admin_connection:  # fmt: skip
        admin_connection.execute(sql)


def checkpoint() -> None:
    """Flush what earlier steps dirtied, so a timed statement does not pay for it."""
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def disconnect() -> None:
    """No session of ours left on the database (the pool's idle ones included)."""
    connection.close()
    if getattr(connection, "pool", None):
        connection.close_pool()


@contextmanager
def on_copy():
    """The default connection on a fresh copy of the bench database, dropped after."""
    source = connection.settings_dict["NAME"]
    copy = f"{source}_copy"
    disconnect()
    admin(f'DROP DATABASE IF EXISTS "{copy}"')
    admin(f'CREATE DATABASE "{copy}" TEMPLATE "{source}" STRATEGY FILE_COPY')
    connection.settings_dict["NAME"] = copy
    try:
        checkpoint()
        yield
    finally:
        disconnect()
        connection.settings_dict["NAME"] = source
        admin(f'DROP DATABASE IF EXISTS "{copy}"')


OLD_COLUMNS = """
    ALTER TABLE battles_battle ADD COLUMN incorporated_at timestamptz NULL,
                               ADD COLUMN leaderboard_served_at timestamptz NULL;
    CREATE INDEX battle_awaiting_service ON battles_battle (arena_id)
     WHERE leaderboard_served_at IS NULL AND incorporated_at IS NOT NULL;
    CREATE INDEX battle_rated_pending ON battles_battle (arena_id)
     WHERE status = 'decided' AND exclusion_reason = '' AND incorporated_at IS NULL
       AND NOT outcome = '';
"""


def pending_ids_now(arena_id: int) -> list[int]:
    """The refit's read of the battles no published refit includes (its own statement,
    as ``refit_counts`` embeds it)."""
    from ratings.selectors import rated_battles

    sql, params = (
        rated_battles(arena_id=arena_id)
        .filter(incorporation__isnull=True)
        .order_by()
        .values("pk")
        .query.sql_with_params()
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(f"SELECT array_agg(pk) FROM ({sql}) AS fresh", params)  # noqa: S608
        return sorted(cursor.fetchone()[0] or ())


def pending_ids_battle_row(arena_id: int) -> list[int]:
    """The same read on the battle row's r (the partial index battle_rated_pending)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(
            "SELECT array_agg(id) FROM battles_battle WHERE arena_id = %s"
            " AND status = 'decided' AND exclusion_reason = '' AND incorporated_at IS NULL"
            " AND NOT outcome = ''",
            [arena_id],
        )
        return sorted(cursor.fetchone()[0] or ())


def stamp_battle_row(arena_id: int, ids: list[int]) -> tuple[int, int]:
    """r as the refit wrote it on the battle row (da875ac)."""
    from django.utils import timezone

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE battles_battle SET incorporated_at = %s"
            " WHERE id = ANY(%s::text::bigint[]) AND incorporated_at IS NULL",
            [timezone.now(), "{" + ",".join(map(str, ids)) + "}"],
        )
        return cursor.rowcount


def serve_battle_row(arena_id: int) -> int:
    from django.utils import timezone

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE battles_battle SET leaderboard_served_at = %s WHERE arena_id = %s"
            " AND leaderboard_served_at IS NULL AND incorporated_at IS NOT NULL",
            [timezone.now(), arena_id],
        )
        return cursor.rowcount


def stamp_per_run(arena_id: int, ids: list[int]) -> int:
    from django.utils import timezone

    from ratings.refit import battles_stamp_incorporated

    with transaction.atomic():
        return battles_stamp_incorporated(
            arena_id=arena_id, snapshot_id=None, battle_ids=ids, at=timezone.now()
        )


def stamp_statements(arena, more) -> dict:
    """r, ℓ, and the next periodic read of the pending ids, on a copy each: the stamps
    on the battle row (the reference) against the stamps per refit run (now)."""
    from ratings.services import leaderboard_served

    designs = {
        "battle_row": (pending_ids_battle_row, stamp_battle_row, serve_battle_row),
        "per_run": (
            pending_ids_now,
            stamp_per_run,
            lambda arena_id: leaderboard_served(arena_id=arena_id),
        ),
    }
    figures = {}
    for name, (pending, stamp, serve) in designs.items():
        with on_copy():
            if name == "battle_row":
                with connection.cursor() as cursor:
                    cursor.execute(OLD_COLUMNS)
                    cursor.execute("ANALYZE battles_battle")
                checkpoint()
            read_s, ids = timed(lambda pending=pending: pending(arena.pk))
            checkpoint()
            r_s, stamped = timed(lambda ids=ids, stamp=stamp: stamp(arena.pk, ids))
            checkpoint()
            l_s, served = timed(lambda serve=serve: serve(arena.pk))
            assert stamped == len(ids) and served == (len(ids) if name == "battle_row" else 1)
            more()  # 100 battles decided since
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            checkpoint()
            periodic_s, fresh = timed(lambda pending=pending: pending(arena.pk))
            assert len(fresh) == 100
            figures[name] = {
                "first_read_pending_ids_s": round(read_s, 2),
                "stamp_r_s": round(r_s, 2),
                "stamp_l_s": round(l_s, 2),
                "periodic_read_pending_ids_s": round(periodic_s, 3),
                "battles": stamped,
                "loadavg": os.getloadavg(),
            }
    return figures


def first_refit(arena_id: int) -> dict:
    from ratings.refit import arena_refit

    checkpoint()
    with phases({}) as timings:
        end_to_end, result = timed(lambda: arena_refit(arena_id=arena_id))
    assert result.snapshot is not None and result.stamped == result.battles
    push = timings["push"]
    parts = ("read", "fit_and_bootstrap", "stamp_r", "push")
    return {
        "battles": result.battles,
        "stamped": result.stamped,
        "end_to_end_s": round(end_to_end, 2),
        "phases_s": {
            "read": round(timings["read"], 2),
            "fit_and_bootstrap": round(timings["fit_and_bootstrap"], 2),
            "stamp_r": round(timings["stamp_r"], 2),
            "push": round(push, 2),
            "push_of_which_stamp_l": round(timings["stamp_l"], 2),
            "publish_other": round(end_to_end - sum(timings[name] for name in parts), 2),
        },
        "outside_the_two_stamps_s": round(end_to_end - timings["stamp_r"] - timings["stamp_l"], 2),
        "compute_ms_recorded": result.compute_ms,
        "loadavg": os.getloadavg(),
    }


def empty_tables() -> None:
    """No battle and no refit: the next size starts from scratch."""
    from battles.models import Battle
    from ratings.models import (
        IncorporatedBattle,
        Incorporation,
        RatingPoint,
        RatingSnapshot,
        RefitState,
    )

    models = (Battle, RefitState, RatingPoint, IncorporatedBattle, Incorporation, RatingSnapshot)
    tables = [m._meta.db_table for m in models]
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


def measure(arena_id: int, replicates: int) -> dict:
    from ratings.bradley_terry import rate
    from ratings.refit import FitParams, arena_refit, refit_input
    from tests.ratings.per_battle import per_battle_input

    params = FitParams.from_settings()
    end_to_end, result = timed(lambda: arena_refit(arena_id=arena_id))
    assert result.snapshot is not None and result.stamped == 100
    read, data = timed(lambda: refit_input(arena_id=arena_id, params=params))
    counts = np.bincount(np.concatenate([data.a, data.b]), np.concatenate([data.count] * 2))
    reference = counts >= params.min_battles

    def ours(bootstrap: int):
        return rate(
            data.a, data.b, data.y, n_agents=len(data.agent_ids), w=data.w, count=data.count,
            clustered=data.clustered, reference=reference, ridge=params.ridge, r0=params.r0,
            bootstrap=bootstrap, seed=data.seed,
        )  # fmt: skip

    fit_s, fitted = timed(lambda: ours(0))
    with_bootstrap_s, _ = timed(lambda: ours(replicates))
    old_read, old = timed(lambda: per_battle_input(arena_id=arena_id))
    old_counts = np.bincount(np.concatenate([old["a"], old["b"]]))

    def theirs(bootstrap: int):
        return rate(
            old["a"], old["b"], old["y"], n_agents=len(old["agent_ids"]), w=old["w"],
            cluster=old["cluster"], reference=old_counts >= params.min_battles,
            ridge=params.ridge, r0=params.r0, bootstrap=bootstrap, seed=data.seed,
        )  # fmt: skip

    old_fit_s, old_fitted = timed(lambda: theirs(0))
    old_with_bootstrap_s, _ = timed(lambda: theirs(replicates))
    ours_by_agent = {data.agent_ids[e.index]: e for e in fitted.agents}
    gap = max(
        abs(getattr(ours_by_agent[old["agent_ids"][e.index]], f) - getattr(e, f))
        for e in old_fitted.agents
        if e.rating is not None
        for f in ("rating", "lower", "upper")
    )
    return {
        "battles": data.battles,
        "rows_read": {"pair_rows": len(data.count), "judge_pair_rows": len(data.clustered.a)},
        "arena_refit_end_to_end_s": round(end_to_end, 3),
        "phases_s": {
            "read": round(read, 3),
            "fit": round(fit_s, 3),
            "bootstrap": round(with_bootstrap_s - fit_s, 3),
            "publish_stamp_push": round(end_to_end - result.compute_ms / 1000, 3),
        },
        "reference_per_row_load_s": {
            "read": round(old_read, 3),
            "fit": round(old_fit_s, 3),
            "bootstrap": round(old_with_bootstrap_s - old_fit_s, 3),
            "read_fit_bootstrap": round(old_read + old_with_bootstrap_s, 3),
        },
        "max_abs_gap_elo_vs_per_row_fit": gap,
        "compute_ms_recorded": result.compute_ms,
        "loadavg": os.getloadavg(),
    }


def main() -> None:
    from django.conf import settings

    replicates = int(sys.argv[1]) if len(sys.argv) > 1 else settings.ARENA.bootstrap_replicates
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=replicates)
    report: dict = {"replicates": replicates, "loadavg_start": os.getloadavg()}
    database = settings.DATABASES["default"]
    database.setdefault("TEST", {})["NAME"] = f"bench_refit_{database['NAME']}"
    config = setup_databases(verbosity=0, interactive=False)
    try:
        arena, agent_ids, judge_ids, team, task = world()
        for size in SIZES:
            empty_tables()
            build, _ = timed(
                lambda size=size: decide(
                    arena, agent_ids, judge_ids, team, task, rows=size, offset=0
                )
            )
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE battles_battle")
            statements = stamp_statements(
                arena,
                lambda size=size: decide(
                    arena, agent_ids, judge_ids, team, task, rows=100, offset=10**8 + size
                ),
            )
            first = first_refit(arena.pk)
            decide(arena, agent_ids, judge_ids, team, task, rows=100, offset=10**8 + size)
            report[f"battles_{size}"] = {
                "build_s": round(build, 1),
                "first_refit": first,
                "stamp_statements_on_copies": statements,
                "periodic_refit": measure(arena.pk, replicates),
            }
    finally:
        disconnect()
        teardown_databases(config, verbosity=0)
    report["loadavg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark: deciding battles whose undo windows have passed (issue 36, item 3). Prints
one JSON document.

The same N due battles (default 5,000; 500 for the RQ runs, at ~10 a second: one final
vote each, as the vote benchmark makes them with ARENA_REDUNDANCY_FRACTION=0; the
builtin roster's three agents, so every decision waits for the same few rating rows; an
assignment per vote) are built afresh in a throwaway database (made from DATABASE_URL)
before each run, and decided by:

1. ``rq_job_per_battle_before``: the code before the decider (the commit before it,
   unpacked by ``git archive``), its way: one ``judging.jobs.battle_resolve`` job per
   battle, run by one ``rqworker judging`` (ArenaSimpleWorker, as ``make run`` starts
   it), jobs already due (the scheduler's move of each from the scheduled registry is
   not counted);
2. ``rq_job_per_battle``: the same with this code (the job is a batch of one);
3. ``decider_batch_1``: one ``manage.py decide --batch 1`` (a transaction per battle,
   no queue);
4. ``decider_1`` / ``decider_2``: one, then two ``manage.py decide`` (batches of 100) at
   once on the same battles.

Per run: battles decided per second (N over the first to the last ``decided_at``: the
decisions themselves, start-up excluded), the wall time of the processes, their CPU per
decision (user + system of the children, less what the same command costs when there is
nothing to do: Django's start-up), PostgreSQL's CPU over the run (every ``postgres``
process this user can read, exited backends included through their parent; other
sessions' queries too), the load average, and the database check (every battle decided,
each streaming rating moved exactly once: ``decisions_state``).

``decisions_state()`` is also the soak's checker (tests/bench/bench_vote_soak.py): call it
on the arena's own database at any time.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \
     BENCH_REDIS_URL=redis://127.0.0.1:6379/15 \
     .venv/bin/python tests/bench/bench_decisions.py [--battles 5000] [--runs ...]
(BENCH_REPO: the git repository, when this runs from an export of it.)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BEFORE_COMMIT = "d0db20e"  # the last commit with one RQ job per battle
RUNS = ("rq_job_per_battle_before", "rq_job_per_battle", "decider_batch_1", "decider_1",
        "decider_2")  # fmt: skip


def decisions_state(*, grace_s: float = 5.0) -> dict:
    """The decision path's health, read from the database (Django set up):

    - ``pending_due``: battles being judged whose ``decide_due_at`` has come;
      ``oldest_due_age_s``: how long the oldest of them has been due (None: none is);
    - ``overdue_votes``: live votes final more than ``grace_s`` ago on battles still
      being judged (with redundancy 0 and no probation to wait for, each is a missed
      decision; a redundancy battle waiting for its third judge counts here too);
    - ``decided_without_streaming``: battles the crowd or the submitting team decided
      with no streaming update recorded;
    - ``rating_count_mismatches``: agents whose rated-battle count differs from the
      decided battles with a streaming update they played (one applied twice, or lost);
    - ``ok``: all of the above zero (``pending_due`` older than ``grace_s`` counts).
    """
    from django.db.models import Count, Min
    from django.utils import timezone

    from battles.models import Battle
    from judging.models import Vote
    from ratings.models import AgentRating

    now = timezone.now()
    judging = Battle.objects.filter(status=Battle.Status.JUDGING)
    due = judging.filter(decide_due_at__lte=now)
    oldest = due.aggregate(oldest=Min("decide_due_at"))["oldest"]
    late = due.filter(decide_due_at__lte=now - timedelta(seconds=grace_s)).count()
    overdue = Vote.objects.filter(
        retracted=False,
        final_at__lte=now - timedelta(seconds=grace_s),
        battle__status=Battle.Status.JUDGING,
    ).count()
    human = (Battle.DecisionSource.CROWD, Battle.DecisionSource.SUBMITTER)
    decided = Battle.objects.filter(status=Battle.Status.DECIDED)
    unapplied = decided.filter(decision_source__in=human, streaming_applied=None).count()
    applied = decided.filter(streaming_applied__isnull=False)
    played: dict[int, int] = {}
    for side in ("agent_a_id", "agent_b_id"):
        for row in applied.values(side).annotate(n=Count("pk")):
            played[row[side]] = played.get(row[side], 0) + row["n"]
    counts = dict(AgentRating.objects.values_list("agent_id", "rated_battles"))
    mismatches = {
        agent_id: {"rated_battles": counts.get(agent_id, 0), "decided_with_update": n}
        for agent_id, n in played.items()
        if counts.get(agent_id, 0) != n
    }
    for agent_id, n in counts.items():
        if n and agent_id not in played:
            mismatches[agent_id] = {"rated_battles": n, "decided_with_update": 0}
    return {
        "pending_due": due.count(),
        "pending_due_late": late,
        "oldest_due_age_s": round((now - oldest).total_seconds(), 3) if oldest else None,
        "overdue_votes": overdue,
        "decided_without_streaming": unapplied,
        "rating_count_mismatches": mismatches,
        "decided": decided.count(),
        "ok": not (late or overdue or unapplied or mismatches),
    }


# --- the benchmark ------------------------------------------------------------------


def world():
    from django.contrib.auth import get_user_model

    from accounts.services import team_create
    from agents.models import Agent, Arena
    from agents.services import roster_install_builtins
    from battles.models import Task

    User = get_user_model()
    arena = Arena.objects.public()
    roster_install_builtins(arena=arena)
    agents = list(Agent.objects.filter(arena=arena).order_by("pk").values_list("pk", flat=True))
    owner = User.objects.create_user("submitter", password=None)
    team = team_create(name="submitters", owner=owner)
    judges = User.objects.bulk_create([User(username=f"j{i}", password="!") for i in range(200)])
    task = Task.objects.create(team=team, submitter=owner, instruction="bench task")
    return arena, agents, [j.pk for j in judges], team, task


def build(arena, agents, judges, team, task, count: int) -> list[int]:
    """``count`` battles being judged, each with one final admissible vote and the
    voter's assignment, due a minute ago; the agents' rating rows made (the steady
    state). Everything of an earlier run removed first."""
    from django.db import connection

    from battles.models import Battle
    from judging.models import Assignment, Vote
    from ratings.services import agent_rating
    from tests.bench.bench_reads import pick, sql_insert

    with connection.cursor() as cursor:
        for table in ("judging_vote", "judging_assignment", "judging_exclusionlogentry",
                      "battles_battle", "ratings_agentrating"):  # fmt: skip
            cursor.execute(f"DELETE FROM {table}")  # noqa: S608 (fixed names)
    n = len(agents)
    sql_insert(
        Battle,
        count,
        {
            "arena_id": ("%s", [arena.pk]),
            "team_id": ("%s", [team.pk]),
            "task_id": ("%s", [task.pk]),
            "agent_a_id": pick(agents, f"g % {n}"),
            "agent_b_id": pick(agents, f"(g + 1) % {n}"),
            "status": "'judging'",
            "submitted_at": "now() - interval '20 minutes'",
            "ended_at": "now() - interval '10 minutes'",
            "admissible_votes": "1",
            "decide_due_at": "now() - interval '1 minute' + g * interval '1 microsecond'",
        },
    )
    ids = list(Battle.objects.order_by("pk").values_list("pk", flat=True))
    if not ids:
        return ids
    first = ids[0]
    judge = pick(judges, f"g % {len(judges)}")
    sql_insert(
        Assignment,
        count,
        {"judge_id": judge, "battle_id": f"{first} - 1 + g",
         "served_at": "now() - interval '5 minutes'"},
    )  # fmt: skip
    sql_insert(
        Vote,
        count,
        {
            "judge_id": judge,
            "battle_id": f"{first} - 1 + g",
            "choice": "(ARRAY['A', 'B', 'tie'])[1 + g % 3]",
            "served_at": "now() - interval '5 minutes'",
            "voted_at": "now() - interval '2 minutes'",
            "final_at": "now() - interval '1 minute'",
            "admissible": "true",
            "inadmissible_reason": "''",
        },
    )
    from agents.models import Agent

    for agent in Agent.objects.filter(pk__in=agents):
        agent_rating(agent)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return ids


def postgres_cpu_s() -> float | None:
    """CPU seconds of every readable ``postgres`` process, its reaped children included
    (a backend that exited is counted in its parent's)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, seen = 0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if not name.startswith("postgres"):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parent_is_postgres = False
        try:
            parent = (Path("/proc") / fields[1] / "stat").read_text()
            parent_is_postgres = "(postgres" in parent
        except OSError:
            pass
        # utime, stime, and for the postmaster (no postgres parent) its children's
        own = int(fields[11]) + int(fields[12])
        reaped = 0 if parent_is_postgres else int(fields[13]) + int(fields[14])
        total += own + reaped
        seen = True
    return total / tick if seen else None


def children(commands: list[list[str]], *, cwd: Path, env: dict) -> dict:
    """Runs the commands at once to their end; wall time and their CPU (rusage)."""
    started = time.perf_counter()
    logs = []
    procs = []
    for command in commands:
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
        logs.append(log)
        procs.append(subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=log))
    cpu, codes = 0.0, []
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        codes.append(proc.returncode)
        cpu += usage.ru_utime + usage.ru_stime
    wall = time.perf_counter() - started
    loops = []  # what each decider says its loop cost (manage.py decide's last line)
    for log in logs:
        log.seek(0)
        output = log.read().decode(errors="replace")
        if any(codes):
            sys.stderr.write(output[-4000:])
        loops += [json.loads(line)["decider"] for line in output.splitlines()
                  if line.startswith('{"decider"')]  # fmt: skip
        log.close()
    if any(codes):
        raise SystemExit(f"a child failed: {codes}")
    return {"wall_s": wall, "cpu_s": cpu, "loops": loops}


def decided_rate(ids: list[int]) -> dict:
    from django.db.models import Max, Min

    from battles.models import Battle

    span = Battle.objects.filter(pk__in=ids, status="decided").aggregate(
        first=Min("decided_at"), last=Max("decided_at")
    )
    seconds = (span["last"] - span["first"]).total_seconds() if span["first"] else 0.0
    return {"decisions_span_s": round(seconds, 3),
            "battles_per_s": round(len(ids) / seconds, 1) if seconds else None}  # fmt: skip


def commands_of(run: str, python: str) -> tuple[list[list[str]], bool]:
    """The run's commands and whether it decides through RQ jobs."""
    worker = [python, "manage.py", "rqworker", "judging", "--burst",
              "--worker-class", "arena_site.worker.ArenaSimpleWorker"]  # fmt: skip
    decide = [python, "manage.py", "decide", "--until-idle"]
    return {
        "rq_job_per_battle_before": ([worker], True),
        "rq_job_per_battle": ([worker], True),
        "decider_batch_1": ([[*decide, "--batch", "1"]], False),
        "decider_1": ([[*decide, "--batch", "100"]], False),
        "decider_2": ([[*decide, "--batch", "100"]] * 2, False),
    }[run]


def before_tree(workdir: Path) -> Path:
    """The code before the decider, unpacked (its migrations are not run: the schema is
    this code's, a superset)."""
    tree = workdir / "before"
    tree.mkdir()
    repo = os.environ.get("BENCH_REPO", str(ROOT))  # (when this runs from an export)
    archive = subprocess.run(["git", "archive", BEFORE_COMMIT], cwd=repo, capture_output=True,
                             check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    (tree / ".venv").symlink_to(ROOT / ".venv")
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--battles", type=int, default=5000)
    parser.add_argument("--rq-battles", type=int, default=500,
                        help="battles of the RQ runs (one job each: ~10/s)")  # fmt: skip
    parser.add_argument("--runs", default=",".join(RUNS), help=f"of {', '.join(RUNS)}")
    args = parser.parse_args()
    runs = [r for r in args.runs.split(",") if r]
    assert set(runs) <= set(RUNS), runs

    os.environ["REDIS_URL"] = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
    os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")
    import django

    django.setup()
    import django_rq
    from django.conf import settings
    from django.test.utils import setup_databases, teardown_databases

    from tests.servers import database_url_for_children

    database = settings.DATABASES["default"]
    assert database["ENGINE"].endswith("postgresql"), "PostgreSQL only (DATABASE_URL)"
    database.setdefault("TEST", {})["NAME"] = f"bench_decisions_{database['NAME']}"
    report: dict = {"battles": args.battles, "rq_battles": args.rq_battles, "agents": 3,
                    "loadavg_start": os.getloadavg(), "runs": {}}  # fmt: skip
    config = setup_databases(verbosity=0, interactive=False)
    workdir = Path(tempfile.mkdtemp(prefix="bench-decisions-"))
    try:
        env = {**os.environ, "DATABASE_URL": database_url_for_children(),
               "ARENA_LOG_LEVEL": "WARNING"}  # fmt: skip
        python = str(ROOT / ".venv" / "bin" / "python")
        queue = django_rq.get_queue("judging")
        queue.empty()
        assert queue.count == 0
        arena, agents, judges, team, task = world()
        tree = before_tree(workdir) if "rq_job_per_battle_before" in runs else None
        for run in runs:
            cwd = tree if run.endswith("_before") else ROOT
            commands, rq = commands_of(run, python)
            build(arena, agents, judges, team, task, 0)
            idle = children(commands, cwd=cwd, env=env)  # start-up and stop alone
            ids = build(arena, agents, judges, team, task, args.rq_battles if rq else args.battles)
            if rq:
                with django_rq.get_connection("judging").pipeline() as pipe:
                    for battle_id in ids:
                        queue.enqueue("judging.jobs.battle_resolve", battle_id, pipeline=pipe)
                    pipe.execute()
            load = os.getloadavg()
            pg_before = postgres_cpu_s()
            ran = children(commands, cwd=cwd, env=env)
            pg_after = postgres_cpu_s()
            state = decisions_state(grace_s=0)
            cpu = max(0.0, ran["cpu_s"] - idle["cpu_s"])
            pg_ms = None
            if pg_before is not None and pg_after is not None:
                pg_ms = round(1000 * (pg_after - pg_before) / len(ids), 3)
            report["runs"][run] = {
                "processes": len(commands),
                "battles": len(ids),
                **decided_rate(ids),
                "wall_s": round(ran["wall_s"], 2),
                "startup_wall_s": round(idle["wall_s"], 2),
                "process_cpu_ms_per_decision": round(1000 * cpu / len(ids), 3),
                "process_cpu_s": round(ran["cpu_s"], 2),
                "startup_cpu_s": round(idle["cpu_s"], 2),
                "postgres_cpu_ms_per_decision": pg_ms,
                "decider_loops": ran["loops"],  # the deciders' own count, CPU and wall
                "loadavg": [round(x, 2) for x in load],
                "check": state,
            }
            print(json.dumps({run: report["runs"][run]}), file=sys.stderr, flush=True)
    finally:
        teardown_databases(config, verbosity=0)
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
    report["loadavg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

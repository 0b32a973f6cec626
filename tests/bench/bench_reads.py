"""Benchmark: the reads that grow with the arena (issue #13, point 4). Prints one JSON
document.

- judge_next: ``GET /api/judge/next/`` with 10,000 open (status judging) battles, half
  of them already holding one or two admissible votes, every judge with live votes on
  20 of them and a tenth of them their own team's; each request by a judge holding
  nothing (the candidate search runs every time). Against the previous query shape in
  the same run: the ORM queryset that counted the admissible votes of every open
  battle (``reference_judge_next`` below), served through the same view, the two
  alternating judge by judge on the same state; both must serve the same battle.
- leaderboard: ``GET /api/leaderboard/`` with 100,000 decided battles (5,000 excluded,
  5,000 self-judged, 200 not yet in a refit) among 20 agents, after a refit: the
  precomputed document (``ratings.services.leaderboard_current``); the same read right
  after a write (the version moved before each request: the board built every time);
  and, as the reference, built every time with the indexes of
  battles/migrations/0011_reads_at_scale dropped (in a transaction rolled back
  afterwards): the previous plans.

Both through the real HTTP stack in process: Django's test ``Client`` (URL routing,
middleware, sessions, DRF, JSON rendering; no socket, no ASGI server): wall time, and
the CPU time of the web process per request (``time.process_time``: what a busy machine
inflates least). The judge's candidate search is also timed alone, against the previous
queryset. The database is
a throwaway one made from DATABASE_URL (created and dropped here).
Targets: both ≤ 20 ms p50.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena \
     .venv/bin/python tests/bench/bench_reads.py
"""

import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

# BENCH_READS_SCALE=0.05 for a quick try; the figures are at 1
SCALE = float(os.environ.get("BENCH_READS_SCALE", "1"))
OPEN_BATTLES = int(10_000 * SCALE)
DECIDED_BATTLES = int(100_000 * SCALE)
JUDGES = 150
TARGET_P50_MS = 20.0


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 2),
        "n": len(ordered),
    }


def sql_insert(model, rows: int, values: dict[str, str | tuple[str, list]]) -> None:
    """INSERT … SELECT over generate_series(1, rows) AS g: ``values`` maps a column to a
    SQL expression of g, or to (expression, its parameters); every other column gets
    NULL or the field's default."""
    table = connection.ops.quote_name(model._meta.db_table)
    columns, exprs, args = [], [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(connection.ops.quote_name(field.column))
        given = values.get(field.column)
        if given is not None:
            expr, params = (given, []) if isinstance(given, str) else given
            exprs.append(re.sub(r"%(?!s)", "%%", expr))  # modulo, not a placeholder
            args.extend(params)
        elif field.null:
            exprs.append("NULL")
        else:
            exprs.append("%s")
            args.append(field.get_db_prep_save(field.get_default(), connection))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(exprs)}"  # noqa: S608
            f" FROM generate_series(1, {int(rows)}) AS g",
            args,
        )


def pick(ids: list[int], index: str) -> tuple[str, list]:
    """SQL choosing ids[index expression] (0-based)."""
    return f"(%s::bigint[])[1 + ({index})]", [list(ids)]


def world():
    """The arena, its agents, a submitting team, a crowd and the measured judges."""
    from django.contrib.auth import get_user_model

    from accounts.models import Membership
    from accounts.services import consent_accept, consent_terms_publish, team_create
    from agents.models import Agent, Arena
    from agents.services import roster_install_builtins
    from battles.models import Task
    from judging.models import JudgeProfile

    User = get_user_model()
    arena = Arena.objects.public()
    roster_install_builtins(arena=arena)
    agents = list(Agent.objects.filter(arena=arena).order_by("pk"))
    while len(agents) < 20:
        template = Agent.objects.get(pk=agents[0].pk)
        template.pk, template.slug = None, f"bench-agent-{len(agents)}"
        template.display_name = f"Bench agent {len(agents)}"
        template.save()
        agents.append(Agent.objects.get(pk=template.pk))
    terms = consent_terms_publish(text="bench")
    owner = User.objects.create_user("submitter", password=None)
    consent_accept(user=owner, terms=terms)
    team = team_create(name="submitters", owner=owner)
    judges_owner = User.objects.create_user("judges-owner", password=None)
    judges_team = team_create(name="judges", owner=judges_owner)
    people = User.objects.bulk_create(
        [User(username=f"judge{i}", password="!") for i in range(JUDGES)]
        + [User(username=f"crowd{i}", password="!") for i in range(40)]
    )
    judges, crowd = people[:JUDGES], people[JUDGES:]
    for person in people:
        consent_accept(user=person, terms=terms)
    JudgeProfile.objects.bulk_create([JudgeProfile(user=p, trust=0.5) for p in people])
    Membership.objects.bulk_create([Membership(team=judges_team, user=j) for j in judges])
    # a conflict of interest: the judges' team entered one of the agents
    Agent.objects.filter(pk=agents[5].pk).update(team=judges_team)
    task = Task.objects.create(team=team, submitter=owner, instruction="bench task")
    own_task = Task.objects.create(team=judges_team, submitter=judges_owner, instruction="own")
    return arena, agents, team, judges_team, task, own_task, judges, crowd


def build_open_battles(arena, agents, team, judges_team, task, own_task, judges, crowd):
    from battles.models import Battle, Run
    from judging.models import Vote

    ids = [a.pk for a in agents]
    n = len(ids)
    sql_insert(
        Battle,
        OPEN_BATTLES,
        {
            "arena_id": ("%s", [arena.pk]),
            "team_id": ("CASE WHEN g % 10 = 0 THEN %s ELSE %s END", [judges_team.pk, team.pk]),
            "task_id": ("CASE WHEN g % 10 = 0 THEN %s ELSE %s END", [own_task.pk, task.pk]),
            "agent_a_id": pick(ids, f"g % {n}"),
            "agent_b_id": pick(ids, f"(g % {n} + 1 + (g / {n}) % {n - 1}) % {n}"),
            "status": "'judging'",
            "redundancy_target": "3",
            "submitted_at": "now() - interval '3 hours' + g * interval '1 second'",
            "ended_at": "now() - interval '2 hours' + g * interval '1 second'",
        },
    )
    battles = list(
        Battle.objects.filter(status="judging").order_by("pk").values_list("pk", flat=True)
    )
    sql_insert(
        Run,
        2 * OPEN_BATTLES,
        {
            "battle_id": pick(battles, "(g - 1) / 2"),
            "side": "CASE WHEN g % 2 = 1 THEN 'A' ELSE 'B' END",
            "agent_id": ("%s", [ids[0]]),
            "status": "'ended'",
            "step_budget": "20",
            "wall_budget_s": "300",
            "final_message": "'The answer is 42, found on the page.'",
        },
    )
    # half the open battles hold one or two admissible crowd votes; every judge has
    # live votes on 20 of them
    now = django.utils.timezone.now()
    votes = []
    for n, pk in enumerate(battles):
        if n % 2:
            for k in range(1 + (n % 3 == 1)):
                votes.append((crowd[(n + k) % len(crowd)].pk, pk))
    for j, judge in enumerate(judges):
        for k in range(20):
            votes.append((judge.pk, battles[(j * 37 + k * 499) % len(battles)]))
    unique = list(dict.fromkeys(votes))
    Vote.objects.bulk_create(
        [
            Vote(
                judge_id=u,
                battle_id=b,
                choice="A",
                served_at=now,
                voted_at=now,
                final_at=now,
                admissible=True,
            )
            for u, b in unique
        ],
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE battles_battle b SET admissible_votes = v.n FROM (SELECT battle_id,"
            " count(*) n FROM judging_vote WHERE NOT retracted AND admissible GROUP BY"
            " battle_id) v WHERE v.battle_id = b.id"
        )
    return battles


def build_decided_battles(arena, agents, team, task, crowd):
    from battles.models import Battle

    ids = [a.pk for a in agents]
    n = len(ids)
    judge_ids = [c.pk for c in crowd]
    decided = "g % 20 <> 7"
    sql_insert(
        Battle,
        DECIDED_BATTLES,
        {
            "arena_id": ("%s", [arena.pk]),
            "team_id": ("%s", [team.pk]),
            "task_id": ("%s", [task.pk]),
            "agent_a_id": pick(ids, f"g % {n}"),
            "agent_b_id": pick(ids, f"(g % {n} + 1 + (g * 7919) % {n - 1}) % {n}"),
            "status": f"CASE WHEN {decided} THEN 'decided' ELSE 'excluded' END",
            "outcome": f"CASE WHEN NOT {decided} THEN '' WHEN (g * 31) % 7 < 4 THEN 'A'"
            " WHEN (g * 31) % 7 < 6 THEN 'B' ELSE 'tie' END",
            "exclusion_reason": f"CASE WHEN {decided} THEN '' ELSE"
            " (ARRAY['named_model','no_trajectory','no_admissible_vote'])[1 + g % 3] END",
            "decision_source": f"CASE WHEN NOT {decided} THEN '' WHEN g % 20 = 3"
            " THEN 'submitter' ELSE 'crowd' END",
            "evidence_weight": f"CASE WHEN {decided} THEN 0.5 + (g % 3) * 0.25 END",
            "cluster_judge_id": (
                f"CASE WHEN {decided} THEN (%s::bigint[])[1 + g % {len(judge_ids)}] END",
                [judge_ids],
            ),
            "submitted_at": "now() - interval '30 days' + g * interval '20 seconds'",
            "ended_at": "now() - interval '30 days' + g * interval '20 seconds'",
            "first_judgment_at": "now() - interval '30 days' + g * interval '21 seconds'",
            "decided_at": f"CASE WHEN {decided} THEN now() - interval '30 days'"
            " + g * interval '21 seconds' END",
        },
    )
    # r and ℓ on all but the newest 200: one refit run (ratings.models.Incorporation)
    stamped(arena, DECIDED_BATTLES - 200)


def stamped(arena, n: int) -> None:
    """The arena's first ``n`` decided or excluded battles (submission order) as
    included by one refit run, served since."""
    from django.utils import timezone

    from battles.models import Battle
    from ratings.models import IncorporatedBattle, Incorporation

    now = timezone.now()
    run = Incorporation.objects.create(arena=arena, incorporated_at=now, leaderboard_served_at=now)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {IncorporatedBattle._meta.db_table} (battle_id, incorporation_id)"  # noqa: S608
            f" SELECT id, %s FROM (SELECT id FROM {Battle._meta.db_table}"
            " WHERE arena_id = %s AND status IN ('decided', 'excluded')"
            " ORDER BY submitted_at, id LIMIT %s) AS first",
            [run.pk, arena.pk, n],
        )


def reference_judge_next(*, judge, **_):
    """judge_next as it was before issue #13: the candidate query annotated every open
    battle with a count of its admissible votes (a GROUP BY over the battles and their
    votes), then ordered them all."""
    from django.utils import timezone

    from judging.models import Assignment
    from judging.services.serving import (
        judge_approval_check,
        judge_consent_check,
        judge_profile,
        judge_rate_check,
    )

    judge_rate_check(judge=judge, scope="next")
    judge_consent_check(judge=judge)
    profile = judge_profile(judge)
    judge_approval_check(judge=judge, profile=profile)
    battle = reference_candidates(judge).select_related("task").first()
    if battle is None:
        return None
    Assignment.objects.get_or_create(
        judge=judge, battle=battle, defaults={"served_at": timezone.now()}
    )
    return battle


def reference_candidates(judge):
    """The previous candidate queryset, ordered (tests/judging/reference_next.py)."""
    from tests.judging.reference_next import reference_candidates as reference

    return reference(judge)


def bench_judge_next(judges) -> dict:
    from django.test import Client

    from judging.models import Assignment

    clients = []
    for judge in judges:
        client = Client()
        client.force_login(judge)
        # one web process: one handler (its middleware chain is built once; a Client of
        # its own would build it again on its first request, and WhiteNoise's start-up
        # scan of the static files would be measured as the view's cost)
        if clients:
            client.handler = clients[0].handler
        clients.append(client)
    ours, reference, agree, served = [], [], 0, set()
    ours_cpu, reference_cpu = [], []
    for warm in clients[:5]:  # connections, caches, first compilations
        warm.get("/api/judge/next/")
    Assignment.objects.all().delete()
    for client, judge in zip(clients, judges, strict=True):
        t, cpu = time.perf_counter(), time.process_time()
        mine = client.get("/api/judge/next/")
        ours.append(time.perf_counter() - t)
        ours_cpu.append(time.process_time() - cpu)
        Assignment.objects.filter(judge=judge).delete()
        with mock.patch("judging.api.judge_next", reference_judge_next):
            t, cpu = time.perf_counter(), time.process_time()
            theirs = client.get("/api/judge/next/")
            reference.append(time.perf_counter() - t)
            reference_cpu.append(time.process_time() - cpu)
        Assignment.objects.filter(judge=judge).delete()
        assert mine.status_code == theirs.status_code == 200, (mine.content, theirs.content)
        agree += mine.json()["id"] == theirs.json()["id"]
        served.add(mine.json()["id"])
    # a judge asking again gets the battle they hold (the held path)
    held, held_cpu = [], []
    for client in clients[:50]:
        client.get("/api/judge/next/")
        t, cpu = time.perf_counter(), time.process_time()
        client.get("/api/judge/next/")
        held.append(time.perf_counter() - t)
        held_cpu.append(time.process_time() - cpu)
    # the candidate search alone (no HTTP stack), ours against the previous queryset
    from judging.selectors import dangerously_next_battle_id_for_judge

    query, query_reference = [], []
    for judge in judges[:60]:
        t = time.perf_counter()
        dangerously_next_battle_id_for_judge(judge_id=judge.pk)
        query.append(time.perf_counter() - t)
        t = time.perf_counter()
        reference_candidates(judge).first()
        query_reference.append(time.perf_counter() - t)
    return {
        "open_battles": OPEN_BATTLES,
        "requests": len(judges),
        "ours": summary(ours),
        "ours_web_process_cpu": summary(ours_cpu),
        "reference_previous_query": summary(reference),
        "reference_web_process_cpu": summary(reference_cpu),
        "candidate_search_only": summary(query),
        "candidate_search_only_reference": summary(query_reference),
        "same_battle_served": f"{agree}/{len(judges)}",
        "distinct_battles_served": len(served),
        "held_battle_again": summary(held),
        "held_battle_again_web_process_cpu": summary(held_cpu),
    }


# (battle_rated_pending, the third, went with r: battles 0022; pending battles are an
# anti-join on ratings.IncorporatedBattle's primary key)
NEW_INDEXES = ["battle_self_judged", "battle_excluded"]


def bench_leaderboard() -> dict:
    from django.test import Client

    from agents.models import Arena
    from ratings.services import _board_version_bump  # what leaderboard_changed runs

    client = Client()
    arena_id = Arena.objects.public().pk
    cpus: list[float] = []

    def measure(n: int, *, after_a_write: bool = False) -> list[float]:
        samples = []
        cpus.clear()
        for i in range(n):
            if after_a_write:  # what every writer's commit does: the next read builds
                _board_version_bump(arena_id)
            # one client address per request: the anonymous throttle is not measured
            address = f"10.{i % 200}.{len(samples) % 200}.{time.perf_counter_ns() % 250 + 1}"
            t, cpu = time.perf_counter(), time.process_time()
            response = client.get("/api/leaderboard/", REMOTE_ADDR=address)
            samples.append(time.perf_counter() - t)
            cpus.append(time.process_time() - cpu)
            assert response.status_code == 200, (response.status_code, response.content[:300])
        return samples

    measure(5)
    ours = measure(200)
    ours_cpu = list(cpus)
    built = measure(200, after_a_write=True)  # the board built on every read
    built_cpu = list(cpus)
    # The previous plans, in a transaction rolled back: a board built there is never
    # stored, and a writer's hook would wait for a commit that never comes, so the
    # version moves directly before each read (every read builds the board).
    with transaction.atomic():
        with connection.cursor() as cursor:
            for name in NEW_INDEXES:
                cursor.execute(f'DROP INDEX "{name}"')
        measure(5, after_a_write=True)
        reference = measure(200, after_a_write=True)
        reference_cpu = list(cpus)
        transaction.set_rollback(True)
    again = measure(200)
    body = client.get("/api/leaderboard/").json()
    return {
        "decided_battles": DECIDED_BATTLES,
        "rows": len(body["rows"]),
        "refit_battles": body["refit"]["battles"],
        "ours": summary(ours),
        "ours_web_process_cpu": summary(ours_cpu),
        "ours_again_after_reference": summary(again),
        "built_on_every_read": summary(built),
        "built_on_every_read_web_process_cpu": summary(built_cpu),
        "reference_without_new_indexes": summary(reference),
        "reference_web_process_cpu": summary(reference_cpu),
    }


def bench_through_servers(judges, servers: list[str]) -> dict:
    """``GET /api/judge/next/`` (a judge holding nothing: the candidate search every
    time; bearer token), ``GET /api/leaderboard/`` (anonymous) and the 404 floor
    ``GET /api/nope/``, sequential and interleaved on one kept-alive connection, through
    one process of each server (tests/bench/web.py), each started on the same data in
    the same run. CPU: the server process's own, per request."""
    import http.client
    import socket
    import tempfile

    from accounts.services import api_token_create
    from judging.models import Assignment
    from tests.bench.web import WebServers
    from tests.servers import database_url_for_children

    tokens = [api_token_create(user=judge, name="bench-reads")[1] for judge in judges]
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_children(),
        "PYTHONUNBUFFERED": "1",
        "ARENA_JUDGE_NEXT_RATE_PER_MIN": str(10**6),
        # the anonymous throttle counts per client address: each board read comes
        # "from" an address of its own through a trusted loopback proxy, as in process
        "ARENA_TRUSTED_PROXIES": "127.0.0.1/32",
    }
    out: dict = {}
    logs = Path(tempfile.mkdtemp(prefix="bench-reads-"))
    for server in servers:
        web = WebServers(1, logs, env, server=server)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def timed(path: str, token: str | None = None, web=web, conn=conn):
                if token:
                    headers = {"Authorization": f"Bearer {token}"}
                else:
                    n = time.perf_counter_ns()
                    headers = {"X-Forwarded-For": f"10.{n % 250}.{n // 250 % 250}.{n % 199 + 1}"}
                cpu, t = web.cpu_s(), time.perf_counter()
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                response.read()
                return time.perf_counter() - t, web.cpu_s() - cpu, response.status

            for token in tokens[:5]:  # warm: connections, caches, first compilations
                timed("/api/judge/next/", token)
                timed("/api/leaderboard/")
            Assignment.objects.all().delete()
            runs: dict[str, tuple[list[float], list[float]]] = {
                k: ([], []) for k in ("judge_next", "leaderboard", "floor_404")
            }
            for judge, token in zip(judges, tokens, strict=True):
                for key, path, auth in (
                    ("judge_next", "/api/judge/next/", token),
                    ("leaderboard", "/api/leaderboard/", None),
                    ("floor_404", "/api/nope/", None),
                ):
                    wall, cpu, status = timed(path, auth)
                    expected = 404 if key == "floor_404" else 200
                    assert status == expected, (server, path, status)
                    runs[key][0].append(wall)
                    runs[key][1].append(cpu)
                Assignment.objects.filter(judge=judge).delete()
            conn.close()
        finally:
            web.stop()
        out[server] = {
            key: {**summary(walls), "server_cpu_mean_ms": round(1000 * sum(cpus) / len(cpus), 3)}
            for key, (walls, cpus) in runs.items()
        }
    return out


def main() -> None:
    from django.conf import settings

    settings.ARENA = settings.ARENA.replace(judge_next_rate_per_min=10**6, bootstrap_replicates=100)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]  # the test Client's
    report: dict = {"loadavg_start": os.getloadavg()}
    database = settings.DATABASES["default"]
    # a name of its own: the test suite may be using test_<name> at the same time
    database.setdefault("TEST", {})["NAME"] = f"bench_reads_{database['NAME']}"
    config = setup_databases(verbosity=0, interactive=False)
    try:
        arena, agents, team, judges_team, task, own_task, judges, crowd = world()
        t = time.perf_counter()
        build_open_battles(arena, agents, team, judges_team, task, own_task, judges, crowd)
        build_decided_battles(arena, agents, team, task, crowd)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        from ratings.refit import arena_refit

        arena_refit(arena_id=arena.pk)
        report["build_s"] = round(time.perf_counter() - t, 1)
        report["loadavg_before_measuring"] = os.getloadavg()
        report["judge_next"] = bench_judge_next(judges)
        print(json.dumps(report["judge_next"]), file=sys.stderr)
        report["loadavg_after_judge_next"] = os.getloadavg()
        report["leaderboard"] = bench_leaderboard()
        report["loadavg_after_leaderboard"] = os.getloadavg()
        servers = os.environ.get("BENCH_READS_SERVERS", "uvicorn,daphne").split(",")
        report["through_servers"] = bench_through_servers(judges, servers)
        report["loadavg_end"] = os.getloadavg()
    finally:
        connection.close()
        teardown_databases(config, verbosity=0)
    report["http"] = (
        "judge_next, leaderboard: django.test.Client, in process (no socket, no ASGI "
        "server); through_servers: one process of each server on loopback"
    )
    report["targets"] = {"judge_next_p50_ms": TARGET_P50_MS, "leaderboard_p50_ms": TARGET_P50_MS}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

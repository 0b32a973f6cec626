"""``manage.py capacity_plan``: the smallest deployment that meets the arena's SLOs at a
given traffic, found by simulation driven by the measured costs (arena_site/capacity.py,
docs/performance.md "A capacity plan for a public arena"); ``--validate`` simulates this
machine and compares the predicted highest clean vote rate with the measured one.
Touches no database. It lives with the other operations commands (backup, restore)."""

import sys

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from arena_site import capacity, capacity_search, strict_json
from arena_site.capacity_inputs import CapacityInputError, Plan, Slo, Traffic, costs_load, plan_load


class Command(BaseCommand):
    help = "Size web processes, PgBouncer, PostgreSQL, Redis, deciders and workers by simulation."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--costs", default="docs/capacity-costs.json", help="measured costs")
        parser.add_argument("--votes-per-s", type=float, default=10_000.0)
        parser.add_argument("--judge-next-per-vote", type=float, default=1.0)
        parser.add_argument(
            "--board-reads-per-s", type=float, default=None, help="default: a tenth of the votes"
        )
        parser.add_argument("--hosts", type=int, default=100, help="battle hosts")
        parser.add_argument(
            "--battles-per-s",
            type=float,
            default=None,
            help="default: 80 %% of what the hosts can run",
        )
        parser.add_argument(
            "--decided-battles",
            type=float,
            default=None,
            help="what each refit reads (default: a day of decisions)",
        )
        parser.add_argument(
            "--plan", default=None, help="a plan (JSON) to evaluate instead of searching"
        )
        parser.add_argument("--visits", type=int, default=20_000, help="visits per queue")
        parser.add_argument("--seed", type=int, default=36)
        parser.add_argument("--validate", action="store_true", help="simulate this machine")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print JSON")

    def handle(self, *args, **o) -> None:
        try:
            costs = costs_load(o["costs"])
            plan = plan_load(o["plan"]) if o["plan"] else None
        except CapacityInputError as exc:
            raise CommandError(str(exc)) from exc
        if o["votes_per_s"] <= 0 or o["hosts"] < 0 or o["visits"] < 1000:
            raise CommandError("--votes-per-s > 0, --hosts ≥ 0, --visits ≥ 1000")
        if costs.placeholders:
            self.stderr.write(
                f"{len(costs.placeholders)} cost figures are still placeholders "
                f"(e.g. {', '.join(costs.placeholders[:3])})"
            )
        if o["validate"]:
            report = capacity_search.validate(costs, visits=o["visits"], seed=o["seed"])
            self.stdout.write(
                strict_json.dumps(report, indent=2) if o["as_json"] else _validated(report)
            )
            return
        per_host = costs["battle.battles_per_host_per_hour"] / 3600
        votes = o["votes_per_s"]
        traffic = Traffic(
            votes_per_s=votes,
            judge_next_per_vote=o["judge_next_per_vote"],
            board_reads_per_s=votes / 10
            if o["board_reads_per_s"] is None
            else o["board_reads_per_s"],
            battles_per_s=o["battles_per_s"]
            if o["battles_per_s"] is not None
            else 0.8 * o["hosts"] * per_host,
            decided_battles=o["decided_battles"]
            if o["decided_battles"] is not None
            else votes * 86_400,
        )
        slo = Slo()
        if plan is not None:
            ev = capacity.evaluate(costs, plan, traffic, slo, visits=o["visits"], seed=o["seed"])
            out = {"evaluation": ev.summary()}
            self.stdout.write(
                strict_json.dumps(out, indent=2, default=float) if o["as_json"] else _evaluated(ev)
            )
            return
        start = Plan(web_processes=1, pgbouncer_pool=1, postgres_cores=1, battle_hosts=o["hosts"])
        rounds = []
        with tqdm(
            desc="capacity search",
            unit="sim",
            file=sys.stderr,
            delay=1.0,
            disable=not sys.stderr.isatty(),
        ) as bar:
            while True:
                found = capacity_search.search(
                    costs,
                    traffic,
                    slo,
                    start=start,
                    visits=o["visits"],
                    seed=o["seed"],
                    progress=bar.update,
                )
                steps = {}
                for name in found.unfixable:
                    resource = found.evaluation.slos[name]["resource"]
                    knob, value, why = capacity_search.NEXT_STEPS.get(resource, (None, None, None))
                    if knob and getattr(start, knob) != value:
                        steps[knob] = (value, why)
                rounds.append((found, steps))
                if not steps:
                    break
                start = start.with_(**{k: v for k, (v, _) in steps.items()})
        if o["as_json"]:
            self.stdout.write(
                strict_json.dumps(
                    [
                        {
                            "evaluation": f.evaluation.summary(),
                            "unfixable": f.unfixable,
                            "next_steps": {k: {"value": v, "why": w} for k, (v, w) in s.items()},
                            "simulations": f.evaluations,
                        }
                        for f, s in rounds
                    ],
                    indent=2,
                    default=float,
                )
            )
            return
        for i, (found, steps) in enumerate(rounds):
            self.stdout.write(_searched(found, steps, first=i == 0))


def _row(name: str, r) -> str:
    return (
        f"  {name:<32} {r.servers:>5} × {r.copies:<5} {r.utilisation * 100:7.1f} %"
        f" {r.wait_p50_ms:9.2f} {r.wait_p99_ms:10.2f}"
    )


def _evaluated(ev: capacity.Evaluation) -> str:
    p, t, conn = ev.plan, ev.traffic, ev.connections
    judge_next = t.votes_per_s * t.judge_next_per_vote
    frames = f"capped at {p.board_frame_hz:g}/s" if p.board_frame_hz else "one per decision"
    lines = [
        f"traffic: {t.votes_per_s:g} votes/s, {judge_next:g} judge/next/s, "
        f"{t.board_reads_per_s:g} board reads/s, {t.battles_per_s:.2f} battles/s, "
        f"{ev.layout['decisions_per_s']:g} decisions/s",
        "plan:",
        f"  web: {p.web_processes} processes, one core each (pool {p.db_pool_per_process} each)",
        f"  PgBouncer (transaction pooling): server pool {p.pgbouncer_pool or 'none'}, "
        f"{conn['client_connections']} client connections",
        f"  PostgreSQL: {p.postgres_cores} cores, {conn['postgres_backends']} backends "
        f"≈ {conn['backend_memory_gib']} GiB private memory + shared_buffers",
        f"  Redis: {p.redis_cache} cache/rate limits (sharded by key) + {p.redis_rq} RQ "
        f"+ {p.redis_channels} channel layer",
        f"  RQ queues per instance: {ev.layout['rq_instances']}",
        f"  deciders: {p.deciders} (batches of {p.decider_batch}); ratings workers "
        f"{p.workers_ratings}; default workers {p.workers_default}",
        f"  battles: {p.battle_hosts} hosts × {ev.layout['battle_slots_per_host']} at once",
        f"  board streaming frames {ev.layout['board_frames_per_s']}/s ({frames}); refit "
        f"{ev.layout['refit_s']} s ({'incremental' if p.incremental_refit else 'full scan'})",
        f"  {'resource':<32} {'servers × copies':>13} {'busy':>9} {'wait p50':>9} {'p99 ms':>10}",
    ]
    lines += [_row(name, r) for name, r in ev.resources.items() if r.classes]
    lines.append("SLOs:")
    for name, s in ev.slos.items():
        if not name.endswith("utilisation") or not s["ok"]:
            mark = "ok " if s["ok"] else "FAIL"
            lines.append(f"  {mark} {name}: {s['value']} (limit {s['limit']}; {s['resource']})")
    ceilings = ev.ceilings()
    if ceilings:
        first = next(iter(ceilings.items()))
        lines.append(
            f"breaks first as traffic grows, every knob at its cap: {first[0]} at "
            f"{first[1]}× this traffic (all: {ceilings})"
        )
    return "\n".join(lines)


def _searched(found: capacity_search.Search, steps: dict, *, first: bool) -> str:
    ev = found.evaluation
    head = (
        "With the code as it is:"
        if first
        else f"With the next steps applied (board_frame_hz {ev.plan.board_frame_hz:g}, "
        f"incremental_refit {ev.plan.incremental_refit}):"
    )
    lines = [head, f"({found.evaluations} simulations)"]
    if found.unfixable:
        lines.append("NO PLAN meets the SLOs: no knob relieves these (the plan where it stopped):")
        lines += [f"  {name}: {why}" for name, why in found.unfixable.items()]
        lines += [f"  next step: {why}" for _, why in steps.values()]
        return "\n".join([*lines, ""])
    lines.append("the smallest plan that meets every SLO:")
    return "\n".join([*lines, _evaluated(ev), ""])


def _validated(r: dict) -> str:
    lines = [
        f"this machine: {r['cores']} cores shared by {r['web_processes']} web processes, "
        f"PostgreSQL, Redis and the load client; {r['cpu_ms_per_vote_all_parts']} ms of CPU per "
        f"vote in all (bound {r['cpu_bound_votes_per_s']} votes/s)",
        f"  {'offered/s':>9} {'p50 ms':>9} {'p99 ms':>10} {'cores busy':>10}  clean",
    ]
    lines += [
        f"  {s['offered_per_s']:>9} {s['p50_ms']:>9} {s['p99_ms']:>10} "
        f"{s['cpu_utilisation'] * 100:>9.1f}%  {'yes' if s['clean'] else 'no'}"
        for s in r["steps"]
    ]
    lines.append(
        f"predicted highest clean step {r['predicted_highest_clean_step_per_s']}/s "
        f"(between steps: {r['predicted_highest_clean_rate_per_s']}/s); measured "
        f"{r['measured_highest_clean_step_per_s']:g}/s; predicted/measured "
        f"{r['predicted_over_measured']}"
    )
    return "\n".join(lines)

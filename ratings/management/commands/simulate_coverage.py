"""``manage.py simulate_coverage``: how often each interval the board can show contains
its target, in seeded simulations with known truth (``ratings.coverage``): ties, evidence
weights, few and many judges, judges of unequal noise and with views of their own,
skewed activity, sparse boards (about one battle per pair), category boards and few
judges with views of their own (``coverage.ALL``, issue 38). Prints a table (or JSON) of
scenario × interval kind, with the same fits scored by the intervals as published before
issue 15. Touches no database. The coverage benchmark of issue 38
(tests/bench/bench_coverage.py) scores the published intervals of the same scenarios."""

import sys

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from arena_site import strict_json
from ratings import coverage


class Command(BaseCommand):
    help = (
        "Coverage of the board's 95% intervals in seeded simulations (docs/intervals.md): "
        "for every scenario, the share of (arena, agent) intervals that contain the "
        "agent's target strength (rank bands: its true rank)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seed", type=int, default=15, help="RNG seed (15)")
        parser.add_argument("--arenas", type=int, default=1000, help="arenas per scenario")
        parser.add_argument(
            "--bootstrap", type=int, default=200, help="replicates for the rank bands (200)"
        )
        parser.add_argument(
            "--bootstrap-arenas",
            type=int,
            default=100,
            help="arenas per scenario whose rank bands are scored (100; 0 for none)",
        )
        parser.add_argument(
            "--scenario", default=None, help="only scenarios whose name contains this"
        )
        parser.add_argument("--json", action="store_true", dest="as_json", help="print JSON")

    def handle(self, *args, seed, arenas, bootstrap, bootstrap_arenas, scenario, as_json, **kw):
        if seed < 0 or arenas < 1 or bootstrap < 0 or bootstrap_arenas < 0:
            raise CommandError("--seed, --bootstrap and --bootstrap-arenas ≥ 0, --arenas ≥ 1")
        chosen = [s for s in coverage.ALL if scenario is None or scenario in s.name]
        if not chosen:
            names = "; ".join(s.name for s in coverage.ALL)
            raise CommandError(f"no scenario matches {scenario!r}; the scenarios: {names}")
        report = []
        for index, s in enumerate(chosen):
            with tqdm(
                total=arenas, desc=s.name[:36], unit="arena", file=sys.stderr,
                disable=not sys.stderr.isatty(),
            ) as bar:  # fmt: skip
                tally = coverage.run(
                    s,
                    arenas=arenas,
                    seed=seed + index,
                    bootstrap=bootstrap,
                    bootstrap_arenas=min(bootstrap_arenas, arenas),
                    progress=bar.update,
                )
            report.append(summary(s, tally))
        if as_json:
            self.stdout.write(strict_json.dumps({"seed": seed, "scenarios": report}, indent=2))
            return
        self.stdout.write(table(report, arenas=arenas, seed=seed))


def summary(scenario: coverage.Scenario, tally: coverage.Tally) -> dict:
    return {
        "scenario": scenario.name,
        "description": scenario.description,
        "agents": scenario.agents,
        "battles": scenario.battles,
        "judges": scenario.judges,
        "coverage": {k: _round(tally.rate(k)) for k in coverage.KINDS},
        "intervals": {k: tally.total[k] for k in coverage.KINDS},
        "mean_halfwidth_elo": {
            k: _round(tally.mean_halfwidth(k), 1) for k in coverage.KINDS if k != "rank_band"
        },
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


SHORT = {
    "published": "published",
    "battle": "battle",
    "clustered": "clustered",
    "clustered (no floor)": "no floor",
    "rank_band": "rank band",
    "information (before)": "info/old",
    "clustered z (before)": "clust z/old",
    "published (before)": "publ/old",
}


def table(report: list[dict], *, arenas: int, seed: int) -> str:
    kinds = coverage.KINDS
    width = max(len(r["scenario"]) for r in report)
    head = f"{'scenario':{width}}  " + "  ".join(f"{SHORT[k]:>10}" for k in kinds)
    lines = [
        f"Coverage of 95% intervals: {arenas} arenas per scenario, seed {seed} "
        "(— : the board never shows that kind there)",
        head,
        "-" * len(head),
    ]
    for r in report:
        cells = "  ".join(
            f"{'—' if v is None else f'{v:.3f}':>10}" for v in (r["coverage"][k] for k in kinds)
        )
        lines.append(f"{r['scenario']:{width}}  {cells}")
    lines.append("columns: " + "; ".join(f"{SHORT[k]} = {k}" for k in kinds))
    return "\n".join(lines)

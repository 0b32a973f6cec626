"""Offline rating of a CSV of battles: ``python -m ratings fit FILE.csv``.

Needs no database and imports no Django (``ratings/__init__.py`` is empty, and this
module and the math it uses import only numpy, scipy and tqdm), so it runs anywhere the
virtualenv does. Prints one JSON document on stdout; a bad file or flag exits with
status 2 and a one-line message saying what is wrong and what to do.
"""

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ratings import bradley_terry

PROVISIONAL_BATTLES = 30  # SPEC §7.2 n0: fewer rated battles → provisional


class CliError(Exception):
    """A problem with the input the user can fix; becomes one line on stderr, exit 2."""


@dataclass(frozen=True)
class Battles:
    agents: list[str]
    a: np.ndarray
    b: np.ndarray
    y: np.ndarray
    w: np.ndarray
    cluster: np.ndarray | None
    skipped: int


def _values(text: str) -> set[str]:
    return {value.strip() for value in text.split(",") if value.strip()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ratings",
        description="Bradley-Terry ratings of agents from a CSV of pairwise battles.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser(
        "fit",
        help="fit the ratings of one CSV file and print them as JSON",
        description=(
            "Fit SPEC §7 ratings (ridge-penalised Bradley-Terry by Newton, centred on "
            "the non-provisional agents, 95%% intervals, bootstrap rank bands, "
            "identifiability labels) to FILE and print one JSON document."
        ),
    )
    fit.add_argument("file", type=Path, metavar="FILE.csv")
    columns = fit.add_argument_group("columns and values")
    columns.add_argument("--a", default="agent_a", metavar="COL", help="side A's agent")
    columns.add_argument("--b", default="agent_b", metavar="COL", help="side B's agent")
    columns.add_argument("--winner", default="winner", metavar="COL", help="the outcome")
    columns.add_argument("--win-a", default="A", metavar="VALUE", help="outcome: A won")
    columns.add_argument("--win-b", default="B", metavar="VALUE", help="outcome: B won")
    columns.add_argument(
        "--tie",
        default="tie,both_bad",
        metavar="VALUES",
        help="comma-separated outcomes that count ½ each (default: tie,both_bad)",
    )
    columns.add_argument(
        "--skip",
        default="",
        metavar="VALUES",
        help="comma-separated outcomes whose rows are dropped, e.g. abstain",
    )
    columns.add_argument("--judge", metavar="COL", help="the judge (cluster for intervals)")
    columns.add_argument("--task", metavar="COL", help="the task (alternative cluster)")
    columns.add_argument("--weight", metavar="COL", help="evidence weight w_b ≥ 0 (default 1)")
    model = fit.add_argument_group("model")
    model.add_argument("--ridge", type=float, default=bradley_terry.RIDGE, help="r (1e-3)")
    model.add_argument("--r0", type=float, default=bradley_terry.R0, help="R0 (1000)")
    model.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap replicates for the rank bands, 0 for none (1000)",
    )
    model.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    model.add_argument(
        "--cluster",
        choices=("judge", "task", "none"),
        help="clusters of the robust interval (default: judge when --judge is given)",
    )
    model.add_argument(
        "--provisional",
        type=int,
        default=PROVISIONAL_BATTLES,
        metavar="N",
        help="agents with fewer battles are provisional and not in the centring (30)",
    )
    return parser


def read_battles(args: argparse.Namespace) -> Battles:
    """Rows of ``args.file`` mapped to index arrays; raises CliError on bad input."""
    win_a, win_b, ties, skip = args.win_a, args.win_b, _values(args.tie), _values(args.skip)
    overlap = ({win_a} & {win_b}) | ({win_a, win_b} & ties) | (({win_a, win_b} | ties) & skip)
    if overlap:
        raise CliError(
            f"outcome value(s) {', '.join(sorted(overlap))} are mapped twice; give each "
            "value to only one of --win-a, --win-b, --tie, --skip"
        )
    cluster_by = args.cluster or ("judge" if args.judge else "none")
    cluster_col = {"judge": args.judge, "task": args.task, "none": None}[cluster_by]
    if cluster_by != "none" and cluster_col is None:
        raise CliError(f"--cluster {cluster_by} needs the --{cluster_by} COL column flag")
    try:
        handle = args.file.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}; check the path") from exc
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames
        if not header:
            raise CliError(f"{args.file} is empty; it needs a header row and battle rows")
        wanted = {"--a": args.a, "--b": args.b, "--winner": args.winner}
        wanted |= {
            flag: col
            for flag, col in (
                ("--judge", args.judge),
                ("--task", args.task),
                ("--weight", args.weight),
            )
            if col is not None
        }
        for flag, col in wanted.items():
            if col not in header:
                raise CliError(
                    f"column {col!r} ({flag}) is not in {args.file}; available columns: "
                    f"{', '.join(header)}"
                )
        names: dict[str, int] = {}
        clusters: dict[str, int] = {}
        a, b, y, w, cl = [], [], [], [], []
        skipped = 0
        for row in reader:
            line = reader.line_num
            outcome = (row[args.winner] or "").strip()
            if outcome in skip:
                skipped += 1
                continue
            if outcome == win_a:
                y.append(1.0)
            elif outcome == win_b:
                y.append(0.0)
            elif outcome in ties:
                y.append(0.5)
            else:
                raise CliError(
                    f"line {line}: {args.winner} value {outcome!r} is not mapped; pass it "
                    "to --win-a, --win-b, --tie or --skip"
                )
            agent_a, agent_b = (row[args.a] or "").strip(), (row[args.b] or "").strip()
            if not agent_a or not agent_b:
                raise CliError(f"line {line}: an agent cell is empty; every battle needs both")
            if agent_a == agent_b:
                raise CliError(f"line {line}: {agent_a!r} plays itself; remove the row")
            a.append(names.setdefault(agent_a, len(names)))
            b.append(names.setdefault(agent_b, len(names)))
            if args.weight is not None:
                w.append(_weight(row[args.weight], line, args.weight))
            if cluster_col is not None:
                key = (row[cluster_col] or "").strip()
                if not key:
                    raise CliError(f"line {line}: the {cluster_col} cell is empty; fill it")
                cl.append(clusters.setdefault(key, len(clusters)))
    if not y:
        raise CliError(f"{args.file} has no battle rows (after --skip); nothing to rate")
    return Battles(
        agents=list(names),
        a=np.array(a, dtype=np.int64),
        b=np.array(b, dtype=np.int64),
        y=np.array(y),
        w=np.array(w) if args.weight is not None else np.ones(len(y)),
        cluster=np.array(cl, dtype=np.int64) if cluster_col is not None else None,
        skipped=skipped,
    )


def _weight(text: str | None, line: int, column: str) -> float:
    try:
        value = float(text or "")
    except ValueError:
        value = float("nan")
    if not np.isfinite(value) or value < 0:
        raise CliError(
            f"line {line}: {column} value {text!r} is not a non-negative number; fix or "
            "drop the row"
        )
    return value


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def fit(args: argparse.Namespace) -> dict:
    if args.bootstrap < 0:
        raise CliError("--bootstrap must be 0 or more replicates")
    if args.ridge <= 0:
        raise CliError("--ridge must be positive (SPEC §7.2 uses 1e-3)")
    battles = read_battles(args)
    n = len(battles.agents)
    counts = np.bincount(battles.a, minlength=n) + np.bincount(battles.b, minlength=n)
    reference = counts >= args.provisional
    bar = None
    if args.bootstrap and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=args.bootstrap, desc="bootstrap", unit="rep", file=sys.stderr)
    try:
        rating = bradley_terry.rate(
            battles.a,
            battles.b,
            battles.y,
            n_agents=n,
            w=battles.w,
            cluster=battles.cluster,
            reference=reference if reference.any() else None,
            ridge=args.ridge,
            r0=args.r0,
            bootstrap=args.bootstrap,
            seed=args.seed,
            progress=bar.update if bar is not None else None,
        )
    finally:
        if bar is not None:
            bar.close()
    agents = [
        {
            "agent": battles.agents[e.index],
            "rating": _round(e.rating),
            "lower": _round(e.lower),
            "upper": _round(e.upper),
            "rank_band": None if e.rank_lower is None else [e.rank_lower, e.rank_upper],
            "unavailable": e.unavailable,
            "battles": e.battles,
            "weight": _round(e.weight),
            "provisional": bool(e.battles < args.provisional),
            "model_halfwidth": _round(e.model_halfwidth),
            "robust_halfwidth": _round(e.robust_halfwidth),
        }
        for e in rating.agents
    ]
    agents.sort(key=lambda row: (row["rating"] is None, -(row["rating"] or 0), row["agent"]))
    return {
        "agents": agents,
        "file": str(args.file),
        "battles": len(battles.y),
        "skipped_rows": battles.skipped,
        "fitted_agents": rating.fitted_agents,
        "reference_agents": rating.reference_agents,
        "iterations": rating.iterations,
        "converged": rating.converged,
        "cluster_by": args.cluster or ("judge" if args.judge else "none"),
        "clusters": rating.clusters,
        "robust_published": rating.robust_published,
        "interval": "cluster-robust" if rating.robust_published else "model-based",
        "bootstrap": rating.bootstrap_replicates,
        "seed": rating.seed,
        "ridge": args.ridge,
        "r0": args.r0,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        document = fit(args)
    except CliError as exc:
        print(f"python -m ratings fit: error: {exc}", file=sys.stderr)
        return 2
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0

"""Offline rating of a file of battles: ``python -m ratings fit FILE.csv``.

The file is CSV, or JSON Lines (``.jsonl``/``.ndjson``: one JSON object a line, the
first object's keys the header) or Parquet (``.parquet``, read with pyarrow), as the
arena's open-data export writes them (docs/open-data.md); ``--format`` overrides the
guess from the suffix. Every format goes through the same checks as CSV; in JSON Lines
and Parquet a null is an empty cell, and Parquet's "line" numbers count rows from 1.

Needs no database and imports no Django (``ratings/__init__.py`` is empty, and this
module and the math it uses import only numpy, scipy and tqdm), so it runs anywhere the
virtualenv does. Prints one JSON document on stdout; a bad file or flag exits with
status 2 and a one-line message saying what is wrong and what to do. Duplicate rows
and rows with more cells than the header are kept (or, for extra cells, ignored) and
reported: one warning line each on stderr and ``input_report`` in the document;
``--strict`` refuses them instead.
"""

import argparse
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ratings import bradley_terry
from ratings.cli_files import CliError, file_records

PROVISIONAL_BATTLES = 30  # SPEC §7.2 n0: fewer rated battles → provisional
REPORT_LINES = 20  # line numbers listed per kind in input_report and the warnings


@dataclass
class InputReport:
    """Rows that were read but look suspect: the same cells as an earlier battle row
    (kept: two identical votes can be real) and rows with more cells than the header
    (the extra cells ignored). Line numbers are the lines the rows start on."""

    duplicate_rows: list[int] = field(default_factory=list)
    extra_field_rows: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "duplicate_rows": self.duplicate_rows[:REPORT_LINES],
            "duplicate_row_count": len(self.duplicate_rows),
            "extra_field_rows": self.extra_field_rows[:REPORT_LINES],
            "extra_field_row_count": len(self.extra_field_rows),
        }

    def warnings(self) -> list[str]:
        return report_warnings(self.as_dict())


def report_warnings(report: dict) -> list[str]:
    """One line per kind of suspect row in an ``InputReport.as_dict()``."""
    lines = []
    for kind, what, effect in (
        ("duplicate_row", "duplicate row{s}", "counted as battles"),
        ("extra_field_row", "row{s} with more fields than the header", "extra cells ignored"),
    ):
        count, listed = report[f"{kind}_count"], report[f"{kind}s"]
        if count:
            s = "s" if count > 1 else ""
            where = ", ".join(map(str, listed))
            if count > len(listed):
                where += f" and {count - len(listed)} more"
            lines.append(
                f"warning: {count} {what.format(s=s)} (line{s} {where}), {effect}; "
                "pass --strict to refuse them"
            )
    return lines


@dataclass(frozen=True)
class Battles:
    agents: list[str]
    a: np.ndarray
    b: np.ndarray
    y: np.ndarray
    w: np.ndarray
    cluster: np.ndarray | None
    skipped: int
    report: InputReport
    # Per battle, in file order: the stripped winner cell, and the judge and task
    # cells when those columns are mapped (None otherwise). For manage.py import_votes.
    winners: list[str]
    judges: list[str] | None
    tasks: list[str] | None
    lines: list[int]  # the line each battle's row starts on
    sha256: str  # of the file's bytes, as read


def _values(text: str) -> set[str]:
    return {value.strip() for value in text.split(",") if value.strip()}


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (still exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    fit.add_argument(
        "--format",
        choices=("auto", "csv", "jsonl", "parquet"),
        default="auto",
        help="the file's format (default: from its suffix: .jsonl/.ndjson, .parquet, else CSV)",
    )
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
    fit.add_argument(
        "--strict",
        action="store_true",
        help="refuse duplicate rows and rows with more fields than the header instead "
        "of reporting them",
    )
    return parser


def read_battles(args: argparse.Namespace) -> Battles:
    """Rows of ``args.file`` mapped to index arrays; raises CliError on bad input.

    The file is read once, as bytes (``Battles.sha256`` is their digest), decoded as
    UTF-8 (an optional byte-order mark is dropped) and parsed as strict CSV (the excel
    dialect: a quote that is never closed, or text after a closing quote, is an error).
    Blank lines are skipped; every other row must have at least the header's cells."""
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
    strict = args.strict
    try:
        content = args.file.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}; check the path") from exc
    records = file_records(content, args.file, getattr(args, "format", "auto"))
    first = next(records, None)
    header = first[1] if first is not None else None
    if not header:
        raise CliError(f"{args.file} is empty; it needs a header row and battle rows")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise CliError(
            f"the header of {args.file} names column(s) {', '.join(map(repr, repeated))} "
            "more than once; rename them so that each column has one name"
        )
    wanted = {"--a": args.a, "--b": args.b, "--winner": args.winner}
    wanted |= {
        flag: col
        for flag, col in (("--judge", args.judge), ("--task", args.task), ("--weight", args.weight))
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
    winners, judges, tasks, kept_lines = [], [], [], []
    report = InputReport()
    seen: dict[tuple[str, ...], int] = {}
    skipped = 0
    for line, cells in records:
        if len(cells) < len(header):
            raise CliError(
                f"line {line} has {len(cells)} fields, the header has {len(header)}; fill "
                "in the missing cells (empty ones need their commas)"
            )
        if len(cells) > len(header):
            if strict:
                raise CliError(
                    f"line {line} has {len(cells)} fields, the header has {len(header)} "
                    "(--strict); remove the extra cells, or drop --strict to ignore them"
                )
            report.extra_field_rows.append(line)
        row = dict(zip(header, cells, strict=False))
        outcome = row[args.winner].strip()
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
        agent_a, agent_b = row[args.a].strip(), row[args.b].strip()
        if not agent_a or not agent_b:
            raise CliError(f"line {line}: an agent cell is empty; every battle needs both")
        if agent_a == agent_b:
            raise CliError(f"line {line}: {agent_a!r} plays itself; remove the row")
        first = seen.setdefault(tuple(cells), line)
        if first != line:
            if strict:
                raise CliError(
                    f"line {line} repeats line {first} cell for cell (--strict); remove "
                    "the duplicate, or drop --strict to count both as battles"
                )
            report.duplicate_rows.append(line)
        a.append(names.setdefault(agent_a, len(names)))
        b.append(names.setdefault(agent_b, len(names)))
        if args.weight is not None:
            w.append(_weight(row[args.weight], line, args.weight))
        if cluster_col is not None:
            key = row[cluster_col].strip()
            if not key:
                raise CliError(f"line {line}: the {cluster_col} cell is empty; fill it")
            cl.append(clusters.setdefault(key, len(clusters)))
        winners.append(outcome)
        if args.judge is not None:
            judges.append(row[args.judge].strip())
        if args.task is not None:
            tasks.append(row[args.task].strip())
        kept_lines.append(line)
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
        report=report,
        winners=winners,
        judges=judges if args.judge is not None else None,
        tasks=tasks if args.task is not None else None,
        lines=kept_lines,
        sha256=hashlib.sha256(content).hexdigest(),
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
    if not (math.isfinite(args.ridge) and args.ridge >= 0):
        raise CliError(
            f"--ridge must be a finite number 0 or more, not {args.ridge} (SPEC §7.2 uses 1e-3)"
        )
    if not math.isfinite(args.r0):
        raise CliError(f"--r0 must be a finite number, not {args.r0} (SPEC §7 uses 1000)")
    if args.bootstrap < 0:
        raise CliError("--bootstrap must be 0 or more replicates")
    if args.seed < 0:
        raise CliError("--seed must be 0 or more")
    if args.provisional < 0:
        raise CliError("--provisional must be 0 or more battles")
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
            "information_halfwidth": _round(e.information_halfwidth),
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
        "interval": rating.interval,
        "critical_value": round(rating.critical_value, 4),
        "effective_clusters": _round(rating.effective_clusters),
        "floored_agents": rating.floored,
        "bootstrap_resamples": rating.bootstrap_resamples,
        "bootstrap": rating.bootstrap_replicates,
        "seed": rating.seed,
        "ridge": args.ridge,
        "r0": args.r0,
        "input_report": battles.report.as_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        document = fit(args)
    except CliError as exc:
        print(f"python -m ratings fit: error: {exc}", file=sys.stderr)
        return 2
    for warning in report_warnings(document["input_report"]):
        print(f"python -m ratings fit: {warning}", file=sys.stderr)
    try:
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into head: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0

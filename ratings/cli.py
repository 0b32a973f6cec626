"""Offline rating of a file of battles: ``python -m ratings fit FILE.csv``.

The file is CSV, or JSON Lines (``.jsonl``/``.ndjson``: one JSON object a line, the
first object's keys the header) or Parquet (``.parquet``, read with pyarrow), as the
arena's open-data export writes them (docs/open-data.md); ``--format`` overrides the
guess from the suffix. Every format goes through the same checks as CSV; in JSON Lines
and Parquet a null is an empty cell, and Parquet's "line" numbers count rows from 1.

Needs no database and imports no Django (``ratings/__init__.py`` is empty, and this
module and the math it uses import only numpy, scipy, threadpoolctl and tqdm, and numba
only where the fit's loops were not compiled ahead of time: ``ratings.kernels``), so it
runs anywhere the virtualenv does. Prints one JSON document on stdout; a bad file or
flag exits with status 2 and a one-line message saying what is wrong and what to do. Duplicate rows
and rows with more cells than the header are kept (or, for extra cells, ignored) and
reported: one warning line each on stderr and ``input_report`` in the document;
``--strict`` refuses them instead.

A file of an open-data export (a ``manifest.json`` beside it lists it) is fitted with
the published board's seed and settings, agents and clusters in the refit's order
(``ratings.cli_export``): the document is then the board, bit for bit. Numbers are
printed with every digit; a number that is not finite (an interval with no end, e.g.
a single tie) is null, never ``Infinity`` (``arena_site.strict_json``).

Modules: ``cli_files`` (the formats, streamed), ``cli_read`` (rows to compact columns and
the input report), ``cli_export`` (an export's settings), this one (flags, fit, output).
"""

import argparse
import ctypes
import gc
import math
import os
import sys
from pathlib import Path

import numpy as np

from arena_site.strict_json import dump as json_dump
from ratings import bradley_terry, cli_export, cli_fit
from ratings.cli_files import CliError
from ratings.cli_read import Battles, InputReport, read_battles, report_warnings

__all__ = ["Battles", "CliError", "InputReport", "build_parser", "fit", "main", "read_battles"]

PROVISIONAL_BATTLES = 30  # SPEC §7.2 n0: fewer rated battles → provisional
BOOTSTRAP_REPLICATES = 1000


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
    model = fit.add_argument_group(
        "model (unset flags take an export's values, docs/open-data.md, else these defaults)"
    )
    model.add_argument("--ridge", type=float, help="r (1e-3)")
    model.add_argument("--r0", type=float, help="R0 (1000)")
    model.add_argument(
        "--bootstrap",
        type=int,
        metavar="N",
        help=f"bootstrap replicates for the rank bands, 0 for none ({BOOTSTRAP_REPLICATES})",
    )
    model.add_argument("--seed", type=int, help="bootstrap seed (0)")
    model.add_argument(
        "--cluster",
        choices=("judge", "task", "none"),
        help="clusters of the robust interval (default: judge when --judge is given)",
    )
    model.add_argument(
        "--bootstrap-unit",
        choices=("default", "tasks"),
        help="what a replicate resamples: default, what the published interval treats as "
        "independent (its clusters, or the battles); tasks, whole tasks (needs --task)",
    )
    model.add_argument(
        "--provisional",
        type=int,
        metavar="N",
        help=f"agents with fewer battles are provisional and not in the centring "
        f"({PROVISIONAL_BATTLES})",
    )
    fit.add_argument(
        "--no-export",
        action="store_true",
        help="ignore the manifest.json of an open-data export beside FILE (its seed and settings)",
    )
    fit.add_argument(
        "--strict",
        action="store_true",
        help="refuse duplicate rows and rows with more fields than the header instead "
        "of reporting them",
    )
    return parser


def _check_model_flags(args: argparse.Namespace) -> None:
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
    if args.bootstrap_unit == "tasks" and args.task is None:
        raise CliError("--bootstrap-unit tasks needs the --task COL column flag")


def _settings(args: argparse.Namespace) -> cli_export.ExportFit | None:
    """The export the file belongs to (its settings filled into the unset flags), then
    the CLI's own defaults for whatever is still unset."""
    export = None if args.no_export else cli_export.find(args.file)
    if export is not None:
        cli_export.apply(args, export)
    for name, value in (
        ("ridge", bradley_terry.RIDGE),
        ("r0", bradley_terry.R0),
        ("bootstrap", BOOTSTRAP_REPLICATES),
        ("seed", 0),
        ("provisional", PROVISIONAL_BATTLES),
        ("bootstrap_unit", "default"),
    ):
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    return export


def _fit_input(args: argparse.Namespace, export) -> tuple[list[str], dict, dict]:
    """(agents, what the document says of the file, ``rate``'s arrays): the battles read,
    ordered as the export's refit ordered them, and reduced to cells and sums per
    (cluster, pair). The per-battle columns die with this call, before the fit
    allocates its own."""
    battles = read_battles(args, numbers=cli_export.order_column(args, export))
    agents, a, b, cluster = battles.agents, battles.a, battles.b, battles.cluster
    if export is not None:
        order = cli_export.agent_order(args.file, args.format, export)
        agents, position = cli_export.reorder_agents(agents, order)
        a, b = position[a], position[b]
        for name, numbers in battles.numbers.items():
            cluster = cli_export.cluster_numbers(cluster, numbers, name)
    n = len(agents)
    arrays: dict = {"n_agents": n, "clustered": None, "tasks": None}
    if cluster is not None:
        arrays["clustered"] = cli_fit.pair_sums(cluster, a, b, battles.y2, battles.w, n)
    if args.bootstrap_unit == "tasks":
        tasks = cli_fit.task_numbers(battles.task, battles.task_keys)
        arrays["tasks"] = cli_fit.pair_sums(tasks, a, b, battles.y2, battles.w, n)
    counts = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
    reference = counts >= args.provisional
    arrays["reference"] = reference if reference.any() else None
    lo, hi, y, w, count = cli_fit.cells(a, b, battles.y2, battles.w_column, n)
    arrays |= {"a": lo, "b": hi, "y": y, "w": w, "count": count}
    read = {
        "battles": len(battles.y2),
        "skipped_rows": battles.skipped,
        "sha256": battles.sha256,
        "input_report": battles.report.as_dict(),
    }
    return agents, read, arrays


def _return_freed_memory() -> None:
    """The heap the read freed, handed back to the system (glibc's ``malloc_trim``)
    before the fit: the fit then starts from what is live (~50 MB at a million battles,
    not the ~90 a JSON Lines read leaves in pieces). Nothing elsewhere."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def fit(args: argparse.Namespace) -> dict:
    export = _settings(args)
    _check_model_flags(args)
    agents, read, arrays = _fit_input(args, export)
    _return_freed_memory()
    bar = None
    if args.bootstrap and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=args.bootstrap, desc="bootstrap", unit="rep", file=sys.stderr)
    from threadpoolctl import threadpool_limits

    try:
        # One BLAS thread, as the refit: a pool only slows the many small solves, and the
        # published board's last bits are those of one thread's sums.
        with threadpool_limits(1):
            # Every array popped, none left in ``arrays``: what ``rate`` converts or
            # drops is freed then, not held by this frame until the fit ends.
            rating = bradley_terry.rate(
                arrays.pop("a"),
                arrays.pop("b"),
                arrays.pop("y"),
                n_agents=arrays.pop("n_agents"),
                w=arrays.pop("w"),
                count=arrays.pop("count"),
                reference=arrays.pop("reference"),
                clustered=arrays.pop("clustered"),
                tasks=arrays.pop("tasks"),
                ridge=args.ridge,
                r0=args.r0,
                bootstrap=args.bootstrap,
                seed=args.seed,
                progress=bar.update if bar is not None else None,
            )
    finally:
        if bar is not None:
            bar.close()
    rows = [
        {
            "agent": agents[e.index],
            "rating": e.rating,
            "lower": e.lower,
            "upper": e.upper,
            "rank_band": None if e.rank_lower is None else [e.rank_lower, e.rank_upper],
            "unavailable": e.unavailable,
            "battles": e.battles,
            "weight": e.weight,
            "provisional": bool(e.battles < args.provisional),
            "model_halfwidth": e.model_halfwidth,
            "information_halfwidth": e.information_halfwidth,
            "robust_halfwidth": e.robust_halfwidth,
        }
        for e in rating.agents
    ]
    rows.sort(key=lambda row: (row["rating"] is None, -(row["rating"] or 0), row["agent"]))
    return {
        "agents": rows,
        "file": str(args.file),
        "battles": read["battles"],
        "skipped_rows": read["skipped_rows"],
        "fitted_agents": rating.fitted_agents,
        "reference_agents": rating.reference_agents,
        "iterations": rating.iterations,
        "converged": rating.converged,
        "cluster_by": args.cluster or ("judge" if args.judge else "none"),
        "clusters": rating.clusters,
        "robust_published": rating.robust_published,
        "interval": rating.interval,
        "critical_value": rating.critical_value,
        "effective_clusters": rating.effective_clusters,
        "floored_agents": rating.floored,
        "bootstrap_resamples": rating.bootstrap_resamples,
        "bootstrap_clusters": rating.bootstrap_clusters,
        "bootstrap": rating.bootstrap_replicates,
        "seed": rating.seed,
        "ridge": args.ridge,
        "r0": args.r0,
        "provisional_below": args.provisional,
        "export": None
        if export is None
        else {
            "manifest": str(export.manifest),
            "file_sha256_matches": export.sha256 == read["sha256"],
            "fit_format": export.fit.get("format"),
        },
        "sha256": read["sha256"],
        "input_report": read["input_report"],
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
    export = document["export"]
    if export is not None and not export["file_sha256_matches"]:
        print(
            f"python -m ratings fit: warning: {document['file']} differs from the file "
            f"{export['manifest']} lists; the board is reproduced only from the exported file",
            file=sys.stderr,
        )
    try:
        # Strict JSON: a number that is not finite (an interval with no end) is null.
        json_dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into head: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0

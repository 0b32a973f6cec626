"""``python -m ratings fit`` on a file of the arena's open-data export
(docs/open-data.md): the published board's settings, read from the export itself.

A file with a ``manifest.json`` beside it that lists it and carries
``round_trip.fit`` is an export's ``battles`` table. Its fit is then the board's: the
manifest gives the seed, the replicates, the ridge, R0, n0 and what the bootstrap
resampled; the ``ratings`` table beside it gives each agent's ``fit_index`` (the
refit numbers agents in the order of their ids); the battles' ``cluster_index`` gives
each cluster's number in the refit (judges in the order the refit reads them). With
those, the CLI hands ``ratings.bradley_terry.rate`` the same numbers in the same order
as the refit did, and prints the published ratings, intervals and rank bands bit for
bit. A flag given on the command line still wins over the export's value; ``--no-export``
ignores the manifest. No Django."""

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ratings.cli_files import CliError, file_format, file_records

FIT_FORMAT = 1  # round_trip.fit's layout; a reader refuses a newer major number
# The arena's bootstrap unit from what its snapshot resampled: judges are what the
# default (battles) resamples when the clustered interval is published.
ARENA_UNIT = {"battles": "battles", "judges": "battles", "tasks": "tasks"}


@dataclass(frozen=True)
class ExportFit:
    manifest: Path
    fit: dict  # manifest.json's round_trip.fit
    sha256: str | None  # the file's digest as the manifest lists it

    @property
    def resamples_tasks(self) -> bool:
        return ARENA_UNIT[self.fit["bootstrap_unit"]] == "tasks"

    def columns(self) -> dict:
        return self.fit["columns"]


def find(path: Path) -> ExportFit | None:
    """The export ``path`` belongs to, when a manifest.json beside it lists it and says
    how its board was fitted; None otherwise (any other file: the CLI's defaults)."""
    manifest = path.parent / "manifest.json"
    try:
        document = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict):
        return None
    fit = (document.get("round_trip") or {}).get("fit")
    files = [f for f in document.get("files") or () if isinstance(f, dict)]
    listed = {f.get("name"): f.get("sha256") for f in files}
    if not isinstance(fit, dict) or path.name not in listed:
        return None
    if int(str(fit.get("format", 0)).split(".")[0]) > FIT_FORMAT:
        raise CliError(
            f"{manifest} describes its fit in format {fit.get('format')}, newer than this "
            f"fitter reads ({FIT_FORMAT}); update the arena's code, or pass --no-export"
        )
    return ExportFit(manifest=manifest, fit=fit, sha256=listed[path.name])


def apply(args: argparse.Namespace, export: ExportFit) -> None:
    """Fills the flags the user left unset with the export's values."""
    fit, columns = export.fit, export.columns()
    defaults = {
        "weight": columns["weight"],
        "judge": columns["cluster"],
        "ridge": fit["ridge"],
        "r0": fit["r0"],
        "provisional": fit["min_battles"],
        "bootstrap": fit["bootstrap_replicates"],
        "seed": fit["seed"],
    }
    if export.resamples_tasks:
        defaults |= {"task": columns["task"], "bootstrap_unit": "tasks"}
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.cluster is None and args.judge == columns["cluster"]:
        args.cluster = "judge"


def order_column(args: argparse.Namespace, export: ExportFit | None) -> tuple[str, ...]:
    """The extra column to read: the refit's cluster numbers, when the clusters are the
    export's."""
    if export is None or args.judge != export.columns()["cluster"]:
        return ()
    if (args.cluster or "judge") != "judge":
        return ()
    return (export.columns()["cluster_index"],)


def agent_order(path: Path, given: str, export: ExportFit) -> dict[str, int]:
    """slug → the agent's index in the published fit, from the ``ratings`` table beside
    the file (same format, else the other one the export wrote)."""
    table = export.fit["agents"]
    kind = file_format(path, given)
    suffixes = [".parquet", ".jsonl"] if kind == "parquet" else [".jsonl", ".parquet"]
    for suffix in suffixes:
        candidate = path.parent / f"{table['table']}{suffix}"
        if candidate.exists():
            break
    else:
        raise CliError(
            f"{export.manifest} fits agents in the order of its {table['table']} table, and "
            f"there is no {table['table']}.jsonl or .parquet beside {path}; put it back, or "
            "pass --no-export"
        )
    records = file_records(candidate, "auto")
    header = next(records, (0, []))[1]
    if table["agent"] not in header or table["index"] not in header:
        raise CliError(f"{candidate} has no {table['agent']} and {table['index']} columns")
    agent, index = header.index(table["agent"]), header.index(table["index"])
    return {cells[agent]: int(cells[index]) for _, cells in records if cells[index] != ""}


def reorder_agents(agents: list[str], order: dict[str, int]) -> tuple[list[str], np.ndarray]:
    """(agents in the published fit's order, then any it did not have in file order;
    the new index of each old one)."""
    known = sorted((a for a in agents if a in order), key=order.__getitem__)
    ordered = known + [a for a in agents if a not in order]
    position = {a: k for k, a in enumerate(ordered)}
    return ordered, np.array([position[a] for a in agents], dtype=np.int64)


def cluster_numbers(cluster: np.ndarray, numbers: np.ndarray, name: str) -> np.ndarray:
    """The refit's number of each battle's cluster (``numbers``), checked to give every
    cluster one number and two clusters different ones."""
    pairs = np.unique(np.stack([cluster, numbers]), axis=1)
    if len(np.unique(pairs[0])) != pairs.shape[1] or len(np.unique(pairs[1])) != pairs.shape[1]:
        raise CliError(
            f"the {name} column does not give each cluster one number of its own; the "
            "file was edited after the export, pass --no-export"
        )
    return numbers

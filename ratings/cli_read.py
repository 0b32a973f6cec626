"""Reading a file of battles for ``python -m ratings fit`` (``ratings.cli``) and
``manage.py import_votes``: the rows of a CSV, JSON Lines or Parquet file
(``ratings.cli_files``) checked and turned into compact columns.

A row costs a few machine words (agent, outcome, weight and cluster codes in ``array``
buffers, a 16-byte digest of its cells for the duplicate check), never a Python object
per row: at a million battles the columns are tens of megabytes, not hundreds. The text
cells the import needs (winner, judge, task) are kept as codes into their distinct
values and listed on demand. No Django."""

import argparse
import hashlib
from array import array
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ratings.cli_files import CliError, file_check, file_format, file_records

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


class _Codes:
    """Distinct text values numbered in order of first appearance, and one code per row."""

    def __init__(self, typecode: str = "i") -> None:
        self.numbers: dict[str, int] = {}
        self.codes = array(typecode)
        self.add = self._add

    def _add(self, value: str) -> None:
        numbers = self.numbers
        self.codes.append(numbers.setdefault(value, len(numbers)))

    def values(self) -> list[str]:
        return list(self.numbers)

    def listed(self) -> list[str]:
        values = self.values()
        return [values[code] for code in self.codes]


@dataclass(frozen=True)
class Battles:
    """The battles of a file, one entry per battle in file order. The arrays are
    compact (int32 codes, 2y in int8); ``y`` and ``w`` give float64 columns."""

    agents: list[str]
    a: np.ndarray  # int32 agent index per battle
    b: np.ndarray
    y2: np.ndarray  # int8: 2, 1 or 0, twice the outcome from a's view
    w_column: np.ndarray | None  # float64 weights, None: all 1 (no --weight)
    cluster: np.ndarray | None  # int32: the cluster's number (first appearance)
    skipped: int
    report: InputReport
    lines: np.ndarray  # int32: the line each battle's row starts on
    sha256: str  # of the file's bytes, as read
    cluster_keys: list[str] | None = None  # the cluster cell of each cluster number
    task: np.ndarray | None = None  # int32 code of the task cell, with --task
    task_keys: list[str] | None = None
    _winners: "_Codes | None" = None
    _judges: "_Codes | None" = None
    # Cells of extra integer columns asked for (``read_battles(..., numbers=)``).
    numbers: dict[str, np.ndarray] = field(default_factory=dict)

    @cached_property
    def y(self) -> np.ndarray:
        """float64 outcomes from a's view: 1, 0.5 or 0."""
        return self.y2 * 0.5

    @cached_property
    def w(self) -> np.ndarray:
        """float64 evidence weights (1 without --weight)."""
        return np.ones(len(self.y2)) if self.w_column is None else self.w_column

    @property
    def winners(self) -> list[str]:
        """Per battle, in file order: the stripped winner cell (for import_votes)."""
        return self._winners.listed()

    @property
    def judges(self) -> list[str] | None:
        """Per battle: the judge cell when --judge maps a column, else None."""
        return None if self._judges is None else self._judges.listed()

    @property
    def tasks(self) -> list[str] | None:
        """Per battle: the task cell when --task maps a column, else None."""
        if self.task is None:
            return None
        return [self.task_keys[code] for code in self.task.tolist()]


def _values(text: str) -> set[str]:
    return {value.strip() for value in text.split(",") if value.strip()}


def _mapping(args: argparse.Namespace) -> tuple[str, str, set, set, str | None]:
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
    return win_a, win_b, ties, skip, cluster_col


def _header(records, path, wanted: dict[str, str]) -> list[str]:
    first = next(records, None)
    header = first[1] if first is not None else None
    if not header:
        raise CliError(f"{path} is empty; it needs a header row and battle rows")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise CliError(
            f"the header of {path} names column(s) {', '.join(map(repr, repeated))} "
            "more than once; rename them so that each column has one name"
        )
    for flag, col in wanted.items():
        if col not in header:
            raise CliError(
                f"column {col!r} ({flag}) is not in {path}; available columns: {', '.join(header)}"
            )
    return header


def read_battles(args: argparse.Namespace, numbers: tuple[str, ...] = ()) -> Battles:
    """Rows of ``args.file`` mapped to index arrays; raises CliError on bad input.

    The file is read twice, streamed: once as bytes (``Battles.sha256`` is their digest;
    text must be UTF-8, an optional byte-order mark dropped) and once parsed, as strict
    CSV (the excel dialect: a quote that is never closed, or text after a closing quote,
    is an error), JSON Lines or Parquet. Blank lines are skipped; every other row must
    have at least the header's cells. ``numbers`` names extra columns of integers to
    keep (``Battles.numbers``)."""
    win_a, win_b, ties, skip, cluster_col = _mapping(args)
    given = getattr(args, "format", "auto")
    sha256 = file_check(args.file, file_format(args.file, given))
    records = file_records(args.file, given)
    wanted = {"--a": args.a, "--b": args.b, "--winner": args.winner}
    wanted |= {
        flag: col
        for flag, col in (("--judge", args.judge), ("--task", args.task), ("--weight", args.weight))
        if col is not None
    }
    wanted |= {f"the export's {name}": name for name in numbers}
    header = _header(records, args.file, wanted)
    width = len(header)
    at = {name: header.index(name) for name in header}
    col_a, col_b, col_winner = at[args.a], at[args.b], at[args.winner]
    col_weight = None if args.weight is None else at[args.weight]
    col_cluster = None if cluster_col is None else at[cluster_col]
    col_judge = None if args.judge is None else at[args.judge]
    col_task = None if args.task is None else at[args.task]
    col_numbers = [at[name] for name in numbers]
    outcomes = {win_a: 1.0, win_b: 0.0} | dict.fromkeys(ties, 0.5)
    outcomes = {k: v for k, v in outcomes.items() if k not in skip}
    names: dict[str, int] = {}
    # Agents, clusters, winners, judges and tasks as int32 codes, y as 2y in a byte, the
    # line as int32: a row costs ~40 bytes, the digest of its cells included.
    a, b, y2, w, lines = array("i"), array("i"), array("b"), array("d"), array("i")
    clusters, tasks, winners = _Codes(), _Codes(), _Codes("b")
    judges = _Codes() if col_judge is not None and col_judge != col_cluster else None
    extra = [array("q") for _ in numbers]
    digests = bytearray()
    report = InputReport()
    skipped = 0
    strict = args.strict
    # Bound methods looked up once: the loop runs once per row.
    add_a, add_b, add_y, add_w, add_line = a.append, b.append, y2.append, w.append, lines.append
    agent = names.setdefault
    blake2b = hashlib.blake2b
    twice = {value: int(2 * number) for value, number in outcomes.items()}
    for line, cells in records:
        if len(cells) != width:
            if len(cells) < width:
                raise CliError(
                    f"line {line} has {len(cells)} fields, the header has {width}; fill "
                    "in the missing cells (empty ones need their commas)"
                )
            if strict:
                raise CliError(
                    f"line {line} has {len(cells)} fields, the header has {width} "
                    "(--strict); remove the extra cells, or drop --strict to ignore them"
                )
            report.extra_field_rows.append(line)
        outcome = cells[col_winner].strip()
        value = twice.get(outcome)
        if value is None:
            if outcome in skip:
                skipped += 1
                continue
            raise CliError(
                f"line {line}: {args.winner} value {outcome!r} is not mapped; pass it "
                "to --win-a, --win-b, --tie or --skip"
            )
        agent_a, agent_b = cells[col_a].strip(), cells[col_b].strip()
        if not agent_a or not agent_b:
            raise CliError(f"line {line}: an agent cell is empty; every battle needs both")
        if agent_a == agent_b:
            raise CliError(f"line {line}: {agent_a!r} plays itself; remove the row")
        add_y(value)
        add_a(agent(agent_a, len(names)))
        add_b(agent(agent_b, len(names)))
        if col_weight is not None:
            add_w(_weight(cells[col_weight], line, args.weight))
        if col_cluster is not None:
            key = cells[col_cluster].strip()
            if not key:
                raise CliError(f"line {line}: the {cluster_col} cell is empty; fill it")
            clusters.add(key)
        winners.add(outcome)
        if judges is not None:
            judges.add(cells[col_judge].strip())
        if col_task is not None:
            tasks.add(cells[col_task].strip())
        for column, kept in zip(col_numbers, extra, strict=True):
            kept.append(_integer(cells[column], line, header[column]))
        digests += blake2b(repr(cells).encode(), digest_size=16).digest()
        add_line(line)
    if col_judge is not None and judges is None:
        judges = clusters  # the judge column is the cluster column: one set of codes
    if not y2:
        raise CliError(f"{args.file} has no battle rows (after --skip); nothing to rate")
    line_numbers = np.frombuffer(lines, dtype=np.int32)
    _duplicates(digests, line_numbers, report, strict)
    del digests
    return Battles(
        agents=list(names),
        a=np.frombuffer(a, dtype=np.int32),
        b=np.frombuffer(b, dtype=np.int32),
        y2=np.frombuffer(y2, dtype=np.int8),
        w_column=np.frombuffer(w, dtype=np.float64) if col_weight is not None else None,
        cluster=np.frombuffer(clusters.codes, dtype=np.int32) if col_cluster is not None else None,
        cluster_keys=clusters.values() if col_cluster is not None else None,
        skipped=skipped,
        report=report,
        lines=line_numbers,
        sha256=sha256,
        task=np.frombuffer(tasks.codes, dtype=np.int32) if col_task is not None else None,
        task_keys=tasks.values() if col_task is not None else None,
        _winners=winners,
        _judges=judges,
        numbers={
            name: np.frombuffer(kept, dtype=np.int64)
            for name, kept in zip(numbers, extra, strict=True)
        },
    )


def _duplicates(digests: bytearray, lines: np.ndarray, report: InputReport, strict: bool):
    """Rows whose cells repeat an earlier row's (equal 128-bit digests of the cells):
    listed in the report, or with ``strict`` the first one refused."""
    keys = np.frombuffer(bytes(digests), dtype=np.uint64).reshape(-1, 2)
    order = np.lexsort((np.arange(len(lines)), keys[:, 1], keys[:, 0]))
    ordered = keys[order]
    same = np.zeros(len(order), dtype=bool)
    same[1:] = (ordered[1:] == ordered[:-1]).all(axis=1)
    if not same.any():
        return
    first = np.maximum.accumulate(np.where(same, 0, np.arange(len(order))))
    repeats = order[same]  # rows that repeat the first row of their run
    originals = order[first[same]]
    by_line = np.argsort(repeats, kind="stable")
    repeats, originals = repeats[by_line], originals[by_line]
    if strict:
        raise CliError(
            f"line {lines[repeats[0]]} repeats line {lines[originals[0]]} cell for cell "
            "(--strict); remove the duplicate, or drop --strict to count both as battles"
        )
    report.duplicate_rows.extend(lines[repeats].tolist())


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


def _integer(text: str, line: int, column: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CliError(f"line {line}: {column} value {text!r} is not a whole number") from None

"""The style of each side of the battles a board rates, as raw numbers per battle side
(the covariates of style control, ``ratings.style``): a read, no writes.

Per side of a battle (its ``Run``):

- ``length``: characters of the final message (what the judges read; the judge page
  hides agent names in it, which changes a handful of characters at most);
- ``markdown``: markdown elements in that message: headers, list items, bold (``**``
  or ``__``), code blocks, links and tables (``markdown_elements``; a lone ``*`` is
  not counted: it is as often a list marker or a product as an emphasis);
- ``steps``: the steps the run recorded;
- ``wall_time``: seconds from the run's start to its end;
- ``files``: files it delivered;
- ``diff_size``: for a coding run, the lines its diff adds plus those it removes, as
  the judge sandbox counted them.

NaN where a side's value is not known: a battle without runs (an imported vote), a run
that never started or ended, a coding diff that could not be read, the diff size of a
desktop battle. One query per table (battles, runs, steps, coding outcomes), never one
per battle; the final messages are measured in the database (PostgreSQL), not read.

A decided battle's runs no longer change, so the refit stores each run's measures once
(``RunStyle``, ``ratings.refit.run_styles_record``) and this read takes them from
there, measuring only the runs not stored yet (measuring a message costs ~0.1 ms: seven
patterns over its text, and a board can hold tens of thousands).
"""

import math
import re
from dataclasses import dataclass

import numpy as np
from django.db import connection
from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Func,
    IntegerField,
    Value,
)
from django.db.models.functions import Coalesce, Length

from battles.coding_models import CodingOutcome
from battles.models import Run, Step
from ratings.models import RunStyle
from ratings.selectors import rated_battles
from ratings.services import OUTCOME_Y

# The covariates this module measures, in the order of ``ratings.style.STYLE_FEATURES``.
FEATURES = ("length", "markdown", "steps", "wall_time", "files", "diff_size")
LABELS = {
    "length": "final message length (characters)",
    "markdown": "markdown elements in the final message",
    "steps": "steps taken",
    "wall_time": "wall time (seconds)",
    "files": "files delivered",
    "diff_size": "diff size (lines added + removed, coding)",
}

# Markdown elements, one pattern each, counted as non-overlapping matches line by line.
# Each is written so that Python's ``re`` (MULTILINE) and PostgreSQL's regexp_count (flag
# n: newline-sensitive) find the same matches: anchored at a line start, or bounded by
# a negated class that cannot run past its closing delimiter (tests/ratings pin them).
MARKDOWN_PATTERNS = {
    "headers": r"^ {0,3}#{1,6}[ \t]",
    "list_items": r"^[ \t]*([-*+]|[0-9]{1,9}[.)])[ \t]",
    "bold_stars": r"\*\*[^*\n]+\*\*",
    "bold_underscores": r"__[^_\n]+__",
    "code_fences": r"^[ \t]*```",  # two fences a block: (fences + 1) // 2
    "links": r"\[[^]\n]+\]\([^)\s]+\)",
    "table_rules": r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*\|",  # one rule under a table's head
}
_COMPILED = {name: re.compile(p, re.MULTILINE) for name, p in MARKDOWN_PATTERNS.items()}


def markdown_elements(text: str) -> int:
    """Markdown elements in ``text`` (the patterns of ``MARKDOWN_PATTERNS``)."""
    counts = {name: len(pattern.findall(text)) for name, pattern in _COMPILED.items()}
    return _markdown_total(counts)


def _markdown_total(counts: dict[str, int]) -> int:
    fences = counts.pop("code_fences")
    return sum(counts.values()) + (fences + 1) // 2


class _RegexpCount(Func):
    """PostgreSQL's regexp_count(text, pattern, 1, 'n'): matches, newline-sensitive."""

    function = "regexp_count"
    output_field = IntegerField()

    def __init__(self, expression, pattern: str):
        super().__init__(expression, Value(pattern), Value(1), Value("n"))


class _JsonLength(Func):
    """Items of a JSON list column."""

    output_field = IntegerField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, function="jsonb_array_length", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, function="json_array_length", **extra)


@dataclass(frozen=True)
class StyleBattles:
    """The battles of a board one by one (id order): agent ids per side, y from side
    A's view, evidence weight, deciding judge (minus the battle id when none: a cluster
    of its own, as the refit counts it) and each side's raw features (columns
    ``names``, NaN where not known)."""

    ids: np.ndarray
    agent_a: np.ndarray
    agent_b: np.ndarray
    y: np.ndarray
    w: np.ndarray
    cluster: np.ndarray
    features_a: np.ndarray
    features_b: np.ndarray
    names: tuple[str, ...]

    @property
    def measured(self) -> dict[str, int]:
        """Per feature, the battles with it known on both sides."""
        both = ~np.isnan(self.features_a) & ~np.isnan(self.features_b)
        return {name: int(both[:, j].sum()) for j, name in enumerate(self.names)}


def unmeasured_runs(scope):
    """The runs of the battles of ``scope`` (a queryset of battle ids) that have no
    ``RunStyle`` row yet."""
    return Run.objects.filter(battle__in=scope, style_measures__isnull=True)


def measure_runs(runs) -> list[dict]:
    """The features of the runs of the queryset ``runs``, one dict each (run pk,
    battle_id, side and every feature, NaN where not known): one query for the runs,
    and only if there are any, one for their steps and one for their coding outcomes."""
    postgres = connection.vendor == "postgresql"
    measures = {
        "length_": Coalesce(Length("final_message"), Value(0)),
        "files_": Coalesce(_JsonLength("delivered_files"), Value(0)),
        "wall_": ExpressionWrapper(F("ended_at") - F("started_at"), output_field=DurationField()),
    }
    if postgres:
        for name, pattern in MARKDOWN_PATTERNS.items():
            measures[f"md_{name}"] = Coalesce(_RegexpCount("final_message", pattern), Value(0))
    else:  # SQLite (``make run``): no regexp_count, the messages are counted here
        measures["message"] = F("final_message")
    found = {}
    for run in runs.order_by().values("pk", "battle_id", "side").annotate(**measures):
        if postgres:
            markdown = _markdown_total({name: run[f"md_{name}"] for name in MARKDOWN_PATTERNS})
        else:
            markdown = markdown_elements(run["message"] or "")
        wall = run["wall_"]
        found[run["pk"]] = {
            "pk": run["pk"],
            "battle_id": run["battle_id"],
            "side": run["side"],
            "length": float(run["length_"]),
            "markdown": float(markdown),
            "steps": 0.0,  # a run without step rows took none; the steps query adds them
            "wall_time": wall.total_seconds() if wall is not None else math.nan,
            "files": float(run["files_"]),
            "diff_size": math.nan,  # a run without a coding outcome: not a coding run
        }
    if not found:
        return []
    ids = runs.order_by().values("pk")
    steps = Step.objects.filter(run__in=ids).order_by().values("run_id").annotate(n=Count("pk"))
    for run_id, count in steps.values_list("run_id", "n"):
        if run_id in found:
            found[run_id]["steps"] = float(count)
    coding = CodingOutcome.objects.filter(run__in=ids).values_list("run_id", "files", "diff_error")
    for run_id, files, error in coding:
        if run_id in found and not error:
            found[run_id]["diff_size"] = _diff_lines(files)
    return list(found.values())


def stored_runs(scope) -> list[tuple]:
    """The ``RunStyle`` rows of the battles of ``scope`` as (battle id, side, *FEATURES)
    tuples, None where not known: one query."""
    return list(
        RunStyle.objects.filter(battle__in=scope).values_list("battle_id", "side", *FEATURES)
    )


def run_features(scope) -> list[tuple]:
    """Every run of the battles of ``scope`` as (battle id, side, *FEATURES) tuples
    (None or NaN where not known): stored (``RunStyle``) or, for the runs not measured
    yet, measured now (``measure_runs``); nothing is written."""
    measured = measure_runs(unmeasured_runs(scope))
    return [
        *stored_runs(scope),
        *((m["battle_id"], m["side"], *(m[name] for name in FEATURES)) for m in measured),
    ]


def side_features(
    battles,
    battle_ids: np.ndarray,
    names: tuple[str, ...] = FEATURES,
    *,
    runs: list[tuple] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The raw features of sides A and B of the battles ``battle_ids`` (ids of battles
    of the queryset ``battles``, in the caller's order): two arrays of len(battle_ids) ×
    len(names), NaN where not known (a feature this module does not measure is NaN
    throughout). The runs are ``runs`` when given (``run_features`` of the same
    battles), else read: two queries once every run is stored, two more (steps, coding
    outcomes) while some is not."""
    n = len(battle_ids)
    features = {side: np.full((n, len(names)), np.nan) for side in ("A", "B")}
    if runs is None:
        runs = run_features(battles.order_by().values("pk")) if n else []
    if not runs or not n:
        return features["A"], features["B"]
    battle = np.array([run[0] for run in runs], dtype=np.int64)
    side_a = np.array([run[1] == "A" for run in runs], dtype=bool)
    values = np.array([run[2:] for run in runs], dtype=np.float64)  # None → NaN
    ids = np.asarray(battle_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    at = np.minimum(np.searchsorted(ids[order], battle), n - 1)
    # a run of a battle decided after the caller's read of the battles: not in its fit
    known = ids[order][at] == battle
    row = order[at]
    for j, name in enumerate(names):
        if name in FEATURES:
            column = values[:, FEATURES.index(name)]
            for side, mask in (("A", side_a), ("B", ~side_a)):
                pick = known & mask
                features[side][row[pick], j] = column[pick]
    return features["A"], features["B"]


def _diff_lines(files: list) -> float:
    """Lines added plus removed over a diff's files (``CodingOutcome.files``)."""
    total = 0
    for item in files or ():
        if isinstance(item, dict):
            for key in ("added", "removed"):
                value = item.get(key)
                if isinstance(value, int) and value > 0:
                    total += value
    return float(total)


def style_battles(
    *, arena_id: int, category: str | None = None, names: tuple[str, ...] = FEATURES
) -> StyleBattles | None:
    """The arena's rated battles (of ``category``'s tasks only, when given) one by one
    with their sides' features, for style control; None when no rated battle has a
    recorded run (imported votes carry none): nothing to control for, and the battles
    are then not read one by one at all. One query per table: the stored runs and the
    runs not stored yet first (the test), then the battles (and while some run is not
    stored, its steps and coding outcomes)."""
    rated = rated_battles(arena_id=arena_id, category=category)
    runs = run_features(rated.order_by().values("pk"))
    if not runs:
        return None
    return style_battles_of(rated, names=names, runs=runs)


def style_battles_of(
    rated, *, names: tuple[str, ...] = FEATURES, runs: list[tuple] | None = None
) -> StyleBattles:
    """``style_battles`` of the battles of the queryset ``rated`` (rated battles)."""
    rows = list(
        rated.order_by("pk").values_list(
            "pk", "agent_a_id", "agent_b_id", "outcome", "evidence_weight", "cluster_judge_id"
        )
    )
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    ids = np.array(columns[0], dtype=np.int64)
    features_a, features_b = side_features(rated, ids, names, runs=runs)
    return StyleBattles(
        ids=ids,
        agent_a=np.array(columns[1], dtype=np.int64),
        agent_b=np.array(columns[2], dtype=np.int64),
        y=np.array([OUTCOME_Y[o] for o in columns[3]], dtype=np.float64),
        w=np.array([1.0 if w is None else w for w in columns[4]], dtype=np.float64),
        cluster=np.array(
            [-pk if c is None else c for pk, c in zip(columns[0], columns[5], strict=True)],
            dtype=np.int64,
        ),
        features_a=features_a,
        features_b=features_b,
        names=names,
    )

"""What a reader asks of the leaderboard (the page's and the API's GET parameters): which
board (overall or a task category) and which agents (by kind, provider, organisation),
checked, and the board narrowed to them. Pure: board documents in, board documents out.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from battles.classify import BOARD_CATEGORIES, CATEGORY_LABELS

KINDS = {
    "builtin": "built-in",
    "scaffold": "scaffold model",
    "remote": "remote system",
    "cli": "CLI coding agent",
    "human": "human baseline",
}
MAX_FILTER_CHARS = 100


class BoardQueryError(ValueError):
    """A parameter the board cannot answer; the message says what to send instead."""


# ``?style=controlled``: the board ordered by its style-controlled rating.
STYLE_CONTROLLED = "controlled"


@dataclass(frozen=True)
class BoardQuery:
    category: str = ""  # "" is the overall board
    kind: str = ""
    provider: str = ""
    organisation: str = ""
    style: str = ""  # "" the plain order; STYLE_CONTROLLED by style-controlled rating

    @property
    def narrowed(self) -> bool:
        """Some agents are filtered out."""
        return bool(self.kind or self.provider or self.organisation)

    def params(self, **changes: str) -> dict[str, str]:
        """The query's non-empty parameters, with ``changes`` applied (links between
        boards keep the filters)."""
        values = {
            "category": self.category,
            "kind": self.kind,
            "provider": self.provider,
            "organisation": self.organisation,
            "style": self.style,
            **changes,
        }
        return {k: v for k, v in values.items() if v}


def board_query(params: Mapping[str, str]) -> BoardQuery:
    """The query of GET parameters ``category``, ``kind``, ``provider``,
    ``organisation`` and ``style`` (each optional; blank means any, or the plain
    order). Raises BoardQueryError for an unknown category, kind or order, or an
    over-long or multi-line value."""
    values = {}
    for name in ("category", "kind", "provider", "organisation", "style"):
        value = params.get(name, "")
        if not isinstance(value, str):
            raise BoardQueryError(f"{name} must be text.")
        value = value.strip()
        if len(value) > MAX_FILTER_CHARS or any(ord(c) < 32 for c in value):
            raise BoardQueryError(
                f"{name} must be one line of at most {MAX_FILTER_CHARS} characters."
            )
        values[name] = value
    if values["category"] in ("overall", "all"):
        values["category"] = ""
    if values["category"] and values["category"] not in BOARD_CATEGORIES:
        choices = ", ".join(f"{c} ({CATEGORY_LABELS[c].lower()})" for c in BOARD_CATEGORIES)
        raise BoardQueryError(
            f"There is no {values['category']!r} board; category is one of {choices}, "
            "or blank for the overall board."
        )
    if values["kind"] and values["kind"] not in KINDS:
        raise BoardQueryError(
            f"kind {values['kind']!r} is unknown; it is one of {', '.join(KINDS)}, or blank."
        )
    if values["style"] == "plain":
        values["style"] = ""
    if values["style"] not in ("", STYLE_CONTROLLED):
        raise BoardQueryError(
            f"style {values['style'][:20]!r} is unknown; it is {STYLE_CONTROLLED} (the board "
            "ordered by its style-controlled rating), plain, or blank."
        )
    return BoardQuery(**values)


def _keep(row: dict[str, Any], query: BoardQuery) -> bool:
    return (
        (not query.kind or row["kind"] == query.kind)
        and (not query.provider or row["provider"].casefold() == query.provider.casefold())
        and (
            not query.organisation
            or row["organisation"].casefold() == query.organisation.casefold()
        )
    )


def matrices_subset(matrices: dict[str, Any], slugs: list[str]) -> dict[str, Any]:
    """The tables restricted to the agents ``slugs`` (in the tables' own order)."""
    wanted = set(slugs)
    keep = [i for i, slug in enumerate(matrices["agents"]) if slug in wanted]
    return {
        **matrices,
        "agents": [matrices["agents"][i] for i in keep],
        "names": [matrices["names"][i] for i in keep],
        "battles": [[matrices["battles"][i][j] for j in keep] for i in keep],
        "win_rate": [[matrices["win_rate"][i][j] for j in keep] for i in keep],
    }


def board_narrow(board: dict[str, Any], query: BoardQuery) -> dict[str, Any]:
    """The board with only the agents the query keeps, and its matrices over them. Ranks
    stay those of the whole board (a filter does not promote anyone)."""
    if not query.narrowed:
        return board
    rows = [row for row in board["rows"] if _keep(row, query)]
    return {
        **board,
        "rows": rows,
        "matrices": matrices_subset(board["matrices"], [row["slug"] for row in rows]),
    }


def with_style_ranks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows (in the board's order) with ``style_rank``: the plain rank's rule on the
    style-controlled rating, the rows that have one numbered 1, 2, … by it, best first,
    ties in the board's order; None for the rest."""
    rated = sorted(
        (i for i, row in enumerate(rows) if row.get("style_rating") is not None),
        key=lambda i: (-rows[i]["style_rating"], i),
    )
    rank = {i: place for place, i in enumerate(rated, start=1)}
    return [{**row, "style_rank": rank.get(i)} for i, row in enumerate(rows)]


def board_ordered(board: dict[str, Any], query: BoardQuery) -> dict[str, Any]:
    """The board in the order the query asks for: as it is, or with ``?style=controlled``
    by style-controlled rank (rows without one after, in the board's order)."""
    if query.style != STYLE_CONTROLLED:
        return board
    rows = sorted(
        board["rows"],
        key=lambda row: (row.get("style_rank") is None, row.get("style_rank") or 0),
    )
    return {**board, "rows": rows}


def filter_options(rows: list[dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    """The values each filter can take on this board, as (value, text) pairs: kinds in
    a fixed order, providers and organisations alphabetically."""
    kinds = {row["kind"] for row in rows}
    providers = sorted({row["provider"] for row in rows if row["provider"]}, key=str.casefold)
    organisations = sorted({row["organisation"] for row in rows}, key=str.casefold)
    return {
        "kinds": [(k, text) for k, text in KINDS.items() if k in kinds],
        "providers": [(p, p) for p in providers],
        "organisations": [(o, o) for o in organisations],
    }

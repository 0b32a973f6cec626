"""The leaderboard's pairwise heatmaps as server-side SVG (the helpers and conventions of
``ratings.svg``: one well-formed ``<svg>``, all text escaped, no inline style; colours
are presentation attributes computed here). Pure.

Rows and columns are the board's agents in its order; rows carry "number + name",
columns the number alone, so the labels stay readable on a phone. Every cell shows its
figure as text as well as colour (nothing is told by colour alone), has a hover title,
and the legend under the grid says what the colours mean.
"""

from collections.abc import Sequence
from html import escape

from ratings.matrices import PairMatrices
from ratings.svg import WIDTH, _num, _svg, _text

LABEL_CHARS = 16
WHITE = (255, 255, 255)
WIN = (28, 126, 214)  # blue: the row agent wins more
LOSS = (232, 89, 12)  # orange: the row agent loses more (blue/orange reads for colour blindness)
COUNT = (24, 100, 171)


def _mix(to: tuple[int, int, int], share: float) -> tuple[int, int, int]:
    share = min(max(share, 0.0), 1.0)
    return tuple(round(w + (t - w) * share) for w, t in zip(WHITE, to, strict=True))


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def _ink(rgb: tuple[int, int, int]) -> str:
    """The text class that reads better on the cell: dark or light (relative luminance;
    a class, since the site's stylesheet sets every chart text's fill)."""
    r, g, b = ((c / 255) ** 2.2 for c in rgb)
    return "hm-dark" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.18 else "hm-light"


def win_rate_colour(rate: float) -> tuple[int, int, int]:
    """White at 50 %, bluer towards 100 %, more orange towards 0 %."""
    return _mix(WIN, (rate - 0.5) * 2) if rate >= 0.5 else _mix(LOSS, (0.5 - rate) * 2)


def count_colour(count: int, peak: int) -> tuple[int, int, int]:
    return _mix(COUNT, 0.12 + 0.88 * count / peak) if count else (241, 243, 245)


def short_name(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def _grid(
    names: Sequence[str],
    cells: list[list[tuple[str, tuple[int, int, int], str] | None]],
) -> tuple[list[str], float]:
    """The labelled grid: ``cells[i][j]`` is (text, fill, hover title), None on the
    diagonal. Returns the SVG parts and the y under the grid."""
    n = len(names)
    left, top = 150, 22
    size = min(56.0, (WIDTH - left - 6) / max(n, 1))
    font = 12 if size >= 40 else 11 if size >= 26 else 9
    body: list[str] = []
    for j in range(n):
        body.append(
            _text(left + (j + 0.5) * size, top - 7, str(j + 1), anchor="middle", muted=True)
        )
    for i, name in enumerate(names):
        y = top + i * size
        label = escape(f"{i + 1} {short_name(name)}")
        body.append(
            f'<text x="{_num(left - 6)}" y="{_num(y + size / 2 + 4)}" text-anchor="end" '
            f'font-size="11">{label}</text>'
        )
        for j in range(n):
            x = left + j * size
            cell = cells[i][j]
            if cell is None:
                body.append(
                    f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(size)}" '
                    f'height="{_num(size)}" fill="#dfe3ea"/>'
                )
                continue
            text, fill, title = cell
            body.append(
                f'<g><title>{escape(title)}</title><rect x="{_num(x)}" y="{_num(y)}" '
                f'width="{_num(size)}" height="{_num(size)}" fill="{_hex(fill)}" '
                f'stroke="#ffffff" stroke-width="1"/>'
                f'<text x="{_num(x + size / 2)}" y="{_num(y + size / 2 + font / 3)}" '
                f'text-anchor="middle" font-size="{font}" class="{_ink(fill)}">'
                f"{escape(text)}</text></g>"
            )
    return body, top + n * size


def _legend(y: float, stops: Sequence[tuple[str, tuple[int, int, int]]], caption: str) -> list:
    """A row of swatches with their labels, and the caption under them."""
    body = [_text(12, y + 16, caption, muted=True)]
    x = 12.0
    for label, fill in stops:
        body.append(
            f'<rect x="{_num(x)}" y="{_num(y + 24)}" width="14" height="14" '
            f'fill="{_hex(fill)}" stroke="#dfe3ea" stroke-width="1"/>'
        )
        body.append(_text(x + 18, y + 35, label))
        x += 26 + 6.5 * len(label)
    return body


def win_rate_heatmap(matrices: PairMatrices, names: Sequence[str], *, title: str) -> str:
    """Row agent's win rate against the column agent (ties and both-bad count half), in
    per cent, over the battles they fought; "–" where they never met."""
    n = len(matrices.agents)
    cells: list[list] = []
    strongest: tuple[float, int, int] | None = None
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append(None)
                continue
            rate, count = matrices.win_rate[i][j], matrices.battles[i][j]
            if rate is None:
                row.append(("–", (241, 243, 245), f"{names[i]} and {names[j]} never met"))
                continue
            title_text = (
                f"{names[i]} against {names[j]}: {rate:.0%} over {count} "
                f"battle{'s' if count != 1 else ''} (ties count half)"
            )
            row.append((f"{rate * 100:.0f}", win_rate_colour(rate), title_text))
            if strongest is None or rate > strongest[0]:
                strongest = (rate, i, j)
        cells.append(row)
    if not n:
        body = [_text(WIDTH / 2, 40, "No rated battles yet", anchor="middle", muted=True)]
        return _svg(70, title, f"{title}: no rated battles yet.", body)
    body, bottom = _grid(names, cells)
    stops = [
        ("0 %", win_rate_colour(0.0)),
        ("25 %", win_rate_colour(0.25)),
        ("50 %", win_rate_colour(0.5)),
        ("75 %", win_rate_colour(0.75)),
        ("100 %", win_rate_colour(1.0)),
    ]
    body += _legend(bottom, stops, "Share of the battles the row's agent won (ties count half)")
    desc = (
        f"{title}: a grid of {n} agents; each cell is the row agent's win rate in per cent "
        "against the column agent, ties and both-bad outcomes counting half; a dash where "
        "the two never met."
    )
    if strongest is not None:
        rate, i, j = strongest
        desc += f" Highest: {names[i]} against {names[j]}, {rate:.0%}."
    return _svg(bottom + 46, title, desc, body)


def battle_count_heatmap(matrices: PairMatrices, names: Sequence[str], *, title: str) -> str:
    """Rated battles between each pair; darker means more."""
    n = len(matrices.agents)
    if not n:
        body = [_text(WIDTH / 2, 40, "No rated battles yet", anchor="middle", muted=True)]
        return _svg(70, title, f"{title}: no rated battles yet.", body)
    peak = max(max(row) for row in matrices.battles) or 1
    cells = [
        [
            None
            if i == j
            else (
                str(matrices.battles[i][j]),
                count_colour(matrices.battles[i][j], peak),
                f"{names[i]} and {names[j]}: {matrices.battles[i][j]} rated battle"
                + ("" if matrices.battles[i][j] == 1 else "s"),
            )
            for j in range(n)
        ]
        for i in range(n)
    ]
    body, bottom = _grid(names, cells)
    middle = max(1, peak // 2)
    stops = {str(v): count_colour(v, peak) for v in (0, 1, middle, peak)}  # distinct labels
    body += _legend(bottom, list(stops.items()), "Rated battles between the two")
    desc = (
        f"{title}: a grid of {n} agents; each cell is the number of rated battles between "
        f"the row and the column agent, {matrices.total_battles} in all, at most {peak} "
        "for one pair."
    )
    return _svg(bottom + 46, title, desc, body)

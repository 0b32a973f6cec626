"""An evaluation's figures as self-contained SVG (000 §4): a radar of each agent's mean
score per criterion with its 95 % bootstrap interval drawn along the axis, and the
win-rate matrix. Pure: standard library, plus the arena's win-rate colours.

Self-contained means every colour and font is a presentation attribute, so a file
written next to the run record opens anywhere; all text is escaped. Nothing is told by
colour alone: every point and cell also carries its number (as text or a hover title).
"""

import math
from collections.abc import Mapping, Sequence
from html import escape

from ratings.heatmap_svg import win_rate_colour

# Distinct on white and for the common colour blindnesses (Okabe–Ito).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def _n(value: float) -> str:
    return f"{value:.1f}"


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>' + "".join(body) + "</svg>"
    )


def radar(
    means: Mapping[str, Mapping[str, Mapping[str, float]]],
    *,
    criteria: Sequence[tuple[str, int]],
    agents: Sequence[str],
    title: str = "Mean score per criterion (95 % bootstrap interval)",
) -> str:
    """``means[agent][criterion] = {"mean", "lower", "upper", ...}`` (evals.aggregates.
    criterion_means); ``criteria`` are (name, scale) in the rubric's order. Each axis
    runs from 0 at the centre to the criterion's scale at the rim."""
    if not criteria:
        raise ValueError("a radar needs at least one criterion")
    size, legend_w = 420, 180
    cx = cy = size / 2
    rim = size / 2 - 60

    def at(axis: int, share: float) -> tuple[float, float]:
        angle = -math.pi / 2 + 2 * math.pi * axis / len(criteria)
        return cx + rim * share * math.cos(angle), cy + rim * share * math.sin(angle)

    body = []
    for ring in (0.25, 0.5, 0.75, 1.0):
        points = " ".join(
            f"{_n(x)},{_n(y)}" for x, y in (at(a, ring) for a in range(len(criteria)))
        )
        if len(criteria) >= 3:
            body.append(f'<polygon points="{points}" fill="none" stroke="#dddddd"/>')
    for axis, (name, scale) in enumerate(criteria):
        x, y = at(axis, 1.0)
        lx, ly = at(axis, 1.13)
        body.append(
            f'<line x1="{_n(cx)}" y1="{_n(cy)}" x2="{_n(x)}" y2="{_n(y)}" stroke="#999999"/>'
        )
        anchor = "middle" if abs(lx - cx) < 1 else ("start" if lx > cx else "end")
        body.append(
            f'<text x="{_n(lx)}" y="{_n(ly)}" text-anchor="{anchor}" {FONT} fill="#222222">'
            f"{escape(name)} (0–{scale})</text>"
        )
    for index, agent in enumerate(agents):
        colour = PALETTE[index % len(PALETTE)]
        scored = means.get(agent, {})
        vertices = []
        for axis, (name, scale) in enumerate(criteria):
            row = scored.get(name)
            if row is None:
                continue
            share = lambda v, scale=scale: min(max(v / scale, 0.0), 1.0)  # noqa: E731
            (x, y), (x0, y0), (x1, y1) = (
                at(axis, share(row[k])) for k in ("mean", "lower", "upper")
            )
            vertices.append((x, y))
            label = (
                f"{agent} · {name}: mean {row['mean']:.2f} "
                f"(95 % {row['lower']:.2f}–{row['upper']:.2f}, n {row.get('n', '?')})"
            )
            body.append(
                f'<line class="interval" x1="{_n(x0)}" y1="{_n(y0)}" x2="{_n(x1)}" y2="{_n(y1)}" '
                f'stroke="{colour}" stroke-width="4" stroke-opacity="0.45"/>'
            )
            body.append(
                f'<circle class="mean" cx="{_n(x)}" cy="{_n(y)}" r="4" fill="{colour}">'
                f"<title>{escape(label)}</title></circle>"
            )
        if len(vertices) >= 3:
            points = " ".join(f"{_n(x)},{_n(y)}" for x, y in vertices)
            body.append(
                f'<polygon class="agent" points="{points}" fill="{colour}" fill-opacity="0.08" '
                f'stroke="{colour}" stroke-width="2"/>'
            )
        ly = 40 + 20 * index
        body.append(f'<rect x="{size + 10}" y="{ly - 10}" width="12" height="12" fill="{colour}"/>')
        body.append(f'<text x="{size + 28}" y="{ly}" {FONT} fill="#222222">{escape(agent)}</text>')
    return _svg(size + legend_w, size, title, body)


def win_rate_matrix(
    rates: Mapping[str, Mapping[str, float | None]],
    *,
    agents: Sequence[str],
    title: str = "Win rate of the row agent against the column agent",
) -> str:
    """``rates[a][b]``: a's win rate over b on their common tasks (evals.aggregates.
    win_rates), None where they share none. Each cell shows its rate."""
    cell, left, top = 56, 140, 40
    width, height = left + cell * len(agents) + 10, top + cell * len(agents) + 40
    body = []
    for j in range(len(agents)):
        x = left + cell * j + cell / 2
        body.append(
            f'<text x="{_n(x)}" y="{top - 10}" text-anchor="middle" {FONT} fill="#222222">'
            f"{j + 1}</text>"
        )
    for i, row_agent in enumerate(agents):
        y = top + cell * i
        body.append(
            f'<text x="{left - 8}" y="{_n(y + cell / 2 + 4)}" text-anchor="end" {FONT} '
            f'fill="#222222">{i + 1} {escape(row_agent[:16])}</text>'
        )
        for j, column_agent in enumerate(agents):
            x = left + cell * j
            rate = rates.get(row_agent, {}).get(column_agent)
            fill = (
                "#f1f3f5" if rate is None else "#{:02x}{:02x}{:02x}".format(*win_rate_colour(rate))
            )
            shown = "–" if rate is None else f"{rate:.2f}"
            hover = f"{row_agent} vs {column_agent}: " + (
                "no common task" if rate is None else f"win rate {rate:.3f}"
            )
            body.append(
                f'<rect class="cell" x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{fill}" '
                f'stroke="#ffffff"><title>{escape(hover)}</title></rect>'
            )
            body.append(
                f'<text x="{_n(x + cell / 2)}" y="{_n(y + cell / 2 + 4)}" text-anchor="middle" '
                f'{FONT} fill="#111111">{shown}</text>'
            )
    body.append(
        f'<text x="{left}" y="{height - 12}" {FONT} fill="#555555">blue: the row agent wins '
        "more often; orange: less often; 0.50: even</text>"
    )
    return _svg(width, height, title, body)

"""Tiny server-side SVG charts for the metrics page: no JavaScript, no build step. Pure.

Every chart is one ``<svg>`` string for a page: well-formed XML, all text escaped, styled
by class from the site's stylesheet (``static/arena.css``, the ``mx-*`` rules: no inline
style, which the pages' Content-Security-Policy refuses), scaled to its container
through its viewBox so it fits a phone's width.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from ratings.metrics import format_duration

WIDTH = 400  # viewBox units; the chart scales to its container


def _num(value: float) -> str:
    """Coordinates with at most two decimals and no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _text(x: float, y: float, body: str, *, anchor: str = "start", muted: bool = False) -> str:
    css = ' class="mx-muted"' if muted else ""
    return f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}"{css}>{escape(body)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, css: str) -> str:
    return f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" y2="{_num(y2)}" class="{css}"/>'


def _svg(height: float, title: str, desc: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="mx-svg" role="img" '
        f'viewBox="0 0 {WIDTH} {_num(height)}" width="100%" '
        f'preserveAspectRatio="xMidYMid meet">'
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>{''.join(body)}</svg>"
    )


# --- box plots on a shared logarithmic time axis ---------------------------------------

# Axis ends and ticks snap to these durations, so both ends are always labelled.
TIME_TICKS: tuple[tuple[float, str], ...] = (
    (0.001, "1 ms"),
    (0.01, "10 ms"),
    (0.1, "100 ms"),
    (1, "1 s"),
    (10, "10 s"),
    (60, "1 min"),
    (600, "10 min"),
    (3600, "1 h"),
    (6 * 3600, "6 h"),
    (86400, "1 d"),
    (7 * 86400, "1 w"),
)
# Below the first tick a value is drawn at the axis floor (log scales have no zero).
TIME_FLOOR_S = TIME_TICKS[0][0]
BOX_KEYS = ("min", "p25", "p50", "p75", "max")


@dataclass(frozen=True)
class BoxRow:
    """One latency: its label and its figures (``min``, ``p25``, ``p50``, ``p75``,
    ``max``, optionally ``mean``, ``p95``, ``p99``, ``n``), or None when it has no data."""

    label: str
    stats: Mapping[str, float | int | None] | None
    note: str = ""


def _time_domain(rows: Sequence[BoxRow]) -> tuple[float, float]:
    values = [
        max(float(row.stats[key]), TIME_FLOOR_S)
        for row in rows
        if row.stats
        for key in ("min", "max")
        if row.stats.get(key) is not None
    ]
    if not values:
        return 1.0, 3600.0
    low, high = min(values), max(values)
    ticks = [t for t, _ in TIME_TICKS]
    lo = max([t for t in ticks if t <= low], default=ticks[0])
    hi = min([t for t in ticks if t >= high], default=ticks[-1])
    if hi <= lo:
        following = [t for t in ticks if t > lo]
        hi = following[0] if following else lo * 10
    return lo, hi


def box_plot(rows: Sequence[BoxRow], *, title: str) -> str:
    """One horizontal box plot per row on a shared log time axis: whiskers min–max, box
    p25–p75, a thick median bar, a hollow diamond at the mean and red ticks at p95
    and p99. A row without data shows its note instead."""
    left, right = 12, WIDTH - 14
    row_h, top = 46, 8
    lo, hi = _time_domain(rows)
    span = math.log10(hi) - math.log10(lo)

    def x(seconds: float) -> float:
        clamped = min(max(seconds, lo), hi)
        return left + (right - left) * (math.log10(clamped) - math.log10(lo)) / span

    body: list[str] = []
    axis_y = top + row_h * len(rows) + 4
    last_label_x = -math.inf
    for tick, label in TIME_TICKS:
        if not lo <= tick <= hi:
            continue
        tx = x(tick)
        body.append(_line(tx, top, tx, axis_y, "mx-grid"))
        if tx - last_label_x >= 46:
            anchor = "start" if tick == lo else "end" if tick == hi else "middle"
            body.append(_text(tx, axis_y + 16, label, anchor=anchor, muted=True))
            last_label_x = tx
    body.append(_line(left, axis_y, right, axis_y, "mx-axis"))

    for index, row in enumerate(rows):
        y0 = top + index * row_h
        body.append(_text(left, y0 + 14, row.label))
        stats = row.stats
        if not stats or any(stats.get(key) is None for key in BOX_KEYS):
            body.append(_text(right, y0 + 14, row.note or "no data", anchor="end", muted=True))
            continue
        v = {key: float(stats[key]) for key in BOX_KEYS}
        n = stats.get("n")
        caption = f"median {format_duration(v['p50'])}" + (f" · {n} measured" if n else "")
        body.append(_text(right, y0 + 14, caption, anchor="end", muted=True))
        mid, half = y0 + 29, 8
        body.append('<g class="mx-box-row">')
        body.append(_line(x(v["min"]), mid, x(v["max"]), mid, "mx-whisker"))
        for end in ("min", "max"):
            body.append(_line(x(v[end]), mid - 5, x(v[end]), mid + 5, "mx-whisker"))
        box_x = x(v["p25"])
        body.append(
            f'<rect x="{_num(box_x)}" y="{_num(mid - half)}" '
            f'width="{_num(max(x(v["p75"]) - box_x, 1))}" height="{2 * half}" class="mx-box">'
            f"<title>{escape(_box_title(row.label, stats))}</title></rect>"
        )
        for key in ("p95", "p99"):
            if stats.get(key) is not None:
                tx = x(float(stats[key]))
                body.append(_line(tx, mid - 5, tx, mid + 5, "mx-tail"))
        body.append(_line(x(v["p50"]), mid - half, x(v["p50"]), mid + half, "mx-median"))
        if stats.get("mean") is not None:
            mx = x(float(stats["mean"]))
            body.append(f'<path d="M{_num(mx)} {_num(mid - 5)}l5 5l-5 5l-5 -5z" class="mx-mean"/>')
        body.append("</g>")
    height = axis_y + 24
    desc = (
        "Box plots on a logarithmic time axis: whiskers from minimum to maximum, box from "
        "the 25th to the 75th percentile, thick bar at the median, diamond at the mean, red "
        "ticks at the 95th and 99th percentiles."
    )
    return _svg(height, title, desc, body)


def _box_title(label: str, stats: Mapping[str, float | int | None]) -> str:
    parts = [
        f"{key} {format_duration(float(stats[key]))}"
        for key in ("min", "p25", "p50", "mean", "p75", "p95", "p99", "max")
        if stats.get(key) is not None
    ]
    return f"{label}: " + ", ".join(parts)


# --- grouped bar chart ------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float]


def nice_ticks(top: float, *, target: int = 4) -> list[float]:
    """0, step, 2·step, … up to the first multiple of a 1-2-5 step at or above ``top``,
    with about ``target`` steps; integer steps only (the charts count battles)."""
    if top <= 0:
        return [0, 1]
    raw = top / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    step = max(1, math.ceil(step))
    count = math.ceil(top / step)
    return [i * step for i in range(count + 1)]


def bar_chart(
    series: Sequence[Series],
    *,
    title: str,
    bin_titles: Sequence[str],
    boundary_labels: Mapping[int, str],
    y_label: str,
) -> str:
    """Grouped bars, one group per bin and one bar per series (every bar is drawn, a
    zero as a zero-height bar). ``boundary_labels`` maps a bin boundary (0 … number of
    bins) to its x-axis label; ``bin_titles`` are the hover texts of the bins."""
    n_bins = len(bin_titles)
    if any(len(s.values) != n_bins for s in series):
        raise ValueError("every series needs one value per bin")
    left, right, top, plot_h = 34, WIDTH - 10, 30, 170
    bottom = top + plot_h
    peak = max((v for s in series for v in s.values), default=0)
    ticks = nice_ticks(peak)
    y_max = ticks[-1]

    def y(value: float) -> float:
        return bottom - plot_h * value / y_max

    body: list[str] = []
    legend_x = left
    for index, s in enumerate(series):
        body.append(
            f'<rect x="{_num(legend_x)}" y="8" width="10" height="10" class="mx-bar-{index}"/>'
        )
        body.append(_text(legend_x + 14, 17, s.label))
        legend_x += 26 + 7.5 * len(s.label)
    body.append(_text(right, 17, y_label, anchor="end", muted=True))
    for tick in ticks:
        body.append(_line(left, y(tick), right, y(tick), "mx-grid"))
        body.append(_text(left - 5, y(tick) + 4, f"{tick:g}", anchor="end", muted=True))
    group_w = (right - left) / max(n_bins, 1)
    bar_w = group_w * 0.8 / max(len(series), 1)
    for b in range(n_bins):
        gx = left + b * group_w + group_w * 0.1
        for index, s in enumerate(series):
            value = s.values[b]
            body.append(
                f'<rect x="{_num(gx + index * bar_w)}" y="{_num(y(value))}" '
                f'width="{_num(bar_w)}" height="{_num(bottom - y(value))}" '
                f'class="mx-bar mx-bar-{index}">'
                f"<title>{escape(f'{bin_titles[b]}: {value:g} {s.label.lower()}')}</title></rect>"
            )
    body.append(_line(left, bottom, right, bottom, "mx-axis"))
    for boundary, label in sorted(boundary_labels.items()):
        bx = left + boundary * group_w
        body.append(_line(bx, bottom, bx, bottom + 4, "mx-axis"))
        anchor = "start" if boundary == 0 else "end" if boundary == n_bins else "middle"
        body.append(_text(bx, bottom + 17, label, anchor=anchor, muted=True))
    desc = f"{title}: " + "; ".join(
        f"{s.label} {sum(s.values):g} in total, at most {max(s.values, default=0):g} per bin"
        for s in series
    )
    return _svg(bottom + 26, title, desc, body)


# --- an agent's rating history: the published value and its 95% band over time --------


@dataclass(frozen=True)
class HistoryPoint:
    """One snapshot of an agent: when it was published (aware datetime), the rating and
    its interval (None while provisional or unavailable: drawn as a gap)."""

    at: object
    rating: float | None
    lower: float | None
    upper: float | None


def _rating_ticks(low: float, high: float) -> list[float]:
    span = max(high - low, 1.0)
    step = next(s for s in (5, 10, 25, 50, 100, 200, 250, 500, 1000, 10**9) if span / s <= 5)
    first = math.floor(low / step) * step
    count = math.ceil((high - first) / step)
    return [first + i * step for i in range(count + 1)]


def rating_history(points: Sequence[HistoryPoint], *, title: str) -> str:
    """The published rating as a line over a shaded 95% band, one vertex per snapshot;
    snapshots without a published value break the line. Time runs left to right."""
    rated = [p for p in points if p.rating is not None]
    left, right, top, plot_h = 44, WIDTH - 12, 14, 170
    bottom = top + plot_h
    if not rated:
        body = [_text(WIDTH / 2, top + plot_h / 2, "No published rating yet", anchor="middle",
                      muted=True)]  # fmt: skip
        return _svg(bottom + 26, title, f"{title}: no published rating yet.", body)
    values = [v for p in rated for v in (p.lower, p.upper, p.rating) if v is not None]
    ticks = _rating_ticks(min(values), max(values))
    y_lo, y_hi = ticks[0], ticks[-1]
    times = [p.at.timestamp() for p in points]
    t_lo, t_hi = min(times), max(times)

    def x(point: HistoryPoint) -> float:
        if t_hi == t_lo:
            return (left + right) / 2
        return left + (right - left) * (point.at.timestamp() - t_lo) / (t_hi - t_lo)

    def y(value: float) -> float:
        return bottom - plot_h * (value - y_lo) / (y_hi - y_lo)

    body: list[str] = []
    for tick in ticks:
        body.append(_line(left, y(tick), right, y(tick), "mx-grid"))
        body.append(_text(left - 5, y(tick) + 4, f"{tick:g}", anchor="end", muted=True))
    # Runs of consecutive published points: the band and the line break between runs.
    runs: list[list[HistoryPoint]] = [[]]
    for point in points:
        if point.rating is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(point)
    for run in (r for r in runs if r):
        banded = [p for p in run if p.lower is not None and p.upper is not None]
        if banded:
            upper = [f"{_num(x(p))},{_num(y(p.upper))}" for p in banded]
            lower = [f"{_num(x(p))},{_num(y(p.lower))}" for p in reversed(banded)]
            if len(banded) == 1:
                px = x(banded[0])
                body.append(_line(px, y(banded[0].lower), px, y(banded[0].upper), "mx-whisker"))
            else:
                body.append(f'<polygon points="{" ".join(upper + lower)}" class="mx-box"/>')
        line = " ".join(f"{_num(x(p))},{_num(y(p.rating))}" for p in run)
        body.append(
            f'<polyline points="{line}" fill="none" stroke="var(--accent,#3b5bdb)" '
            f'stroke-width="2"/>'
        )
        for p in run:
            body.append(
                f'<circle cx="{_num(x(p))}" cy="{_num(y(p.rating))}" r="2.5" class="mx-mean">'
                f"<title>{escape(f'{p.at:%Y-%m-%d %H:%M} UTC: {p.rating:.0f}')}"
                + (escape(f" [{p.lower:.0f}, {p.upper:.0f}]") if p.lower is not None else "")
                + "</title></circle>"
            )
    body.append(_line(left, bottom, right, bottom, "mx-axis"))
    body.append(_text(left, bottom + 17, f"{points[0].at:%Y-%m-%d %H:%M}", muted=True))
    if len(points) > 1:
        body.append(
            _text(right, bottom + 17, f"{points[-1].at:%Y-%m-%d %H:%M}", anchor="end", muted=True)
        )
    last = rated[-1]
    desc = (
        f"{title}: {len(rated)} published snapshots of {len(points)}; latest {last.rating:.0f}"
        + (f" with 95% interval [{last.lower:.0f}, {last.upper:.0f}]" if last.lower else "")
        + "."
    )
    return _svg(bottom + 26, title, desc, body)

"""Benchmark: how often every published interval kind covers its target (issue 38).

Runs the coverage grids of ``ratings.coverage`` (board, category, sparse board, few
judges), ``ratings.style_coverage`` (style-controlled ratings and coefficients) and
``ratings.tournament_coverage`` (tournaments), each ``grid(replications, seed,
progress)`` of the shared interface, at ≥ 500 replications per cell by default. A
module that does not exist yet is skipped with a note. Prints a Markdown table (kind,
cell, coverage, the Monte Carlo error sqrt(p(1 − p)/n) over the n intervals scored, n,
mean half-width) and writes the figures as JSON to var/bench/coverage.json.

Exits 1 when a published kind covers outside [0.93, 0.97], naming the cells. The
"few judges" kind (fewer judges than agents, judges with views of their own) is
published with a caveat beside the interval instead of a 95 % promise
(``ratings.intervals.caveat``): it is reported, not held to the band.

The n intervals of one simulated arena are correlated (they share its fit), so the
printed Monte Carlo error understates the spread from seed to seed; see
docs/intervals.md.

Run: .venv/bin/python tests/bench/bench_coverage.py [--replications 500] [--seed 38]
     [--only coverage,style_coverage,tournament_coverage]
"""

import argparse
import importlib
import json
import math
import sys
import time
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MODULES = ("coverage", "style_coverage", "tournament_coverage")
BAND = (0.93, 0.97)
CAVEATED = {"few judges"}  # ratings.coverage.CAVEATED: shown with a caveat
OUT = ROOT / "var" / "bench" / "coverage.json"


class Progress:
    """tqdm when installed, else one line rewritten in place."""

    def __init__(self, label: str):
        self.label = label
        self.bar = None
        self.last = 0.0
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            self.bar = tqdm(desc=label, unit="rep", file=sys.stderr, total=None, mininterval=2.0)

    def __call__(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.total = total
            self.bar.update(done - self.bar.n)
            return
        now = time.monotonic()
        if done == total or now - self.last > 1.0:
            self.last = now
            print(f"\r{self.label}: {done}/{total}", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            print(file=sys.stderr)


def monte_carlo_error(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n) if n else float("nan")


def run(modules, replications: int, seed: int) -> tuple[list[dict], list[str]]:
    cells, notes = [], []
    for name in modules:
        try:
            module = importlib.import_module(f"ratings.{name}")
        except ImportError as exc:
            notes.append(f"ratings.{name}: not run ({exc})")
            print(f"note: ratings.{name} skipped: {exc}", file=sys.stderr)
            continue
        if not hasattr(module, "grid"):
            notes.append(f"ratings.{name}: not run (no grid() yet)")
            print(f"note: ratings.{name} has no grid() yet, skipped", file=sys.stderr)
            continue
        bar = Progress(name)
        started = time.perf_counter()
        try:
            rows = module.grid(replications=replications, seed=seed, progress=bar)
        finally:
            bar.close()
        seconds = time.perf_counter() - started
        for row in rows:
            p = row["covered"] / row["total"] if row["total"] else None
            cells.append(
                {
                    **row,
                    "module": f"ratings.{name}",
                    "coverage": p,
                    "mc_error": None if p is None else monte_carlo_error(p, row["total"]),
                    "held": row["kind"] not in CAVEATED,
                }
            )
        notes.append(f"ratings.{name}: {len(rows)} cells in {seconds:.0f} s")
    return cells, notes


def strict(value):
    """NaN and infinities as null: the file is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def table(cells: list[dict]) -> str:
    lines = [
        "| kind | cell | coverage | MC error | n | mean half-width (Elo) |",
        "|---|---|---|---|---|---|",
    ]
    for c in cells:
        p = "—" if c["coverage"] is None else f"{c['coverage']:.3f}"
        err = "—" if c["mc_error"] is None else f"{c['mc_error']:.3f}"
        hw = c.get("mean_halfwidth_elo")
        hw = "—" if hw is None else f"{hw:.1f}"
        kind = c["kind"] + ("" if c["held"] else " (caveat shown)")
        lines.append(f"| {kind} | {c['cell']} | {p} | {err} | {c['total']} | {hw} |")
    return "\n".join(lines)


def outside(cells: list[dict]) -> list[dict]:
    low, high = BAND
    return [
        c
        for c in cells
        if c["held"] and (c["coverage"] is None or not low <= c["coverage"] <= high)
    ]


def plot(cells: list[dict], *, replications: int, seed: int) -> str:
    """Every cell's coverage as a dot with ± 2 Monte Carlo errors, one row per cell
    grouped by kind, over the shaded 0.93–0.97 band and the nominal 0.95: a standalone
    SVG (docs/coverage.svg)."""
    low, high = 0.85, 1.0
    left, width, row, top = 430, 420, 13, 46
    height = top + row * len(cells) + 40

    def x(p: float) -> float:
        return left + (min(max(p, low), high) - low) / (high - low) * width

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 60}" height="{height}" '
        f'font-family="DejaVu Sans, sans-serif" font-size="11" role="img" '
        f'aria-labelledby="title"><title id="title">Coverage of the published 95% '
        f"intervals, {replications} replications per cell, seed {seed}</title>",
        '<rect width="100%" height="100%" fill="#fff"/>',
        '<text x="10" y="16" font-size="13" font-weight="bold">Coverage of the '
        "published 95% intervals</text>",
        f'<text x="10" y="32" fill="#555">{replications} replications per cell, seed '
        f"{seed}; shaded: 0.93–0.97; bars: ± 2 Monte Carlo errors</text>",
        f'<rect x="{x(BAND[0]):.1f}" y="{top - 4}" width="{x(BAND[1]) - x(BAND[0]):.1f}" '
        f'height="{row * len(cells) + 4}" fill="#dcefdc"/>',
        f'<line x1="{x(0.95):.1f}" x2="{x(0.95):.1f}" y1="{top - 4}" '
        f'y2="{top + row * len(cells)}" stroke="#2a7a2a" stroke-dasharray="3 2"/>',
    ]
    for k, c in enumerate(cells):
        y = top + row * k + row / 2
        if c["coverage"] is None:
            continue
        inside = BAND[0] <= c["coverage"] <= BAND[1]
        colour = "#777" if not c["held"] else "#1f4e9c" if inside else "#b00020"
        label = f"{c['kind']}: {c['cell']}"
        label = label if len(label) <= 72 else label[:71] + "…"
        spread = 2 * c["mc_error"]
        name = f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{escape(label)}</text>'
        parts.append(name)
        if c["coverage"] < low:  # off the scale to the left: its figure instead
            parts.append(
                f'<text x="{left + 2}" y="{y + 4:.1f}" fill="{colour}">◀ {c["coverage"]:.3f}</text>'
            )
            continue
        parts += [
            f'<line x1="{x(c["coverage"] - spread):.1f}" x2="{x(c["coverage"] + spread):.1f}" '
            f'y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}"/>',
            f'<circle cx="{x(c["coverage"]):.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>',
        ]
    axis = top + row * len(cells) + 6
    for tick in (0.85, 0.9, 0.93, 0.95, 0.97, 1.0):
        parts.append(
            f'<text x="{x(tick):.1f}" y="{axis + 12}" text-anchor="middle">{tick:g}</text>'
        )
    parts.append(
        f'<text x="10" y="{axis + 28}" fill="#555">'
        "share of intervals that contain their target (red: a published cell outside the band;"
        " grey: few judges, shown with a caveat instead)</text></svg>"
    )
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=500, help="per cell (500)")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--only", default=",".join(MODULES), help="modules to run")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--plot", type=Path, help="also write the cells as an SVG plot here")
    args = parser.parse_args(argv)
    if args.replications < 1:
        parser.error("--replications must be at least 1")
    modules = [m.strip() for m in args.only.split(",") if m.strip()]
    started = time.perf_counter()
    cells, notes = run(modules, args.replications, args.seed)
    seconds = time.perf_counter() - started
    bad = outside(cells)
    print(
        f"Coverage of the published 95% intervals: {args.replications} replications "
        f"per cell, seed {args.seed}, {seconds:.0f} s\n"
    )
    print(table(cells))
    for note in notes:
        print(f"\n- {note}", end="")
    print()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "replications": args.replications,
        "seed": args.seed,
        "band": list(BAND),
        "seconds": round(seconds, 1),
        "notes": notes,
        "cells": cells,
        "outside": [f"{c['kind']}: {c['cell']}" for c in bad],
    }
    args.out.write_text(json.dumps(strict(document), indent=2, allow_nan=False) + "\n")
    print(f"figures: {args.out}")
    if args.plot:
        args.plot.write_text(plot(cells, replications=args.replications, seed=args.seed))
        print(f"plot: {args.plot}")
    if args.replications < 500:
        print(f"(quick run: {args.replications} < 500 replications per cell)")
    if bad:
        for c in bad:
            print(
                f"OUTSIDE {BAND[0]}–{BAND[1]}: {c['kind']} / {c['cell']}: {c['coverage']}",
                file=sys.stderr,
            )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

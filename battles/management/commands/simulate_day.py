"""One simulated day of arrivals on the arena's dispatch rule (SPEC §9, paper Fig. 4):
Poisson arrivals, lognormal service, C slots served FIFO by ``battles.queueing``, on a
simulated clock. Prints the day's figures and writes a plot of arrivals and completed
runs per hour as a standalone SVG. Touches no database."""

import math
import random
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from arena_site import strict_json
from battles.queueing import SimulationResult, simulate

SPEC_REFERENCE = "SPEC §9: ρ = 0.34, mean wait ≈ 0.1 min, runs ≈ 2 × arrivals"


class Command(BaseCommand):
    help = (
        "Simulate one day of Poisson arrivals on the arena's FIFO slot queue and plot "
        "arrivals vs completed runs per hour."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seed", type=int, default=11, help="RNG seed (default 11)")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print one JSON object"
        )
        parser.add_argument("--rate", type=float, default=12.0, help="arrivals per hour")
        parser.add_argument(
            "--median-min", type=float, default=6.0, help="median battle service, minutes"
        )
        parser.add_argument(
            "--log-sd", type=float, default=0.5, help="log-scale sd of the service time"
        )
        parser.add_argument("--slots", type=int, default=4, help="concurrent battles, C")
        parser.add_argument("--hours", type=int, default=24, help="length of the day")
        parser.add_argument(
            "--plot",
            default=None,
            help="SVG to write (default var/simulate_day.svg in the project directory)",
        )

    def handle(
        self,
        *args,
        seed: int,
        as_json: bool,
        rate: float,
        median_min: float,
        log_sd: float,
        slots: int,
        hours: int,
        plot: str | None,
        **options,
    ) -> None:
        try:
            result = simulate(
                arrival_rate_per_h=rate,
                service_median_min=median_min,
                service_log_sd=log_sd,
                slots=slots,
                hours=hours,
                rng=random.Random(seed),  # noqa: S311 -- a seeded, reproducible simulation
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        path = Path(plot) if plot else Path(settings.BASE_DIR) / "var" / "simulate_day.svg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_svg(result, seed=seed), encoding="utf-8")
        report = summary(result, seed=seed, plot=path)
        if as_json:
            self.stdout.write(strict_json.dumps(report))
            return
        self.stdout.write(
            f"Simulated day, seed {seed}: Poisson λ = {rate:g}/h, lognormal service median "
            f"{median_min:g} min (log-sd {log_sd:g}), C = {slots}, FIFO, {hours} h"
        )
        self.stdout.write(f"  arrivals           {result.arrivals}")
        self.stdout.write(
            f"  completed          {result.completed_battles} battles = "
            f"{result.completed_runs} runs ({result.unfinished_battles} unfinished at the end)"
        )
        self.stdout.write(
            f"  wait               mean {result.mean_wait_min:.2f} min, p95 "
            f"{result.wait_p95_min:.2f}, max {result.max_wait_min:.2f}; "
            f"{result.share_waited:.1%} of battles waited"
        )
        self.stdout.write(
            f"  ρ                  offered {result.rho_offered:.3f} (λE[S]/C), measured "
            f"{result.rho_measured:.3f} (busy / C·T)"
        )
        self.stdout.write(f"  plot               {path}")
        self.stdout.write(f"  reference          {SPEC_REFERENCE}")


def summary(result: SimulationResult, *, seed: int, plot: Path) -> dict:
    return {
        "arrivals": result.arrivals,
        "completed_runs": result.completed_runs,
        "mean_wait_min": round(result.mean_wait_min, 4),
        "max_wait_min": round(result.max_wait_min, 4),
        "rho": round(result.rho_offered, 4),
        "rho_measured": round(result.rho_measured, 4),
        "completed_battles": result.completed_battles,
        "unfinished_battles": result.unfinished_battles,
        "wait_p95_min": round(result.wait_p95_min, 4),
        "share_waited": round(result.share_waited, 4),
        "max_queue_depth": result.max_queue_depth,
        "arrivals_per_hour": list(result.arrivals_per_hour),
        "completed_runs_per_hour": list(result.completed_runs_per_hour),
        "params": {
            "seed": seed,
            "rate_per_h": result.arrival_rate_per_h,
            "median_min": result.service_median_min,
            "log_sd": result.service_log_sd,
            "slots": result.slots,
            "hours": result.hours,
        },
        "plot": str(plot),
    }


# --- the plot -------------------------------------------------------------------------

WIDTH, HEIGHT = 900, 500
LEFT, RIGHT, TOP, BOTTOM = 70, 870, 78, 430  # plot area
SERIES = (
    # key, label, colour, dash
    ("arrivals", "arrivals per hour", "#1f6fb4", ""),
    ("completed_runs", "completed runs per hour", "#d9541e", ""),
    ("twice_arrivals", "2 × arrivals (two runs per battle)", "#8a8a8a", "5 4"),
)


def _nice_step(span: float, ticks: int = 6) -> float:
    raw = span / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


def _text(x: float, y: float, body: str, **attrs: str) -> str:
    extra = "".join(f" {k.replace('_', '-')}={quoteattr(v)}" for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(body)}</text>'


def render_svg(result: SimulationResult, *, seed: int) -> str:
    """Arrivals and completed runs per hour as a standalone SVG: one point per hour,
    drawn at the middle of its hour; the dashed line is twice the arrivals."""
    values = {
        "arrivals": list(result.arrivals_per_hour),
        "completed_runs": list(result.completed_runs_per_hour),
        "twice_arrivals": [2 * n for n in result.arrivals_per_hour],
    }
    bins = len(values["arrivals"])
    top_value = max(max(v, default=0) for v in values.values()) or 1
    step = _nice_step(top_value * 1.3)
    y_max = step * math.ceil(top_value * 1.3 / step)

    def sx(hour: float) -> float:
        return LEFT + (RIGHT - LEFT) * hour / bins

    def sy(value: float) -> float:
        return BOTTOM - (BOTTOM - TOP) * value / y_max

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Arial, sans-serif">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        _text(
            WIDTH / 2,
            28,
            f"One simulated day: arrivals and completed runs per hour (seed {seed})",
            text_anchor="middle",
            font_size="17",
            font_weight="bold",
        ),
        _text(
            WIDTH / 2,
            50,
            f"Poisson λ = {result.arrival_rate_per_h:g}/h · lognormal service, median "
            f"{result.service_median_min:g} min, log-sd {result.service_log_sd:g} · "
            f"C = {result.slots} slots, FIFO · {result.hours:g} h",
            text_anchor="middle",
            font_size="13",
            fill="#444",
        ),
        _text(
            WIDTH / 2,
            68,
            f"{result.arrivals} arrivals, {result.completed_runs} runs completed "
            f"({result.completed_battles} battles) · mean wait {result.mean_wait_min:.2f} min, "
            f"max {result.max_wait_min:.2f} min · ρ = {result.rho_offered:.2f} offered, "
            f"{result.rho_measured:.2f} measured",
            text_anchor="middle",
            font_size="12",
            fill="#444",
        ),
    ]
    # grid and y axis
    tick = 0.0
    while tick <= y_max + 1e-9:
        y = sy(tick)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{RIGHT}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        out.append(
            _text(LEFT - 8, y + 4, f"{tick:g}", text_anchor="end", font_size="12", fill="#333")
        )
        tick += step
    # x axis: hour boundaries
    for hour in range(0, bins + 1, 2 if bins > 12 else 1):
        x = sx(hour)
        out.append(
            f'<line x1="{x:.1f}" y1="{BOTTOM}" x2="{x:.1f}" y2="{BOTTOM + 5}" stroke="#333"/>'
        )
        out.append(
            _text(x, BOTTOM + 20, f"{hour}", text_anchor="middle", font_size="12", fill="#333")
        )
    out.append(
        f'<polyline points="{LEFT},{TOP} {LEFT},{BOTTOM} {RIGHT},{BOTTOM}" '
        'fill="none" stroke="#333" stroke-width="1.2"/>'
    )
    out.append(
        _text(
            (LEFT + RIGHT) / 2,
            BOTTOM + 45,
            "hour of the simulated day",
            text_anchor="middle",
            font_size="13",
        )
    )
    out.append(
        f'<text x="20" y="{(TOP + BOTTOM) / 2:.1f}" font-size="13" text-anchor="middle" '
        f'transform="rotate(-90 20 {(TOP + BOTTOM) / 2:.1f})">count per hour</text>'
    )
    # series, the reference drawn first so the data sit on top
    for key, label, colour, dash in reversed(SERIES):
        points = [(sx(h + 0.5), sy(v)) for h, v in enumerate(values[key])]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<g data-series="{key}">')
        out.append(
            f'<polyline data-series="{key}" data-values="{" ".join(map(str, values[key]))}" '
            f'points="{coords}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>'
        )
        if not dash:
            for hour, ((x, y), v) in enumerate(zip(points, values[key], strict=True)):
                out.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.2" fill="{colour}">'
                    f"<title>{escape(f'hour {hour}: {v} {label.removesuffix(" per hour")}')}"
                    "</title></circle>"
                )
        out.append("</g>")
    # legend, top left inside the plot area
    lx, ly = LEFT + 14, TOP + 8
    out.append(
        f'<rect x="{lx - 8}" y="{ly - 4}" width="300" height="{len(SERIES) * 20 + 6}" '
        'fill="white" fill-opacity="0.9" stroke="#ccc"/>'
    )
    for i, (_, label, colour, dash) in enumerate(SERIES):
        y = ly + 10 + i * 20
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line x1="{lx}" y1="{y}" x2="{lx + 28}" y2="{y}" stroke="{colour}" '
            f'stroke-width="2"{dash_attr}/>'
        )
        if not dash:
            out.append(f'<circle cx="{lx + 14}" cy="{y}" r="3.2" fill="{colour}"/>')
        out.append(_text(lx + 36, y + 4, label, font_size="12"))
    out.append("</svg>")
    return "\n".join(out) + "\n"

"""The interval-narrowing study of SPEC §9 (paper Fig. 3): prints agent A's refit
rating and 95% half-width at 100, 300 and 600 votes and the coverage rate, and writes a
plot of A's refit rating with its band, the streaming value and the true value against
votes. Touches no database."""

import statistics
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from arena_site import strict_json
from ratings import simulation
from ratings.svg import WIDTH, _line, _num, _svg, _text, nice_ticks

PAPER_SINGLE_RUN = {"100": 112, "300": 52, "600": 41}
SPEC_20_SEED_MEDIAN = {"100": 130, "300": 71, "600": 51}


class Command(BaseCommand):
    help = (
        "SPEC §9 interval narrowing: 5 agents with true Elo 1139.7, 1049.5, 1000, 950, "
        "860.8; uniform pairs, binary Bradley-Terry outcomes; the refit (centred on all "
        "five agents, model-based 95% interval) every 20 votes up to 600 and the "
        "streaming Elo on the same votes. Reports agent A's rating and half-width at "
        "100, 300 and 600 votes and the coverage: the "
        + simulation.COVERAGE_DEFINITION
        + ". half_width_vs_other_four is A's half-width centred on the other four agents' "
        "mean instead, a diagnostic."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seed", type=int, default=7, help="RNG seed (default 7)")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print one JSON object"
        )
        parser.add_argument("--votes", type=int, default=600, help="total votes (600)")
        parser.add_argument("--every", type=int, default=20, help="refit period in votes (20)")
        parser.add_argument(
            "--seeds",
            type=int,
            default=1,
            help="also run seeds seed … seed+N−1 and report medians and ranges (1: off)",
        )
        parser.add_argument(
            "--plot",
            default=None,
            help="SVG to write (default var/simulate_ratings.svg in the project directory)",
        )

    def handle(
        self,
        *args,
        seed: int,
        as_json: bool,
        votes: int,
        every: int,
        seeds: int,
        plot: str | None,
        **options,
    ) -> None:
        if seeds < 1:
            raise CommandError("--seeds must be at least 1")
        try:
            study = simulation.interval_narrowing(seed, votes=votes, every=every)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        path = Path(plot) if plot else Path(settings.BASE_DIR) / "var" / "simulate_ratings.svg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_svg(study), encoding="utf-8")
        report = summary(study, plot=path)
        if seeds > 1:
            report["seeds"] = over_seeds(
                [study]
                + [
                    simulation.interval_narrowing(s, votes=votes, every=every)
                    for s in range(seed + 1, seed + seeds)
                ]
            )
        if as_json:
            self.stdout.write(strict_json.dumps(report))
            return
        self.stdout.write(f"Interval narrowing, seed {seed}: agent A (true {study.true_elo[0]})")
        for key, hw in report["half_width"].items():
            self.stdout.write(
                f"  {key:>4} votes  refit {report['rating'][key]:.1f} ± {hw:.1f}  "
                f"streaming {report['streaming'][key]:.1f}"
            )
        self.stdout.write(
            f"  coverage   {report['coverage']:.3f} "
            f"({report['covered']} of {report['intervals']} intervals)"
        )
        self.stdout.write(f"  plot       {path}")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _reported(study: simulation.Study) -> list[int]:
    return [v for v in simulation.REPORT_AT if any(c.votes == v for c in study.checkpoints)]


def summary(study: simulation.Study, *, plot: Path) -> dict:
    covered, total = study.coverage()
    at = {str(v): study.at(v) for v in _reported(study)}
    return {
        "seed": study.seed,
        "agent": "A",
        "true_elo": study.true_elo[0],
        "rating": {k: _rounded(c.rating[0]) for k, c in at.items()},
        "half_width": {k: _rounded(c.halfwidth[0]) for k, c in at.items()},
        "lower": {k: _rounded(c.lower[0]) for k, c in at.items()},
        "upper": {k: _rounded(c.upper[0]) for k, c in at.items()},
        "streaming": {k: _rounded(c.streaming[0]) for k, c in at.items()},
        "coverage": round(covered / total, 4) if total else None,
        "covered": covered,
        "intervals": total,
        "coverage_definition": simulation.COVERAGE_DEFINITION,
        "interval": "model-based 95%, centred on the mean of all five agents",
        "half_width_vs_other_four": {k: _rounded(c.halfwidth_vs_others) for k, c in at.items()},
        "votes": study.checkpoints[-1].votes,
        "refits": len(study.checkpoints),
        "max_newton_iterations": max(c.iterations for c in study.checkpoints),
        "reference": {
            "paper_single_run_half_width": PAPER_SINGLE_RUN,
            "spec_20_seed_median_half_width": SPEC_20_SEED_MEDIAN,
        },
        "plot": str(plot),
    }


def over_seeds(studies: list[simulation.Study]) -> dict:
    """Median and range of A's half-widths over the seeds, and the pooled coverage."""

    def spread(values: list[float]) -> dict:
        return {
            "median": round(statistics.median(values), 2),
            "min": round(min(values), 2),
            "max": round(max(values), 2),
        }

    keys = _reported(studies[0])
    covered = sum(s.coverage()[0] for s in studies)
    total = sum(s.coverage()[1] for s in studies)
    return {
        "n": len(studies),
        "first": studies[0].seed,
        "half_width": {
            str(v): spread([s.at(v).halfwidth[0] for s in studies if s.at(v).halfwidth[0]])
            for v in keys
        },
        "half_width_vs_other_four": {
            str(v): spread(
                [s.at(v).halfwidth_vs_others for s in studies if s.at(v).halfwidth_vs_others]
            )
            for v in keys
        },
        "coverage": round(covered / total, 4) if total else None,
    }


def render_svg(study: simulation.Study) -> str:
    """A's refit rating (line) over its shaded 95% band at each refit, the streaming
    Elo after every vote, and the true value (dashed), against votes."""
    left, right, top, plot_h = 46, WIDTH - 10, 40, 200
    bottom = top + plot_h
    cps = [c for c in study.checkpoints if c.rating[0] is not None]
    stream = [row[0] for row in study.streaming_trace]
    truth = study.checkpoints[-1].truth[0]
    values = [truth, *stream] + [v for c in cps for v in (c.lower[0], c.upper[0])]
    step = 50
    y_lo = step * ((min(values) // step) - (1 if min(values) % step == 0 else 0))
    y_hi = y_lo + nice_ticks(max(values) - y_lo, target=5)[-1]
    x_max = len(stream)

    def x(votes: float) -> float:
        return left + (right - left) * votes / x_max

    def y(value: float) -> float:
        return bottom - plot_h * (value - y_lo) / (y_hi - y_lo)

    def points(pairs) -> str:
        return " ".join(f"{_num(x(v))},{_num(y(r))}" for v, r in pairs)

    body = [
        "<style>.sr-refit{fill:none;stroke:var(--accent,#3b5bdb);stroke-width:2}"
        ".sr-stream{fill:none;stroke:#e67700;stroke-width:1.2}"
        ".sr-true{stroke:var(--fg,#1d2330);stroke-width:1.2;stroke-dasharray:5 4}</style>"
    ]
    for tick in nice_ticks(y_hi - y_lo, target=5):
        body.append(_line(left, y(y_lo + tick), right, y(y_lo + tick), "mx-grid"))
        body.append(
            _text(left - 5, y(y_lo + tick) + 4, f"{y_lo + tick:g}", anchor="end", muted=True)
        )
    if cps:
        band = [(c.votes, c.upper[0]) for c in cps] + [(c.votes, c.lower[0]) for c in cps[::-1]]
        body.append(f'<polygon points="{points(band)}" class="mx-box" data-series="band"/>')
        body.append(
            f'<polyline points="{points((c.votes, c.rating[0]) for c in cps)}" '
            'class="sr-refit" data-series="refit"/>'
        )
    body.append(
        f'<polyline points="{points(enumerate(stream, start=1))}" class="sr-stream" '
        'data-series="streaming"/>'
    )
    body.append(
        f'<line x1="{_num(x(0))}" y1="{_num(y(truth))}" x2="{_num(x(x_max))}" '
        f'y2="{_num(y(truth))}" class="sr-true" data-series="true"/>'
    )
    body.append(_line(left, bottom, right, bottom, "mx-axis"))
    for tick in nice_ticks(x_max, target=6):
        if tick <= x_max:
            body.append(_line(x(tick), bottom, x(tick), bottom + 4, "mx-axis"))
            anchor = "end" if tick == x_max else "middle"
            body.append(_text(x(tick), bottom + 16, f"{tick:g}", anchor=anchor, muted=True))
    body.append(_text((left + right) / 2, bottom + 32, "votes", anchor="middle", muted=True))
    legend = (
        ("refit ± 95%", "sr-refit"),
        ("streaming", "sr-stream"),
        (f"true {truth:g}", "sr-true"),
    )
    lx = left
    for label, css in legend:
        body.append(f'<line x1="{lx}" y1="14" x2="{lx + 18}" y2="14" class="{css}"/>')
        body.append(_text(lx + 22, 18, label))
        lx += 30 + 7 * len(label)
    body.append(_text(right, 34, f"agent A, seed {study.seed}", anchor="end", muted=True))
    last = cps[-1] if cps else None
    desc = (
        f"Agent A's Elo against votes, seed {study.seed}: refit every "
        f"{study.checkpoints[0].votes} votes with its 95% band, streaming Elo, true value "
        f"{truth:g}"
        + (
            f"; at {last.votes} votes refit {last.rating[0]:.0f} ± {last.halfwidth[0]:.0f}"
            if last
            else ""
        )
        + "."
    )
    return _svg(bottom + 40, "Interval narrowing (SPEC §9)", desc, body)

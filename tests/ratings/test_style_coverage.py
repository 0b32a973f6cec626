"""The style-control coverage grid (``ratings.style_coverage``) at small sizes: its rows
follow the benchmark's interface (iface.md), its intervals cover about 95 % of a
correctly specified arena, and the arenas it draws do plant a style effect (the plain
board's intervals miss the truth there). The full-size table is in docs/intervals.md."""

import numpy as np
import pytest

from ratings import bradley_terry, intervals, style, style_coverage

KINDS = {"style-controlled", "style coefficient"}


def test_the_grid_answers_the_benchmark_interface():
    calls = []
    rows = style_coverage.grid(replications=2, seed=5, progress=lambda *a: calls.append(a))
    assert len(rows) == 2 * len(style_coverage.GRID)
    assert {r["kind"] for r in rows} == KINDS
    assert len({(r["kind"], r["cell"]) for r in rows}) == len(rows)
    for row in rows:
        assert set(row) == {"kind", "cell", "covered", "total", "replications",
                            "mean_halfwidth_elo"}  # fmt: skip
        assert row["replications"] == 2
        assert 0 <= row["covered"] <= row["total"] > 0
        assert row["mean_halfwidth_elo"] > 0
    total = 2 * len(style_coverage.GRID)
    assert calls[-1] == (total, total) and len(calls) == total
    assert [done for done, _ in calls] == list(range(1, total + 1))


@pytest.mark.parametrize("effect", [0.0, 2.0])
def test_style_controlled_intervals_cover_about_95_percent(effect):
    rows = style_coverage.run_cell(
        style_coverage.Cell(6, 600, effect), replications=80, seed=int(10 * effect) + 1
    )
    rate = {r["kind"]: r["covered"] / r["total"] for r in rows}
    total = {r["kind"]: r["total"] for r in rows}
    assert total["style-controlled"] >= 0.95 * 80 * 6
    # 480 intervals (correlated within an arena) and 160 coefficients: loose bounds
    assert 0.90 <= rate["style-controlled"] <= 0.99, rate
    assert 0.88 <= rate["style coefficient"] <= 1.0, rate


def test_the_arenas_plant_an_effect_the_plain_board_does_not_survive():
    cell = style_coverage.Cell(6, 3000, 2.0)
    rng = np.random.default_rng(3)
    covered = total = 0
    for _ in range(30):
        theta, a, b, y, *_ = style_coverage.draw(cell, rng)
        fit = bradley_terry.rate(a, b, y, n_agents=cell.agents, r0=style_coverage.R0)
        lower = np.array([e.lower for e in fit.agents])
        upper = np.array([e.upper for e in fit.agents])
        target = style_coverage.R0 + intervals.ELO_SCALE * (theta - theta.mean())
        covered += int(np.sum((lower <= target) & (target <= upper)))
        total += len(target)
    assert covered / total < 0.6


def test_the_judged_cells_publish_the_clustered_interval():
    judged = [cell for cell in style_coverage.GRID if cell.judges]
    assert judged
    for cell in judged:
        _, a, b, y, fa, fb, judge = style_coverage.draw(cell, np.random.default_rng(1))
        fit = style.style_rate(a, b, y, n_agents=cell.agents, features_a=fa, features_b=fb,
                               names=style_coverage.NAMES, cluster=judge)  # fmt: skip
        assert fit.interval == "clustered" and fit.clusters == cell.judges
    rows = style_coverage.run_cell(judged[0], replications=40, seed=2)
    rate = {r["kind"]: r["covered"] / r["total"] for r in rows}
    assert 0.88 <= rate["style-controlled"] <= 1.0, rate

"""`manage.py simulate_ratings`: SPEC §9's interval-narrowing study, one JSON object, a
plot, and figures that come from the refit code itself."""

import json
import math
import xml.etree.ElementTree as ET
from io import StringIO

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from ratings import elo, simulation
from ratings.bradley_terry import rate

SVG = "{http://www.w3.org/2000/svg}"


def run(*args: str) -> dict:
    out = StringIO()
    call_command("simulate_ratings", *args, "--json", stdout=out)
    assert out.getvalue().count("\n") == 1  # one line, one object
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def study() -> simulation.Study:
    return simulation.interval_narrowing(7)


def test_json_reports_a_at_100_300_600_and_the_coverage(tmp_path, study):
    plot = tmp_path / "plots" / "sim.svg"  # directory does not exist yet
    report = run("--seed", "7", "--plot", str(plot))

    assert set(report["half_width"]) == {"100", "300", "600"}
    assert set(report["rating"]) == {"100", "300", "600"}
    for key in ("100", "300", "600"):
        checkpoint = study.at(int(key))
        assert report["rating"][key] == pytest.approx(checkpoint.rating[0], abs=0.01)
        assert report["half_width"][key] == pytest.approx(checkpoint.halfwidth[0], abs=0.01)
        assert report["streaming"][key] == pytest.approx(checkpoint.streaming[0], abs=0.01)
    covered, total = study.coverage()
    assert report["coverage"] == pytest.approx(covered / total, abs=1e-4)
    assert report["intervals"] == total == 30 * 5  # every refit rated all five agents
    assert "true Elo" in report["coverage_definition"]
    assert report["max_newton_iterations"] <= 8
    assert report["plot"] == str(plot) and plot.exists()


def test_half_width_narrows_roughly_as_one_over_root_n(study):
    hw = {v: study.at(v).halfwidth[0] for v in (100, 300, 600)}
    assert hw[100] > hw[300] > hw[600]
    assert hw[100] / hw[600] == pytest.approx(math.sqrt(6), rel=0.2)
    # the region of SPEC §9 (centred on all five: below the 20-seed reference of
    # 130 / 71 / 51, which is A's width against the other four; see the report)
    assert 60 < hw[100] < 160 and 30 < hw[300] < 90 and 25 < hw[600] < 65


def test_each_checkpoint_is_the_refit_of_the_votes_so_far(study):
    # rebuild the vote sequence from the seed as the study does and refit at 300 votes
    rng = np.random.default_rng(7)
    first, second = np.triu_indices(5, 1)
    pick = rng.integers(0, 10, 600)
    swap = rng.random(600) < 0.5
    a = np.where(swap, second[pick], first[pick])
    b = np.where(swap, first[pick], second[pick])
    true = np.array(simulation.TRUE_ELO)
    theta = (true - true.mean()) / (400 / math.log(10))
    y = (rng.random(600) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
    refit = rate(a[:300], b[:300], y[:300], n_agents=5)
    assert study.at(300).rating == [e.rating for e in refit.agents]
    assert study.at(300).upper == [e.upper for e in refit.agents]
    # the streaming column is SPEC §7.1's Elo over the same votes
    r, n = [1000.0] * 5, [0] * 5
    for i, j, outcome in zip(a[:300], b[:300], y[:300], strict=True):
        r[i], r[j] = elo.update(r[i], r[j], float(outcome), n[i], n[j], elo.EloParams())
        n[i] += 1
        n[j] += 1
    assert study.at(300).streaming == pytest.approx(r)


def test_same_seed_same_study_other_seed_other_numbers():
    assert simulation.interval_narrowing(3, votes=100) == simulation.interval_narrowing(
        3, votes=100
    )
    assert simulation.interval_narrowing(4, votes=100).at(100).rating != (
        simulation.interval_narrowing(3, votes=100).at(100).rating
    )


def test_coverage_counts_intervals_that_contain_the_truth():
    study = simulation.Study(
        seed=0,
        true_elo=(1100.0, 900.0),
        checkpoints=[
            simulation.Checkpoint(
                votes=20, rating=[1090.0, 910.0], lower=[1050.0, 905.0],
                upper=[1130.0, 915.0], halfwidth=[40.0, 5.0], halfwidth_vs_others=None,
                streaming=[1000.0, 1000.0], truth=[1100.0, 900.0], iterations=4,
            ),
            simulation.Checkpoint(
                votes=40, rating=[None, None], lower=[None, None], upper=[None, None],
                halfwidth=[None, None], halfwidth_vs_others=None,
                streaming=[1000.0, 1000.0], truth=[1100.0, 900.0], iterations=0,
            ),
        ],
        streaming_trace=[],
    )  # fmt: skip
    assert study.coverage() == (1, 2)


def test_seeds_option_reports_medians_and_ranges(tmp_path):
    report = run("--seed", "1", "--seeds", "3", "--votes", "300", "--plot", str(tmp_path / "p"))
    assert report["seeds"]["n"] == 3
    widths = [simulation.interval_narrowing(s, votes=300).at(100).halfwidth[0] for s in (1, 2, 3)]
    assert report["seeds"]["half_width"]["100"]["median"] == pytest.approx(
        sorted(widths)[1], abs=0.01
    )
    assert set(report["seeds"]["half_width"]) == {"100", "300"}


def test_plot_has_band_refit_streaming_and_truth(tmp_path, study):
    plot = tmp_path / "sim.svg"
    run("--seed", "7", "--plot", str(plot))
    root = ET.parse(plot).getroot()  # noqa: S314 -- the file this test just wrote
    series = {el.get("data-series"): el for el in root.iter() if el.get("data-series")}
    assert set(series) == {"band", "refit", "streaming", "true"}
    assert len(series["refit"].get("points").split()) == len(study.checkpoints)
    assert len(series["streaming"].get("points").split()) == 600
    assert len(series["band"].get("points").split()) == 2 * len(study.checkpoints)
    assert root.find(f"{SVG}title").text


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(CommandError, match="positive"):
        call_command("simulate_ratings", "--every", "0", "--plot", str(tmp_path / "p.svg"))
    with pytest.raises(CommandError, match="--seeds"):
        call_command("simulate_ratings", "--seeds", "0", "--plot", str(tmp_path / "p.svg"))

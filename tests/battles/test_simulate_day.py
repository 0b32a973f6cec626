"""`manage.py simulate_day`: one JSON object, the same day as `simulate`, and an SVG plot
with one point per hour for each series."""

import json
import random
import xml.etree.ElementTree as ET
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from battles.queueing import simulate

SVG = "{http://www.w3.org/2000/svg}"


def run(*args: str) -> str:
    out = StringIO()
    call_command("simulate_day", *args, stdout=out)
    return out.getvalue()


def parse(svg_path) -> ET.Element:
    return ET.parse(svg_path).getroot()  # noqa: S314 -- the file this test just wrote


def series(svg_path, key: str) -> tuple[list[tuple[float, float]], list[int]]:
    root = parse(svg_path)
    (line,) = [p for p in root.iter(f"{SVG}polyline") if p.get("data-series") == key]
    points = [tuple(map(float, pair.split(","))) for pair in line.get("points").split()]
    return points, [int(v) for v in line.get("data-values").split()]


def test_json_is_one_object_with_the_figures(tmp_path):
    plot = tmp_path / "plots" / "day.svg"  # the directory does not exist yet

    output = run("--seed", "11", "--json", "--plot", str(plot))

    assert output.count("\n") == 1  # exactly one line, one object
    report = json.loads(output)
    for key, kind in [
        ("arrivals", int),
        ("completed_runs", int),
        ("mean_wait_min", float),
        ("max_wait_min", float),
        ("rho", float),
    ]:
        assert type(report[key]) is kind, key
    expected = simulate(12, 6, 0.5, 4, 24, random.Random(11))
    assert report["arrivals"] == expected.arrivals
    assert report["completed_runs"] == expected.completed_runs == 2 * expected.completed_battles
    assert report["mean_wait_min"] == round(expected.mean_wait_min, 4)
    assert report["max_wait_min"] == round(expected.max_wait_min, 4)
    assert report["rho"] == 0.3399
    assert report["params"] == {
        "seed": 11,
        "rate_per_h": 12.0,
        "median_min": 6.0,
        "log_sd": 0.5,
        "slots": 4,
        "hours": 24,
    }
    assert report["plot"] == str(plot)
    assert plot.is_file()


def test_the_plot_has_24_points_per_series(tmp_path):
    plot = tmp_path / "day.svg"

    report = json.loads(run("--seed", "11", "--json", "--plot", str(plot)))

    root = parse(plot)
    assert root.tag == f"{SVG}svg"
    texts = " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
    assert "arrivals per hour" in texts
    assert "completed runs per hour" in texts
    assert "hour of the simulated day" in texts
    arrivals, arrival_values = series(plot, "arrivals")
    runs, run_values = series(plot, "completed_runs")
    assert len(arrivals) == len(runs) == 24
    assert arrival_values == report["arrivals_per_hour"]
    assert run_values == report["completed_runs_per_hour"]
    # left to right, one per hour; higher counts drawn higher (smaller y)
    assert [x for x, _ in arrivals] == sorted(x for x, _ in arrivals)
    busiest = max(range(24), key=run_values.__getitem__)
    quietest = min(range(24), key=run_values.__getitem__)
    assert runs[busiest][1] < runs[quietest][1]


def test_options_reach_the_simulation(tmp_path):
    plot = tmp_path / "half.svg"

    report = json.loads(
        run(
            "--seed",
            "3",
            "--json",
            "--rate",
            "6",
            "--slots",
            "2",
            "--hours",
            "12",
            "--plot",
            str(plot),
        )
    )

    expected = simulate(6, 6, 0.5, 2, 12, random.Random(3))
    assert report["arrivals"] == expected.arrivals
    assert report["rho"] == round(expected.rho_offered, 4)
    assert len(series(plot, "arrivals")[0]) == 12


def test_without_json_prints_a_readable_summary(tmp_path):
    output = run("--seed", "11", "--plot", str(tmp_path / "day.svg"))

    assert "arrivals" in output
    assert "offered 0.340" in output
    assert "SPEC §9" in output
    assert str(tmp_path / "day.svg") in output


def test_bad_parameters_are_a_command_error(tmp_path):
    with pytest.raises(CommandError):
        run("--slots", "0", "--plot", str(tmp_path / "day.svg"))

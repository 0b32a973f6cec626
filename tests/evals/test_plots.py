"""The evaluation figures (evals.plots): well-formed, self-contained SVG whose marks sit
where the numbers say, with every number also in text, and every name escaped."""

import math
import xml.etree.ElementTree as ET

import pytest

from evals import plots

NS = {"s": "http://www.w3.org/2000/svg"}
CRITERIA = [("correctness", 5), ("clarity", 3), ("brevity", 4)]


def row(mean, lower, upper, n=20):
    return {"mean": mean, "lower": lower, "upper": upper, "n": n}


MEANS = {
    "alpha": {"correctness": row(5, 5, 5), "clarity": row(3, 3, 3), "brevity": row(2, 1, 3)},
    "be<ta>": {"correctness": row(2.5, 1.0, 4.0), "clarity": row(0, 0, 0.5)},
}


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # noqa: S314 - our own SVG; raises when malformed
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "class=" not in svg.replace('class="interval"', "").replace('class="mean"', "").replace(
        'class="agent"', ""
    ).replace('class="cell"', "")  # no stylesheet needed
    return root


def test_the_radar_puts_each_mean_at_its_share_of_the_axis():
    root = parse(plots.radar(MEANS, criteria=CRITERIA, agents=["alpha", "be<ta>"]))
    means = root.findall(".//s:circle[@class='mean']", NS)
    assert len(means) == 5  # alpha's three, beta's two (no brevity score)
    cx = cy = 210.0
    rim = 150.0
    # alpha's correctness (5 of 5) sits on the rim, straight up (axis 0)
    first = means[0]
    assert (float(first.get("cx")), float(first.get("cy"))) == pytest.approx(
        (cx, cy - rim), abs=0.1
    )
    # beta's correctness, 2.5 of 5: half way up the same axis
    beta = next(c for c in means if c.find("s:title", NS).text.startswith("be<ta> · correctness"))
    assert (float(beta.get("cx")), float(beta.get("cy"))) == pytest.approx(
        (cx, cy - rim / 2), abs=0.1
    )
    # alpha's brevity (2 of 4) on axis 2: 240° round from the top
    angle = -math.pi / 2 + 2 * math.pi * 2 / 3
    brevity = next(c for c in means if "alpha · brevity" in c.find("s:title", NS).text)
    assert float(brevity.get("cx")) == pytest.approx(cx + rim * 0.5 * math.cos(angle), abs=0.1)
    assert "mean 2.00 (95 % 1.00–3.00, n 20)" in brevity.find("s:title", NS).text


def test_the_radar_draws_each_interval_and_a_polygon_only_for_full_scores():
    root = parse(plots.radar(MEANS, criteria=CRITERIA, agents=["alpha", "be<ta>"]))
    intervals = root.findall(".//s:line[@class='interval']", NS)
    assert len(intervals) == 5
    # beta's correctness interval runs from 1/5 to 4/5 of the rim along axis 0
    beta = intervals[3]
    assert float(beta.get("y1")) == pytest.approx(210 - 150 * 0.2, abs=0.1)
    assert float(beta.get("y2")) == pytest.approx(210 - 150 * 0.8, abs=0.1)
    assert len(root.findall(".//s:polygon[@class='agent']", NS)) == 1  # beta has only two


def test_names_are_escaped_not_markup():
    svg = plots.radar(MEANS, criteria=CRITERIA, agents=["alpha", "be<ta>"])
    assert "be<ta>" not in svg and "be&lt;ta&gt;" in svg
    hostile = {"</svg><script>": {"x": None}}
    svg = plots.win_rate_matrix(hostile, agents=["</svg><script>"])
    parse(svg)
    assert "<script>" not in svg


def test_the_matrix_shows_every_rate_and_colours_the_winner_blue():
    rates = {"a": {"a": 0.5, "b": 0.75}, "b": {"a": 0.25, "b": 0.5}}
    root = parse(plots.win_rate_matrix(rates, agents=["a", "b"]))
    cells = root.findall(".//s:rect[@class='cell']", NS)
    assert [c.find("s:title", NS).text for c in cells] == [
        "a vs a: win rate 0.500",
        "a vs b: win rate 0.750",
        "b vs a: win rate 0.250",
        "b vs b: win rate 0.500",
    ]
    fills = [c.get("fill") for c in cells]
    assert fills[0] == fills[3] == "#ffffff"  # even
    blue, orange = fills[1], fills[2]
    assert int(blue[5:7], 16) > int(blue[1:3], 16)  # more blue than red
    assert int(orange[1:3], 16) > int(orange[5:7], 16)
    texts = [t.text for t in root.findall(".//s:text", NS)]
    assert {"0.50", "0.75", "0.25"} <= set(texts)


def test_a_pair_without_common_tasks_is_a_dash_not_a_number():
    root = parse(plots.win_rate_matrix({"a": {"b": None}}, agents=["a", "b"]))
    titles = [c.find("s:title", NS).text for c in root.findall(".//s:rect[@class='cell']", NS)]
    assert "a vs b: no common task" in titles
    assert "–" in [t.text for t in root.findall(".//s:text", NS)]


def test_a_radar_needs_a_criterion():
    with pytest.raises(ValueError, match="at least one criterion"):
        plots.radar({}, criteria=[], agents=["a"])

"""The pure figures of SPEC §6 (ratings.metrics) and the SVG charts (ratings.svg)."""

import random
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from battles.similarity import jaccard, trigrams
from ratings import metrics, svg

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def at(seconds: float | None) -> datetime | None:
    return None if seconds is None else T0 + timedelta(seconds=seconds)


def events(s=None, q=None, p=None, e=None, h=None, r=None, ell=None) -> dict:
    """A battle's stamps, each given as seconds after T0."""
    return {
        "submitted_at": at(s),
        "dequeued_at": at(q),
        "lanes_started_at": at(p),
        "ended_at": at(e),
        "first_judgment_at": at(h),
        "incorporated_at": at(r),
        "leaderboard_served_at": at(ell),
    }


def exact(value):
    return pytest.approx(value, rel=1e-12, abs=1e-12)


# --- summary -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], {"n": 0, "p50": None, "p95": None, "p99": None, "mean": None}),
        ([5.0], {"n": 1, "p50": 5.0, "p95": 5.0, "p99": 5.0, "mean": 5.0}),
        ([1, 2, 3, 4], {"n": 4, "p50": 2.5, "p95": 3.85, "p99": 3.97, "mean": 2.5}),
        ([10, 0], {"n": 2, "p50": 5.0, "p95": 9.5, "p99": 9.9, "mean": 5.0}),
        (list(range(1, 102)), {"n": 101, "p50": 51.0, "p95": 96.0, "p99": 100.0, "mean": 51.0}),
        ([3, 3, 3, 100], {"n": 4, "p50": 3.0, "p95": 85.45, "p99": 97.09, "mean": 27.25}),
    ],
)
def test_summary_interpolates_percentiles_linearly(values, expected):
    got = metrics.summary(values)
    assert set(got) == {"n", "p50", "p95", "p99", "mean"}
    assert got == {k: v if v is None else exact(v) for k, v in expected.items()}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], {"min": None, "p25": None, "p75": None, "max": None}),
        ([1, 2, 3, 4, 5], {"min": 1.0, "p25": 2.0, "p75": 4.0, "max": 5.0}),
        ([4, 0], {"min": 0.0, "p25": 1.0, "p75": 3.0, "max": 4.0}),
    ],
)
def test_spread_gives_the_rest_of_a_box_plot(values, expected):
    assert metrics.spread(values) == {k: v if v is None else exact(v) for k, v in expected.items()}


# --- latencies ---------------------------------------------------------------------------

FULL = events(s=0, q=10, p=12, e=72, h=372, r=400, ell=405)
RUN_ONLY = events(s=0, q=100, p=103, e=163)
QUEUED = events(s=0)
NO_DEQUEUE_STAMP = events(s=0, e=50, h=80, ell=90)  # machine latency needs no q
BATTLES = [FULL, RUN_ONLY, QUEUED, NO_DEQUEUE_STAMP]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("wait", [10, 100]),
        ("provisioning", [2, 3]),
        ("execution", [60, 60]),
        ("judgment", [300, 30]),
        ("incorporation", [28]),
        ("service", [5]),
        ("machine", [405 - 300, 90 - 30]),
        ("end_to_end", [405, 90]),
    ],
)
def test_each_latency_uses_only_battles_with_its_stamps(name, expected):
    assert metrics.latencies(BATTLES)[name] == expected


def test_latencies_name_every_latency_of_the_spec():
    assert list(metrics.latencies([])) == [
        "wait",
        "provisioning",
        "execution",
        "judgment",
        "incorporation",
        "service",
        "machine",
        "end_to_end",
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("wait", [100]),  # FULL dequeued at 10: before the window
        ("provisioning", [3]),
        ("execution", [60, 60]),  # both ended inside (50, 200]
        ("judgment", [30]),  # FULL judged at 372, after the window; the last one at 80
        ("end_to_end", [90]),  # NO_DEQUEUE_STAMP served at 90
    ],
)
def test_a_latency_counts_in_the_window_of_its_closing_stamp(name, expected):
    got = metrics.latencies(BATTLES, since=at(50), until=at(200))
    assert got[name] == expected


@pytest.mark.parametrize(
    ("latency", "expected"),
    [
        (metrics.SERVICE_TIME, [62, 63]),  # e − q, only with q + δ stamped too
        (metrics.TIME_IN_SYSTEM, [72, 163, 9]),  # e − s
    ],
)
def test_service_time_and_time_in_system(latency, expected):
    battles = [FULL, RUN_ONLY, events(s=0, q=5, e=9), QUEUED]
    assert metrics.durations(battles, latency) == expected


@pytest.mark.parametrize(
    ("t", "inside"),
    [(50, False), (50.5, True), (200, True), (200.5, False), (None, False)],
)
def test_the_window_is_open_at_its_start_and_closed_at_its_end(t, inside):
    assert metrics.in_window(at(t), at(50), at(200)) is inside


# --- capacity, freshness, duplicates ----------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "service", "slots", "expected"),
    [
        (0.01, 120.0, 4, 0.3),
        (0.05, 120.0, 4, 1.5),
        (4 / 86400, 62.5, 4, 62.5 / 86400),
        (0.0, 100.0, 1, 0.0),
        (None, 120.0, 4, None),
        (0.01, None, 4, None),
    ],
)
def test_offered_load(rate, service, slots, expected):
    got = metrics.offered_load(rate, service, slots)
    assert got == (None if expected is None else exact(expected))


def test_offered_load_needs_a_slot():
    with pytest.raises(ValueError, match="slots"):
        metrics.offered_load(0.1, 10.0, 0)


@pytest.mark.parametrize(
    ("ages", "weights", "alpha", "expected"),
    [
        ([10, 4000, 3600], [1, 1, 0.5], 3600, 0.6),  # age = α counts as fresh
        ([10, 20], [0.25, 0.75], 3600, 1.0),
        ([7200, 9000], [1, 1], 3600, 0.0),
        ([10, 7200], [0.1, 0.9], 3600, 0.1),
        ([], [], 3600, None),
        ([10, 20], [0, 0], 3600, None),
    ],
)
def test_freshness(ages, weights, alpha, expected):
    got = metrics.freshness(ages, weights, alpha)
    assert got == (None if expected is None else exact(expected))


def test_freshness_needs_one_weight_per_age():
    with pytest.raises(ValueError, match="same length"):
        metrics.freshness([1, 2], [1], 60)


A = "create a file named notes.txt containing hello arena"
A_AGAIN = "Create a file named notes.txt containing hello arena now"  # J = 7/8
B = "create a file named report.txt containing the quarterly sales"  # J(A, B) = 2/13
C = "open https://example.com and report the page title"


@pytest.mark.parametrize(
    ("texts", "theta", "flags", "rate"),
    [
        ([], 0.55, [], None),
        ([A], 0.55, [False], 0.0),
        ([A, A], 0.55, [False, True], 0.5),
        ([A, A, A], 0.55, [False, True, True], 2 / 3),
        ([A, B, A_AGAIN], 0.55, [False, False, True], 1 / 3),
        ([A, B, C], 0.55, [False, False, False], 0.0),
        ([A, B], 2 / 13, [False, True], 0.5),  # J ≥ θ: equality counts
        ([A, B], 2 / 13 + 1e-9, [False, False], 0.0),
        ([A, C], 0.0, [False, True], 0.5),  # θ = 0: every later task matches
        (["hello world", "hello world"], 0.55, [False, True], 0.5),  # under 3 words
        (["", ""], 0.55, [False, False], 0.0),  # two empty texts are not similar
    ],
)
def test_duplicate_rate(texts, theta, flags, rate):
    assert metrics.duplicate_flags(texts, theta) == flags
    got = metrics.duplicate_rate(texts, theta)
    assert got == (None if rate is None else exact(rate))


def test_duplicate_flags_match_the_all_pairs_definition():
    """The inverted index finds exactly what comparing every earlier pair finds."""
    rng = random.Random(11)
    vocabulary = ["open", "the", "file", "and", "write", "a", "report", "to", "arena"]
    texts = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 9))) for _ in range(300)]
    grams = [trigrams(t) for t in texts]
    for theta in (0.3, 0.55, 0.9):
        brute = [any(jaccard(grams[i], grams[j]) >= theta for j in range(i)) for i in range(300)]
        assert metrics.duplicate_flags(texts, theta) == brute
        assert 0 < sum(brute) < 300  # the corpus exercises both answers


# --- bins and formatting -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("offsets", "window_s", "expected"),
    [
        ([0, -1, -3599], 3 * 3600, [0, 0, 3]),
        ([-3600], 3 * 3600, [0, 1, 0]),  # a bin is (start, end]: its end belongs to it
        ([-3 * 3600, 1, None], 3 * 3600, [0, 0, 0]),  # the window start and the future are out
        ([-3 * 3600 + 1, -7000, -7300], 3 * 3600, [2, 1, 0]),
        ([-5000, -10], 5400, [1, 1]),  # a window of 1.5 bins: the oldest bin is short
    ],
)
def test_binned_counts(offsets, window_s, expected):
    got = metrics.binned_counts([at(o) for o in offsets], until=T0, window_s=window_s, bin_s=3600)
    assert got == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (0, "0 ms"),
        (0.35, "350 ms"),
        (1, "1 s"),
        (4.24, "4.2 s"),
        (90, "1.5 min"),
        (3600, "1 h"),
        (7200, "2 h"),
        (129600, "1.5 d"),
        (-2.5, "−2.5 s"),
    ],
)
def test_format_duration(seconds, text):
    assert metrics.format_duration(seconds) == text


# --- SVG ---------------------------------------------------------------------------------


def parse(document: str) -> ET.Element:
    root = ET.fromstring(document)  # noqa: S314 - our own SVG; raises when malformed
    assert root.tag == f"{SVG}svg"
    return root


def with_class(root: ET.Element, tag: str, css: str) -> list[ET.Element]:
    return [el for el in root.iter(f"{SVG}{tag}") if css in el.get("class", "").split()]


def hourly(submitted, ended):
    n = len(submitted)
    return svg.bar_chart(
        [svg.Series("Submitted", submitted), svg.Series("Ended <&>", ended)],
        title="Battles per hour",
        bin_titles=[f"hour {b}" for b in range(n)],
        boundary_labels={0: "−24 h", n // 2: "−12 h", n: "now"},
        y_label="battles per hour",
    )


def test_bar_chart_draws_one_bar_per_bin_and_series():
    submitted = [0] * 13 + [1] + [0] * 9 + [3]
    ended = [0] * 14 + [1] + [0] * 8 + [1]
    root = parse(hourly(submitted, ended))
    bars = with_class(root, "rect", "mx-bar")
    assert len(bars) == 48
    heights = [float(b.get("height")) for b in bars]
    assert heights.count(0) == 48 - 4
    tallest = max(bars, key=lambda b: float(b.get("height")))
    assert tallest.find(f"{SVG}title").text == "hour 23: 3 submitted"
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"−24 h", "−12 h", "now", "Submitted", "Ended <&>"} <= set(texts)
    assert root.find(f"{SVG}title").text == "Battles per hour"


def test_bar_chart_of_an_empty_day_still_has_its_axes():
    root = parse(hourly([0] * 24, [0] * 24))
    assert len(with_class(root, "rect", "mx-bar")) == 48
    assert {"0", "1"} <= {t.text for t in root.iter(f"{SVG}text")}


def test_bar_chart_needs_one_value_per_bin():
    with pytest.raises(ValueError, match="one value per bin"):
        hourly([1, 2], [1])


@pytest.mark.parametrize(
    ("top", "ticks"),
    [
        (0, [0, 1]),
        (1, [0, 1]),
        (3, [0, 1, 2, 3]),
        (7, [0, 2, 4, 6, 8]),
        (20, [0, 5, 10, 15, 20]),
        (150, [0, 50, 100, 150]),
    ],
)
def test_nice_ticks(top, ticks):
    assert svg.nice_ticks(top) == ticks


def box(values):
    return {**metrics.summary(values), **metrics.spread(values)}


def test_box_plot_draws_a_box_for_each_latency_with_data():
    rows = [
        svg.BoxRow("Wait", box([10, 20, 60])),
        svg.BoxRow("Provisioning", box([2, 3, 5])),
        svg.BoxRow("Service <ℓ − r>", None, "no battle has r, ℓ yet"),
    ]
    root = parse(svg.box_plot(rows, title="Latencies"))
    boxes = with_class(root, "rect", "mx-box")
    assert len(boxes) == 2
    assert len(with_class(root, "line", "mx-median")) == 2
    assert len(with_class(root, "line", "mx-tail")) == 4  # p95 and p99 of each
    assert len(with_class(root, "path", "mx-mean")) == 2
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "Service <ℓ − r>" in texts and "no battle has r, ℓ yet" in texts
    assert "median 20 s · 3 measured" in texts
    # the axis runs from 1 s to 1 min (the ticks around 2 s … 60 s), both ends labelled
    assert {"1 s", "10 s", "1 min"} <= set(texts) and "10 min" not in texts


def test_box_plot_places_the_quartiles_in_order_on_a_log_axis():
    root = parse(svg.box_plot([svg.BoxRow("Wait", box([1, 10, 100, 1000, 10000]))], title="x"))
    (rect,) = with_class(root, "rect", "mx-box")
    (median,) = with_class(root, "line", "mx-median")
    left, width = float(rect.get("x")), float(rect.get("width"))
    # p25 = 10 s, p50 = 100 s, p75 = 1000 s: on a log axis the median sits mid-box
    assert float(median.get("x1")) == pytest.approx(left + width / 2, abs=0.02)


def test_box_plot_without_any_data_is_still_a_chart():
    root = parse(svg.box_plot([svg.BoxRow("Wait", None, "no data")], title="x"))
    assert with_class(root, "rect", "mx-box") == []
    assert "no data" in [t.text for t in root.iter(f"{SVG}text")]

"""Where each side's replay opens on the judge page: its latest screenshot that shows
something, never a blank browser window (judging.presenters)."""

import pytest

from judging.presenters import replay_sides, replay_start, shows_something


def step(index: int, shot: bool = True, url: str | None = None) -> dict:
    return {
        "index": index,
        "screenshot": f"/judge/1/A/steps/{index}/screenshot" if shot else None,
        "page": None if url is None else {"url": url, "title": ""},
    }


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (step(0, url="http://demo.test/"), True),
        (step(0, url="https://demo.test/list?q=1"), True),
        (step(0), True),  # no page state (a desktop without a browser page): the screen
        (step(0, url=""), True),  # state unknown mid-navigation: shown
        (step(0, url="about:blank"), False),
        (step(0, url=" About:Blank "), False),
        (step(0, url="chrome://newtab/"), False),
        (step(0, url="chrome://new-tab-page/"), False),
        (step(0, shot=False, url="http://demo.test/"), False),  # no screenshot at all
    ],
)
def test_shows_something(given, expected):
    assert shows_something(given) is expected


@pytest.mark.parametrize(
    ("steps", "start"),
    [
        ([], 0),
        ([step(0, url="about:blank")], 0),  # nothing better: the last step
        ([step(0, url="about:blank"), step(1, url="about:blank")], 1),
        ([step(0, url="about:blank"), step(1, url="http://demo.test/")], 1),
        ([step(0, url="http://demo.test/"), step(1, url="about:blank")], 0),
        ([step(0, url="http://a.test/"), step(1, shot=False), step(2, url="about:blank")], 0),
        ([step(0, url="about:blank"), step(1), step(2, shot=False)], 1),
        ([step(0), step(1), step(2)], 2),
    ],
)
def test_replay_start_is_the_latest_step_that_shows_something(steps, start):
    assert replay_start(steps) == start


def test_replay_sides_flags_a_side_whose_browser_stayed_blank():
    payload = {
        "sides": {
            "A": {"steps": [step(0, url="about:blank"), step(1, url="about:blank")]},
            "B": {"steps": [step(0, url="about:blank"), step(1, url="http://demo.test/")]},
        }
    }
    a, b = replay_sides(payload)
    assert (a["side"], a["start"], a["blank_only"]) == ("A", 1, True)
    assert (b["side"], b["start"], b["blank_only"]) == ("B", 1, False)


def test_replay_sides_without_a_run_or_steps():
    a, b = replay_sides({"sides": {"A": None, "B": {"steps": []}}})
    assert (a["start"], a["blank_only"], a["run"]["steps"]) == (0, False, [])
    assert (b["start"], b["blank_only"]) == (0, False)

"""Screenshots only on request, read through the media API, each a PNG within the
arena's bound, per battle and in total within the export's bounds; every step says
what happened to its screenshot."""

import pytest

from arena_site.media import media_save
from battles.models import Step
from tests.exports.factories import export, old_battle, rows, with_steps
from tests.ratings.factories import judges


@pytest.fixture
def two_battles(alice, roster):
    agents = {a.slug: a for a in roster}
    crowd = judges(1)
    battles = [old_battle(alice, agents["rulebook"], agents["idle"], judge=crowd[0]) for _ in "ab"]
    for battle in battles:
        with_steps(battle, steps=3, screenshot_bytes=1000)  # 6 × 1000 bytes a battle
    return battles


def _statuses(out):
    return [
        (s["battle_id"], s["side"], s["index"], s["screenshot_status"]) for s in rows(out, "steps")
    ]


def test_without_the_flag_no_screenshot_is_read(tmp_path, two_battles):
    out, manifest = export(tmp_path, with_steps=True)
    assert {s["screenshot_status"] for s in rows(out, "steps")} == {"not_requested"}
    assert not (out / "screenshots").exists()
    assert manifest["screenshots"] == {"files": 0, "bytes": 0}


def test_bounds_per_battle_and_in_total(tmp_path, two_battles):
    out, manifest = export(
        tmp_path, with_screenshots=True, max_battle_screenshot_bytes=4500, max_screenshot_bytes=6000
    )
    statuses = _statuses(out)
    # the first battle: 4 of its 6 fit its 4,500 bytes
    assert [s[3] for s in statuses[:6]] == ["included"] * 4 + ["over_battle_bound"] * 2
    # the second: 2 more fit the total of 6,000
    assert [s[3] for s in statuses[6:]] == ["included"] * 2 + ["over_total_bound"] * 4
    assert manifest["screenshots"] == {"files": 6, "bytes": 6000}
    files = sorted(p for p in (out / "screenshots").rglob("*.png"))
    assert len(files) == 6 and all(p.stat().st_size == 1000 for p in files)
    included = [s for s in rows(out, "steps") if s["screenshot"]]
    for step in included:
        assert (out / step["screenshot"]).read_bytes().startswith(b"\x89PNG")
        assert step["screenshot_bytes"] == 1000
    assert (
        sum(f["bytes"] for f in manifest["files"] if f["name"].startswith("screenshots/")) == 6000
    )


def test_untrusted_screenshots_are_checked(tmp_path, two_battles, settings):
    first, _ = two_battles
    steps = list(Step.objects.filter(run__battle=first).order_by("run__side", "index"))
    media_save(steps[0].screenshot, b"<html>not a png</html>")
    media_save(steps[1].screenshot, b"\x89PNG\r\n\x1a\n" + b"\x00" * 70_000)
    Step.objects.filter(pk=steps[2].pk).update(screenshot="screens/none/there.png")
    Step.objects.filter(pk=steps[3].pk).update(screenshot="../../etc/passwd")
    settings.ARENA = settings.ARENA.replace(screenshot_max_bytes=64 * 1024)
    out, _ = export(tmp_path, with_screenshots=True)
    assert [s[3] for s in _statuses(out)[:6]] == [
        "invalid",
        "too_large",
        "missing",
        "missing",
        "included",
        "included",
    ]

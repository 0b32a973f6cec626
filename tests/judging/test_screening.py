"""Screening (SPEC §5.1, exclusion rule 1) reads everything a judge will see besides the
stored texts: the page each step left (title and URL), the contents of delivered files
(text, and HTML as a browser shows it), and it keeps the battle away from judges until
it has run. Each case hides the name only in the source it tests; screenshots and
images (OCR) are in test_screening_ocr.py."""

import pytest
from django.conf import settings
from PIL import Image

from battles.models import Battle, Step
from battles.presenters import battle_payload
from judging.services import battle_screen, judge_next
from judging.services import screening as screening_module
from tests.judging.battle_factories import ended_battle
from tests.judging.leak_factories import deliver, note_of, with_page

SCREENING = Battle.Status.SCREENING


# --- the page each step left -------------------------------------------------------


def test_a_name_only_in_a_page_title_excludes_the_battle(alice, roster):
    battle = ended_battle(alice, status=SCREENING)
    with_page(battle, "B", "https://example.com/", "Results - Rulebook edition")

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side B step 0 page title names 'Rulebook': …")


def test_a_name_only_in_a_visited_url_percent_encoded_excludes_the_battle(alice, roster):
    battle = ended_battle(alice, status=SCREENING)
    with_page(battle, "A", "https://example.com/who?me=%53urve%79or", "Search")

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side A step 0 page URL names 'Surveyor': …")


def test_ordinary_pages_leave_the_battle_open(alice, roster):
    battle = ended_battle(alice, status=SCREENING)
    with_page(battle, "A", "https://example.com/survey%20or%20poll", "A survey or a rule book")

    assert battle_screen(battle_id=battle.pk) == ""


def test_judges_see_the_page_blind(alice, roster):
    battle = ended_battle(alice)
    with_page(battle, "A", "https://example.com/rulebook", "Ｒｕｌｅｂｏｏｋ says hi")

    step = battle_payload(battle, reveal=False)["sides"]["A"]["steps"][0]

    assert step["page"] == {"url": "https://example.com/[hidden]", "title": "[hidden] says hi"}
    assert battle_payload(battle, reveal=True)["sides"]["A"]["steps"][0]["page"] == {
        "url": "https://example.com/rulebook",
        "title": "Ｒｕｌｅｂｏｏｋ says hi",
    }


def test_text_typed_over_several_steps_is_read_together(alice, roster):
    battle = ended_battle(alice, status=SCREENING, steps=(1, 2))
    steps = battle.runs.get(side="B").steps.order_by("index")
    for step, text in zip(steps, ("Rule", "book"), strict=True):
        Step.objects.filter(pk=step.pk).update(tool="type", args={"text": text})

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side B steps 0–1 typed text, run together names")


def test_typing_interrupted_by_another_action_is_not_run_together(alice, roster):
    battle = ended_battle(alice, status=SCREENING, steps=(1, 3))
    steps = list(battle.runs.get(side="B").steps.order_by("index"))
    Step.objects.filter(pk=steps[0].pk).update(tool="type", args={"text": "Rule"})
    Step.objects.filter(pk=steps[1].pk).update(tool="click", args={"x": 1, "y": 2})
    Step.objects.filter(pk=steps[2].pk).update(tool="type", args={"text": "book"})

    assert battle_screen(battle_id=battle.pk) == ""


# --- delivered files ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "where"),
    [
        ("report.txt", b"Summary\nWritten by the Surveyor agent.\n", "(report.txt) text"),
        ("data.csv", "id,who\n1,Ｓｕｒｖｅｙｏｒ\n".encode(), "(data.csv) text"),
        ("utf16.txt", "by Ｓｕｒｖｅｙｏｒ".encode("utf-16"), "(utf16.txt) text as UTF-16"),
        ("nul.txt", "by Surveyor".encode("utf-16-le"), "(nul.txt) text"),  # NULs: invisible
        ("notes", b"\x00\x9fgarbage\x80 surveyor \xc3", "(notes) text"),
        ("bom", b"\xff\xfe surveyor", "(bom) text"),  # an editor may show it as UTF-8
        ("page.html", b"<p>By <b>Sur</b>vey<i>or</i></p>", "(page.html) text shown as HTML"),
        ("page.htm", b"<p>By Sur&#118;&#x65;y&shy;or</p>", "(page.htm) text shown as HTML"),
        ("x.svg", b"<svg><text>Surv</text><text>eyor</text></svg>", "shown as HTML"),
        ("alt.html", b'<img alt="Surv&#101;yor" src="x.png">', "(alt.html) text shown as HTML"),
    ],
)
def test_a_name_only_inside_a_delivered_file_excludes_the_battle(alice, roster, name, data, where):
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", name, data)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    note = note_of(battle)
    assert note.startswith(f"side A delivered file 1 {where}") or where in note, note
    assert "names 'Surveyor'" in note


def test_html_blocks_are_not_run_together(alice, roster):
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "page.html", b"<ul><li>a survey</li><li>or</li></ul><p>Rule</p>book")

    assert battle_screen(battle_id=battle.pk) == ""


def test_ordinary_files_leave_the_battle_open(alice, roster):
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "notes.txt", b"The survey or the rule book: both were idle.\n")
    deliver(battle, "B", "page.html", b"<h1>Results</h1><p>42</p>")

    assert battle_screen(battle_id=battle.pk) == ""
    battle.refresh_from_db()
    assert battle.status == Battle.Status.JUDGING


def test_a_file_too_large_to_scan_whole_fails_closed(alice, roster, monkeypatch):
    monkeypatch.setattr(screening_module, "FILE_MAX_BYTES", 1000)
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "B", "big.txt", b"x" * 1001)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle) == (
        "side B delivered file 1 (big.txt): more than the scan's 1,000 bytes: "
        "not scanned in full, so it may name an agent"
    )


def test_the_battles_files_are_bounded_together(alice, roster, monkeypatch):
    monkeypatch.setattr(screening_module, "BATTLE_FILES_MAX_BYTES", 1500)
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "a.txt", b"a" * 1000)
    deliver(battle, "B", "b.txt", b"b" * 1000)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side B delivered file 1 (b.txt): the battle's files pass")


def test_a_file_too_complex_to_put_in_display_order_fails_closed(alice, roster):
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "odd.txt", ("\u202ex\u202c" * 6000 + "\u202eroyevruS").encode())

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle) == (
        "side A delivered file 1 (odd.txt) text: 12,001 direction controls is over 10,000: "
        "not scanned in full, so it may name an agent"
    )


def test_a_delivered_link_is_not_followed_and_fails_closed(alice, roster, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("nothing")
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "x.txt", b"")
    run = battle.runs.get(side="A")
    path = settings.PRIVATE_MEDIA_ROOT / "deliveries" / f"run-{run.pk}" / "x.txt"
    path.unlink()
    path.symlink_to(secret)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side A delivered file 1 (x.txt): not a plain file")


# --- never served before the scan ------------------------------------------------------


def test_a_battle_in_screening_is_never_served_nor_shown_to_judges(
    alice, judge, roster, api, client
):
    battle = ended_battle(alice, status=SCREENING)
    deliver(battle, "A", "report.txt", b"42")
    step = battle.runs.get(side="A").steps.get()
    (settings.PRIVATE_MEDIA_ROOT / "screens").mkdir(parents=True)
    Image.new("RGB", (64, 32), "white").save(settings.PRIVATE_MEDIA_ROOT / "screens" / "s.png")
    Step.objects.filter(pk=step.pk).update(screenshot="screens/s.png")
    client.force_login(judge)

    assert judge_next(judge=judge) is None
    assert api(judge).get("/api/judge/next/").status_code == 204
    assert api(judge).get(f"/api/battles/{battle.pk}/").status_code == 404
    assert client.get(f"/judge/{battle.pk}/A/steps/0/screenshot").status_code == 404
    assert client.get(f"/judge/{battle.pk}/A/files/0").status_code == 404
    page = client.get("/judge/")
    assert page.status_code == 200 and f"/judge/{battle.pk}/" not in page.content.decode()

    battle_screen(battle_id=battle.pk)  # the scan runs, then the battle opens

    assert judge_next(judge=judge).pk == battle.pk
    assert client.get(f"/judge/{battle.pk}/A/files/0").status_code == 200

"""The audit report of a tournament record (evals.report): its sections in 003's order,
self-contained (no script, no link, no URL in any tag's attribute or in the CSS), every
value escaped (a hostile reply stays text), a no-judge run reported as such, and every
number read from the record, never recomputed."""

import copy
from html.parser import HTMLParser

import pytest

from evals.report import audit_report_html
from evals.tournament_record import tournament_record
from evals.tournaments import ROUND_ROBIN, SINGLE_ELIMINATION
from tests.evals.test_tournament_record import (
    RR,
    RR_RESULTS,
    RR_SCRIPT,
    RR_TASKS,
    Judge,
    build,
    provenance,
    result,
    task,
)

HOSTILE = '</details></pre><script>alert(1)</script><img src="https://evil.test/x.png">'
SECTIONS = [
    "header", "coverage", "tournament", "judgments", "replies", "usage", "raw", "ratings",
    "comparisons", "bootstrap", "configuration",
]  # fmt: skip


class Page(HTMLParser):
    """Every start tag with its attributes, the ids in document order, the text (data
    only, entities decoded) and the contents of <style>."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.ids: list[str] = []
        self.text: list[str] = []
        self.style = ""
        self._in_style = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if "id" in attributes:
            self.ids.append(attributes["id"])
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.style += data
        else:
            self.text.append(data)

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split()).replace(" ,", ",")


def rr_record() -> dict:
    results = [*RR_RESULTS, {**result("t2", "gamma", HOSTILE, None)}]
    judge = Judge(RR_SCRIPT)
    return build(RR, RR_TASKS, results, judge, format=ROUND_ROBIN, seed=5)


def no_judge_record() -> dict:
    return tournament_record(
        run=provenance(RR, 2), tasks=RR_TASKS, results=RR_RESULTS, games=[], tournaments=None,
        candidates=RR, judge=None, seed=0, replicates=1000, format=ROUND_ROBIN, best_of=1,
        opening=None,
    )  # fmt: skip


@pytest.mark.parametrize("make", [rr_record, no_judge_record])
def test_sections_in_order_and_self_contained(make):
    page = Page(audit_report_html(make()))
    sections = [attrs["id"] for tag, attrs in page.tags if tag in ("header", "section")]
    assert sections == SECTIONS
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "base", "form"}
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            assert "://" not in (value or "") and "javascript:" not in (value or ""), (tag, name)
    assert [tag for tag, _ in page.tags].count("style") == 1
    assert "url(" not in page.style and "@import" not in page.style


def test_the_round_robin_report_shows_the_record():
    record = rr_record()
    page = Page(audit_report_html(record))
    words = page.words
    assert "Audit report · tournament run 41" in words
    assert "judged by judge (openai judge-model)" in words
    assert "incomplete not every game the tournament played was judged" in words
    assert "expected games 6 resolved 5 failed 1 orientations agree 4 disagree (drawn) 1" in words
    assert "agreement rate 0.800" in words
    assert "Task t2 · incomplete · no champion" in words
    assert "t1 1 alpha gamma tie disagree alpha gamma 101" in words  # a judgement row
    assert "t2 1 beta gamma judge reply not in the schema beta failed" in words  # a failure
    assert "seeded fallback" not in words
    # replies and raw completions are collapsed
    summaries = [t for t, _ in page.tags].count("summary")
    assert summaries == 2 + 6 + 6  # per task, per (task, candidate), per judged game
    assert [t for t, _ in page.tags].count("details") == summaries


def test_a_hostile_reply_is_text():
    html = audit_report_html(rr_record())
    assert "<script>" not in html and 'src="https' not in html
    assert "&lt;/details&gt;&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    page = Page(html)
    assert HOSTILE in page.text  # the reply, whole, as the text of its <pre>
    assert "script" not in {tag for tag, _ in page.tags}


def test_the_numbers_are_the_records():
    record = rr_record()
    record["ratings"][1].update(rating=1234.5678, rating_lower=1100.04, rating_upper=1399.96)
    record["run"].update(expected_pairs=99, bootstrap_valid=17, bootstrap_ran=True)
    record["run"]["orientation_agreement"]["agreement_rate"] = 0.123456
    record["statistics"][2]["wins"] = 42
    words = Page(audit_report_html(record)).words
    assert "beta 1234.6 1100.0 1400.0" in words  # not refitted
    assert "expected games 99 resolved 5" in words  # not recounted
    assert "agreement rate 0.123" in words
    assert "gamma 42 1 1 2 1" in words
    assert "bootstrap_ran yes bootstrap_valid 17" in words


def test_unavailable_ratings_show_their_reason_and_no_bounds():
    record = rr_record()
    record["ratings"][0] = {"model": "alpha", "rating": None, "unavailable": "disconnected"}
    words = Page(audit_report_html(record)).words
    assert "alpha — — — disconnected" in words


def test_a_no_judge_run_is_reported_as_such():
    words = Page(audit_report_html(no_judge_record())).words
    assert "3 candidates on 2 tasks of sums.yaml · no judge : a no-judge run" in words
    assert "not judged No judge was used in this run" in words
    assert "status not_judged" in words
    assert "No judge: no pairwise judgements." in words
    assert "No judge: no ratings." in words
    assert "expected games" not in words and "Lower" not in words and "Wins" not in words
    assert "t1 alpha beta 1.0 0.0 alpha" in words  # the exact-match comparisons remain


def test_an_elimination_report_marks_fallbacks_and_tie_breaks():
    field = ["alpha", "beta", "gamma", "delta"]
    judge = Judge(
        {
            ("t1", "alpha", "beta"): ["tt", "AB", "tt", "BA"],
            ("t1", "gamma", "delta"): ["tt", "BB"],
            ("t1", "beta", "delta"): ["-A"],
        }
    )
    record = build(field, [task("t1")], [], judge, format=SINGLE_ELIMINATION, seed=3)
    record_copy = copy.deepcopy(record)
    words = Page(audit_report_html(record)).words
    assert record == record_copy  # the report reads the record, never changes it
    assert "Task t1 · stopped · no champion" in words
    assert (
        "Round 1 alpha beta drawn 0–0, 1 draw · beta advances seeded fallback · 3 tie-breaks"
        in (words)
    )
    assert "#2 (tie-break) tie, #3 (tie-break) tie, #4 (tie-break) tie" in words
    assert (
        "drawn 0–0, 1 draw · delta advances · 1 tie-break games: #1 tie, #2 (tie-break) delta"
        in (words)
    )
    assert "Round 2 beta delta failed 0–0 games: #1 failed" in words

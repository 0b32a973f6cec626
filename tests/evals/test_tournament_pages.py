"""The tournament workbench pages on real PostgreSQL and Redis: the "New evaluation"
form starts a tournament (the candidates in the order given, the schedule stored; a bad
schedule shows the service's reason and stores nothing); the run page of a tournament
played for real — candidates on the OpenAI SDK and a scripted judge on the Anthropic
SDK, against fake servers on 127.0.0.1 (the world of tests/evals/tournament_world.py)
— shows the brackets, coverage and ratings its record states; the record and the audit
report download; charlie, of another team, gets 404 on each of them."""

import json
import re
from html import unescape

import django_rq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.template.loader import render_to_string
from django.test import Client

from evals import services, tournament_selectors
from evals.models import Evaluation
from evals.presenters import progress_of
from evals.report import audit_report_html
from evals.services import execution
from evals.tournament_presenters import tournament_results_view
from evals.tournaments import seeded_fallback
from tests.evals import test_pages as pages
from tests.evals.scripted import RUBRIC
from tests.evals.tournament_world import VALIDATOR, play, suite_bytes

pytestmark = pytest.mark.django_db


REPORT_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
# Single elimination, opening matchups p-r and q-s, seed 3, best of 1. Task 1: p and r
# draw, r takes the first tie-break; q beats s; the final r-q is drawn and so are its
# three tie-breaks (two by disagreeing orders): the seeded fallback advances one side.
# Task 2: the (B, A) order of q-s never answers: that game fails and stops the bracket.
# Task 3: r beats p, s beats q, r beats s.
ELIMINATION = {
    (1, "p", "r"): ["tt", "BB"],
    (1, "q", "s"): ["AA"],
    (1, "r", "q"): ["tt", "AB", "tt", "BA"],
    (2, "p", "r"): ["AA"],
    (2, "q", "s"): ["B-"],
    (3, "p", "r"): ["BB"],
    (3, "q", "s"): ["BB"],
    (3, "r", "s"): ["AA"],
}
# Round robin of p, q, r, best of 3. Task 1: q sweeps p and r; p wins one game against r
# and two are drawn (one by disagreeing orders): drawn at 1-0. Task 2: p beats q 2-1, the
# p-r series fails on its first game, r beats q 2-1.
ROUND_ROBIN = {
    (1, "p", "q"): ["BB", "BB"],
    (1, "p", "r"): ["AA", "tt", "BA"],
    (1, "q", "r"): ["AA", "AA"],
    (2, "p", "q"): ["AA", "BB", "AA"],
    (2, "p", "r"): ["-B"],
    (2, "q", "r"): ["BB", "AA", "BB"],
}


def play_elimination(acme, world) -> tuple[Evaluation, dict]:
    world.judge.script = ELIMINATION
    evaluation, record, _ = play(
        acme, agents=["p", "q", "r", "s"], n_tasks=3, tournament="single-elimination",
        seed=3, opening=[["p", "r"], ["q", "s"]],
    )  # fmt: skip
    return evaluation, record


def play_round_robin(acme, world) -> tuple[Evaluation, dict]:
    world.judge.script = ROUND_ROBIN
    evaluation, record, _ = play(
        acme, agents=["p", "q", "r"], n_tasks=2, tournament="round-robin", best_of=3
    )
    return evaluation, record


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text_of(html: str) -> str:
    """The text a person reads: inline tags out, other tags as spaces, spaces collapsed."""
    inline = re.sub(r"</?(?:a|strong|span|code|em|b)\b[^>]*>", "", html)
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", inline)).strip())


def element(html: str, id_: str) -> str:
    """The text of the element with this id (its first closing tag of the same name)."""
    _, body = re.search(rf'<(\w+)[^>]* id="{id_}"[^>]*>(.*?)</\1>', html, re.S).groups()
    return text_of(body)


def brackets(html: str) -> dict:
    """Each task's tournament as the page shows it: (status, champion, series), each
    series as "a-b status outcome games" with each game's outcome by the page's own
    data attributes (a tie-break marked *)."""
    out = {}
    for task in re.split(r'<div class="t-task" ', html)[1:]:
        head = re.match(r'data-task="([^"]+)" data-status="([^"]+)" data-champion="([^"]*)"', task)
        rows = []
        for series in re.split(r'class="t-series" ', task)[1:]:
            name, status = re.match(r'data-series="([^"]+)" data-status="([^"]+)"', series).groups()
            outcome = text_of(re.search(r'class="t-outcome">(.*?)</(?:p|td)>', series, re.S)[1])
            games = "".join(
                ("x" if o == "failed" else "t" if o == "tie" else o) + ("*" if tb else "")
                for o, tb in re.findall(r'data-outcome="([^"]+)"( class="tb")?', series)
            )
            rows.append(f"{name} {status} | {outcome} | {games}")
        out[head[1]] = (head[2], head[3], rows)
    return out


# -- the form ---------------------------------------------------------------------------


def form_data(**change) -> dict:
    """tests/evals/test_pages.py's form, for a tournament: two tasks, four candidates
    in an order of their own, best of 3, seed 7, opening matchups (a blank line and
    stray spaces among them)."""
    return pages.form_data(**{
        "suite": SimpleUploadedFile("lines.json", suite_bytes(2)),
        "rubric": None, "pairwise": None, "agents": ["p", "q", "r", "s"], "order": "q p s r",
        "tournament": "single-elimination", "best_of": "3", "seed": "7",
        "opening": "q vs r\n\n p, s \n", **change,
    })  # fmt: skip


def test_the_form_offers_the_tournament_controls(alice, world):
    html = signed_in(alice).get("/evaluations/").content.decode()
    assert re.findall(r'<option value="([^"]*)"', html.split('name="tournament"')[1])[:4] == [
        "", "round-robin", "single-elimination", "king-of-the-hill",
    ]  # fmt: skip
    assert re.search(r'<input type="number" name="best_of" value="1" min="1" step="2"', html)
    assert re.search(r'<input type="number" name="seed" value="0" min="0"', html)
    assert '<textarea name="opening"' in html and 'name="order"' in html
    assert "the ticked candidates' slugs in the order they should play" in text_of(html)


def test_the_form_starts_a_tournament_in_the_order_given(
    alice, world, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(alice).post("/evaluations/", form_data())
    evaluation = Evaluation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/evaluations/{evaluation.pk}/"
    assert [c.agent.slug for c in evaluation.candidates.select_related("agent")] == [
        "q", "p", "s", "r",
    ]  # fmt: skip
    assert (evaluation.tournament, evaluation.best_of, evaluation.seed, evaluation.opening) == (
        "single-elimination", 3, 7, [["q", "r"], ["p", "s"]],
    )  # fmt: skip
    assert (evaluation.judge.slug, evaluation.pairwise, evaluation.rubric) == ("judge", True, None)
    jobs = django_rq.get_queue("evals").jobs
    assert [(job.func_name, job.args) for job in jobs] == [
        ("evals.jobs.evaluation_run", (evaluation.pk,))
    ]


def test_without_an_order_the_candidates_play_in_the_lists_order(alice, world):
    response = signed_in(alice).post(
        "/evaluations/",
        form_data(order="", opening="", tournament="king-of-the-hill", best_of="", seed=""),
    )
    assert response.status_code == 302
    evaluation = Evaluation.objects.get()
    assert [c.agent.slug for c in evaluation.candidates.select_related("agent")] == [
        "p", "q", "r", "s",
    ]  # fmt: skip
    assert (evaluation.tournament, evaluation.best_of, evaluation.seed, evaluation.opening) == (
        "king-of-the-hill", 1, 0, None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "says"),
    [
        # the service's reasons
        ({"best_of": "2"}, "best-of must be an odd positive integer, got 2"),
        ({"agents": ["p", "q", "r"], "order": "", "opening": ""},
         "single elimination needs a power-of-two field (2, 4, 8, ...), got 3 candidates"),
        ({"opening": "q vs p\nr vs s\np vs s"}, "opening matchups must be 2 pairs of candidates"),
        ({"tournament": "round-robin"}, "opening matchups are for single elimination only"),
        ({"tournament": "", "opening": ""}, "best-of, seed and opening matchups belong to a "
                                            "tournament"),
        ({"seed": "-1"}, "the seed must lie in 0..2^63-1"),
        ({"rubric": SimpleUploadedFile("rubric.yaml", RUBRIC)},
         "a tournament plays pairwise games; a rubric belongs to an evaluation without one"),
        ({"judge": "q"}, "the judge must not be one of the candidates (it is, or shares the "
                         "model of, q)"),
        # the form's own: what the browser sent does not parse
        ({"order": "q p r"}, "The order must name every ticked candidate once (ticked but not "
                             "in the order: s)."),
        ({"order": "q p s r judge p"}, "The order must name every ticked candidate once (named "
                                       "more than once: p; not ticked: judge)."),
        ({"opening": "q vs r\np s r"}, "Line 2: 'p s r' is not one pair; write 'p vs s' or "
                                       "'p, s'."),
        ({"best_of": "three"}, "Enter a whole number."),
    ],
)  # fmt: skip
def test_a_refused_schedule_says_why_next_to_the_form_and_stores_nothing(
    alice, acme, world, change, says
):
    response = signed_in(alice).post("/evaluations/", form_data(**change))
    assert response.status_code == 400
    html = response.content.decode()
    assert says in text_of(html)
    assert 'id="eval-refused"' in html
    assert Evaluation.objects.count() == 0 and acme.suites.count() == 0
    assert django_rq.get_queue("evals").count == 0


# -- the run page -------------------------------------------------------------------------


def test_the_run_page_shows_the_brackets_coverage_and_ratings_of_the_record(alice, acme, world):
    evaluation, record = play_elimination(acme, world)
    fallback = seeded_fallback(3, "r", "q")
    response = signed_in(alice).get(f"/evaluations/{evaluation.pk}/")
    assert response.status_code == 200
    html = response.content.decode()

    # the facts: the schedule, the report's two links
    assert element(html, "eval-schedule") == (
        "single-elimination · best of 1 · seed 3 · opening matchups p vs r, q vs s"
    )
    assert f'href="/evaluations/{evaluation.pk}/report.html?inline=1" id="eval-report-open"' in html
    assert f'href="/evaluations/{evaluation.pk}/report.html" id="eval-report" download' in html
    # progress counts games: finished, the games played
    assert re.findall(r'data-part="(\w+)">([^<]+)<strong>([^<]+)</strong>', html) == [
        ("runs", "Answers ", "12 / 12"), ("pairs", "Games ", "12 / 12"),
    ]  # fmt: skip
    assert 'id="eval-estimate"' not in html
    # each task's bracket, rounds side by side
    assert brackets(html) == {
        "t01": ("complete", fallback, [
            "p-r drawn | 0–0, 1 draw · r advances on a tie-break 1 tie-break | tr*",
            "q-s won | 1–0 · won by q | q",
            f"r-q drawn | 0–0, 1 draw · {fallback} advances seeded fallback 3 tie-breaks "
            "| tt*t*t*",
        ]),
        "t02": ("stopped", "", [
            "p-r won | 1–0 · won by p | p",
            "q-s failed | 0–0 · a game failed: the bracket stops | x",
        ]),
        "t03": ("complete", "r", [
            "p-r won | 0–1 · won by r | r",
            "q-s won | 0–1 · won by s | s",
            "r-s won | 1–0 · won by r | r",
        ]),
    }  # fmt: skip
    assert [[t["champion"], t["status"]] for t in record["tournament"]["tasks"]] == [
        [fallback, "complete"], [None, "stopped"], ["r", "complete"],
    ]  # fmt: skip
    tasks = html.split('<div class="t-task" ')[1:]
    assert [re.findall(r'class="bracket-round" data-round="(\d)"', t) for t in tasks] == [
        ["1", "2"], ["1"], ["1", "2"],
    ]  # fmt: skip
    # coverage in games, as the record counts them
    run = record["run"]
    assert (run["expected_pairs"], run["resolved_pairs"], run["failed_pairs"]) == (12, 11, 1)
    assert run["orientation_agreement"]["orientation_agreeing_pairs"] == 9
    assert element(html, "eval-complete").startswith("incomplete: not every game")
    assert element(html, "eval-coverage") == (
        "Games 12 played · 11 resolved · 1 failed Orientation agreement the two orders agreed "
        "on 9 of 11 resolved games (0.818); 2 disagreed and count as draws"
    )
    # the ratings beside the statistics, bounds or why there are none
    rows = re.findall(r'<tr data-agent="(\w)"><th scope="row">\w</th>(.*?)</tr>', html)
    ratings = {r["model"]: r for r in record["ratings"]}
    stats = {s["model"]: s for s in record["statistics"]}
    assert [slug for slug, _ in rows][-4:] == ["p", "q", "r", "s"]
    for slug, cells in rows[-4:]:
        rating, stat = ratings[slug], stats[slug]
        shown = [text_of(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", cells)]
        assert shown == [
            f"{rating['rating']:.1f}", "–", str(stat["wins"]), str(stat["losses"]),
            str(stat["draws"]), str(stat["agreement_count"]), str(stat["disagreement_count"]),
        ]  # fmt: skip
    assert run["bootstrap_unavailable"] == "invalid_replicates"
    assert element(html, "eval-bounds") == (
        "No bounds: some resampled runs could not rate every candidate (invalid_replicates)."
    )
    # the failed game with its reason
    failed = re.findall(r'<tr data-task="(\w+)" data-pair="([\w-]+)" class="failed">', html)
    assert failed == [("t02", "q-s")]
    reason = record["judgment_failures"][0]["failure"]
    assert "not a single JSON object" in reason
    assert text_of(reason[:100]) in element(html, "eval-failed-games")
    # the answers table, each linked to its run
    assert len(re.findall(r'<tr data-task="t0\d"><th scope="row">', html)) == 3
    assert html.count(f'href="/evaluations/{evaluation.pk}/runs/') == 12
    # the live part says the same
    live = signed_in(alice).get(f"/evaluations/{evaluation.pk}/live/").content.decode()
    assert brackets(live) == brackets(html)


def test_a_round_robin_shows_a_table_per_task_and_the_ratings_order(alice, acme, world):
    evaluation, record = play_round_robin(acme, world)
    html = signed_in(alice).get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert element(html, "eval-schedule") == "round-robin · best of 3 · seed 0"
    assert 'class="bracket"' not in html
    assert brackets(html) == {
        "t01": ("complete", "", [
            "p-q won | won by q | qq",
            "p-r drawn | drawn | ptt",
            "q-r won | won by q | qq",
        ]),
        "t02": ("incomplete", "", [
            "p-q won | won by p | pqp",
            "p-r failed | a game failed: the series ends | x",
            "q-r won | won by r | rqr",
        ]),
    }  # fmt: skip
    scores = re.findall(r'<td class="t-score">([^<]*)</td>', html)
    assert scores == ["0–2", "1–0, 2 draws", "2–0", "2–1", "0–0", "1–2"]
    assert element(html, "eval-coverage").startswith("Games 14 played · 13 resolved · 1 failed")
    assert record["run"]["expected_pairs"] == 14
    ratings = {r["model"]: r["rating"] for r in record["ratings"]}
    shown = dict(re.findall(r'<tr data-agent="(\w)"><th scope="row">\w</th><td class="rating">'
                            r"([^<]+)</td>", html))  # fmt: skip
    assert shown == {slug: f"{value:.1f}" for slug, value in ratings.items()}
    # q won 6 games and lost 4, p won 3 and lost 3, r won 2 and lost 4
    assert float(shown["q"]) > float(shown["p"]) > float(shown["r"])


def test_a_tournament_without_a_judge_says_it_plays_no_game(alice, acme, world):
    evaluation, _, _ = play(
        acme, agents=["p", "q"], n_tasks=2, judge=None, tournament="round-robin"
    )
    html = signed_in(alice).get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert element(html, "eval-schedule") == (
        "round-robin · best of 1 · seed 0 · no judge: no game is played"
    )
    assert element(html, "eval-not-judged").startswith("No judge: no game is played")
    assert 'id="eval-coverage"' not in html and 'id="eval-ratings"' not in html
    assert re.findall(r'data-part="(\w+)"', html) == ["runs"]


def test_a_cancelled_tournament_shows_its_unfinished_tasks(alice, acme, world, monkeypatch):
    # as in tests/evals/test_tournament_runs.py: cancelled after t01's r-s game
    monkeypatch.setattr(execution, "CANCEL_POLL_S", 0.0)
    world.judge.script = {(1, "p", "q"): ["AA"], (1, "r", "s"): ["BB"]}
    suite = services.suite_store(team=acme, name="lines.json", data=suite_bytes(2))
    evaluation = services.evaluation_create(
        team=acme, suite=suite, agent_slugs=["p", "q", "r", "s"], judge_slug="judge",
        tournament="single-elimination",
    )  # fmt: skip

    def progress(label):
        if label == "t01 · r vs s · game 1":
            services.evaluation_cancel(evaluation=evaluation)

    services.evaluation_execute(evaluation_id=evaluation.pk, progress=progress)
    html = signed_in(alice).get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert brackets(html) == {
        "t01": ("unfinished", "", [
            "p-q won | 1–0 · won by p | p",
            "r-s won | 0–1 · won by s | s",
            "p-s pending | 0–0 · not played yet | ",
        ]),
        "t02": ("unfinished", "", ["p-q pending | 0–0 · not played yet | "]),
    }  # fmt: skip
    assert element(html, "eval-unfinished") == (
        "2 tasks unfinished (still running, or cancelled before the next game): t01, t02"
    )
    assert element(html, "eval-complete").startswith("incomplete")
    # finished (cancelled): the games expected are the games played
    assert re.findall(r'data-part="(\w+)">([^<]+)<strong>([^<]+)</strong>', html) == [
        ("runs", "Answers ", "8 / 8"), ("pairs", "Games ", "2 / 2"),
    ]  # fmt: skip
    assert 'id="eval-cancel"' not in html and 'id="eval-estimate"' not in html


def test_progress_counts_games_against_the_estimate_while_it_runs(alice, acme, world):
    world.judge.script = ROUND_ROBIN
    suite = services.suite_store(team=acme, name="lines.json", data=suite_bytes(2))
    pending = services.evaluation_create(
        team=acme, suite=suite, agent_slugs=["p", "q", "r"], judge_slug="judge",
        tournament="round-robin", best_of=3,
    )  # fmt: skip
    before = progress_of([pending])[pending.pk]
    # 3 series a task × 2 tasks × best of 3
    assert (before.pairs_done, before.pairs_expected, before.games_estimated) == (0, 18, True)
    html = signed_in(alice).get(f"/evaluations/{pending.pk}/").content.decode()
    assert element(html, "eval-estimate").startswith(
        "The games expected are an estimate while the tournament runs"
    )
    assert re.findall(r'data-part="(\w+)">([^<]+)<strong>([^<]+)</strong>', html) == [
        ("runs", "Answers ", "0 / 6"), ("pairs", "Games ", "0 / 18"),
    ]  # fmt: skip

    done = services.evaluation_execute(evaluation_id=pending.pk, sleep=lambda s: None)
    after = progress_of([done])[done.pk]
    assert (after.pairs_done, after.pairs_expected, after.games_estimated) == (14, 14, False)
    assert (after.done, after.expected, after.percent) == (20, 20, 100)
    # read as if still running: the estimate stands until the games played outrun it
    Evaluation.objects.filter(pk=done.pk).update(status=Evaluation.Status.RUNNING)
    running = Evaluation.objects.select_related("suite").get(pk=done.pk)
    assert progress_of([running])[done.pk].pairs_expected == 18


def test_tie_breaks_beyond_the_estimate_raise_it_to_the_games_played(alice, acme, world):
    evaluation, _ = play_elimination(acme, world)
    Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.Status.RUNNING)
    running = Evaluation.objects.select_related("suite").get(pk=evaluation.pk)
    progress = progress_of([running])[evaluation.pk]
    # 3 series × 3 tasks × best of 1 = 9 estimated; 12 played
    assert (progress.pairs_done, progress.pairs_expected, progress.percent) == (12, 12, 100)


def test_the_run_page_takes_as_many_queries_for_three_tasks_as_for_one(
    alice, acme, world, django_assert_max_num_queries
):
    world.judge.default = lambda n, a, b, game: "AA"
    small, _, _ = play(acme, agents=["p", "q", "r", "s"], n_tasks=1,
                       tournament="single-elimination")  # fmt: skip
    large, _, _ = play(acme, agents=["p", "q", "r", "s"], n_tasks=3,
                       tournament="single-elimination")  # fmt: skip
    client = signed_in(alice)
    for evaluation in (small, large):
        # (one of them reads the judge's calls, for the record's tokens and cost)
        with django_assert_max_num_queries(15):
            page = client.get(f"/evaluations/{evaluation.pk}/")
        with django_assert_max_num_queries(14):
            live = client.get(f"/evaluations/{evaluation.pk}/live/")
        assert page.status_code == live.status_code == 200
    assert len(brackets(page.content.decode())) == 3


# -- the record and the report -----------------------------------------------------------


def test_the_record_and_the_report_download_and_the_report_opens_under_its_own_policy(
    alice, acme, world
):
    evaluation, _ = play_elimination(acme, world)
    client = signed_in(alice)

    saved = client.get(f"/evaluations/{evaluation.pk}/record.json")
    assert saved.status_code == 200
    assert saved["Content-Disposition"] == f'attachment; filename="evaluation-{evaluation.pk}.json"'
    assert json.loads(saved.content) == tournament_selectors.record_of(evaluation)
    VALIDATOR.validate(json.loads(saved.content))

    expected = audit_report_html(tournament_selectors.record_of(evaluation))
    for query, disposition in (("", "attachment"), ("?inline=1", "inline")):
        report = client.get(f"/evaluations/{evaluation.pk}/report.html{query}")
        assert report.status_code == 200
        assert report["Content-Type"] == "text/html; charset=utf-8"
        assert report["Content-Disposition"] == (
            f'{disposition}; filename="evaluation-{evaluation.pk}-report.html"'
        )
        assert report["Content-Security-Policy"] == REPORT_POLICY
        assert report["X-Content-Type-Options"] == "nosniff"
        assert report["Cache-Control"] == "private, no-store"
        body = report.content.decode()
        assert body == expected
        assert "<script" not in body.lower()
        assert f"Audit report · tournament run {evaluation.pk}" in body


def test_an_evaluation_without_a_tournament_has_no_report(alice, acme, world):
    suite = services.suite_store(team=acme, name="lines.json", data=suite_bytes(1))
    plain = services.evaluation_create(team=acme, suite=suite, agent_slugs=["p", "q"])
    client = signed_in(alice)
    assert client.get(f"/evaluations/{plain.pk}/report.html").status_code == 404
    page = client.get(f"/evaluations/{plain.pk}/").content.decode()
    assert "report.html" not in page and 'id="eval-schedule"' not in page
    assert json.loads(client.get(f"/evaluations/{plain.pk}/record.json").content)["schema"] == (
        "agent-arena/evaluation-record/1"
    )


def test_another_team_gets_404_on_every_page_of_a_tournament(alice, charlie, acme, world):
    evaluation, _ = play_elimination(acme, world)
    outsider = signed_in(charlie)
    base = f"/evaluations/{evaluation.pk}/"
    for path in ("", "live/", "record.json", "report.html", "report.html?inline=1"):
        assert outsider.get(base + path).status_code == 404, path
    assert outsider.post(base + "cancel/").status_code == 404
    assert Evaluation.objects.get().status == Evaluation.Status.DONE
    assert (
        re.findall(r'<tr data-evaluation="(\d+)">', outsider.get("/evaluations/").content.decode())
        == []
    )


def test_the_bounds_name_the_method_that_made_them(alice, acme, world):
    """Where a tournament publishes bounds, the run page names the method from its record
    (ratings.task_bootstrap's interval), not the percentile bootstrap it used before."""
    evaluation, record = play_round_robin(acme, world)
    run = record["run"]
    run["bootstrap_unavailable"] = None
    run["bootstrap_valid"] = run["bootstrap_replicates"]
    run["interval"] = {**run["interval"], "clusters": 2, "effective_clusters": 2.0,
                       "degrees_of_freedom": 1.0, "critical_value": 12.706}  # fmt: skip
    view = tournament_results_view(evaluation, record)
    html = render_to_string(
        "evals/_tournament_results.html", {"results": view, "evaluation": evaluation}
    )
    said = element(html, "eval-bounds")
    assert said.startswith(f"Bounds: 95 % {run['interval']['name']} (tasks (clusters) 2,")
    assert "critical value t 12.706" in said and "percentile" not in said

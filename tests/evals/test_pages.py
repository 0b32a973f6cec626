"""The evaluation pages on real PostgreSQL and Redis with the scripted fake providers:
the list with its form (errors shown next to it, nothing created), the run page with
the results the scripts imply, the record download, one run's page with its waterfall,
cancel, the live socket; another team (charlie) gets 404 or a closed socket everywhere
and changes nothing."""

import json
import re

import django_rq
import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from accounts.models import Team
from arena_site.asgi import application
from evals import selectors, services
from evals.jobs import Throttled, evaluation_run
from evals.models import EvalRun, EvalSpan, Evaluation
from evals.presenters import progress_of
from tests.evals.scripted import FAILING_TASK, KEY, RUBRIC, suite_bytes

pytestmark = pytest.mark.django_db


def acme() -> Team:
    return Team.objects.get(name="Acme")


def create(*, agents=("alpha", "beta"), rubric=False, pairwise=False, team=None) -> Evaluation:
    team = team or acme()
    suite = services.suite_store(team=team, name="arith.yaml", data=suite_bytes())
    stored_rubric = (
        services.rubric_store(team=team, name="rubric.yaml", data=RUBRIC) if rubric else None
    )
    return services.evaluation_create(
        team=team, suite=suite, agent_slugs=list(agents), rubric=stored_rubric,
        judge_slug="judge" if rubric or pairwise else None, pairwise=pairwise,
    )  # fmt: skip


def full() -> Evaluation:
    """The scripted world whole: 20 tasks × alpha, beta, gamma, rubric and pairs."""
    evaluation = create(agents=("alpha", "beta", "gamma"), rubric=True, pairwise=True)
    return services.evaluation_execute(evaluation_id=evaluation.pk, sleep=lambda s: None)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


# -- progress ---------------------------------------------------------------------------


def test_progress_counts_what_is_stored_against_what_the_record_expects(alice, arena_agents):
    evaluation = create(agents=("alpha", "beta", "gamma"), rubric=True, pairwise=True)
    before = progress_of([evaluation])[evaluation.pk]
    assert (before.runs_done, before.runs_expected, before.scores_expected) == (0, 60, 120)
    assert (before.pairs_expected, before.done, before.percent) == (60, 0, 0)

    evaluation = services.evaluation_execute(evaluation_id=evaluation.pk, sleep=lambda s: None)
    after = progress_of([evaluation])[evaluation.pk]
    run = selectors.evaluation_record(evaluation)["run"]
    # gamma's failed run on t05 takes 2 scores and 2 pairs out of what is expected
    assert (after.runs_done, after.runs_failed, after.runs_expected) == (60, 1, 60)
    assert (after.scores_done, after.scores_expected) == (118, 118)
    assert (after.pairs_done, after.pairs_expected) == (58, 58)
    assert after.pairs_expected == run["expected_pairs"]
    assert after.pairs_done == run["resolved_pairs"] + run["failed_pair_judgements"]
    assert (after.done, after.expected, after.percent, after.finished) == (236, 236, 100, True)


def test_frames_are_throttled_to_one_per_interval_and_the_first_goes_at_once():
    now = {"t": 0.0}
    sent: list[float] = []
    publish = Throttled(lambda: sent.append(now["t"]), interval=0.25, clock=lambda: now["t"])
    for t in (0.0, 0.1, 0.2, 0.26, 0.3, 0.5, 0.52, 1.0):
        now["t"] = t
        publish("label")
    assert sent == [0.0, 0.26, 0.52, 1.0]


# -- the list and the form ----------------------------------------------------------------


def list_rows(html: str) -> list[tuple[str, str]]:
    """(evaluation id, progress) per row of the list, in order."""
    return re.findall(
        r'<tr data-evaluation="(\d+)">.*?class="eval-list-progress">([^<]*)</td>', html, re.S
    )


def test_the_list_shows_the_teams_evaluations_newest_first_in_a_fixed_number_of_queries(
    alice, charlie, arena_agents, django_assert_num_queries
):
    first = create()
    services.evaluation_execute(evaluation_id=first.pk, sleep=lambda s: None)
    client = signed_in(alice)
    with django_assert_num_queries(13):
        one = client.get("/evaluations/")
    assert list_rows(one.content.decode()) == [(str(first.pk), "40 / 40")]

    second = create(agents=("alpha", "beta", "gamma"), rubric=True, pairwise=True)
    third = create(agents=("gamma",))
    with django_assert_num_queries(13):  # as many for three as for one
        three = client.get("/evaluations/")
    html = three.content.decode()
    assert list_rows(html) == [
        (str(third.pk), "0 / 20"), (str(second.pk), "0 / 240"), (str(first.pk), "40 / 40"),
    ]  # fmt: skip
    assert "alpha, beta, gamma" in html and "arith.yaml" in html
    assert acme().suites.get().sha256[:12] in html
    # the form offers the agents the team may evaluate
    assert re.findall(r'name="agents" value="([^"]+)"', html) == ["alpha", "beta", "gamma", "judge"]
    # another team sees none of them
    assert list_rows(signed_in(charlie).get("/evaluations/").content.decode()) == []


def form_data(**change) -> dict:
    data = {
        "suite": SimpleUploadedFile("arith.yaml", suite_bytes(), content_type="application/yaml"),
        "rubric": SimpleUploadedFile("rubric.yaml", RUBRIC, content_type="application/yaml"),
        "agents": ["alpha", "beta", "gamma"],
        "judge": "judge",
        "pairwise": "on",
        "max_tokens": "512",
    }
    data.update(change)
    return {k: v for k, v in data.items() if v is not None}


def test_the_form_creates_the_evaluation_starts_it_and_goes_to_its_page(
    alice, arena_agents, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(alice).post("/evaluations/", form_data())
    evaluation = Evaluation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/evaluations/{evaluation.pk}/"
    assert [c.agent.slug for c in evaluation.candidates.select_related("agent")] == [
        "alpha", "beta", "gamma",
    ]  # fmt: skip
    assert (evaluation.judge.slug, evaluation.pairwise, evaluation.rubric.name) == (
        "judge", True, "rubric.yaml",
    )  # fmt: skip
    assert evaluation.settings["candidate_max_tokens"] == 512
    assert (evaluation.team, evaluation.created_by, evaluation.status) == (acme(), alice, "pending")
    jobs = django_rq.get_queue("evals").jobs
    assert [(job.func_name, job.args) for job in jobs] == [
        ("evals.jobs.evaluation_run", (evaluation.pk,))
    ]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"suite": SimpleUploadedFile("s.yaml", b"- {id: t1, promt: x}\n")},
         "s.yaml: task 't1': field 'promt': unknown field"),
        ({"judge": "alpha"}, "the judge must not be one of the candidates (it is, or shares the "
                             "model of, alpha)"),
        ({"judge": ""}, "a rubric or pairwise judging needs --judge"),
        ({"rubric": None, "pairwise": None, "agents": ["alpha", "alpha"]},
         "each agent may be named once"),
        ({"suite": None}, "Upload a suite file or choose a bundled sample suite above (one of "
                          "the two)."),
        ({"agents": ["nobody"]}, "Select a valid choice. nobody is not one of the available "
                                 "choices."),
        ({"max_tokens": "0"}, "Ensure this value is greater than or equal to 1."),
    ],
)  # fmt: skip
def test_a_refused_form_says_why_next_to_it_and_creates_nothing(alice, arena_agents, change, says):
    response = signed_in(alice).post("/evaluations/", form_data(**change))
    assert response.status_code == 400
    html = response.content.decode()
    assert says in text_of(html.replace("&#x27;", "'"))
    assert 'id="eval-refused"' in html
    assert Evaluation.objects.count() == 0 and acme().suites.count() == 0
    assert django_rq.get_queue("evals").count == 0


def test_signed_out_visitors_are_sent_to_log_in(client, alice, arena_agents):
    evaluation = create()
    for path in ("/evaluations/", f"/evaluations/{evaluation.pk}/"):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# -- the run page, the record, one run ----------------------------------------------------


def cell(html: str, task: str, agent: str, measure: str) -> str:
    row = re.search(rf'<tr data-task="{task}">(.*?)</tr>', html, re.S).group(1)
    found = re.search(
        rf'<td class="m-{measure}[^"]*" data-agent="{agent}">(.*?)</td>', row, re.S
    ).group(1)
    return text_of(found)


def test_the_run_page_and_a_runs_page_show_what_the_scripts_imply(alice, arena_agents):
    evaluation = full()
    client = signed_in(alice)
    response = client.get(f"/evaluations/{evaluation.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    # finished: progress complete, no socket, no cancel button
    assert 'id="eval-bar" max="236" value="236"' in html
    assert "ws-connect" not in html and 'id="eval-cancel"' not in html
    # the table: exact match, weighted rubric score, status (with the failure's message)
    assert [cell(html, "t01", a, "exact") for a in ("alpha", "beta", "gamma")] == ["1", "0", "0"]
    assert [cell(html, "t01", a, "weighted") for a in ("alpha", "beta", "gamma")] == [
        "1.00", "0.47", "0.89",
    ]  # fmt: skip
    assert cell(html, "t12", "beta", "exact") == "–"  # 000's shape: no exact check
    assert cell(html, FAILING_TASK, "gamma", "status").startswith("error")
    assert "gave up after 3 attempts" in cell(html, FAILING_TASK, "gamma", "status")
    assert cell(html, FAILING_TASK, "gamma", "weighted") == "–"
    assert len(re.findall(r"<tr data-task=\"t\d\d\">", html)) == 20
    assert len(re.findall(r"<tr data-task=\"t\d\d\" data-pair=", html)) == 58
    # the figures, inline
    assert re.search(r'<figure id="eval-radar"><svg [^>]*role="img"', html)
    assert re.search(r'<figure id="eval-matrix"><svg [^>]*role="img"', html)
    assert html.count('class="mean"') == 6 and html.count('class="cell"') == 9
    assert "alpha vs beta: win rate 0.750" in html
    # the means per criterion with their intervals, as the record has them
    means = selectors.evaluation_record(evaluation)["statistics"]["criterion_means"]
    row = re.search(r'data-agent="beta" data-criterion="correctness">(.*?)</tr>', html, re.S)
    m = means["beta"]["correctness"]
    assert text_of(row.group(1)) == (
        f"beta correctness (0–5) {m['mean']:.2f} {m['lower']:.2f} – {m['upper']:.2f} 20"
    )
    # the pairwise judgements: t07's position bias is a disagreement, t10's game failed
    assert "57 pairs resolved; the two orders agreed on 54 (0.947)" in text_of(html)
    t07 = re.search(r'data-task="t07" data-pair="alpha-beta">(.*?)</tr>', html, re.S).group(1)
    assert text_of(t07) == "t07 alpha beta tie no (A→A, B→B)"
    t10 = re.search(r'data-task="t10" data-pair="alpha-beta" class="failed">(.*?)</tr>', html, re.S)
    assert text_of(t10.group(1)).startswith("t10 alpha beta failed:")
    assert KEY not in html

    # the same live part over HTTP, for re-syncing
    live = client.get(f"/evaluations/{evaluation.pk}/live/").content.decode()
    assert live.lstrip().startswith('<div id="eval-progress"') and 'id="eval-results"' in live

    # the record, as a file: the same document the API serves
    download = client.get(f"/evaluations/{evaluation.pk}/record.json")
    assert download["Content-Disposition"] == (
        f'attachment; filename="evaluation-{evaluation.pk}.json"'
    )
    record = json.loads(download.content)
    expected = selectors.evaluation_record(evaluation)
    for document in (record, expected):
        document["run"].pop("app_version")
    assert record == expected

    # one run's page: the reply, the criterion scores, the waterfall of its calls
    run = EvalRun.objects.get(evaluation=evaluation, task_id="t03", agent__slug="beta")
    html = client.get(f"/evaluations/{evaluation.pk}/runs/{run.pk}/").content.decode()
    assert text_of(re.search(r'<pre id="run-output">(.*?)</pre>', html, re.S).group(1)) == "7"
    assert "Compute 3+3. Answer with the number only." in html
    scores = [
        (name, score.strip())
        for name, score in re.findall(r'<tr data-criterion="(\w+)"><td>\w+</td><td>([^<]*)', html)
    ]
    assert scores == [("correctness", "1 / 5"), ("clarity", "3 / 3")]
    assert html.count(">corrected</span>") == 1  # clarity's first reply was not JSON
    # the candidate's call, the correctness call, clarity's call and its correction
    spans = EvalSpan.objects.filter(run=run)
    assert spans.count() == 4
    assert re.findall(r'<tr class="span-model">\s*<td>(\w+)</td>', html) == [
        s.role for s in spans.order_by("started_at", "pk")
    ]
    assert html.count('<rect class="bar"') == 4


def test_cancel_stops_a_pending_evaluation_and_the_page_says_so(alice, arena_agents):
    evaluation = create()
    client = signed_in(alice)
    page = client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert f'ws-connect="/ws/evaluations/{evaluation.pk}/"' in page and 'id="eval-cancel"' in page
    response = client.post(f"/evaluations/{evaluation.pk}/cancel/", follow=True)
    evaluation.refresh_from_db()
    assert evaluation.status == "cancelled"
    html = response.content.decode()
    assert "Cancelled: nothing more is asked" in html
    assert 'id="eval-status">cancelled<' in html and 'id="eval-cancel"' not in html


def test_another_team_gets_404_everywhere_and_changes_nothing(alice, charlie, arena_agents):
    evaluation = create()
    services.evaluation_execute(evaluation_id=evaluation.pk, sleep=lambda s: None)
    Evaluation.objects.filter(pk=evaluation.pk).update(status="running")
    run = EvalRun.objects.filter(evaluation=evaluation).first()
    outsider = signed_in(charlie)
    base = f"/evaluations/{evaluation.pk}/"
    for path in (base, base + "live/", base + "record.json", base + f"runs/{run.pk}/"):
        assert outsider.get(path).status_code == 404, path
    assert outsider.post(base + "cancel/").status_code == 404
    assert Evaluation.objects.get(pk=evaluation.pk).status == "running"
    # and a run of another evaluation is not found through this one
    other = create(agents=("gamma",))
    assert signed_in(alice).get(f"/evaluations/{other.pk}/runs/{run.pk}/").status_code == 404


# -- the socket -----------------------------------------------------------------------------


def session_cookie(user) -> bytes:
    return f"sessionid={signed_in(user).cookies['sessionid'].value}".encode()


def communicator(evaluation_id: int, cookie: bytes | None = None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://127.0.0.1")]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, f"/ws/evaluations/{evaluation_id}/", headers=headers)


def status_and_done(frame: str) -> tuple[str, int]:
    status = re.search(r'id="eval-status">(\w+)<', frame).group(1)
    return status, int(re.search(r'id="eval-done">(\d+)<', frame).group(1))


@pytest.mark.django_db(transaction=True)
def test_a_member_hears_the_progress_as_the_job_runs(alice, bob, arena_agents):
    evaluation = create()
    cookie = session_cookie(bob)

    async def scenario():
        socket = communicator(evaluation.pk, cookie)
        connected, _ = await socket.connect()
        assert connected
        frames = [await socket.receive_from(timeout=5)]
        await database_sync_to_async(evaluation_run)(evaluation.pk)
        while status_and_done(frames[-1]) != ("done", 40):
            frames.append(await socket.receive_from(timeout=5))
        assert await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return frames

    frames = async_to_sync(scenario)()
    assert status_and_done(frames[0]) == ("pending", 0)
    assert frames[0].startswith('\n<div id="eval-progress"') or frames[0].lstrip().startswith(
        '<div id="eval-progress"'
    )
    # the start's frame at once (running, nothing done yet), then at most four a second,
    # then the last word
    assert status_and_done(frames[1]) == ("running", 0)
    assert len(frames) >= 3
    done = [d for _, d in map(status_and_done, frames)]
    assert done == sorted(done)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", ["outsider", "anonymous"])
def test_an_outsider_and_a_visitor_get_a_closed_socket(alice, charlie, arena_agents, who):
    evaluation = create()
    cookie = session_cookie(charlie) if who == "outsider" else None

    async def scenario():
        socket = communicator(evaluation.pk, cookie)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    assert async_to_sync(scenario)() == (False, 4404)

"""Conversations with both sides (docs/conversations.md), on real lanes: bubblewrap
sandboxes, two scripted agents that ask the submitter before they deliver, the team's
page and API in between, then the leak scan and the judge page."""

import datetime as dt
import random
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from agents import policies
from agents.builtins.script import Script, ScriptPolicy, deliver, stdout
from agents.models import Agent
from agents.policies import Action, Observation
from battles.models import Battle, FollowUpReceipt, Question, Run
from battles.parity import conversation_digest
from battles.services import battle_run, task_submit
from battles.services.conversation import FOLLOW_UP_MAX_CHARS, LaneConversation
from judging.services import battle_screen
from judging.visible import judge_visible_texts
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db(transaction=True)  # lanes run in threads

FOLLOW_UP = "Please use a bright shade."


class AskingPolicy(ScriptPolicy):
    """A scripted entrant: asks the submitter one question, then delivers the answer."""

    observes_page = False

    def script(self, observation: Observation) -> Script:
        observation = yield Action("ask_user", {"question": "Which colour should it be?"})
        answer = stdout(observation) or "no answer"
        yield deliver(f"The colour I was given: {answer}")


@pytest.fixture
def askers(monkeypatch, roster):
    """Both built-in slots of a battle drive the asking script (the registry is the
    lane's: agents.services.policy_for)."""
    monkeypatch.setitem(policies.BUILTIN_POLICIES, "idle", AskingPolicy)
    monkeypatch.setitem(policies.BUILTIN_POLICIES, "surveyor", AskingPolicy)


def battle_between(user, slug_a: str, slug_b: str) -> Battle:
    battle = task_submit(user=user, instruction="list the files", rng=random.Random(0))
    a, b = Agent.objects.get(slug=slug_a), Agent.objects.get(slug=slug_b)
    Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
    Run.objects.filter(battle=battle, side="A").update(agent=a)
    Run.objects.filter(battle=battle, side="B").update(agent=b)
    return battle


def run_battle(battle_id: int) -> None:
    try:
        battle_run(battle_id=battle_id)
    finally:
        connection.close()  # the thread's own connection, before the database is dropped


def wait_for(condition, timeout_s: float = 90.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def pending_question(battle: Battle, side: str) -> Question | None:
    return Question.objects.filter(battle=battle, run__side=side, status="pending").first()


def test_a_follow_up_reaches_both_lanes_and_an_answer_only_the_side_that_asked(
    alice, bob, charlie, judge, askers, client
):
    battle = battle_between(alice, "idle", "surveyor")
    lanes = threading.Thread(target=run_battle, args=(battle.pk,))
    lanes.start()
    try:
        # given both sides waiting on their questions (step 0 of each)
        qa = wait_for(lambda: pending_question(battle, "A"))
        qb = wait_for(lambda: pending_question(battle, "B"))
        api = api_client_for(alice)
        url = f"/api/battles/{battle.pk}/follow-ups/"

        # attacks first: another team, a judge not on the team, an oversize text
        assert api_client_for(charlie).post(url, {"text": "hi"}, format="json").status_code == 404
        assert api_client_for(judge).post(url, {"text": "hi"}, format="json").status_code == 404
        answer_url = f"/api/battles/{battle.pk}/questions/{qa.pk}/answer/"
        outsider = api_client_for(charlie).post(answer_url, {"text": "red"}, format="json")
        assert outsider.status_code == 404
        too_long = api.post(url, {"text": "x" * (FOLLOW_UP_MAX_CHARS + 1)}, format="json")
        assert too_long.status_code == 413
        assert too_long.json()["error"]["code"] == "follow_up_too_long"
        assert "at most 2000" in too_long.json()["error"]["message"]
        empty = api.post(url, {"text": "  "}, format="json")
        assert (empty.status_code, empty.json()["error"]["code"]) == (400, "empty_follow_up")

        # when the team sends a follow-up while both sides run
        sent = api.post(url, {"text": FOLLOW_UP}, format="json")
        assert sent.status_code == 201, sent.content
        assert sent.json()["follow_ups"][0]["seq"] == 1
        too_soon = api.post(url, {"text": "again"}, format="json")
        assert too_soon.status_code == 429 and "Retry-After" in too_soon

        # and a teammate answers side A's question on the battle page (htmx)
        client.force_login(bob)
        page = client.post(
            f"/battles/{battle.pk}/questions/{qa.pk}/answer/",
            {"text": "red"},
            HTTP_HX_REQUEST="true",
        )
        assert page.status_code == 200 and "You answered: <q>red</q>" in page.content.decode()
        again = api.post(answer_url, {"text": "blue"}, format="json")
        assert (again.status_code, again.json()["error"]["code"]) == (409, "already_answered")
        qb.refresh_from_db()
        assert qb.status == "pending"  # B still waits: the answer was A's only

        # side A ends; a follow-up after that is refused in words
        wait_for(lambda: Run.objects.filter(battle=battle, side="A", status="ended").exists())
        late = api.post(url, {"text": "one more thing"}, format="json")
        assert late.status_code == 409
        assert late.json()["error"] == {
            "code": "lanes_ended",
            "message": "Side A has ended, so a follow-up could not reach both sides alike; "
            "nothing was sent.",
        }
        answered_b = api.post(
            f"/api/battles/{battle.pk}/questions/{qb.pk}/answer/", {"text": "green"}, format="json"
        )
        assert answered_b.status_code == 200
    finally:
        lanes.join(timeout=120)
    assert not lanes.is_alive()

    # then each side got its own answer, and both got the follow-up at the same point
    a, b = battle.runs.order_by("side")
    assert (a.end_reason, b.end_reason) == ("delivered", "delivered")
    step_a, step_b = a.steps.get(index=0), b.steps.get(index=0)
    assert (step_a.tool, step_a.args) == ("ask_user", {"question": "Which colour should it be?"})
    assert (step_a.result["stdout"], step_b.result["stdout"]) == ("red", "green")
    assert "red" in a.final_message and "green" not in a.final_message
    assert "green" in b.final_message and "red" not in b.final_message
    assert FOLLOW_UP in a.final_message and FOLLOW_UP in b.final_message  # acknowledged
    receipts = FollowUpReceipt.objects.filter(run__battle=battle).order_by("run__side")
    assert [(r.run.side, r.follow_up.seq, r.step_index) for r in receipts] == [
        ("A", 1, 1),
        ("B", 1, 1),
    ]
    expected = conversation_digest("", 1, FOLLOW_UP)
    assert a.conversation_digest == b.conversation_digest == expected
    assert a.input_digest == b.input_digest  # the task's inputs as ever

    # the leak scan reads the question (the agent's text) and the answer, as every step's
    texts = set(judge_visible_texts(battle.runs.prefetch_related("steps").order_by("side")))
    assert ("side A step 0 (ask_user) arguments", "Which colour should it be?") in texts
    assert ("side B step 0 (ask_user) stdout", "green") in texts

    # and the judge sees the exchange of each side, and the follow-up
    battle_screen(battle_id=battle.pk)
    battle.refresh_from_db()
    assert battle.status == "judging"
    client.force_login(judge)
    html = client.get("/judge/").content.decode()
    assert f'hx-post="/judge/{battle.pk}/vote/"' in html
    assert html.count("Asked the submitter:") == 2
    assert html.count("Which colour should it be?") == 2
    assert '<pre class="out" tabindex="0">red</pre>' in html
    assert '<pre class="out" tabindex="0">green</pre>' in html
    assert f"<q>{FOLLOW_UP}</q>" in html
    assert "Side A: before its step 2 · Side B: before its step 2" in html


def test_follow_ups_wait_for_both_sides_to_run(alice, roster):
    battle = battle_between(alice, "rulebook", "idle")
    response = api_client_for(alice).post(
        f"/api/battles/{battle.pk}/follow-ups/", {"text": "hello"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "lanes_not_started"
    assert not battle.follow_ups.exists()


def test_an_unanswered_question_times_out_and_cannot_be_answered_later(alice, roster):
    battle = battle_between(alice, "rulebook", "idle")
    Battle.objects.filter(pk=battle.pk).update(status="running")
    Run.objects.filter(battle=battle).update(status="running", started_at=timezone.now())
    run = battle.runs.get(side="A")
    beats = []

    result = LaneConversation(run).ask(
        step=0, args={"question": "Anything?"}, seconds_left=2.5, beat=lambda: beats.append(1)
    )

    assert not result.ok and result.error == "no answer within 0 s; carry on without one"
    question = Question.objects.get(run=run)
    assert (question.status, question.text, question.step_index) == ("unanswered", "Anything?", 0)
    late = api_client_for(alice).post(
        f"/api/battles/{battle.pk}/questions/{question.pk}/answer/", {"text": "yes"}, format="json"
    )
    assert late.status_code == 409 and late.json()["error"]["code"] == "question_closed"


def test_a_malformed_question_is_a_failed_step_not_a_wait(alice, roster):
    battle = battle_between(alice, "rulebook", "idle")
    Run.objects.filter(battle=battle).update(status="running", started_at=timezone.now())
    run = battle.runs.get(side="A")
    result = LaneConversation(run).ask(step=0, args={"q": 1}, seconds_left=60, beat=lambda: None)
    assert not result.ok and result.error == "ask_user has no argument q"
    assert not Question.objects.exists()


def test_the_team_reads_questions_blind_and_nobody_else_reads_them(alice, charlie, judge, roster):
    battle = battle_between(alice, "rulebook", "idle")
    Battle.objects.filter(pk=battle.pk).update(status="running")
    Run.objects.filter(battle=battle).update(status="running", started_at=timezone.now())
    run = battle.runs.get(side="A")
    Question.objects.create(
        run=run, battle=battle, team=battle.team, step_index=0,
        text="As Rulebook, I ask: which file?",
        deadline_at=timezone.now() + dt.timedelta(seconds=60),
    )  # fmt: skip
    url = f"/api/battles/{battle.pk}/conversation/"

    state = api_client_for(alice).get(url)

    assert state.status_code == 200
    [question] = state.json()["questions"]
    assert (question["side"], question["status"]) == ("A", "pending")
    assert question["question"] == "As [hidden], I ask: which file?"
    assert api_client_for(charlie).get(url).status_code == 404
    assert api_client_for(judge).get(url).status_code == 404


def test_the_battle_page_offers_the_box_to_its_team_and_says_why_it_refuses(
    alice, charlie, roster, client
):
    battle = battle_between(alice, "rulebook", "idle")
    client.force_login(alice)

    page = client.get(f"/battles/{battle.pk}/").content.decode()
    assert 'id="follow-up-form"' in page
    assert f'hx-get="/battles/{battle.pk}/conversation/"' in page  # polled while queued

    refused = client.post(
        f"/battles/{battle.pk}/follow-ups/", {"text": "hello"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "The agents have not started yet: send the follow-up once both sides run." in refused
    assert not battle.follow_ups.exists()

    client.force_login(charlie)
    assert client.get(f"/battles/{battle.pk}/conversation/").status_code == 404
    assert client.post(f"/battles/{battle.pk}/follow-ups/", {"text": "x"}).status_code == 404

    Battle.objects.filter(pk=battle.pk).update(status="decided")
    client.force_login(alice)
    assert 'id="conversation"' not in client.get(f"/battles/{battle.pk}/").content.decode()


def chain(*messages: tuple[int, str]) -> str:
    digest = ""
    for seq, text in messages:
        digest = conversation_digest(digest, seq, text)
    return digest


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(((1, "a"),), id="one missing"),
        pytest.param(((1, "a"), (2, "b"), (3, "c")), id="one extra"),
        pytest.param(((2, "b"), (1, "a")), id="reordered"),
        pytest.param(((1, "a"), (2, "B")), id="altered text"),
        pytest.param(((1, "a"), (3, "b")), id="another number"),
        pytest.param(((1, "ab"), (2, "")), id="text moved across messages"),
    ],
)
def test_the_conversation_digest_tells_any_difference(other):
    assert chain((1, "a"), (2, "b")) == chain((1, "a"), (2, "b"))
    assert chain((1, "a"), (2, "b")) != chain(*other)
    assert chain() == ""

"""The machine judge on live battles (issue 16 point 6): the arena's setting, the verdicts
its scripted judge implies (pairwise in both orders, rubric per criterion per side),
refusal of a judge whose model plays, failure never a tie, idempotence, the view the
judge reads, the enqueue when screening opens a battle, and the backfill command.

The judge is a fake Anthropic server on 127.0.0.1 driven through the real SDK client
(tests/judging/machine_script.py); the database, the services and the command are real.
Waits between attempts are recorded, not slept."""

import hashlib
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from agents.models import Agent, Arena
from arena_site.exceptions import ApplicationError
from arena_site.redis import queue
from battles.models import Battle
from evals import calls
from judging.models import MachineVerdict, Vote
from judging.services import battle_screen
from judging.services.machine import (
    arena_machine_judge_configure,
    battle_machine_judge,
    machine_view,
)
from tests.agents.conftest import (
    PNG_1X1,
    _loopback_allowlisted,  # noqa: F401 - the fake is on loopback
)
from tests.agents.fake_providers import FakeAnthropic
from tests.judging.battle_factories import ended_battle
from tests.judging.machine_script import (
    JUDGE_MODEL,
    KEY,
    KEY_ENV,
    MARK,
    RUBRIC,
    arena_judge_on,
    judge_policy,
    machine_judge_agent,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake_judge(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeAnthropic(api_key=KEY, policy=judge_policy) as fake:
        yield fake


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr(calls, "_sleep", waits.append)
    return waits


@pytest.fixture
def judge_agent(roster, fake_judge):
    return machine_judge_agent(fake_judge.base_url)


def test_pairwise_verdicts_are_the_ones_the_script_implies(alice, judge_agent, fake_judge):
    arena_judge_on(judge_agent)
    cases = {
        "A": ("The answer is 42", "I could not."),
        "B": ("I could not.", "It is 42."),
        "tie": ("no idea", "no clue"),
        "biased": ("BIASED 42", "no"),
    }
    battles = {name: ended_battle(alice, messages=m) for name, m in cases.items()}
    verdicts = {name: battle_machine_judge(battle_id=b.pk) for name, b in battles.items()}

    got = {name: [(v.method, v.status, v.outcome, v.agreement) for v in rows]
           for name, rows in verdicts.items()}  # fmt: skip
    assert got == {
        "A": [("pairwise", "resolved", "A", True)],
        "B": [("pairwise", "resolved", "B", True)],
        "tie": [("pairwise", "resolved", "tie", True)],
        "biased": [("pairwise", "resolved", "tie", False)],  # A first, then B first: a draw
    }
    biased = verdicts["biased"][0]
    assert (biased.ab_winner, biased.ba_winner) == ("A", "B")  # mapped back to A/B
    assert biased.ab_reason == f"{MARK} the first" and len(biased.ab_raw) == len(biased.ba_raw) == 1
    assert json.loads(biased.ab_raw[0]) == {"winner": "A", "reason": f"{MARK} the first"}
    assert {v.calls for rows in verdicts.values() for v in rows} == {2}
    assert len(fake_judge.requests) == 8
    # temperature 0, both orders; the request names no agent of the battle
    body = fake_judge.requests[0].json
    assert body["temperature"] == 0 and body["max_tokens"] == 4096
    prompt = body["messages"][0]["content"][0]["text"]
    assert "<response_a>\nFinal message:\nThe answer is 42\n</response_a>" in prompt
    for agent in Agent.objects.filter(slug__in=["rulebook", "idle"]):
        assert all(name.lower() not in prompt.lower() for name in agent.identity_strings())
    # a verdict decides nothing and is no vote
    for battle in Battle.objects.all():
        assert (battle.status, battle.outcome, battle.decision_source) == ("judging", "", "")
    assert Vote.objects.count() == 0


def test_a_game_that_never_parses_is_failed_never_a_tie(alice, judge_agent, fake_judge, sleeps):
    arena_judge_on(judge_agent)
    battle = ended_battle(alice, messages=("BROKEN 42", "no"))
    [verdict] = battle_machine_judge(battle_id=battle.pk)
    assert (verdict.status, verdict.outcome, verdict.agreement) == ("failed", "", None)
    assert verdict.reason.startswith("the pairwise game failed: ")
    assert "judge reply rejected" in verdict.reason
    assert len(verdict.ab_raw) == 3 and verdict.ab_raw[0] == "Both look fine to me, I suppose."
    assert verdict.calls == 6 and sleeps == [1.0, 2.0, 1.0, 2.0]


def test_the_rubric_scores_each_side_and_the_higher_wins(alice, judge_agent, fake_judge):
    arena = arena_judge_on(judge_agent, pairwise=False, rubric=RUBRIC)
    canonical = json.dumps({"criteria": RUBRIC}, sort_keys=True, separators=(",", ":"))
    assert arena.machine_judge_rubric_sha256 == hashlib.sha256(canonical.encode()).hexdigest()
    won = ended_battle(alice, messages=("it is 42", "no"))
    even = ended_battle(alice, messages=("no", "none"))

    [verdict] = battle_machine_judge(battle_id=won.pk)
    assert (verdict.method, verdict.status, verdict.outcome) == ("rubric", "resolved", "A")
    assert verdict.score_a == 1.0
    assert verdict.score_b == pytest.approx((2 * 1 / 5 + 3 / 3) / 3, abs=1e-15)
    assert verdict.rubric_sha256 == arena.machine_judge_rubric_sha256 and verdict.calls == 4
    assert [(c["criterion"], c["score"], c["scale"], c["weight"], c["status"])
            for c in verdict.criteria["B"]] == [
        ("correctness", 1, 5, 2.0, "ok"), ("clarity", 3, 3, 1.0, "ok")]  # fmt: skip
    assert verdict.criteria["A"][0]["justification"] == f"{MARK} correctness"
    [tie] = battle_machine_judge(battle_id=even.pk)
    assert (tie.outcome, tie.score_a, tie.score_b) == ("tie", tie.score_b, tie.score_a)


def test_a_judge_whose_model_plays_is_refused_with_the_reason(alice, judge_agent, fake_judge):
    arena_judge_on(judge_agent, rubric=RUBRIC)
    Agent.objects.create(arena=Arena.objects.public(), slug="twin", display_name="Twin",
                         kind="scaffold", provider="openai", model_id=JUDGE_MODEL)  # fmt: skip
    battle = ended_battle(alice, a="rulebook", b="twin")
    verdicts = battle_machine_judge(battle_id=battle.pk)
    assert [(v.method, v.status, v.outcome) for v in verdicts] == [
        ("pairwise", "skipped", ""), ("rubric", "skipped", "")]  # fmt: skip
    assert verdicts[0].reason == (
        f"the judge's model {JUDGE_MODEL} is side B's model: a model does not judge a "
        "battle it plays in"
    )
    assert fake_judge.requests == []


def test_judging_again_asks_nothing_and_stores_one_row_per_method(alice, judge_agent, fake_judge):
    arena_judge_on(judge_agent, rubric=RUBRIC)
    battle = ended_battle(alice, messages=("42", "no"))
    assert len(battle_machine_judge(battle_id=battle.pk)) == 2
    asked = len(fake_judge.requests)
    assert battle_machine_judge(battle_id=battle.pk) == []
    assert len(fake_judge.requests) == asked == 2 + 4
    assert MachineVerdict.objects.filter(battle=battle).count() == 2


def test_nothing_without_a_judge_or_on_a_battle_a_judge_may_not_read(alice, judge_agent):
    open_one = ended_battle(alice)
    assert battle_machine_judge(battle_id=open_one.pk) == []  # the arena has no judge
    arena_judge_on(judge_agent)
    for status in ("excluded", "screening", "running", "failed"):
        battle = ended_battle(alice, status=status)
        assert battle_machine_judge(battle_id=battle.pk) == []
    assert MachineVerdict.objects.count() == 0


def test_a_judge_that_cannot_be_called_fails_with_the_reason(alice, judge_agent, monkeypatch):
    arena_judge_on(judge_agent)
    monkeypatch.delenv(KEY_ENV)
    [verdict] = battle_machine_judge(battle_id=ended_battle(alice).pk)
    assert verdict.status == "failed" and verdict.outcome == ""
    assert (
        verdict.reason.startswith("the judge could not be called: ") and KEY_ENV in verdict.reason
    )


def test_the_judge_reads_what_a_human_judge_reads(alice, judge_agent, settings):
    files = [{"name": "notes.txt", "size": 17}, {"name": "rulebook.png", "size": len(PNG_1X1)}]
    battle = ended_battle(alice, messages=("Done by rulebook: 42", "no"), files=(files, []))
    battle.task.start_url = "https://example.org/"
    battle.task.save(update_fields=["start_url"])
    folder = (
        Path(settings.PRIVATE_MEDIA_ROOT) / "deliveries" / f"run-{battle.runs.get(side='A').pk}"
    )
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_bytes(b"the answer is 42\n")
    (folder / "rulebook.png").write_bytes(PNG_1X1)

    view = machine_view(battle)
    assert view.task == "what is 6*7\nStart URL: https://example.org/"
    assert view.side_a == (
        "Final message:\nDone by [hidden]: 42\n\n"
        'Delivered file "notes.txt":\nthe answer is 42\n\n\n'
        'Delivered file "file-2.png": an image (not shown to a text judge).'
    )
    assert view.side_b == "Final message:\nno"


def test_configuring_refuses_what_cannot_judge_with_what_to_change(roster, judge_agent):
    arena = Arena.objects.public()
    cases = [
        (dict(judge=Agent.objects.get(slug="rulebook"), pairwise=True, rubric=None),
         "invalid_machine_judge", "rulebook is a built-in offline agent, not a model"),
        (dict(judge=judge_agent, pairwise=False, rubric=None), "no_machine_method",
         "turn on pairwise judging or give rubric criteria"),
        (dict(judge=judge_agent, pairwise=True, rubric=[{**RUBRIC[0], "scael": 3}]),
         "invalid_rubric",
         "machine judge rubric of arena public: criterion 'correctness': field 'scael': "
         "unknown field"),
        (dict(judge=judge_agent, pairwise=True, rubric=[{**RUBRIC[0], "scale": 0}]),
         "invalid_rubric", "field 'scale': must be a whole number ≥ 1, got 0"),
    ]  # fmt: skip
    for kwargs, code, says in cases:
        with pytest.raises(ApplicationError) as refused:
            arena_machine_judge_configure(arena=arena, **kwargs)
        assert refused.value.code == code and says in refused.value.message, refused.value.message
    arena.refresh_from_db()
    assert arena.machine_judge is None


def test_the_admin_form_says_what_to_fix_and_saves_the_rubric_hash(roster, judge_agent):
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser("root", password="x")
    client = Client()
    client.force_login(admin)
    arena = Arena.objects.public()
    url = f"/admin/agents/arena/{arena.pk}/change/"
    form = {"slug": "public", "name": "Public arena", "team": "", "machine_judge": judge_agent.pk,
            "machine_judge_pairwise": "on"}  # fmt: skip
    bad = client.post(url, {**form, "machine_judge_rubric": json.dumps([{"name": "x"}])})
    assert bad.status_code == 200
    assert "criterion &#x27;x&#x27;: field &#x27;description&#x27;: missing" in bad.text
    good = client.post(url, {**form, "machine_judge_rubric": json.dumps(RUBRIC)})
    assert good.status_code == 302, good.text[:2000]
    arena.refresh_from_db()
    canonical = json.dumps({"criteria": RUBRIC}, sort_keys=True, separators=(",", ":"))
    assert arena.machine_judge_id == judge_agent.pk and arena.machine_judge_pairwise
    assert arena.machine_judge_rubric_sha256 == hashlib.sha256(canonical.encode()).hexdigest()


def test_screening_enqueues_the_judge_after_commit_only_when_it_opens_the_battle(
    alice, judge_agent, django_capture_on_commit_callbacks
):
    evals = queue("evals")
    off = ended_battle(alice, status=Battle.Status.SCREENING)
    with django_capture_on_commit_callbacks(execute=True):
        battle_screen(battle_id=off.pk)
    assert evals.count == 0  # no machine judge yet
    arena_judge_on(judge_agent)
    opened = ended_battle(alice, status=Battle.Status.SCREENING)
    excluded = ended_battle(alice, status=Battle.Status.SCREENING, budgets=(20, 30))
    with django_capture_on_commit_callbacks(execute=True):
        battle_screen(battle_id=opened.pk)
        battle_screen(battle_id=excluded.pk)
    assert Battle.objects.get(pk=excluded.pk).status == "excluded"
    assert [(job.func_name, job.args) for job in evals.jobs] == [
        ("judging.jobs.battle_machine_judge", (opened.pk,))
    ]


def test_the_backfill_judges_what_has_no_verdict_and_reports(alice, judge_agent, fake_judge):
    arena_judge_on(judge_agent)
    open_one = ended_battle(alice, messages=("42", "no"))
    decided = ended_battle(alice, messages=("no", "42"))
    Battle.objects.filter(pk=decided.pk).update(
        status="decided", outcome="B", decision_source="crowd"
    )
    out = _call("machine_judge", "--arena", "public", "--battles", "decided")
    assert out == "verdicts stored: 1 resolved\n"
    assert list(MachineVerdict.objects.values_list("battle_id", "outcome")) == [(decided.pk, "B")]
    assert _call("machine_judge") == "verdicts stored: 1 resolved\n"  # the open one now
    assert MachineVerdict.objects.get(battle=open_one).outcome == "A"
    assert _call("machine_judge") == "verdicts stored: none\n"
    report = json.loads(_call("machine_judge", "--report", "--json"))
    overall = report["judges"][0]["overall"]
    assert (report["judges"][0]["judge_model"], overall["n"], overall["agreed"]) == (
        JUDGE_MODEL, 1, 1)  # fmt: skip
    assert "people \\ machine" in _call("machine_judge", "--report")
    with pytest.raises(CommandError, match="No arena 'nope' \\(arenas: public\\)"):
        _call("machine_judge", "--arena", "nope")


def _call(*args) -> str:
    from io import StringIO

    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue()

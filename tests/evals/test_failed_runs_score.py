"""A run its candidate failed counts 0 on its task's metrics; a failure that is not the
candidate's leaves the run out (evals.scorer_selectors). Without the first rule an
agent that fails the tasks it would get wrong looks better on the mean than one that
answers them wrong."""

import json
import re
from contextlib import ExitStack
from pathlib import Path

import jsonschema
import pytest
from django.core.management import call_command
from django.test import Client

from battles.models import Run
from evals import calls, scorer_selectors, selectors
from evals.models import EvalRun
from tests.agents.conftest import _loopback_allowlisted  # noqa: F401 - the fakes are on loopback
from tests.agents.fake_providers import FakeOpenAI, HttpError, text
from tests.evals.conftest import scaffolds_on
from tests.evals.scripted import KEY, last_user_text

pytestmark = pytest.mark.django_db

SCHEMA = json.loads((Path(selectors.__file__).parent / "record.schema.json").read_text())

SUITE = b"""tasks:
  - id: sum
    prompt: What is 17 * 23 + 4?
    evaluation: {type: exact, expected: "395"}
  - id: mult
    prompt: What is 6 * 7?
    evaluation: {type: exact, expected: "42"}
  - id: cat
    prompt: Where did the cat sit?
    scorers:
      - {type: includes, text: mat}
"""

RIGHT = {"What is 17": "395", "What is 6": "42", "Where did": "On the mat."}


def candidate(name: str):
    """guesser answers 'sum' wrong; dodger's endpoint refuses 'sum' (a 400: no retry).
    Both answer the rest right."""

    def answer(request: dict):
        prompt = last_user_text(request)
        start = next(s for s in RIGHT if prompt.startswith(s))
        if start == "What is 17":
            if name == "dodger":
                return HttpError(400, message="the model declines")
            return text("394")
        return text(RIGHT[start])

    return answer


@pytest.fixture
def agents(monkeypatch, alice):
    monkeypatch.setenv("EVAL_TEST_API_KEY", KEY)
    monkeypatch.setattr(calls, "_sleep", lambda s: None)
    with ExitStack() as stack:
        fakes = {
            name: stack.enter_context(FakeOpenAI(api_key=KEY, policy=candidate(name)))
            for name in ("guesser", "dodger")
        }
        scaffolds_on(fakes)
        yield fakes


def run_both(tmp_path) -> dict:
    """Both candidates on the suite through ``manage.py eval run``; the record."""
    suite, out = tmp_path / "suite.yaml", tmp_path / "run.json"
    suite.write_bytes(SUITE)
    with pytest.raises(SystemExit):  # a failed run: the record is incomplete
        call_command(
            "eval", "run", "--team", "Acme", "--suite", str(suite), "--agent", "guesser",
            "--agent", "dodger", "--output", str(out),
        )  # fmt: skip
    return json.loads(out.read_text())


def test_a_run_the_candidate_failed_counts_zero(alice, agents, tmp_path):
    record = run_both(tmp_path)
    jsonschema.validate(record, SCHEMA)
    failed = EvalRun.objects.get(agent__slug="dodger", task_id="sum")
    assert failed.status == EvalRun.Status.ERROR and failed.scores == {}

    stats = record["statistics"]["scorers"]["agents"]
    # both got one of the two exact tasks: the same mean, whether wrong or refused
    assert stats["guesser"]["exact"] == {
        "mean": 0.5, "stderr": 0.5, "tasks": 2, "unscored_tasks": 0, "epochs_scored": 2,
        "failed_counted_zero": 0,
    }  # fmt: skip
    assert stats["dodger"]["exact"] == {
        "mean": 0.5, "stderr": 0.5, "tasks": 2, "unscored_tasks": 0, "epochs_scored": 2,
        "failed_counted_zero": 1,
    }  # fmt: skip
    assert stats["dodger"]["includes"]["mean"] == 1.0
    # the older exact-match rate: the same rule
    assert record["statistics"]["exact_match"] == {"guesser": 0.5, "dodger": 0.5}

    page = Client()
    page.force_login(alice)
    html = page.get(f"/evaluations/{record['run']['evaluation_id']}/").content.decode()
    row = re.search(r'<tr data-agent="dodger" data-metric="exact">(.*?)</tr>', html).group(1)
    assert re.findall(r"<td>(.*?)</td>", row)[-1] == "2 (1 failed, counted 0)"


def test_whose_failure_it_was():
    lane = Run(pk=1, end_reason=Run.EndReason.ERROR, agent_fault=True)
    assert scorer_selectors.candidate_failed(EvalRun(status="error"))  # a chat call
    assert scorer_selectors.candidate_failed(EvalRun(status="error", lane=lane))
    lane.agent_fault = False  # the sandbox would not start, the worker died ...
    assert not scorer_selectors.candidate_failed(EvalRun(status="error", lane=lane))
    lane.end_reason = Run.EndReason.DELIVERED  # the hidden tests could not be judged
    assert not scorer_selectors.candidate_failed(EvalRun(status="error", lane=lane))
    assert not scorer_selectors.candidate_failed(EvalRun(status="done"))


def test_an_arena_failure_leaves_the_run_out(alice, agents, tmp_path):
    """The same evaluation with dodger's failed run turned into the arena's failure of
    its lane: that task is unscored for dodger, not 0."""
    run_both(tmp_path)
    failed = EvalRun.objects.get(agent__slug="dodger", task_id="sum")
    failed.lane = Run.objects.create(
        agent=failed.agent, for_evaluation=True, side="A", step_budget=1, wall_budget_s=1,
        status=Run.Status.ENDED, end_reason=Run.EndReason.ERROR, agent_fault=False,
    )  # fmt: skip
    failed.save(update_fields=["lane"])
    record = selectors.evaluation_record(failed.evaluation)
    figures = record["statistics"]["scorers"]["agents"]["dodger"]["exact"]
    assert (figures["mean"], figures["tasks"], figures["unscored_tasks"]) == (1.0, 1, 1)
    assert figures["failed_counted_zero"] == 0
    assert record["statistics"]["exact_match"]["dodger"] == 1.0

"""The bundled sample suites (examples/suites) run end to end with no provider key set,
through the real code path (``manage.py eval run``: the services, real bubblewrap
sandboxes, the real SDK clients):

- desktop-files.yaml with the built-in agents (rulebook, surveyor, idle), scored by
  each task's success command in the lane's final state;
- qa-exact.yaml with a model on a local OpenAI-compatible server, entered as a team
  entrant is (``POST /api/agents/``, approved by an admin), scored by exact match, and
  judged by a rubric judge that is a model on another local server;
- repo-fix.yaml with the same kind of local model offered the shell, graded by the
  repository's tests.

The "local servers" are tests.agents.fake_providers.FakeOpenAI on 127.0.0.1 (the only
address anything here calls); docs/local-models.md says how to run a real one."""

import json
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.urls import reverse

from agents.models import Agent, Arena
from agents.registration import agent_approve
from agents.services import roster_install_builtins
from evals.keyless import samples_dir
from tests.agents.fake_providers import FakeOpenAI, text, tool_call
from tests.conftest import api_client_for
from tests.evals.scripted import first_user_text, last_user_text

pytestmark = pytest.mark.django_db(transaction=True)  # each lane has its own connection

PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")
ANSWERS = {"capital of France": "Paris", "17 + 25": "42", '"arena" backwards': "anera"}
RUBRIC = b"""criteria:
  - {name: brevity, description: Is the reply only the answer?, scale: 1}
"""


@pytest.fixture(autouse=True)
def no_provider_key(monkeypatch):
    for name in PROVIDER_KEYS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def shell_only(settings):
    """The lanes without the desktop (no Chromium): the same lane, seconds cheaper."""
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)


def sample(name: str) -> str:
    return str(samples_dir() / name)


def run(tmp_path: Path, suite: str, *args: str) -> dict:
    out = tmp_path / "record.json"
    try:
        call_command("eval", "run", "--team", "Acme", "--suite", suite, *args,
                     "--output", str(out))  # fmt: skip
    except SystemExit as exit_:  # exit 1: something failed (the record is still written)
        assert exit_.code == 1
    return json.loads(out.read_text())


def register_local(owner, admin_user, *, slug: str, base_url: str) -> Agent:
    """A team's model on a local OpenAI-compatible server, entered through the API as
    any team entrant is (no provider key), then approved."""
    body = {
        "kind": "scaffold", "display_name": slug.title(), "slug": slug,
        "provider": "openai_compatible", "model_id": f"{slug}-7b",
        "params": {"base_url": base_url, "max_tokens": 256},
    }  # fmt: skip
    answer = api_client_for(owner).post(reverse("api:agents"), body, format="json")
    assert answer.status_code == 201, answer.content
    agent = Agent.objects.get(slug=slug)
    return agent_approve(agent=agent, actor=admin_user, note="A local model.")


def test_the_desktop_sample_runs_the_built_ins_with_no_key(alice, shell_only, tmp_path):
    roster_install_builtins(arena=Arena.objects.public())

    record = run(
        tmp_path, sample("desktop-files.yaml"),
        "--agent", "rulebook", "--agent", "surveyor", "--agent", "idle", "--desktop-lanes", "1",
    )  # fmt: skip

    assert record["run"]["failed_runs"] == 0 and record["run"]["complete"] is True
    scores = {(r["agent"], r["task_id"]): r["success"]["score"] for r in record["results"]}
    assert scores == {
        ("rulebook", "note"): 1.0, ("rulebook", "todo"): 1.0, ("rulebook", "poem"): 0.0,
        ("surveyor", "note"): 0.0, ("surveyor", "todo"): 0.0, ("surveyor", "poem"): 0.0,
        ("idle", "note"): 0.0, ("idle", "todo"): 0.0, ("idle", "poem"): 0.0,
    }  # fmt: skip


def answer(request: dict):
    question = last_user_text(request)
    return text(next(a for q, a in ANSWERS.items() if q in question))


def judge(request: dict):
    reply = first_user_text(request).split("AGENT RESPONSE:\n", 1)[1].split("\n\n", 1)[0]
    score = 1 if reply.strip() in ANSWERS.values() else 0
    return text(json.dumps({"score": score, "justification": "only the answer"}))


def test_the_question_sample_runs_on_a_local_model_judged_by_another(alice, admin_user, tmp_path):
    rubric = tmp_path / "brevity.yaml"
    rubric.write_bytes(RUBRIC)
    with FakeOpenAI(policy=answer) as model, FakeOpenAI(policy=judge) as judge_server:
        register_local(alice, admin_user, slug="local-qwen", base_url=model.base_url)
        register_local(alice, admin_user, slug="local-judge", base_url=judge_server.base_url)
        judge_url = judge_server.base_url

        record = run(
            tmp_path, sample("qa-exact.yaml"), "--agent", "local-qwen",
            "--rubric", str(rubric), "--judge", "local-judge",
        )  # fmt: skip

    assert record["run"]["complete"] is True
    assert record["run"]["judge"]["base_url"] == judge_url
    rows = [
        (r["task_id"], r["output"], r["exact_score"], r["weighted_score"])
        for r in record["results"]
    ]
    assert rows == [("capital", "Paris", 1.0, 1.0), ("sum", "42", 1.0, 1.0),
                    ("spell", "anera", 1.0, 1.0)]  # fmt: skip
    assert record["statistics"]["exact_match"]["local-qwen"] == 1.0
    # both servers were called, with the placeholder key of a server that needs none
    assert len(model.requests) == 3 and len(judge_server.requests) == 3
    assert {r.headers["authorization"] for r in model.requests + judge_server.requests} == {
        "Bearer not-needed"
    }


FIX = "cd /work/repo && sed -i '0,/a - b/s//a + b/' calc.py"


def fixer(request: dict):
    if not any(m["role"] == "assistant" for m in request["messages"]):
        return tool_call("shell", {"command": FIX})
    return tool_call("deliver", {"message": "add adds now"})


def test_the_repository_sample_runs_on_a_local_model_with_the_shell(
    alice, admin_user, tmp_path, settings
):
    assert Path(django_settings.BASE_DIR, "examples/suites/calc.tar.gz").exists()
    with FakeOpenAI(policy=fixer) as model:
        register_local(alice, admin_user, slug="local-coder", base_url=model.base_url)

        record = run(
            tmp_path, sample("repo-fix.yaml"), "--agent", "local-coder",
            "--desktop-lanes", "1", "--step-budget", "5",
        )  # fmt: skip

    assert record["run"]["complete"] is True and record["run"]["failed_runs"] == 0
    (result,) = record["results"]
    assert (result["task_id"], result["coding"]["functional"]) == ("fix-add", 1.0)
    assert result["coding"]["composite"] == 1.0

"""The "New evaluation" form with no provider key (issue 37, point 3): it offers the
built-in agents as candidates with what each can run, says which judges cannot be
called here and how to fix it, refuses such a judge before anything is stored, and lets
a newcomer pick a bundled sample suite (examples/suites) instead of writing one. Charlie's
team's agents are never offered to alice, and a sample name from outside the list is
refused."""

import hashlib
import re

import django_rq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from accounts.models import Team
from agents.models import Agent, Arena
from agents.services import roster_install_builtins
from evals.keyless import SAMPLES, sample_files
from evals.models import EvalRepo, Evaluation

pytestmark = pytest.mark.django_db

PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")


@pytest.fixture
def keyless(monkeypatch, alice, charlie):
    """The public arena's built-ins, a cloud model with no key set, and an agent of
    charlie's team; no provider key in the environment."""
    for name in PROVIDER_KEYS:
        monkeypatch.delenv(name, raising=False)
    arena = Arena.objects.public()
    roster_install_builtins(arena=arena)
    Agent.objects.create(
        arena=arena, slug="cloud", display_name="Cloud", kind="scaffold",
        provider="anthropic", model_id="claude-test",
    )  # fmt: skip
    Agent.objects.create(
        arena=arena, slug="umbrella-secret", display_name="Umbrella secret", kind="scaffold",
        provider="openai_compatible", model_id="theirs", team=Team.objects.get(name="Umbrella"),
        params={"base_url": "http://127.0.0.1:9/v1"},
    )  # fmt: skip
    return arena


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip().replace("&#x27;", "'")


def options(html: str, name: str) -> list[tuple[str, str]]:
    if name == "agents":
        found = re.findall(
            r'<input type="checkbox" name="agents" value="([^"]*)"[^>]*>\s*([^<]*)</label>', html
        )
        return [(v, " ".join(t.split())) for v, t in found]
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S).group(1)
    return [
        (v, " ".join(t.split())) for v, t in re.findall(r'value="([^"]*)"[^>]*>([^<]*)<', select)
    ]


def test_the_form_offers_the_built_ins_and_says_no_judge_can_be_called(alice, keyless):
    html = signed_in(alice).get("/evaluations/").content.decode()

    assert options(html, "agents") == [
        ("cloud", "Cloud (cloud) · model claude-test · runs chat, desktop, repository tasks"),
        ("idle", "Idle baseline (idle) · built-in, needs no key · runs desktop tasks"),
        ("rulebook", "Rulebook (rulebook) · built-in, needs no key · runs desktop tasks"),
        ("surveyor", "Surveyor (surveyor) · built-in, needs no key · runs desktop tasks"),
    ]
    assert options(html, "judge") == [
        ("", "No judge: exact match and success commands only (needs no key)"),
        (
            "cloud",
            "Cloud (cloud) · model claude-test · cannot be called here: no usable provider key",
        ),
    ]
    assert options(html, "sample") == [("", "None: I upload my own suite")] + [
        (s.key, s.label) for s in SAMPLES
    ]
    note = re.search(r'<p[^>]*id="judge-keyless"[^>]*>(.*?)</p>', html, re.S).group(1)
    assert text_of(note).startswith(
        "No model judge can be called here yet (the models listed lack a provider key), so "
        "rubric scores, pairwise judging and tournaments are not available."
    )
    assert '<a href="/my-agents/">register a model agent</a>' in note
    assert "docs/local-models.md" in note
    assert 'id="tournament-keyless"' in html
    assert "umbrella-secret" not in html  # another team's agent is never offered


def test_a_bundled_desktop_suite_with_the_built_ins_needs_no_file_and_no_judge(
    alice, keyless, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(alice).post(
            "/evaluations/",
            {"sample": "desktop-files", "agents": ["rulebook", "idle"], "max_tokens": "4096"},
        )

    evaluation = Evaluation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/evaluations/{evaluation.pk}/"
    assert evaluation.suite.name == "desktop-files.yaml"
    assert evaluation.suite.source == sample_files("desktop-files").suite
    assert [t["id"] for t in evaluation.suite.tasks] == ["note", "todo", "poem"]
    assert [c.agent.slug for c in evaluation.candidates.order_by("position")] == [
        "rulebook", "idle",
    ]  # fmt: skip
    assert evaluation.judge is None and evaluation.settings["desktop"]["lanes"] == 2
    jobs = django_rq.get_queue("evals").jobs
    assert [(j.func_name, j.args) for j in jobs] == [
        ("evals.jobs.evaluation_run", (evaluation.pk,))
    ]


def refused(client: Client, data: dict) -> str:
    response = client.post("/evaluations/", data)
    assert response.status_code == 400
    assert Evaluation.objects.count() == 0 and Team.objects.get(name="Acme").suites.count() == 0
    assert django_rq.get_queue("evals").count == 0
    return text_of(response.content.decode())


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"sample": "qa-exact", "agents": ["rulebook"]},
         "agent 'rulebook' cannot answer chat task 'capital': it is not a model agent (kind "
         "builtin); chat tasks need a provider and a model"),
        ({"sample": "repo-fix", "agents": ["rulebook"]},
         "agent 'rulebook' cannot work on repo task 'fix-add': agents of kind 'builtin' do not "
         "work on repositories"),
        ({"agents": ["rulebook"]},
         "Upload a suite file or choose a bundled sample suite above (one of the two)."),
        ({"sample": "desktop-files", "agents": ["rulebook"],
          "suite": SimpleUploadedFile("s.yaml", b"- {id: t1, prompt: x}\n")},
         "Choose either a bundled sample suite or a file of your own, not both."),
        ({"sample": "../../etc/passwd", "agents": ["rulebook"]},
         "Select a valid choice. ../../etc/passwd is not one of the available choices."),
        ({"sample": "desktop-files", "agents": ["rulebook", "idle"], "judge": "cloud",
          "pairwise": "on"},
         "The judge cloud cannot be called here: ANTHROPIC_API_KEY is not set, so this agent "
         "could not call anthropic"),
        ({"sample": "desktop-files", "agents": ["umbrella-secret"]},
         "Select a valid choice. umbrella-secret is not one of the available choices."),
    ],
)  # fmt: skip
def test_what_cannot_run_without_a_key_is_refused_saying_why(alice, keyless, data, says):
    assert says in refused(signed_in(alice), {"max_tokens": "4096", **data})


def test_a_judge_on_a_local_server_or_with_its_key_can_be_called(alice, keyless, monkeypatch):
    Agent.objects.create(
        arena=keyless, slug="local", display_name="Local", kind="scaffold",
        provider="openai_compatible", model_id="qwen", params={"base_url": "http://127.0.0.1:9/v1"},
    )  # fmt: skip
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-sent")
    html = signed_in(alice).get("/evaluations/").content.decode()

    assert options(html, "judge")[1:] == [
        ("cloud", "Cloud (cloud) · model claude-test"),
        ("local", "Local (local) · model qwen"),
    ]
    assert "register a model agent" not in html and 'id="tournament-keyless"' not in html


def test_the_bundled_repository_suite_brings_its_repository(alice, keyless):
    Agent.objects.create(
        arena=keyless, slug="local", display_name="Local", kind="scaffold",
        provider="openai_compatible", model_id="qwen", tool_set=["shell", "deliver"],
        params={"base_url": "http://127.0.0.1:9/v1"},
    )  # fmt: skip
    response = signed_in(alice).post(
        "/evaluations/", {"sample": "repo-fix", "agents": ["local"], "max_tokens": "4096"}
    )

    assert response.status_code == 302, text_of(response.content.decode())[:2000]
    repo = EvalRepo.objects.get()
    assert repo.task_id == "fix-add"
    source = repo.source_task.repo
    assert (source.origin, source.time_limit_s) == ("tarball", 120)
    calc = sample_files("repo-fix").repos["calc.tar.gz"]
    assert source.upload_sha256 == hashlib.sha256(calc).hexdigest()


def test_a_coding_battle_with_only_the_built_ins_says_what_to_do(api, alice, keyless):
    calc = sample_files("repo-fix").repos["calc.tar.gz"]
    response = api(alice).post(
        "/api/tasks/",
        {"instruction": "Make the tests pass.", "success_cmd": "python3 -m pytest -q",
         "repo_upload": SimpleUploadedFile("calc.tar.gz", calc)},
        format="multipart",
    )  # fmt: skip

    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "roster_too_small"
    assert error["message"] == (
        "The arena has fewer than two coding agents your team did not enter; an admin must "
        "add some. A coding agent works on a repository: the built-in agents do not, and the "
        "bundled Claude Code, Codex and Aider run only once an admin enters them with the "
        "arena's provider key (docs/coding.md). A model agent offered the shell works too, and "
        "one on a local OpenAI-compatible server needs no key (docs/local-models.md)."
    )

"""What an evaluation can run without a provider key, said in words for the form: the
bundled sample suites (``examples/suites``), what each candidate can run, and whether
each model judge can be called here (a key, the team's key, or its own server).

Reads only: nothing here writes, and no call leaves the host (a judge's readiness is
judged from its settings and this process's environment, as ``agents.services``
checks an agent when it is saved)."""

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agents.models import Agent
from agents.services import agent_keys_check
from arena_site.exceptions import ApplicationError
from evals import suites
from evals.services.creation import lane_refusal, repo_refusal

LOCAL_MODELS_DOC = "docs/local-models.md"
# Where a person enters a model agent (its key, or its local server's URL).
AGENTS_PAGE = "/my-agents/"


@dataclass(frozen=True)
class Sample:
    key: str
    file: str
    label: str


SAMPLES = (
    Sample(
        "desktop-files",
        "desktop-files.yaml",
        "Desktop files: 3 desktop tasks checked by a command (the built-in agents run it; no key)",
    ),
    Sample(
        "qa-exact",
        "qa-exact.yaml",
        "Questions with exact answers: 3 chat tasks, no judge (needs a model agent; a local "
        "server needs no key)",
    ),
    Sample(
        "repo-fix",
        "repo-fix.yaml",
        "Fix a failing test: 1 repository task graded by its tests (needs an agent that "
        "works on repositories)",
    ),
)
SAMPLE_CHOICES = [(s.key, s.label) for s in SAMPLES]


def samples_dir() -> Path:
    return Path(settings.BASE_DIR) / "examples" / "suites"


@dataclass(frozen=True)
class SampleFiles:
    name: str
    suite: bytes
    repos: dict[str, bytes]


def sample_files(key: str) -> SampleFiles:
    """A bundled suite's bytes and the repositories its repo tasks name beside it.
    Raises ``ApplicationError`` (404) for a key that is not a bundled suite."""
    sample = next((s for s in SAMPLES if s.key == key), None)
    if sample is None:
        raise ApplicationError(
            f"no bundled suite {key!r}; choose one of {', '.join(s.key for s in SAMPLES)}",
            code="unknown_sample",
            status=404,
        )
    root = samples_dir()
    data = (root / sample.file).read_bytes()
    tasks = suites.parse_suite(data, name=sample.file).tasks
    paths = dict.fromkeys(t.repo for t in tasks if t.kind == "repo" and "://" not in t.repo)
    return SampleFiles(
        name=sample.file, suite=data, repos={path: (root / path).read_bytes() for path in paths}
    )


def candidate_label(agent: Agent) -> str:
    """The agent as the form lists it: its name, slug and what kinds of task it runs."""
    runs = []
    if agent.kind == Agent.Kind.SCAFFOLD and agent.model_id:
        runs.append("chat")
    if lane_refusal(agent) is None:
        runs.append("desktop")
    if repo_refusal(agent) is None:
        runs.append("repository")
    what = {
        Agent.Kind.BUILTIN: "built-in, needs no key",
        Agent.Kind.SCAFFOLD: f"model {agent.model_id}",
        Agent.Kind.REMOTE: "your endpoint",
        Agent.Kind.CLI: "coding CLI",
    }.get(agent.kind, agent.kind)
    tasks = ", ".join(runs) if runs else "no task kind"
    return f"{agent.display_name} ({agent.slug}) · {what} · runs {tasks} tasks"


def judge_unready(agent: Agent) -> str | None:
    """Why this model agent cannot be called from here, in words with the fix; None
    when it can (the team's own key, a key variable that is set, or its own server that
    needs none). Whether the key is right shows only when it is called."""
    if agent.provider_key_encrypted:
        return None
    try:
        agent_keys_check(kind=agent.kind, provider=agent.provider, params=agent.params)
    except ApplicationError as refused:
        return refused.message
    return None


def judge_label(agent: Agent, unready: str | None) -> str:
    base = f"{agent.display_name} ({agent.slug}) · model {agent.model_id}"
    if unready is None:
        return base
    return f"{base} · cannot be called here: no usable provider key"

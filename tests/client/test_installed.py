"""Issue 40's "done when" for the client: installed into a FRESH virtual environment
(`python -m venv`, then `pip install ./client` as a lab would), it runs a one-prompt
`arena run` and an evaluation (`arena eval start` then `arena eval watch` to the end,
then `arena eval record`) against the arena as `make run` starts it (tests/makerun.py),
with a token made by `manage.py arena_token`. The candidates and the judge are scaffold
agents on fake OpenAI-compatible servers on 127.0.0.1 (what docs/local-models.md calls a
local model); nothing leaves the machine."""

import json
import os
import shutil
import subprocess
import sys
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
from django.conf import settings

from tests.agents.conftest import LOOPBACK
from tests.agents.fake_providers import FakeOpenAI
from tests.client.conftest import echo_policy, judge_policy
from tests.makerun import BANNER, ROOT, MakeRun

STEP_S = 240  # one pip install, one evaluation: generous for a loaded CI machine

IGNORED = ("build", "*.egg-info", "__pycache__")

SUITE = """tasks:
  - {id: capital, prompt: "What is the capital of France?"}
  - {id: sum, prompt: "What is 2+2?", evaluation: {type: exact, expected: "4"}}
"""


@pytest.fixture
def installed_client(tmp_path) -> Path:
    """The `arena` script of a fresh venv with ./client installed (pip as configured on
    this machine: its package index and local wheels)."""
    # a copy: setuptools builds in the source folder (build/, *.egg-info), not in the repo
    source = shutil.copytree(
        ROOT / "client", tmp_path / "client", ignore=shutil.ignore_patterns(*IGNORED)
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=STEP_S)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(source)],
        capture_output=True,
        text=True,
        timeout=STEP_S,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv / "bin" / "arena"


@pytest.fixture
def fakes():
    with ExitStack() as stack:
        yield {
            "echo": stack.enter_context(FakeOpenAI(policy=echo_policy("echo"))),
            "parrot": stack.enter_context(FakeOpenAI(policy=echo_policy("parrot"))),
            "judge": stack.enter_context(FakeOpenAI(policy=judge_policy)),
        }


@pytest.fixture
def make_run(tmp_path, sandbox_root):
    run = MakeRun(
        tmp_path,
        redis_url=settings.REDIS_URL,
        extra={
            "ARENA_SANDBOX_ROOT": str(sandbox_root),
            "ARENA_CACHE_PREFIX": f"arena-client-{uuid.uuid4().hex}",
            "ARENA_INTERNAL_ALLOWLIST": LOOPBACK,  # the fake model servers
            "ARENA_SANDBOX_DESKTOP": "false",
        },
    )
    yield run
    run.kill_everything()


def manage(run: MakeRun, *argv: str) -> str:
    """manage.py on the running arena's database (its data dir's SQLite, as make run's)."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(ARENA_DATA_DIR=str(run.data_dir), REDIS_URL=settings.REDIS_URL)
    done = subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


ENTER_AGENTS = """
from agents.models import Agent, Arena
for slug, base_url in AGENTS.items():
    Agent.objects.create(arena=Arena.objects.public(), slug=slug, display_name=slug.title(),
                         kind="scaffold", provider="openai_compatible",
                         model_id=slug + "-model", params={"base_url": base_url})
"""


def test_the_installed_client_runs_a_prompt_and_an_evaluation_against_make_run(
    make_run, installed_client, fakes, tmp_path
):
    make_run.wait_for(BANNER)
    agents = {slug: fake.base_url for slug, fake in fakes.items()}
    manage(make_run, "shell", "-c", f"AGENTS = {agents!r}\n{ENTER_AGENTS}")
    token = manage(make_run, "arena_token", "--user", "demo").strip()
    assert token.startswith("arena_")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ARENA_URL": f"http://127.0.0.1:{make_run.port}",
        "ARENA_TOKEN": token,
    }

    def arena(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(installed_client), *argv],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=STEP_S + 30,
        )

    ran = arena("run", "--agent", "echo", "--prompt", "Name three primes.", "--timeout", "240")
    assert (ran.returncode, ran.stdout) == (0, "[echo] Name three primes.\n"), ran.stderr
    assert token not in ran.stdout + ran.stderr

    (tmp_path / "suite.yaml").write_text(SUITE)
    started = arena(
        "eval", "start", "--suite", "suite.yaml", "--agent", "echo", "--agent", "parrot",
        "--judge", "judge", "--pairwise",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    evaluation_id = started.stdout.strip()
    assert evaluation_id.isdigit(), started.stdout

    watched = arena("eval", "watch", evaluation_id, "--timeout", str(STEP_S))
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout == (
        f"evaluation {evaluation_id} done: Answers 4/4, Pair judgements 2/2\n"
    )
    assert "100%" in watched.stderr  # the bar reached its end

    recorded = arena("eval", "record", evaluation_id, "-o", "run.json")
    assert recorded.returncode == 0, recorded.stderr
    record = json.loads((tmp_path / "run.json").read_text())
    replies = {(r["task_id"], r["agent"]): r["output"] for r in record["results"]}
    assert replies == {
        ("capital", "echo"): "[echo] What is the capital of France?",
        ("capital", "parrot"): "[parrot] What is the capital of France?",
        ("sum", "echo"): "[echo] What is 2+2?",
        ("sum", "parrot"): "[parrot] What is 2+2?",
    }

    refused = arena("--token", "arena_wrong", "run", "--agent", "echo", "--prompt", "x")
    assert refused.returncode == 1
    assert "HTTP 401" in refused.stderr and "the token was refused" in refused.stderr

"""The scripted world of the tournament tests (and of the 8 × 20 demonstration in
tests/bench/bench_tournaments.py): candidates that answer every task with a reply that
names them, and a pairwise judge that follows a script of games; the ``world`` and
``acme`` fixtures (re-exported by tests/evals/conftest.py, imported by the browser
test) and the helpers that start and play a tournament and read its bracket.

Candidates: one fake OpenAI server answers for every candidate; a request's ``model``
(``<slug>-model``) says who asks, and the reply is ``<slug> answers task <n>``.

The judge (a fake Anthropic server's policy) reads the task's number and, from the two
fenced replies, the two candidates. Per (task, candidate x, candidate y) the script
lists the games in play order, each a two-letter code in the game's own order — the
series' first side is ``a`` whichever way the prompt shows it: the first letter is
the (A, B) orientation's verdict, the second the (B, A) one's mapped back; ``A``/``B``
a win for that side, ``t`` a tie, ``-`` an orientation that never answers in the
schema (three non-JSON replies, so the game fails for good). ``A?`` stands for
"AA". The series' first side is given by the key's order: ``(task, a, b)``. Requests
of one task and pair come in play order (AB then BA, game after game), so the policy
serves them from a queue. A game the script does not list is decided by ``default``
(game codes from a seeded coin weighted by strengths, for the demonstration), else the
policy raises (the test then fails, naming the game).
"""

import json
import math
import random
import re
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from html import unescape
from pathlib import Path

import jsonschema
import pytest

from accounts.models import Team
from agents.models import Agent, Arena
from evals import services, tournament_record, tournament_selectors
from evals.models import Evaluation
from tests.agents.fake_providers import FakeAnthropic, FakeOpenAI, text

KEY = "sk-test-tournament-5b1e0c93d7a2"
REPLY = re.compile(r"^([a-z0-9-]+) answers task (\d+)$")


def task_prompt(n: int) -> str:
    return f"Task {n}: write one line about the number {n}."


def suite_bytes(n_tasks: int) -> bytes:
    rows = [f'{{"id": "t{n:02d}", "prompt": "{task_prompt(n)}"}}' for n in range(1, n_tasks + 1)]
    return ("[\n  " + ",\n  ".join(rows) + "\n]\n").encode()


def candidate_policy(request: dict):
    slug = request["model"].removesuffix("-model")
    content = request["messages"][-1]["content"]
    prompt = content if isinstance(content, str) else content[0]["text"]
    n = int(re.match(r"Task (\d+):", prompt).group(1))
    return text(f"{slug} answers task {n}")


def _first_text(request: dict) -> str:
    content = request["messages"][0]["content"]
    return content if isinstance(content, str) else content[0]["text"]


def _fenced(prompt: str, tag: str) -> str:
    return unescape(re.search(rf"<{tag}>\n(.*?)\n</{tag}>", prompt, re.S).group(1))


Code = str  # two letters, as above
Default = Callable[[int, str, str, int], Code]


def strength_coin(strengths: dict[str, float], *, seed: int, agree: float = 0.85) -> Default:
    """Game codes for the demonstration: a beats b with the Bradley-Terry probability of
    their strengths (Elo points), the judge's two orientations agree with probability
    ``agree`` (else they split, a draw), reproducible from ``seed`` per game."""

    def code(n: int, a: str, b: str, game: int) -> Code:
        rng = random.Random(f"{seed}:{n}:{a}:{b}:{game}")
        p = 1 / (1 + math.pow(10, (strengths[b] - strengths[a]) / 400))
        winner = "A" if rng.random() < p else "B"
        if rng.random() < agree:
            return winner * 2
        return "AB" if rng.random() < 0.5 else "BA"

    return code


class ScriptedJudge:
    """The judge policy (see the module's docstring). ``games`` counts the games it
    began per (task, a, b); ``requests`` every request it answered."""

    def __init__(
        self, script: dict[tuple[int, str, str], list[Code]] | None = None, *,
        default: Default | None = None,
    ) -> None:  # fmt: skip
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.default = default
        self.queues: dict[tuple[int, frozenset], list[tuple[str, str]]] = {}
        self.games: dict[tuple[int, str, str], int] = {}
        self.requests = 0
        # Seconds each answer waits: a browser test that watches the progress slows the
        # run down enough to see it move (a whole tournament takes ~0.3 s otherwise).
        self.pause_s = 0.0
        self._lock = threading.Lock()

    def _next_game(self, n: int, a: str, b: str) -> Code:
        """The code of the pair's next game, ``a`` the series' first side (the game's
        first request is its (A, B) orientation, which shows ``a`` first)."""
        if (n, b, a) in self.script and (n, a, b) not in self.script:
            raise AssertionError(f"task {n}: the script has {b} vs {a}; the series is {a} vs {b}")
        number = self.games.get((n, a, b), 0) + 1
        listed = self.script.get((n, a, b))
        if listed is not None and number <= len(listed):
            code = listed[number - 1]
        elif self.default is not None:
            code = self.default(n, a, b, number)
        else:
            raise AssertionError(f"the script has no game {number} of task {n}, {a} vs {b}")
        self.games[(n, a, b)] = number
        return code

    def __call__(self, request: dict):
        if self.pause_s:
            time.sleep(self.pause_s)
        prompt = _first_text(request)
        first, second = _fenced(prompt, "response_a"), _fenced(prompt, "response_b")
        (x, n1), (y, n2) = (REPLY.match(r).groups() for r in (first, second))
        n = int(n1)
        assert n == int(n2) == int(re.search(r"Task (\d+):", prompt).group(1))
        with self._lock:
            self.requests += 1
            key = (n, frozenset((x, y)))
            queue = self.queues.setdefault(key, [])
            if not queue:
                a, b = x, y
                code = self._next_game(n, a, b)
                # the (A, B) orientation shows a first; the (B, A) one shows b first and
                # its verdict, in the prompt's terms, is the mapped-back letter swapped
                swap = {"A": "B", "B": "A", "t": "t", "-": "-"}
                for shown_first, letter in ((a, code[0]), (b, swap[code[1]])):
                    tries = 3 if letter == "-" else 1
                    queue += [(shown_first, letter)] * tries
            shown_first, letter = queue.pop(0)
        assert shown_first == x, f"task {n}: expected {shown_first} shown first, got {x}"
        if letter == "-":
            return text("Both are fine, I think.")  # not the schema: retried, then failed
        winner = {"A": "A", "B": "B", "t": "tie"}[letter]
        return text(json.dumps({"winner": winner, "reason": f"scripted {letter}"}))


# -- the tests' world: fixtures and helpers ---------------------------------------------

SCHEMA = json.loads(
    (Path(tournament_record.__file__).parent / "tournament_record.schema.json").read_text()
)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


class World:
    """Four candidates p, q, r, s and a judge; ``judge.script`` is set by each test."""

    def __init__(self, candidates: FakeOpenAI, judge_fake: FakeAnthropic, judge: ScriptedJudge):
        self.candidates, self.judge_fake, self.judge = candidates, judge_fake, judge


@pytest.fixture
def acme(alice) -> Team:
    return Team.objects.get(name="Acme")


@pytest.fixture
def world(monkeypatch, alice):
    monkeypatch.setenv("TOURNAMENT_TEST_API_KEY", KEY)
    arena = Arena.objects.public()
    judge = ScriptedJudge()
    with ExitStack() as stack:
        candidates = stack.enter_context(FakeOpenAI(api_key=KEY, policy=candidate_policy))
        judge_fake = stack.enter_context(FakeAnthropic(api_key=KEY, policy=judge))
        for slug in ("p", "q", "r", "s"):
            Agent.objects.create(
                arena=arena, slug=slug, display_name=slug.upper(), kind="scaffold",
                provider="openai", model_id=f"{slug}-model",
                params={"base_url": candidates.base_url, "api_key_env": "TOURNAMENT_TEST_API_KEY"},
            )  # fmt: skip
        Agent.objects.create(
            arena=arena, slug="judge", display_name="Judge", kind="scaffold",
            provider="anthropic", model_id="judge-model",
            params={"base_url": judge_fake.base_url, "api_key_env": "TOURNAMENT_TEST_API_KEY"},
        )  # fmt: skip
        yield World(candidates, judge_fake, judge)


def start(team, *, agents, n_tasks, judge="judge", **schedule) -> Evaluation:
    suite = services.suite_store(team=team, name="lines.json", data=suite_bytes(n_tasks))
    return services.evaluation_create(
        team=team, suite=suite, agent_slugs=agents, judge_slug=judge, **schedule
    )


def play(team, **kwargs) -> tuple[Evaluation, dict, list]:
    """Start and run a tournament (waits recorded, not slept); its record, validated."""
    sleeps: list = []
    evaluation = start(team, **kwargs)
    evaluation = services.evaluation_execute(evaluation_id=evaluation.pk, sleep=sleeps.append)
    record = tournament_selectors.record_of(evaluation)
    VALIDATOR.validate(record)
    return evaluation, record, sleeps


def brief(record: dict) -> dict:
    """Each task's tournament as (status, champion, series) with each series as
    "a-b status winner/advanced games" — the bracket at a glance."""
    out = {}
    for t in record["tournament"]["tasks"]:
        rows = []
        for s in t["series"]:
            games = "".join(
                {"A": "a", "B": "b", "tie": "t", "failed": "x"}[g["outcome"]]
                + ("*" if g["kind"] == "tie_break" else "")
                for g in s["games"]
            )
            who = s["winner"] or (f"→{s['advanced']}" if s["advanced"] else "-")
            rows.append(f"{s['a']}-{s['b']} {s['status']} {who} {games}")
        out[t["task_id"]] = (t["status"], t["champion"], rows)
    return out

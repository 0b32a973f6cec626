"""Plain words on every page a visitor or a signed-in judge can open: no "SPEC" or "§",
no formula (ℓ, "(ℓ − s)", "λ E[S] / C", "x = y" between single letters, a lone Greek
letter), no internal code in snake_case (``gave_up``, ``no_trajectory``) in what the page
shows.

Every route of the URLconf is classified below: a page (how to reach it with the world's
data, and who must be able to open it), or not a page (with why). A route added without
being classified fails the test, so a new page cannot skip the scan.

What is scanned: the text a person reads, plus the ``title``, ``alt`` and ``aria-label``
attributes (tooltips, image descriptions, what a screen reader says). Exempt, narrowly:

- ``<code>``, ``<pre>``, ``<kbd>``, ``<samp>``: literal text a person reads as code or
  types (a command, a file name, an API address, an agent's own tool call), and a coding
  battle's diff lines (``diff-lines``: the agents' code);
- other attributes (classes, ids, data attributes, URLs) and ``<script>``/``<style>``;
- addresses in the text (``https://…``, ``/api/…``);
- the API's own reference (Swagger UI draws it from the schema in the browser: field
  names are the API's vocabulary); its page's HTML is scanned like any other.
"""

import random
import re
from collections.abc import Callable
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from accounts.models import Team
from accounts.services import team_invite_create
from agents.models import Agent, Arena
from battles.models import Battle, Run, Step, TestDrive
from ratings.refit import arena_refit
from tests.agents.conftest import _loopback_allowlisted  # noqa: F401 - the fakes are on loopback
from tests.coding.page_factories import coding_battle
from tests.conftest import make_person
from tests.environments.environment_factories import environment, source_battle
from tests.evals.conftest import (
    _calls_in_the_test_thread,  # noqa: F401 - autouse, as there
    arena_agents,  # noqa: F401 - a fixture: the scripted agents
)
from tests.exports.factories import excluded_battle, old_battle, with_steps
from tests.judging.battle_factories import ended_battle, judge_on
from tests.ratings.factories import judges, round_robin

pytestmark = pytest.mark.django_db(transaction=True)  # the refit commits on its own

# -- what a page must not show ----------------------------------------------------------

_VAR = r"[A-Za-zα-ωΑ-Ωℓ]"  # a one-letter variable
RULES: dict[str, re.Pattern] = {
    "a SPEC reference": re.compile(r"\bSPEC\b|§"),
    "a formula symbol": re.compile(r"ℓ|\b[A-Z]\[[A-Z]\]"),  # ℓ, E[S]
    "a formula": re.compile(
        rf"(?<![\w'’]){_VAR}\s*[−+×÷=<>≤≥]\s*(?:{_VAR}|\d)(?![\w'’])"  # r − h, x = y, ρ < 1
        rf"|\b[A-Z]\((?:[α-ω]|\d[\d.]*)\)"  # F(α), D(0.6)
    ),
    "a lone Greek letter": re.compile(r"(?<!\w)[α-ωΑ-Ω](?!\w)"),
    "an internal code": re.compile(r"(?<![\w.@/-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/-])"),
}
_ADDRESS = re.compile(r"\S+://\S+|(?<!\w)/[\w./-]+")
_LITERAL = {"code", "pre", "kbd", "samp"}
_HIDDEN = {"script", "style", "template"}
_READ_ATTRIBUTES = {"title", "alt", "aria-label"}
_DIFF_LINES = "diff-lines"  # a coding battle's diff: the agents' code, line by line
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
         "source", "track", "wbr"}  # fmt: skip


class ReadText(HTMLParser):
    """The text a person reads on a page (see the module's docstring for what is not)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, bool]] = []  # each open element: (tag, exempt)
        self.parts: list[str] = []

    @property
    def skipping(self) -> bool:
        return any(exempt for _, exempt in self.open)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if not self.skipping:
            self.parts += [v for k, v in attrs if k in _READ_ATTRIBUTES and v]
        if tag in _VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.open.append((tag, tag in _LITERAL | _HIDDEN or _DIFF_LINES in classes))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, -1, -1):  # (an unclosed <p> or <li> inside)
            if self.open[depth][0] == tag:
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def read_text(html: str) -> str:
    parser = ReadText()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def findings(html: str) -> list[str]:
    """Each rule broken, with the words around it."""
    text = _ADDRESS.sub(" ", read_text(html))
    found = []
    for rule, pattern in RULES.items():
        for match in pattern.finditer(text):
            around = text[max(0, match.start() - 40) : match.end() + 40]
            found.append(f"{rule} {match.group(0)!r} in …{around}…")
    return found


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("From a run's failure (SPEC §8)", "a SPEC reference"),
        ("Machine latency (ℓ − s) − (h − e)", "a formula symbol"),
        ("stable, ρ < 1", "a formula"),
        ("E[N] = λ E[T]", "a formula symbol"),
        ("Freshness F(α)", "a formula"),
        ("Fleiss' κ", "a lone Greek letter"),
        ("Side A gave_up", "an internal code"),
    ],
)
def test_the_scan_catches_each_kind(text, rule):
    assert any(f.startswith(rule) for f in findings(f"<p>{text}</p>"))


@pytest.mark.parametrize(
    "html",
    [
        "<p>Side A gave up; side B ran out of steps.</p>",
        "<p>Run <code>gave_up</code> is what the API says</p>",
        '<p><a href="/api/open_data/" class="x_y">the open data</a> at https://a.b/c_d</p>',
        "<p>Side A's screen, A/B pages, 1 / 4 slots, 6*7 = 42</p>",
        "<p>Don't, it's the agent’s run</p>",
        '<div class="diff-lines"><div class="dl"><span>+</span>return a + b</div></div><p>ok',
    ],
)
def test_the_scan_leaves_plain_words_and_literals_alone(html):
    assert findings(html) == []


# -- the world: enough data that every page shows what it can ----------------------------


@pytest.fixture
def world(terms, alice, roster, arena_agents, settings):  # noqa: F811 - the imported fixture
    """A public arena with a rated board, battles of the judge's team in every state that
    shows words (decided, excluded, failed, judging, a coding battle), a battle from
    another team for her to judge, a test drive, training environments (published,
    building), an evaluation run to its end, and an invite."""
    from tests.evals.test_pages import full

    settings.ARENA = settings.ARENA.replace(export_delay_days=7)
    judith = make_person("judith", "Acme", terms)
    bob = make_person("bob", "Bobs", terms)
    crowd = judges(3)
    arena = Arena.objects.public()
    round_robin(alice, roster[:3], crowd, rounds=2, rng=random.Random(3))

    decided = old_battle(alice, roster[0], roster[1], judge=crowd[0], days=10)
    with_steps(decided)
    Run.objects.filter(battle=decided, side="B").update(end_reason="step_budget")
    excluded = excluded_battle(alice, roster[1], roster[2], reason="named_model", days=10)
    with_steps(excluded)
    arena_refit(arena_id=arena.pk)  # (the board counts the exclusions by reason)
    failed = old_battle(alice, roster[0], roster[2], judge=None, days=1, outcome="")
    Battle.objects.filter(pk=failed.pk).update(
        status=Battle.Status.FAILED, failure_reason="An agent failed: its endpoint did not answer."
    )
    judging = ended_battle(alice, a=roster[0].slug, b=roster[1].slug)
    coding = coding_battle(alice)  # its phases, both diffs and the judge sandbox's figures
    voted = ended_battle(bob, a=roster[1].slug, b=roster[2].slug)
    judge_on(judith, voted, "A")  # her vote's status page
    ended_battle(bob, a=roster[0].slug, b=roster[2].slug, end_reasons=("gave_up", "time_budget"))

    own = Agent.objects.create(
        arena=arena, slug="acme-rulebook", display_name="Acme Rulebook", kind="builtin",
        builtin_policy="rulebook", team=alice.memberships.get().team,
    )  # fmt: skip
    drive = TestDrive.objects.create(
        agent=own, team=own.team, requested_by=alice, sample="files",
        instruction="Create a file named hello.txt.", status=TestDrive.Status.ENDED,
        started_at=timezone.now(), ended_at=timezone.now(),
    )  # fmt: skip
    run = Run.objects.create(
        test_drive=drive, side="A", agent=own, status=Run.Status.ENDED, step_budget=20,
        wall_budget_s=300, end_reason="gave_up", final_message="I could not do it.",
    )  # fmt: skip
    Step.objects.create(
        run=run, index=0, tool="shell", args={"command": "ls"}, result={"ok": True},
        started_at=timezone.now(), duration_ms=5,
    )  # fmt: skip

    published = environment(source_battle(alice, roster, crowd[1], days=30))
    building = environment(source_battle(alice, roster, crowd[2], days=30), status="graded")
    evaluation = full()
    team = Team.objects.get(name="Acme")
    _, token = team_invite_create(team=team, actor=alice)
    return {
        "judith": judith,
        "agent": roster[0],
        "own": own,
        "battles": [decided, excluded, failed, judging, coding],
        "voted": voted,
        "drive": drive,
        "environments": [published, building],
        "evaluation": evaluation,
        "eval_run": evaluation.runs.order_by("pk").first(),
        "team": team,
        "token": token,
    }


# -- every route, classified ------------------------------------------------------------

VISITOR, JUDGE = "visitor", "judge"
BOTH = frozenset({VISITOR, JUDGE})
Paths = Callable[[dict], list[str]]


def _battles(suffix: str = "") -> Paths:
    return lambda w: [f"/battles/{b.pk}/{suffix}" for b in w["battles"]]


# route name → (its paths in the world, who must be able to open it). Nobody: a page for
# staff only, checked to be closed to both.
PAGES: dict[str, tuple[Paths, frozenset]] = {
    "ratings:leaderboard": (lambda w: ["/"], BOTH),
    "ratings:matrices": (lambda w: ["/matrices/"], BOTH),
    "ratings:method": (lambda w: ["/method/"], BOTH),
    "ratings:agent": (lambda w: [f"/agents/{w['agent'].slug}/"], BOTH),
    "metrics": (lambda w: ["/metrics/"], BOTH),
    "environments:list": (lambda w: ["/environments/"], BOTH),
    "environments:latency": (lambda w: ["/environments/latency"], BOTH),
    "environments:detail": (lambda w: [f"/environments/{w['environments'][0].pk}/"], BOTH),
    "accounts:login": (lambda w: ["/accounts/login/"], frozenset({VISITOR})),
    "accounts:signup": (lambda w: ["/accounts/signup/"], frozenset({VISITOR})),
    "accounts:consent": (lambda w: ["/accounts/consent/"], frozenset({JUDGE})),
    "accounts:settings": (lambda w: ["/accounts/settings/"], frozenset({JUDGE})),
    "accounts:team": (lambda w: [f"/accounts/teams/{w['team'].pk}/"], frozenset({JUDGE})),
    # (one team: it sends her to its page, scanned as that page; followed here)
    "accounts:my-team": (lambda w: ["/accounts/team/"], frozenset({JUDGE})),
    "accounts:invite": (lambda w: [f"/accounts/invites/{w['token']}/"], BOTH),
    "api:docs": (lambda w: ["/api/docs/"], BOTH),
    "battles:submit": (lambda w: ["/submit/"], frozenset({JUDGE})),
    "battles:detail": (_battles(), frozenset({JUDGE})),
    "battles:panel": (_battles("panel/"), frozenset({JUDGE})),
    "battles:run": (lambda w: [f"/battles/{w['battles'][0].pk}/runs/B/"], frozenset({JUDGE})),
    "battles:agents-status": (lambda w: ["/my-agents/"], frozenset({JUDGE})),
    "battles:agent-new": (lambda w: ["/my-agents/new/"], frozenset({JUDGE})),
    "battles:agent": (lambda w: [f"/my-agents/{w['own'].pk}/"], frozenset({JUDGE})),
    "battles:test-drives-of": (
        lambda w: [f"/my-agents/{w['own'].pk}/test-drives/"],
        frozenset({JUDGE}),
    ),
    "battles:test-drive": (lambda w: [f"/test-drives/{w['drive'].pk}/"], frozenset({JUDGE})),
    "judging:judge": (lambda w: ["/judge/"], frozenset({JUDGE})),
    "judging:vote-status": (
        lambda w: [f"/judge/{w['voted'].pk}/vote/status/"],
        frozenset({JUDGE}),
    ),
    "battles:conversation": (_battles("conversation/"), frozenset({JUDGE})),
    "judging:reasons": (lambda w: [f"/judge/{w['voted'].pk}/reasons/"], frozenset({JUDGE})),
    "judging:agent-reasons": (lambda w: [f"/agents/{w['agent'].slug}/reasons/"], BOTH),
    # (for a team's baseline operators only: the world's judge is none, so it is closed)
    "operate": (lambda w: ["/operate/"], frozenset()),
    "judging:quality": (lambda w: ["/judging/quality/"], frozenset()),
    "judging:machine-board": (lambda w: ["/machine-board/"], BOTH),
    "judging:machine-agreement": (lambda w: ["/judging/machine-agreement/"], BOTH),
    "evals:list": (lambda w: ["/evaluations/"], frozenset({JUDGE})),
    "evals:detail": (lambda w: [f"/evaluations/{w['evaluation'].pk}/"], frozenset({JUDGE})),
    "evals:live": (lambda w: [f"/evaluations/{w['evaluation'].pk}/live/"], frozenset({JUDGE})),
    "evals:run": (
        lambda w: [f"/evaluations/{w['evaluation'].pk}/runs/{w['eval_run'].pk}/"],
        frozenset({JUDGE}),
    ),
}

# route name (or pattern, for unnamed ones) → why it is not scanned.
NOT_PAGES = {
    "admin": "Django's admin: staff's tool, not a public page",
    "api": "the JSON API: codes are its vocabulary (the pages put them into words)",
    "accounts:logout": "POST only",
    "battles:events": "a Server-Sent Events stream for command-line clients (JSON)",
    "battles:end-side": "POST only",
    "battles:screenshot": "an image",
    "battles:attachment": "a file download",
    "battles:delivery": "a file download",
    "battles:test-drive-screenshot": "an image",
    "judging:vote": "POST only",
    "judging:undo": "POST only",
    "judging:screenshot": "an image",
    "judging:landing": "a redirect: where log-in lands (the judge page, submit or the agents)",
    "judging:file": "a file download",
    "battles:follow-up": "POST only",
    "battles:answer": "POST only",
    "battles:api-conversation": "the JSON API (a battle's conversation)",
    "battles:api-follow-up": "the JSON API (POST a follow-up)",
    "battles:api-answer": "the JSON API (POST an answer to an agent's question)",
    "judging:vote-reasons": "the JSON API (a vote's reasons)",
    "judging:vote-reason-tags": "the JSON API (the reasons' taxonomy)",
    "operate-panel": "a fragment the operator page polls (an operator's only)",
    "operate-duty": "POST only",
    "operate-take": "POST only",
    "operate-act": "POST only",
    "operate-screen": "an image",
    "evals:cancel": "POST only",
    "evals:record": "a JSON download",
    "evals:report": "a tournament's standalone audit report (a download; tournaments only)",
}

# Findings a page still owes, by route, as "<rule> '<what>'", while the change that fixes
# them is under way elsewhere (none now: the evaluation and machine-agreement pages were
# fixed). Exact: a finding fixed must leave this list too.
OWED: dict[str, set[str]] = {}


def routes() -> list[str]:
    """Every route's name (namespaced), or its pattern when it has none."""
    found = []

    def walk(patterns, namespace: str, prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                if entry.namespace in ("admin", "api"):
                    found.append(entry.namespace)
                    continue
                inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
                walk(entry.url_patterns, inner, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                found.append(
                    f"{namespace}{entry.name}" if entry.name else prefix + str(entry.pattern)
                )

    walk(get_resolver().url_patterns, "", "")
    return sorted(set(found))


def test_every_route_is_classified():
    unknown = [r for r in routes() if r not in PAGES and r not in NOT_PAGES]
    assert unknown == [], "classify these routes in PAGES (with paths) or NOT_PAGES (why)"


def test_every_public_page_speaks_plain_words(world):
    viewers = {VISITOR: Client(), JUDGE: Client()}
    viewers[JUDGE].force_login(world["judith"])
    report: dict[str, list[str]] = {}
    owed: dict[str, set[str]] = {}
    wrong_status = []
    for name, (paths, who) in PAGES.items():
        for path in paths(world):
            for viewer, client in viewers.items():
                response = client.get(path, follow=viewer in who and name in _FOLLOWED)
                status = response.status_code
                if viewer not in who:
                    if status == 200 and viewer not in _OPEN_TO_ALL.get(name, ()):
                        wrong_status.append(f"{path} opens for the {viewer}: add them")
                    continue
                if status != 200:
                    wrong_status.append(f"{path} answers the {viewer} {status}")
                    continue
                for found in findings(response.content.decode()):
                    if found.split(" in …")[0] in OWED.get(name, ()):
                        owed.setdefault(name, set()).add(found.split(" in …")[0])
                    elif found not in report.setdefault(path, []):
                        report[path].append(found)
    assert wrong_status == []
    assert {path: found for path, found in report.items() if found} == {}
    assert owed == OWED  # each one still there (fixed: take it off the list)


# Routes that send a viewer on to a page (followed, and that page scanned).
_FOLLOWED = {"accounts:my-team"}

# Pages that answer 200 to a viewer they are not meant for, harmlessly (a log-in form
# shown to someone signed in): not a leak, not scanned twice.
_OPEN_TO_ALL: dict[str, tuple[str, ...]] = {
    "accounts:login": (JUDGE,),
    "accounts:signup": (JUDGE,),
}


def test_the_demo_board_speaks_plain_words_too(roster, settings):
    """The first page of a fresh `make run` is the demo board (docs/leaderboard.md): it,
    its who-beat-whom tables and its agents' pages pass the same scan, for a visitor."""
    from judging.services.demo_board import demo_board_seed

    settings.ARENA = settings.ARENA.replace(demo_board=True, bootstrap_replicates=50)
    demo_board_seed()
    agents = Agent.objects.filter(arena__demo=True).order_by("slug")
    assert agents.exists()
    paths = ["/", "/?arena=demo", "/matrices/?arena=demo"]
    paths += [f"/agents/{agent.slug}/?arena=demo" for agent in agents]
    visitor = Client()
    report = {}
    for path in paths:
        response = visitor.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        assert "Demo data" in page, path
        report[path] = findings(page)
    assert {path: found for path, found in report.items() if found} == {}

"""A coding battle between two bundled CLI agents, read blind by a judge (issue 33, item
3; docs/coding.md "What judges see"): Aider and Claude Code, for real in their sandboxes,
reach their models (fake providers on 127.0.0.1) only through the arena's model gateway
and fix calc.py; the judge sandboxes grade both diffs; screening opens the battle for
judging, since Aider's start-up banner (its version and "Model: openai/<model>") no
longer reaches any text a judge reads. The judge's page in Chromium and the judge API's
JSON then show the steps in one neutral shape ("read file", "edit file", "run command"),
the agents' own last words as final messages, and no CLI's tool name, wording, banner or
usage line, and no token or cost figure. Once the judge has voted and the battle is
decided, the names show, and the tokens and cost beside them."""

import json
import random
import re
import threading

import pytest
from django.db import connection
from django.test import Client
from playwright.sync_api import expect

from accounts.services import consent_terms_publish
from agents.models import Agent
from battles.coding_models import CodingOutcome
from battles.models import Battle, Run
from battles.services import battle_run, task_submit
from battles.services.repo_admission import RepoRequest
from judging.services import battle_screen
from tests.agents.conftest import LOOPBACK
from tests.coding import fake_streaming as fs
from tests.coding import repos
from tests.coding.test_coding_battles import claude_fixing
from tests.conftest import make_person
from tests.e2e.test_arena_loop import PASSWORD, production_hash
from tests.e2e.test_blindness import recorder
from tests.e2e.test_judge_page import log_in
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.e2e

ANTHROPIC_KEY = "sk-ant-api03-blind-coding-provider-key-0123"
OPENAI_KEY = "sk-proj-blind-coding-provider-key-0123456789"
INSTRUCTION = "Fix add() in calc.py so that the tests pass."
USAGE = fs.Usage(input_tokens=1500, output_tokens=60, cache_read_tokens=400)
AIDER_SAYS = "The sign in add() is wrong; this block fixes it."
CLAUDE_SAYS = "Fixed add(): it adds now."
# What a judge must never read anywhere: the CLIs' names and wording, Aider's banner and
# its usage lines.
HARNESS = tuple(
    re.compile(pattern)
    for pattern in (
        r"apply_patch", r"SEARCH/REPLACE", r"<{5,} SEARCH", r">{5,} REPLACE", r"(?i)\baider\b",
        r"(?i)\bclaude\b", r"(?i)\bcodex\b", r"Claude Code", r"Aider v", r"Main model",
        r"Model:", r"Tokens:", r"Cost:", r"Applied edit", r"/bin/sh -lc",
    )
)  # fmt: skip
# ... nor, in what the sides show (steps, final messages, diffs and results), a CLI's tool
# names (case-sensitive whole words: the arena's own "read file" is no leak, and the
# page's own "Read first" above the vote buttons is not a side's).
TOOL_NAMES = tuple(
    re.compile(rf"\b{name}\b") for name in ("Read", "Edit", "Bash", "Write", "Grep", "Glob")
)


def aider_fixes(request: dict) -> list:
    """Aider's model: a sentence and one SEARCH/REPLACE block in its reply's text."""
    block = (
        "calc.py\n```python\n<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n=======\n"
        "def add(a, b):\n    return a + b\n>>>>>>> REPLACE\n```\n"
    )
    return [fs.Text(f"{AIDER_SAYS}\n\n{block}")]


# Claude Code's model: Read, Edit, run the tests with Bash, then its answer.
claude_fixes = claude_fixing(CLAUDE_SAYS, "Run the tests")


def run_and_screen(battle_id: int) -> None:
    try:
        battle_run(battle_id=battle_id)
        battle_screen(battle_id=battle_id)
    finally:
        connection.close()


def harness_words(text: str, patterns=HARNESS) -> list[str]:
    return [match[0] for pattern in patterns for match in pattern.finditer(text)]


def usage_figures(outcome: CodingOutcome) -> list[re.Pattern]:
    """The side's token counts and cost as a page or a payload would print them."""
    usage = outcome.usage
    counts = [usage[k] for k in ("input_tokens", "output_tokens", "cache_read_tokens") if usage[k]]
    cost = usage["cost_usd"]
    return [re.compile(rf"(?<![\d.]){n}(?![\d])") for n in counts] + [
        re.compile(re.escape(f"{cost:.4f}")),
        re.compile(re.escape(repr(cost))),
    ]


def test_a_judge_reads_two_cli_agents_blind_and_sees_names_and_cost_after_the_vote(
    arena_servers, browser, monkeypatch, settings, tmp_path
):
    # Given Aider and Claude Code, entered as the roster would name them
    settings.ARENA = settings.ARENA.replace(
        internal_allowlist=LOOPBACK, model_prices={"arena-coder": [3.0, 15.0]}
    )
    terms = consent_terms_publish(text="You agree to publication.")
    arena = ensure_public_arena()
    submitter = make_person("sam", "Submitters Guild", terms)
    aider = Agent.objects.create(
        arena=arena, slug="aider-arena-coder", display_name="Aider (arena-coder)", kind="cli",
        provider="openai", model_id="arena-coder", params={"cli": "aider"},
    )  # fmt: skip
    claude = Agent.objects.create(
        arena=arena, slug="claude-code-sonnet", display_name="Claude Code (Sonnet 4.5)",
        kind="cli", provider="anthropic", model_id="claude-sonnet-4-5",
        params={"cli": "claude-code"},
    )  # fmt: skip
    with (
        fs.FakeChatCompletions(
            aider_fixes, usage=USAGE, api_key=OPENAI_KEY, model="arena-coder"
        ) as openai_api,
        fs.FakeAnthropicStream(
            claude_fixes, usage=USAGE, api_key=ANTHROPIC_KEY, model="claude-sonnet-4-5"
        ) as anthropic_api,
    ):
        monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{openai_api.port}/v1")
        monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{anthropic_api.port}")
        request = RepoRequest(
            upload=repos.bundle(repos.FIX, tmp_path), ref="main", judge_ref="",
            success_cmd=repos.FIX.success_cmd, test_cmd=repos.FIX.test_cmd, time_limit_s=120,
        )  # fmt: skip
        battle = task_submit(
            user=submitter, instruction=INSTRUCTION, repo=request, rng=random.Random(0)
        )
        Battle.objects.filter(pk=battle.pk).update(
            agent_a=aider, agent_b=claude, redundancy_target=1
        )
        Run.objects.filter(battle=battle, side="A").update(agent=aider)
        Run.objects.filter(battle=battle, side="B").update(agent=claude)
        # When the battle runs for real and is screened (in a thread of its own: this one
        # runs Playwright's event loop, and the battle publishes to its socket)
        worker = threading.Thread(target=run_and_screen, args=(battle.pk,))
        worker.start()
        worker.join(timeout=300)
    assert not worker.is_alive()

    # Then both fixed the bug through the gateway, and screening opened the battle: the
    # banner that Aider printed named its model, and no judge-visible text carries it
    battle.refresh_from_db()
    runs = {run.side: run for run in battle.runs.all()}
    said = {side: (run.end_reason, run.error) for side, run in runs.items()}
    assert battle.status == "judging", (battle.exclusion_reason, battle.failure_reason, said)
    assert openai_api.calls("/v1/chat/completions") and anthropic_api.calls("/v1/messages")
    outcomes = {o.run.side: o for o in CodingOutcome.objects.filter(run__battle=battle)}
    for outcome in outcomes.values():
        assert "-    return a - b\n+    return a + b\n" in outcome.diff
        assert outcome.judged_at is not None
    assert outcomes["A"].usage["source"].startswith("aider")  # it printed "Tokens: …"
    assert (runs["A"].final_message, runs["B"].final_message) == (AIDER_SAYS, CLAUDE_SAYS)

    # When a judge opens the judge page, and asks the judge API for the battle
    judith = make_person("judith", "Judith's", terms)
    judith.password = production_hash(PASSWORD)  # the servers know no MD5 hasher
    judith.save(update_fields=["password"])
    context = browser.new_context(
        base_url=arena_servers.base_url, viewport={"width": 1280, "height": 800}
    )
    page = context.new_page()
    received: list[tuple[str, str]] = []
    recorder(page, received)
    log_in(page, "judith")
    page.goto("/judge/")
    expect(page.locator("#vote-form")).to_have_attribute("hx-post", f"/judge/{battle.pk}/vote/")
    api = page.request.get("/api/judge/next/")
    assert api.status == 200
    payload = api.json()
    assert payload["id"] == battle.pk

    # Then the steps read the same for both CLIs: what was done, on which file or command
    steps = {
        side: [(s["tool"], s["args"]) for s in payload["sides"][side]["steps"]] for side in "AB"
    }
    assert steps == {
        "A": [("edit file", {"kind": "edit", "path": "calc.py"})],
        "B": [
            ("read file", {"kind": "read", "path": "calc.py"}),
            ("edit file", {"kind": "edit", "path": "calc.py"}),
            ("run command", {"kind": "command", "command": "python3 -m pytest -q"}),
        ],
    }
    assert all(s["result"]["ok"] for s in payload["sides"]["B"]["steps"])
    assert "cli_tool" not in api.text()
    expect(page.locator("#side-A ol.timeline li .action")).to_have_text(["1. edit file calc.py"])
    expect(page.locator("#side-B ol.timeline li .action")).to_have_text(
        ["1. read file calc.py", "2. edit file calc.py", "3. run command python3 -m pytest -q"]
    )
    # and the final messages are what each agent said, nothing its CLI printed around it
    for side, words in (("A", AIDER_SAYS), ("B", CLAUDE_SAYS)):
        assert payload["sides"][side]["final_message"] == words
        expect(page.locator(f"#side-{side} .final .message")).to_have_text(words)
    # and no CLI's tool name, wording, banner or usage line is anywhere the judge reads:
    # the page as shown, its HTML, the API's JSON, every HTML fragment or frame received
    document = page.content()
    shown = page.inner_text("body")
    fragments = [(url, body) for url, body in received if "/static/" not in url]
    readings = [("page text", shown), ("page HTML", document), ("judge API", api.text())]
    assert [(where, harness_words(text)) for where, text in readings + fragments
            if harness_words(text)] == []  # fmt: skip
    sides = [
        (f"{where} {part}", reader(part))
        for part in ("#coding", "#side-A", "#side-B")
        for where, reader in (("text of", page.inner_text), ("HTML of", page.inner_html))
    ]
    sides.append(("judge API sides", json.dumps(payload["sides"])))
    assert [(where, harness_words(text, TOOL_NAMES)) for where, text in sides
            if harness_words(text, TOOL_NAMES)] == []  # fmt: skip
    # and no token or cost figure, nor a score made from the cost
    for outcome in outcomes.values():
        for figure in usage_figures(outcome):
            assert not figure.search(shown) and not figure.search(api.text()), figure.pattern
    assert not re.search(r"\$\s?\d", shown)
    for gone in ("Cost efficiency", "Composite", "Tokens", "input_tokens", "cost_usd"):
        assert gone not in shown and gone not in api.text(), gone
    for side in "AB":
        expect(page.locator(f"#coding-{side} .coding-results")).not_to_contain_text("Cost")

    # When the judge votes once voting opens
    expect(page.locator("#read-timer")).to_contain_text("Voting is open", timeout=30_000)
    page.keyboard.press("a")

    # Then the battle is decided and the names show, on her page and in the API
    card = page.locator("#reveal-card")
    expect(card.locator(".reveal-a")).to_have_text("Aider (arena-coder)", timeout=20_000)
    expect(card.locator(".reveal-b")).to_have_text("Claude Code (Sonnet 4.5)")
    mine = page.request.get(f"/api/battles/{battle.pk}/votes/mine/").json()
    reveal = mine["reveal"]
    assert (reveal["A"]["agent"], reveal["B"]["agent"]) == (aider.display_name, claude.display_name)
    # and with them each side's tokens, cost, cost efficiency and composite
    for side, outcome in outcomes.items():
        outcome.refresh_from_db()
        revealed = reveal[side]["coding"]
        assert revealed["tokens"]["input_tokens"] == outcome.usage["input_tokens"] > 0
        assert revealed["cost_usd"] == outcome.usage["cost_usd"] > 0
        assert (revealed["cost_efficiency"], revealed["composite"]) == (
            outcome.cost_efficiency, outcome.composite
        )  # fmt: skip
    context.close()
    # and the submitting team's battle page shows them beside the names
    team = Client()
    team.force_login(submitter)
    html = team.get(f"/battles/{battle.pk}/").content.decode()
    usage = html[html.index('id="coding-usage"') :]
    assert f"${outcomes['A'].usage['cost_usd']:.4f}" in usage
    assert f'<td class="tokens-in">{outcomes["B"].usage["input_tokens"]}</td>' in usage

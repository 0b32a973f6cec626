"""The built-ins on the demo tasks, in real lanes: bubblewrap sandboxes, Chromium, the
egress proxy serving the demo web as http://demo.arena.test/. The best one solves the
browsing tasks by reading the page and clicking and typing (never by typing a computed
URL with a query string); the weakest visibly fails them; the middle one solves some.
What they say varies with the task and never names them."""

import random
from collections import Counter
from urllib.parse import urlsplit

import pytest

from agents.identity import LeakScanner
from agents.models import Agent
from battles.models import Battle, Run
from battles.services import battle_run, task_submit
from battles.services.creation import battle_create
from sandboxes.demoweb import DEMO_TASKS, answer_matches

pytestmark = pytest.mark.django_db(transaction=True)  # lanes run in threads

BROWSING = DEMO_TASKS[:5]
_results: dict[tuple[str, int], dict] = {}


def _lane(run: Run) -> dict:
    steps = list(run.steps.order_by("index"))
    return {
        "end_reason": run.end_reason,
        "message": run.final_message,
        "tools": Counter(step.tool for step in steps),
        "navigated": [step.args.get("url", "") for step in steps if step.tool == "navigate"],
        "typed": [step.args.get("text", "") for step in steps if step.tool == "type"],
        "failed_steps": [step.result.get("error") for step in steps if not step.result.get("ok")],
        "error": run.error,
        "refusals": run.egress_refusals,
    }


def run_all(user) -> dict[tuple[str, int], dict]:
    """Every demo task once by rulebook and surveyor (one battle), and the browsing tasks
    once more by idle against rulebook (so rulebook's wording is seen twice)."""
    if _results:
        return _results
    rulebook, surveyor, idle = (Agent.objects.get(slug=s) for s in ("rulebook", "surveyor", "idle"))
    for number, task in enumerate(DEMO_TASKS):
        battle = task_submit(
            user=user,
            instruction=task["instruction"],
            start_url=task["start_url"],
            rng=random.Random(number),
        )
        Battle.objects.filter(pk=battle.pk).update(agent_a=rulebook, agent_b=surveyor)
        Run.objects.filter(battle=battle, side="A").update(agent=rulebook)
        Run.objects.filter(battle=battle, side="B").update(agent=surveyor)
        battle_run(battle_id=battle.pk)
        pairs = [battle]
        if number < len(BROWSING):
            again = battle_create(
                task=battle.task, agent_a=idle, agent_b=rulebook, redundancy_target=1
            )
            battle_run(battle_id=again.pk)
            pairs.append(again)
        for each in pairs:
            for run in each.runs.select_related("agent"):
                key = (run.agent.slug, number)
                lane = _lane(run)
                if key in _results:
                    _results[key]["rerun_message"] = lane["message"]
                else:
                    _results[key] = lane
    _print_summary()
    return _results


def _print_summary() -> None:
    for slug in ("rulebook", "surveyor", "idle"):
        for number, task in enumerate(DEMO_TASKS):
            lane = _results.get((slug, number))
            if lane is None:
                continue
            mix = {tool: lane["tools"][tool] for tool in ("navigate", "click", "type", "key")}
            solved = answer_matches(task, lane["message"])
            print(f"{slug:9} task {number + 1}: solved={solved!s:5} {lane['end_reason']:9} {mix}")
            print(f"           {lane['message'][:160]!r}")


def solved(slug: str, tasks=BROWSING) -> list[int]:
    return [
        n
        for n, task in enumerate(tasks)
        if (slug, n) in _results and answer_matches(task, _results[(slug, n)]["message"])
    ]


def test_the_best_builtin_solves_the_browsing_tasks_by_clicking_and_typing(alice, roster):
    results = run_all(alice)

    assert len(solved("rulebook")) >= 4, {n: results[("rulebook", n)] for n in range(5)}
    mix = sum((results[("rulebook", n)]["tools"] for n in range(5)), Counter())
    assert mix["click"] >= 8 and mix["type"] >= 5 and mix["navigate"] == 5, mix
    for n in range(5):
        lane = results[("rulebook", n)]
        # Only the task's own URL was typed into the address bar: no computed query.
        assert [urlsplit(url).query for url in lane["navigated"]] == [""], lane
        assert lane["failed_steps"] == [], lane
    # The contact form was filled by typing each value into its field.
    assert {"Ada Lovelace", "ada@example.org", "The map page is broken"} <= set(
        results[("rulebook", 2)]["typed"]
    )
    # And the file tasks, with the shell.
    assert solved("rulebook", DEMO_TASKS) == list(range(len(DEMO_TASKS)))


# The best built-in's run above covers the browsing path; how the weaker ones rank
# against it is a longer run of the same tasks: `make soak`.
@pytest.mark.soak
def test_the_weakest_fails_and_the_middle_one_is_in_between(alice, roster):
    results = run_all(alice)

    assert solved("idle") == []
    assert all(results[("idle", n)]["end_reason"] == "gave_up" for n in range(5))
    assert all(results[("idle", n)]["tools"]["navigate"] == 1 for n in range(5))
    middle = solved("surveyor")
    assert 1 <= len(middle) < len(solved("rulebook")), middle
    # It types into the contact form's first field, and sends nothing.
    assert [results[("surveyor", n)]["tools"]["type"] for n in range(5)] == [0, 0, 1, 0, 0]
    assert "REF-" not in results[("surveyor", 2)]["message"]


def test_their_lanes_ask_the_egress_proxy_for_nothing_it_refuses(alice, roster):
    # Every built-in request goes to the demo web, which the proxy serves: a refusal in
    # a lane would be a request of Chromium's own (docs/egress.md) or a wrong URL.
    results = run_all(alice)
    assert {key: lane["refusals"] for key, lane in results.items() if lane["refusals"]} == {}


def test_their_words_vary_and_never_name_them(alice, roster):
    results = run_all(alice)
    identities = [
        name for agent in Agent.objects.filter(kind="builtin") for name in agent.identity_strings()
    ]

    messages = [lane["message"] for lane in results.values()]
    assert LeakScanner(identities).scan(("final message", m) for m in messages) == []
    openings = Counter(" ".join(m.split()[:3]) for m in messages if m)
    assert openings.most_common(1)[0][1] <= 3, openings
    # Deterministic: the same task draws the same words on a rerun.
    assert all(
        lane["rerun_message"] == lane["message"]
        for lane in results.values()
        if "rerun_message" in lane
    )

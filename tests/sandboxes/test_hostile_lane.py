"""A hostile entrant through a whole lane: NUL bytes and bytes that are not UTF-8 in
its shell output, NUL in its own arguments and final message, a delivery that fails
midway. The run is recorded and ends as the agent chose, never crashed; what is stored
is escaped and flagged; a judge's payload and the leak scan see the escaped text.

The agent is a scaffold on the real Anthropic SDK against a fake Messages API on
127.0.0.1 (tests/agents/fake_providers.py); the sandbox is real."""

import random

import pytest

from agents.models import Agent, Arena
from battles.models import Battle, Run, Step
from battles.presenters import battle_payload
from battles.services import battle_run, task_submit
from judging.visible import judge_visible_texts
from tests.agents.fake_providers import FakeAnthropic, tool_call

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-ant-test-hostile-0123456789abcdef01234"
OUTPUT = "printf 'out\\000put \\377 done'; printf 'e\\000' >&2"


def hostile_model(request: dict):
    done = sum(1 for m in request["messages"] if m["role"] == "assistant")
    script = [
        tool_call("shell", {"command": f"{OUTPUT}; printf ok > good.txt"}),
        tool_call("type", {"text": "na\u0000me"}),
        tool_call("deliver", {"message": "half", "files": ["good.txt", "missing.txt"]}),
        tool_call("deliver", {"message": "done \u0000 here", "files": ["good.txt"]}),
    ]
    return script[min(done, len(script) - 1)]


@pytest.fixture(autouse=True)
def _shell_only_and_fake_api_reachable(settings):
    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)
    # The fake API is on loopback: where the worker's own calls go through an address
    # policy with an operator allow-list, allow loopback for this test.
    if hasattr(settings.ARENA, "internal_allowlist"):
        settings.ARENA = settings.ARENA.replace(internal_allowlist="127.0.0.0/8,::1")


def test_hostile_bytes_are_stored_escaped_and_the_run_goes_on(alice, roster, monkeypatch, settings):
    with FakeAnthropic(api_key=KEY, policy=hostile_model) as fake:
        arena = Arena.objects.public()
        hostile = Agent.objects.create(
            arena=arena, slug="hostile-test", display_name="Hostile Test", kind="scaffold",
            provider="anthropic", model_id="hostile-test",
            params={"base_url": fake.base_url, "api_key_env": "HOSTILE_TEST_ANTHROPIC_API_KEY",
                    "max_tokens": 256},
        )  # fmt: skip
        monkeypatch.setenv("HOSTILE_TEST_ANTHROPIC_API_KEY", KEY)
        idle = Agent.objects.get(slug="idle")
        battle = task_submit(user=alice, instruction="Print some bytes", rng=random.Random(0))
        Battle.objects.filter(pk=battle.pk).update(agent_a=hostile, agent_b=idle)
        Run.objects.filter(battle=battle, side="A").update(agent=hostile)
        Run.objects.filter(battle=battle, side="B").update(agent=idle)

        battle_run(battle_id=battle.pk)

    run = Run.objects.get(battle=battle, side="A")
    assert (run.end_reason, run.error) == ("delivered", "")
    assert run.final_message == "done \\x00 here"
    assert [f["name"] for f in run.delivered_files] == ["good.txt"]
    shell, typed, failed, delivered = Step.objects.filter(run=run).order_by("index")
    assert shell.result["stdout"] == "out\\x00put \\xff done"
    assert shell.result["stderr"] == "e\\x00"
    assert shell.result["escaped"] is True and shell.result["ok"] is True
    assert typed.args == {"text": "na\\x00me"} and typed.result["escaped"] is True
    assert not failed.result["ok"] and "missing.txt" in failed.result["error"]
    assert delivered.result["ok"] and delivered.args["message"] == "done \\x00 here"
    # The failed delivery left nothing: only the successful one's file is there.
    deliveries = settings.PRIVATE_MEDIA_ROOT / "deliveries"
    assert [p.name for p in deliveries.iterdir()] == [f"run-{run.pk}"]
    assert [p.name for p in (deliveries / f"run-{run.pk}").iterdir()] == ["good.txt"]

    # Judges see the escaped text and the flag; the leak scan reads through the escapes.
    payload = battle_payload(battle, reveal=True)
    side = payload["sides"]["A"]
    [step0] = [s for s in side["steps"] if s["index"] == 0]
    assert step0["result"]["stdout"] == "out\\x00put \\xff done"
    assert step0["result"]["escaped"] is True
    texts = dict(judge_visible_texts(Run.objects.filter(pk=run.pk).prefetch_related("steps")))
    assert texts["side A step 1 (type) arguments, escapes skipped"] == "name"
    assert texts["side A step 0 (shell) stdout, escapes skipped"] == "output  done"

"""Issue 4's end-to-end: a battle between a scaffold agent on the real Anthropic SDK
(against a fake Messages API on 127.0.0.1) and a remote entrant (the reference server,
signed requests), both lanes in real local desktop sandboxes. The fake stands where
the remote API cannot exist here; everything else is real."""

import random
import threading

import pytest

from agents.models import Agent, Arena
from battles.models import Battle, Run, Span, Step
from battles.services import battle_run, task_submit
from examples.remote_entrant.server import EntrantServer
from judging.services import battle_screen
from tests.agents.fake_providers import FakeAnthropic, tool_call

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-ant-test-0123456789abcdef0123456789"
SECRET = "entrant-secret-for-tests"


def scripted_model(request: dict):
    """Answers from the conversation: shell, then look, then deliver."""
    done = sum(1 for m in request["messages"] if m["role"] == "assistant")
    if done == 0:
        return tool_call("shell", {"command": "printf 'hello arena' > notes.txt; cat notes.txt"})
    if done == 1:
        return tool_call("screenshot", {})
    return tool_call("deliver", {"message": "Wrote notes.txt", "files": ["notes.txt"]})


@pytest.fixture
def entrant():
    server = EntrantServer(("127.0.0.1", 0), SECRET.encode())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_scaffold_agent_and_remote_entrant_fight_a_whole_battle(
    alice, entrant, monkeypatch, settings
):
    settings.ARENA = settings.ARENA.replace(model_prices={"claude-test": [3.0, 15.0]})
    with FakeAnthropic(api_key=KEY, policy=scripted_model) as fake:
        arena = Arena.objects.public()
        scaffold = Agent.objects.create(
            arena=arena, slug="claude-test", display_name="Claude Test", kind="scaffold",
            provider="anthropic", model_id="claude-test",
            params={"base_url": fake.base_url, "api_key_env": "LANE_TEST_ANTHROPIC_API_KEY",
                    "max_tokens": 512},
        )  # fmt: skip
        monkeypatch.setenv("LANE_TEST_ANTHROPIC_API_KEY", KEY)
        remote = Agent.objects.create(
            arena=arena, slug="team-system", display_name="Team System", kind="remote",
            params={"endpoint": entrant.url}, remote_secret=SECRET,
        )  # fmt: skip
        battle = task_submit(
            user=alice, instruction="Create a file named notes.txt", rng=random.Random(0)
        )
        Battle.objects.filter(pk=battle.pk).update(agent_a=scaffold, agent_b=remote)
        Run.objects.filter(battle=battle, side="A").update(agent=scaffold)
        Run.objects.filter(battle=battle, side="B").update(agent=remote)

        battle_run(battle_id=battle.pk)
        battle_screen(battle_id=battle.pk)

    battle.refresh_from_db()
    assert battle.status == "judging"
    a, b = battle.runs.order_by("side")
    assert (a.end_reason, a.error) == ("delivered", "")
    assert a.final_message == "Wrote notes.txt"
    assert a.delivered_files[0]["name"] == "notes.txt" and a.delivered_files[0]["size"] == 11
    assert list(a.steps.values_list("tool", flat=True)) == ["shell", "screenshot", "deliver"]
    assert b.end_reason == "delivered" and b.error == ""
    assert b.steps.count() >= 2

    # The model saw the task and, after each step, the result with a screenshot.
    requests = fake.requests
    assert len(requests) == 3
    assert [r.headers.get("authorization") for r in requests] == [f"Bearer {KEY}"] * 3
    assert len(FakeAnthropic.images(requests[0].json)) == 1  # the first screenshot
    assert len(FakeAnthropic.images(requests[2].json)) >= 2
    assert "hello arena" in " ".join(FakeAnthropic.tool_result_texts(requests[1].json))

    # Spans: model calls with tokens and cost, tool calls, remote exchanges.
    model_spans = Span.objects.filter(run=a, kind="model")
    assert model_spans.count() == 3
    assert all(s.input_tokens > 0 and s.output_tokens > 0 for s in model_spans)
    assert sum(float(s.cost_usd) for s in model_spans) > 0
    assert Span.objects.filter(run=a, kind="tool").count() == 3
    assert Span.objects.filter(run=b, kind="remote").count() == b.steps.count()
    assert all(s.output["status"] == 200 for s in Span.objects.filter(run=b, kind="remote"))

    # The key is in no record of the run.
    for record in [
        *Span.objects.filter(run__battle=battle),
        *Step.objects.filter(run__battle=battle),
    ]:
        assert KEY not in str(record.input if isinstance(record, Span) else record.args)
        assert KEY not in str(record.output if isinstance(record, Span) else record.result)
    assert KEY not in str(list(Run.objects.filter(battle=battle).values()))
    assert SECRET not in str(list(Span.objects.filter(run=b).values()))


def test_the_run_waterfall_shows_the_spans_to_staff_only(
    alice, terms, entrant, client, django_user_model
):
    from accounts.services import consent_accept

    arena = Arena.objects.public()
    remote = Agent.objects.create(
        arena=arena, slug="team-system", display_name="Team System", kind="remote",
        params={"endpoint": entrant.url}, remote_secret=SECRET,
    )  # fmt: skip
    from agents.services import roster_install_builtins

    roster_install_builtins(arena=arena)
    battle = task_submit(user=alice, instruction="list the files", rng=random.Random(0))
    rulebook = Agent.objects.get(slug="rulebook")
    Battle.objects.filter(pk=battle.pk).update(agent_a=rulebook, agent_b=remote)
    Run.objects.filter(battle=battle, side="A").update(agent=rulebook)
    Run.objects.filter(battle=battle, side="B").update(agent=remote)
    battle_run(battle_id=battle.pk)

    client.force_login(alice)  # the submitter, before voting: identities stay hidden
    assert client.get(f"/battles/{battle.pk}/runs/B/").status_code == 404
    staff = django_user_model.objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    consent_accept(user=staff, terms=terms)
    client.force_login(staff)
    page = client.get(f"/battles/{battle.pk}/runs/B/").content.decode()
    assert "Team System" in page and 'class="waterfall"' in page
    assert (
        page.count('class="bar"') == Span.objects.filter(run__battle=battle, run__side="B").count()
    )

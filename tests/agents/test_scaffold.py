"""The scaffold loop on a real SDK client against a fake OpenAI-compatible server, in
a real (shell-only) sandbox: malformed arguments become an error step the model sees;
a reply without tool calls ends the run; only the newest screenshots are kept."""

import json

import pytest
from django.conf import settings

from agents.policies import Action, GiveUp, Observation
from agents.providers.openai_client import OpenAICompatibleClient
from agents.scaffold import ScaffoldPolicy
from sandboxes.base import SandboxSpec
from sandboxes.local_backend import LocalBackend
from sandboxes.tools import tool_call
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_providers import FakeOpenAI, text
from tests.agents.fake_providers import tool_call as call


def observe(step, last=None, png=None):
    return Observation(
        step=step, instruction="make a file", start_url="", last_result=last,
        steps_left=10 - step, seconds_left=100.0, screenshot_png=png,
    )  # fmt: skip


@pytest.fixture
def sandbox(sandbox_root):
    box = LocalBackend(sandbox_root, settings.ARENA.sandbox_uid_base).provision(
        SandboxSpec(run_id=5, desktop=False), slot=12
    )
    yield box
    box.destroy()


def test_malformed_arguments_are_an_error_step_the_model_sees(sandbox, tmp_path):
    script = [
        call("shell", "{not json"),  # arguments that are not JSON
        call("shell", {"command": "echo fixed"}),
        text("All done."),
    ]
    with FakeOpenAI(script) as fake:
        client = OpenAICompatibleClient(
            "local-model", base_url=fake.base_url, max_retries=0, outbound=loopback_outbound()
        )
        policy = ScaffoldPolicy(client=client)

        first = policy.next_action(observe(0))
        assert isinstance(first, Action) and first.args == "{not json"
        result = tool_call(sandbox, first.tool, first.args, deliver_dir=tmp_path)
        assert not result.ok and "takes a JSON object" in result.error

        second = policy.next_action(observe(1, result.as_dict()))
        assert second == Action("shell", {"command": "echo fixed"})
        # the model was told what went wrong, in the tool message answering its call
        told = FakeOpenAI.tool_result_texts(fake.requests[1].json)
        assert any("takes a JSON object" in t for t in told)

        out = tool_call(sandbox, second.tool, second.args, deliver_dir=tmp_path)
        assert out.stdout == "fixed\n"
        third = policy.next_action(observe(2, out.as_dict()))
        assert third == GiveUp("All done.")
    assert [s.kind for s in policy.spans] == ["model"] * 3


def test_only_the_newest_screenshots_are_sent(png):
    with FakeOpenAI(policy=lambda request: call("screenshot", {})) as fake:
        client = OpenAICompatibleClient(
            "local-model", base_url=fake.base_url, max_retries=0, outbound=loopback_outbound()
        )
        policy = ScaffoldPolicy(client=client, keep_screenshots=2)
        last = None
        for step in range(5):
            policy.next_action(observe(step, last, png))
            last = {"ok": True, "tool": "screenshot"}
        sent = [len(FakeOpenAI.images(r.json)) for r in fake.requests]
    assert sent == [1, 2, 2, 2, 2]


def test_the_protocol_document_is_served(client, db):
    response = client.get("/api/agent-protocol/")
    assert response.status_code == 200
    document = response.json()
    assert document["version"] == "arena-agent/1"
    assert set(document["tools"]) == {
        "screenshot", "mouse_move", "click", "drag", "scroll", "type", "key", "navigate",
        "shell", "deliver", "edit",  # edit: offered on repo tasks only
        "ask_user",  # on a battle's desktop lanes (docs/conversations.md)
    }  # fmt: skip
    assert json.dumps(document)  # plain JSON all through

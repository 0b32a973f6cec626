"""Conversations reach every kind of agent (docs/conversations.md): the scaffold's model
sees follow-ups as user text and is offered ask_user, the remote protocol and the MCP
server carry them, and the built-ins answer a follow-up in their final message."""

import json

import pytest

from agents.builtins.idle import IdlePolicy
from agents.builtins.rulebook import RulebookPolicy
from agents.mcp_server import call_result, tool_list
from agents.policies import Action, FollowUp, GiveUp, Observation
from agents.protocol import (
    PROTOCOL_REVISION,
    ProtocolError,
    observation_schema,
    protocol_document,
    validate_reply,
)
from agents.providers.openai_client import OpenAICompatibleClient
from agents.remote import RemotePolicy, session_token
from agents.scaffold import FOLLOW_UP_HEADER, ScaffoldPolicy
from sandboxes.base import TOOL_NAMES
from sandboxes.tools import ASK_USER, TOOL_SCHEMAS, tool_call
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_providers import FakeOpenAI
from tests.agents.fake_providers import tool_call as call

MESSAGE = FollowUp(1, "Also say which day it is.")


def observe(step: int, last=None, messages=(), instruction="list the files") -> Observation:
    return Observation(
        step=step, instruction=instruction, start_url="", last_result=last,
        steps_left=10 - step, seconds_left=100.0, messages=messages,
    )  # fmt: skip


def test_the_scaffold_passes_follow_ups_as_user_turns_and_offers_ask_user():
    with FakeOpenAI(policy=lambda request: call("shell", {"command": "ls"})) as fake:
        client = OpenAICompatibleClient(
            "local-model", base_url=fake.base_url, max_retries=0, outbound=loopback_outbound()
        )
        policy = ScaffoldPolicy(client=client, tool_names=(*TOOL_NAMES, ASK_USER))
        policy.next_action(observe(0, messages=(MESSAGE,)))
        policy.next_action(observe(1, {"ok": True, "tool": "shell"}))
        policy.next_action(observe(2, {"ok": True, "tool": "shell"}, (FollowUp(2, "Stop soon."),)))
        first, second, third = (json.dumps(r.json) for r in fake.requests)
        offered = [t["function"]["name"] for t in fake.requests[0].json["tools"]]
    assert offered[-1] == ASK_USER
    assert f"{FOLLOW_UP_HEADER} (message 1):\\n{MESSAGE.text}" in first
    assert second.count(FOLLOW_UP_HEADER) == 1  # the history keeps it, nothing new
    assert f"{FOLLOW_UP_HEADER} (message 2):\\nStop soon." in third


def test_the_remote_observation_carries_follow_ups_under_its_schema():
    jsonschema = pytest.importorskip("jsonschema")
    policy = RemotePolicy(
        "http://127.0.0.1:9/agent", "s3cret", session=session_token(),
        outbound=loopback_outbound(), tools=(*TOOL_NAMES, ASK_USER),
    )  # fmt: skip
    try:
        with_message = json.loads(policy.request_body(observe(0, messages=(MESSAGE,))))
        without = json.loads(policy.request_body(observe(1)))
    finally:
        policy.close()
    schema = observation_schema()
    jsonschema.Draft202012Validator(schema).validate(with_message)
    assert with_message["messages"] == [{"seq": 1, "text": MESSAGE.text}]
    assert "messages" not in without  # absent when there are none, as the schema says
    assert with_message["tools"][-1] == ASK_USER
    assert validate_reply({"action": {"tool": "ask_user", "args": {"question": "Which?"}}}) == (
        Action("ask_user", {"question": "Which?"})
    )
    document = protocol_document()
    assert document["revision"] == PROTOCOL_REVISION == 2
    assert document["tools"][ASK_USER] == TOOL_SCHEMAS[ASK_USER]
    assert "ask_user" in document["conversations"]
    with pytest.raises(ProtocolError):
        validate_reply({"action": {"tool": "ask_someone"}})


def test_the_mcp_server_lists_ask_user_and_returns_follow_ups_with_a_result():
    listed = [t.name for t in tool_list(("shell", ASK_USER))]
    assert listed == ["shell", ASK_USER, "give_up"]
    result = call_result(
        {
            "result": {"ok": True, "tool": "shell"},
            "steps_left": 3,
            "seconds_left": 50,
            "messages": [{"seq": 1, "text": MESSAGE.text}],
        }
    )
    body = json.loads(result.content[0].text)
    assert body["messages"] == [{"seq": 1, "text": MESSAGE.text}]
    quiet = json.loads(call_result({"result": {"ok": True}, "messages": []}).content[0].text)
    assert "messages" not in quiet


def test_the_rulebook_answers_a_follow_up_it_can_work_out_by_its_rules():
    policy = RulebookPolicy()
    first = policy.next_action(observe(0, messages=(FollowUp(1, "and what is 6*7"),)))
    assert first.tool == "shell"
    final = policy.next_action(observe(1, {"ok": True, "tool": "shell", "stdout": "a.txt"}))
    assert isinstance(final, Action) and final.tool == "deliver"
    message = final.args["message"]
    assert "6*7" in message and "42" in message and "a.txt" in message


def test_every_built_in_acknowledges_a_follow_up_even_when_it_gives_up():
    policy = IdlePolicy()
    assert policy.next_action(observe(0)).tool == "shell"
    final = policy.next_action(observe(1, {"ok": True, "tool": "shell"}, (MESSAGE,)))
    assert isinstance(final, GiveUp)
    assert MESSAGE.text in final.message
    # without follow-ups the message is what it always was
    plain = IdlePolicy()
    plain.next_action(observe(0))
    assert MESSAGE.text not in plain.next_action(observe(1, {"ok": True, "tool": "shell"})).message


def test_ask_user_never_reaches_a_sandbox(tmp_path):
    result = tool_call(None, ASK_USER, {"question": "Which?"}, deliver_dir=tmp_path)  # type: ignore[arg-type]
    assert not result.ok and "answered by the battle's lane" in result.error
    too_long = tool_call(None, ASK_USER, {"question": "x" * 2001}, deliver_dir=tmp_path)  # type: ignore[arg-type]
    assert too_long.error == "ask_user: question is longer than 2000 characters"

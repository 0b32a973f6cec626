"""The arena-agent/1 protocol: the reply checker, the schemas it agrees with, request
signing, and the published document."""

import json

import pytest
from rest_framework.test import APIRequestFactory

from agents.policies import Action, GiveUp
from agents.protocol import (
    PROTOCOL_VERSION,
    RETRY_STATUSES,
    THOUGHT_MAX_CHARS,
    ProtocolError,
    observation_schema,
    protocol_document,
    reply_schema,
    sign,
    validate_reply,
    verify,
)
from agents.protocol_api import AgentProtocolApi
from sandboxes.base import TOOL_NAMES
from sandboxes.tools import TOOL_SCHEMAS, tool_call

SECRET = b"arena-secret"
NOW = 1_700_000_000

# One well-formed call of every tool.
VALID_ARGS = {
    "screenshot": {},
    "mouse_move": {"x": 10, "y": 20},
    "click": {"x": 10, "y": 20, "button": "right", "count": 2},
    "drag": {"x1": 0, "y1": 0, "x2": 5, "y2": 5},
    "scroll": {"x": 1, "y": 1, "dy": 3},
    "type": {"text": "hello"},
    "key": {"combo": "ctrl+l"},
    "navigate": {"url": "https://example.org/"},
    "shell": {"command": "ls -la", "timeout_s": 5},
    "deliver": {"message": "done", "files": ["out.txt"]},
}

VALID = [
    *[({"action": {"tool": t, "args": a}}, Action(t, a)) for t, a in VALID_ARGS.items()],
    ({"action": {"tool": "screenshot"}}, Action("screenshot", {})),
    (
        {"action": {"tool": "key", "args": {"combo": "Return"}}, "thought": "submit"},
        Action("key", {"combo": "Return"}),
    ),
    ({"give_up": {"message": "cannot do this"}}, GiveUp("cannot do this")),
    ({"give_up": {"message": ""}, "thought": "nothing to do"}, GiveUp("")),
]

INVALID = [
    ([], "must be a JSON object, not an array"),
    ("shell", "must be a JSON object, not a string"),
    (None, "must be a JSON object, not null"),
    ({}, "needs 'action' or 'give_up'"),
    ({"thought": "hmm"}, "needs 'action' or 'give_up'"),
    (
        {"action": {"tool": "shell", "args": {"command": "ls"}}, "give_up": {"message": "x"}},
        "both 'action' and 'give_up'",
    ),
    ({"action": {"tool": "teleport"}}, "action.tool must be one of screenshot, "),
    ({"action": {"tool": 3}}, "action.tool must be one of"),
    ({"action": {"args": {}}}, "action needs tool"),
    ({"action": "shell ls"}, "action must be an object, not a string"),
    ({"action": {"tool": "shell", "args": ["ls"]}}, "action.args must be an object, not an array"),
    ({"action": {"tool": "shell", "args": "ls"}}, "action.args must be an object, not a string"),
    ({"action": {"tool": "shell", "args": None}}, "action.args must be an object, not null"),
    ({"action": {"tool": "shell", "arguments": {}}}, "action has unknown fields: arguments"),
    ({"give_up": {}}, "give_up needs message"),
    ({"give_up": "tired"}, "give_up must be an object, not a string"),
    ({"give_up": {"message": 42}}, "give_up.message must be a string, not a number"),
    ({"give_up": {"message": "x", "code": 1}}, "give_up has unknown fields: code"),
    ({"give_up": {"message": "x"}, "thought": ["a"]}, "thought must be a string, not an array"),
    (
        {"give_up": {"message": "x"}, "thought": "t" * (THOUGHT_MAX_CHARS + 1)},
        f"thought is longer than {THOUGHT_MAX_CHARS} characters",
    ),
    ({"give-up": {"message": "x"}}, "unknown fields: give-up"),
    ({"action": {"tool": "screenshot"}, "usage": {}}, "unknown fields: usage"),
]


@pytest.mark.parametrize(("reply", "expected"), VALID)
def test_validate_reply_accepts_every_tool_and_giving_up(reply, expected):
    assert validate_reply(reply) == expected


@pytest.mark.parametrize(("reply", "message"), INVALID)
def test_validate_reply_names_what_is_wrong(reply, message):
    with pytest.raises(ProtocolError) as caught:
        validate_reply(reply)
    assert message in str(caught.value)


def test_a_bad_argument_is_left_to_the_tool_which_fails_the_step_not_the_run(tmp_path):
    # Given a reply whose envelope is right but whose argument has the wrong type
    reply = {"action": {"tool": "click", "args": {"x": "ten", "y": 1}}}
    # When the arena checks it, then it passes, as the tool's arguments are the tool's
    # business (the same check every other kind of agent gets)
    action = validate_reply(reply)
    assert action == Action("click", {"x": "ten", "y": 1})
    # and the tool answers with a failed result the agent sees, touching no sandbox
    result = tool_call(None, action.tool, action.args, deliver_dir=tmp_path)
    assert (result.ok, result.error) == (False, "click: x must be an integer")


def test_the_schemas_are_valid_draft_2020_12_and_agree_with_the_checker():
    jsonschema = pytest.importorskip("jsonschema")
    validator_class = jsonschema.Draft202012Validator
    validator_class.check_schema(observation_schema())
    validator_class.check_schema(reply_schema())
    replies = validator_class(reply_schema())
    for reply, _ in VALID:
        assert replies.is_valid(reply), reply
    for reply, _ in INVALID:
        assert not replies.is_valid(reply), reply


def test_the_reply_schema_offers_exactly_the_fixed_tool_set_and_the_repo_tasks_editor():
    tools = reply_schema()["properties"]["action"]["properties"]["tool"]["enum"]
    assert tools == [*TOOL_NAMES, "edit", "ask_user"]  # ask_user: docs/conversations.md
    assert observation_schema()["properties"]["tools"]["items"]["enum"] == tools


# --- signing ----------------------------------------------------------------------------


def test_sign_is_hmac_sha256_over_timestamp_dot_body():
    # A fixed vector: entrants in any language can check their implementation by it.
    assert sign(SECRET, NOW, b'{"step":0}') == (
        "v1=01b8018a6a30dcc7c5cc017652e1a6c3b98fad0a2dcb5b2edc879bbf654c5bc5"
    )


def test_verify_accepts_a_fresh_signature_given_as_header_strings():
    body = b'{"step":0}'
    signature = sign(SECRET, NOW, body)
    assert verify(SECRET, NOW, body, signature, now=NOW)
    assert verify(SECRET, str(NOW), body, signature, now=NOW + 300)
    assert verify(SECRET, str(NOW), body, signature, now=NOW - 300)


@pytest.mark.parametrize(
    ("secret", "timestamp", "body", "signature", "now"),
    [
        (SECRET, NOW, b'{"step":1}', sign(SECRET, NOW, b'{"step":0}'), NOW),  # tampered body
        (SECRET, NOW + 1, b"{}", sign(SECRET, NOW, b"{}"), NOW),  # tampered timestamp
        (b"other", NOW, b"{}", sign(SECRET, NOW, b"{}"), NOW),  # wrong secret
        (SECRET, NOW, b"{}", sign(SECRET, NOW, b"{}"), NOW + 301),  # too old
        (SECRET, NOW, b"{}", sign(SECRET, NOW, b"{}"), NOW - 301),  # from the future
        (SECRET, NOW, b"{}", sign(SECRET, NOW, b"{}").removeprefix("v1="), NOW),  # no scheme
        (SECRET, NOW, b"{}", sign(SECRET, NOW, b"{}").upper(), NOW),
        (SECRET, NOW, b"{}", None, NOW),
        (SECRET, None, b"{}", sign(SECRET, NOW, b"{}"), NOW),
        (SECRET, "", b"{}", sign(SECRET, NOW, b"{}"), NOW),
        (SECRET, "1.7e9", b"{}", sign(SECRET, NOW, b"{}"), NOW),
        (SECRET, "-5", b"{}", sign(SECRET, -5, b"{}"), -5),
        (SECRET, "١٧", b"{}", sign(SECRET, NOW, b"{}"), NOW),  # non-ASCII digits
        (SECRET, NOW, b"{}", "v1=é", NOW),
    ],
)
def test_verify_refuses(secret, timestamp, body, signature, now):
    assert verify(secret, timestamp, body, signature, now=now) is False


# --- the published document -------------------------------------------------------------


def test_the_document_carries_schemas_signing_tools_timeouts_and_retries():
    document = protocol_document()
    assert document["version"] == PROTOCOL_VERSION == "arena-agent/1"
    assert document["request"] == observation_schema()
    assert document["response"] == reply_schema()
    assert document["tools"] == TOOL_SCHEMAS
    assert document["signing"]["algorithm"] == "HMAC-SHA256"
    assert document["signing"]["timestamp_header"] == "X-Arena-Timestamp"
    assert document["signing"]["signature_header"] == "X-Arena-Signature"
    assert document["timeouts"]["attempt_s"] == 30.0
    assert document["retries"]["max_retries"] == 2
    assert document["retries"]["request_id_header"] == "X-Arena-Request-Id"
    assert document["retries"]["retry_on"] == [
        "connection error",
        "timeout",
        *map(str, RETRY_STATUSES),
    ]
    json.dumps(document)  # plain JSON all the way down


def test_the_api_serves_the_document_to_anyone():
    # Given no credentials at all
    request = APIRequestFactory().get("/api/agent-protocol/")
    # When the protocol is asked for
    response = AgentProtocolApi.as_view()(request)
    response.render()
    # Then it is the document, as JSON
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == protocol_document()

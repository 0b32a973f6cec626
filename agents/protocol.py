"""The remote-agent protocol ``arena-agent/1``: JSON over HTTP, one request per step.

The arena POSTs the observation to the entrant's endpoint; the entrant answers with one
action (or gives up). Requests are signed with the agent's secret so the entrant can
tell the arena from anyone else. This module is pure (no Django): the schemas published
at ``/api/agent-protocol/``, the reply checker and the signing helpers live here, and
``agents.remote`` (the arena's client) and the reference entrant both use them.
"""

import hashlib
import hmac
import json
from typing import Any

from agents.policies import Action, GiveUp
from sandboxes.tools import TOOL_SCHEMAS

PROTOCOL_VERSION = "arena-agent/1"
# Additions within the version that an entrant ignoring unknown fields never notices:
# revision 2 adds the ``messages`` field (the submitter's follow-ups) and the
# ``ask_user`` tool (docs/conversations.md).
PROTOCOL_REVISION = 2
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

TIMESTAMP_HEADER = "X-Arena-Timestamp"
SIGNATURE_HEADER = "X-Arena-Signature"
REQUEST_ID_HEADER = "X-Arena-Request-Id"
SIGNATURE_SCHEME = "v1"
SIGNATURE_TOLERANCE_S = 300

# Timeouts and retries: the defaults ``RemotePolicy`` applies and the document states.
ATTEMPT_TIMEOUT_S = 30.0
MAX_RETRIES = 2
BACKOFF_S = 0.5
RETRY_AFTER_CAP_S = 10.0
RETRY_STATUSES = (429, 502, 503, 504)
MAX_REPLY_BYTES = 1_000_000
MESSAGE_MAX_CHARS = 20_000
THOUGHT_MAX_CHARS = 20_000
# The health call (``health_request_body``): one signed POST to the same endpoint, asked
# when an agent is saved to be drawn; one attempt, bounded, never retried.
HEALTH_TIMEOUT_S = 5.0
HEALTH_MAX_REPLY_BYTES = 10_000
HEALTH_REQUEST_ID_PREFIX = "health:"

_REPLY_KEYS = ("action", "give_up", "thought")


class ProtocolError(ValueError):
    """The entrant's reply breaks the protocol; the message names what is wrong."""


# --- schemas ----------------------------------------------------------------------------


def observation_schema() -> dict[str, Any]:
    """JSON Schema of the request body the arena sends for every step."""
    nonnegative = {"type": "integer", "minimum": 0}
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "Observation",
        "description": (
            "One step's observation. Entrants must ignore fields they do not know: the "
            "arena may add some within the same protocol version."
        ),
        "type": "object",
        "properties": {
            "protocol": {"const": PROTOCOL_VERSION},
            "session": {
                "type": "string",
                "minLength": 1,
                "description": (
                    "An opaque token, fixed for one run and new for every run. It names "
                    "neither the battle nor the opponent."
                ),
            },
            "step": {**nonnegative, "description": "0 for the first step of the run."},
            "instruction": {"type": "string", "description": "The task, as submitted."},
            "start_url": {
                "type": "string",
                "description": "The page the browser opened on; empty when there is none.",
            },
            "attachments": {
                "type": "array",
                "description": "Files that came with the task.",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                        "size": nonnegative,
                        "url": {"type": "string", "description": "Where to fetch the file."},
                    },
                    "required": ["name", "sha256", "size"],
                },
            },
            "last_result": {
                "description": (
                    "The previous step's tool result; null on step 0. ok=false with an "
                    "error is a failed call (a bad argument, say): the run goes on."
                ),
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "properties": {
                            "ok": {"type": "boolean"},
                            "tool": {"type": "string"},
                            "stdout": {"type": "string"},
                            "stderr": {"type": "string"},
                            "exit_code": {"type": ["integer", "null"]},
                            "truncated": {"type": "boolean"},
                            "timed_out": {"type": "boolean"},
                            "error": {"type": "string"},
                            "escaped": {
                                "type": "boolean",
                                "description": "Some output held NUL bytes or invalid UTF-8: "
                                "the texts carry them escaped (\\x00, \\xff).",
                            },
                            "data": {"type": "object"},
                        },
                        "required": ["ok", "tool"],
                    },
                ],
            },
            "screenshot": {
                "description": "The screen after the previous step; null without a desktop.",
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "properties": {
                            "media_type": {"const": "image/png"},
                            "data": {"type": "string", "contentEncoding": "base64"},
                        },
                        "required": ["media_type", "data"],
                    },
                ],
            },
            "budgets": {
                "type": "object",
                "properties": {
                    "steps_left": {
                        **nonnegative,
                        "description": "Steps left, this one included.",
                    },
                    "seconds_left": {
                        "type": "number",
                        "minimum": 0,
                        "description": "Wall-clock seconds left in the run when sent.",
                    },
                },
                "required": ["steps_left", "seconds_left"],
            },
            "tools": {
                "type": "array",
                "items": {"enum": list(TOOL_SCHEMAS)},
                "description": "The tools this run offers (see the document's 'tools').",
            },
            "page": page_schema(),
            "messages": messages_schema(),
        },
        "required": [
            "protocol",
            "session",
            "step",
            "instruction",
            "start_url",
            "attachments",
            "last_result",
            "screenshot",
            "budgets",
            "tools",
        ],
    }


def messages_schema() -> dict[str, Any]:
    """JSON Schema of the optional ``messages`` field (revision 2): follow-ups from the
    person who submitted the task, received at this step."""
    return {
        "type": "array",
        "description": (
            "Follow-up messages the person who gave the task sent since the previous "
            "step, oldest first; absent when there are none. Both agents of a battle "
            "receive the same messages in the same order, each at its first step after "
            "the message was sent. Treat them as the user's words, like the instruction."
        ),
        "items": {
            "type": "object",
            "properties": {
                "seq": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The message's number in this battle, from 1.",
                },
                "text": {"type": "string", "maxLength": 2000},
            },
            "required": ["seq", "text"],
        },
    }


def page_schema() -> dict[str, Any]:
    """JSON Schema of the optional ``page`` field: the browser's page as text, sent only
    to agents registered with ``params {"observe": "page_text"}`` (docs/agents.md)."""
    coordinate = {"type": "integer", "minimum": 0}
    element = {
        "type": "object",
        "properties": {
            "i": {"type": "integer", "minimum": 0},
            "role": {
                "type": "string",
                "description": "link, button, textbox, searchbox, combobox, listbox, "
                "checkbox, radio, slider, tab, menuitem or generic.",
            },
            "name": {"type": "string", "description": "Its label, text or placeholder."},
            "tag": {"type": "string"},
            "type": {"type": "string", "description": "An input's type."},
            "field": {"type": "string", "description": "A form field's name attribute."},
            "placeholder": {"type": "string"},
            "value": {"type": "string", "description": "A field's value (a select's option)."},
            "options": {"type": "array", "items": {"type": "string"}},
            "href": {"type": "string"},
            "checked": {"type": "boolean"},
            "disabled": {"type": "boolean"},
            "focused": {"type": "boolean"},
            "x": {**coordinate, "description": "Screen pixels: click here to hit it."},
            "y": coordinate,
            "offscreen": {
                "enum": ["above", "below", "beside"],
                "description": "Instead of x/y: outside the viewport; scroll to reach it.",
            },
        },
        "required": ["i", "role", "name"],
    }
    return {
        "type": "object",
        "description": (
            "The page as text after the previous step (the DOM's visible text and its "
            "interactive elements with screen coordinates), for agents that ask for it; "
            "absent otherwise, and absent in a step whose browser did not answer. The "
            "page's content is the web's: untrusted."
        ),
        "properties": {
            "url": {"type": "string"},
            "title": {"type": "string"},
            "text": {"type": "string", "maxLength": 8000},
            "text_truncated": {"type": "boolean"},
            "elements": {"type": "array", "maxItems": 150, "items": element},
            "elements_total": {"type": "integer", "minimum": 0},
            "viewport": {
                "type": "object",
                "description": "Screen pixels: width, height, left, top (the page's origin "
                "on the screen, below the toolbar); scroll_y and page_height in CSS pixels.",
            },
            "escaped": {"type": "boolean"},
        },
        "required": ["url", "title", "text", "elements"],
    }


def reply_schema() -> dict[str, Any]:
    """JSON Schema of the entrant's answer. ``validate_reply`` enforces exactly this;
    the tool's arguments are checked by the tool itself (see ``protocol_document``)."""
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "Reply",
        "description": "Exactly one of 'action' and 'give_up'; 'thought' is optional.",
        "type": "object",
        "properties": {
            "action": {
                "type": "object",
                "properties": {
                    "tool": {"enum": list(TOOL_SCHEMAS)},
                    "args": {
                        "type": "object",
                        "description": (
                            "The tool's arguments, as its 'parameters' schema in the "
                            "document's 'tools' says; absent means {}."
                        ),
                    },
                },
                "required": ["tool"],
                "additionalProperties": False,
            },
            "give_up": {
                "type": "object",
                "properties": {"message": {"type": "string", "maxLength": MESSAGE_MAX_CHARS}},
                "required": ["message"],
                "additionalProperties": False,
            },
            "thought": {
                "type": "string",
                "maxLength": THOUGHT_MAX_CHARS,
                "description": "Why the agent chose this; recorded with the step.",
            },
        },
        "oneOf": [{"required": ["action"]}, {"required": ["give_up"]}],
        "additionalProperties": False,
    }


def protocol_document() -> dict[str, Any]:
    """Everything an entrant needs, served as JSON at ``/api/agent-protocol/``."""
    return {
        "version": PROTOCOL_VERSION,
        "revision": PROTOCOL_REVISION,
        "conversations": (
            "Revision 2: an observation may carry 'messages', follow-ups from the person "
            "who gave the task, and a battle's desktop runs offer the tool 'ask_user' "
            "(listed in the observation's 'tools' when offered): reply with the action "
            "{'tool': 'ask_user', 'args': {'question': ...}} and the next observation's "
            "last_result holds the answer in 'stdout' (and data.answer), or ok=false with "
            "error 'no answer ...' after at most 120 s. The wait counts against the run's "
            "time budget, and the call is a step."
        ),
        "transport": (
            "For every step the arena POSTs the observation as JSON (UTF-8, "
            "Content-Type: application/json) to the agent's endpoint, from the arena's "
            "worker host, never from the sandbox. The entrant answers 200 with a JSON "
            f"reply of at most {MAX_REPLY_BYTES} bytes. Redirects are not followed."
        ),
        "request": observation_schema(),
        "response": reply_schema(),
        "validation": (
            "A reply that is not JSON or breaks the response schema is a protocol error: "
            "the run ends as an error. The tool's arguments are checked by the tool, as "
            "for every other agent: a bad argument makes the step fail (last_result.ok "
            "is false, last_result.error says why) and the run goes on."
        ),
        "signing": {
            "algorithm": "HMAC-SHA256",
            "secret": "The per-agent secret the arena's admin registered with the agent.",
            "timestamp_header": TIMESTAMP_HEADER,
            "signature_header": SIGNATURE_HEADER,
            "signed_payload": "the ASCII timestamp, a '.', then the raw request body bytes",
            "signature_format": f"{SIGNATURE_SCHEME}=<lowercase hex digest>",
            "tolerance_s": SIGNATURE_TOLERANCE_S,
            "description": (
                f"{TIMESTAMP_HEADER} is the Unix time in seconds when the attempt was "
                f"sent. Recompute the HMAC over the bytes received (before parsing), "
                f"compare in constant time, and refuse (401) a mismatch or a timestamp "
                f"more than {SIGNATURE_TOLERANCE_S} s from your clock. Replies are not "
                "signed: the entrant is reached over the URL the admin registered, so "
                "use https beyond localhost."
            ),
        },
        "health": health_document(),
        "tools": TOOL_SCHEMAS,
        "timeouts": {
            "attempt_s": ATTEMPT_TIMEOUT_S,
            "description": (
                "Each attempt (connect, send, receive) must finish within attempt_s "
                "(the default; an agent's registration may set another). The arena never "
                "waits past the run's remaining wall-clock budget (budgets.seconds_left), "
                "retries and backoff included."
            ),
        },
        "retries": {
            "max_retries": MAX_RETRIES,
            "retry_on": [
                "connection error",
                "timeout",
                *(str(status) for status in RETRY_STATUSES),
            ],
            "backoff_s": BACKOFF_S,
            "backoff": "exponential: backoff_s, then 2 × backoff_s, ...",
            "retry_after_cap_s": RETRY_AFTER_CAP_S,
            "request_id_header": REQUEST_ID_HEADER,
            "description": (
                "A retry sends the same body and the same "
                f"{REQUEST_ID_HEADER} (one per session and step), re-signed with a fresh "
                "timestamp: entrants should answer a repeated request id with the reply "
                "they gave it, without acting twice. A Retry-After header (seconds) on "
                f"429 or 503 sets the wait, up to retry_after_cap_s. Any other status, a "
                "redirect, or an invalid reply is not retried. When the retries are "
                "exhausted the run ends as an error."
            ),
        },
    }


# --- the health call ----------------------------------------------------------------------


def health_request_body() -> bytes:
    """The body of the health call: the protocol version and ``"health": true`` (an
    observation never has a ``health`` field, so an entrant tells the two apart)."""
    return json.dumps({"protocol": PROTOCOL_VERSION, "health": True}).encode()


def health_reply_schema() -> dict[str, Any]:
    """JSON Schema of the entrant's answer to the health call."""
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "Health reply",
        "type": "object",
        "properties": {
            "protocol": {"const": PROTOCOL_VERSION},
            "ok": {"const": True},
        },
        "required": ["protocol", "ok"],
    }


def health_document() -> dict[str, Any]:
    """The health call, as ``protocol_document`` publishes it."""
    return {
        "request": {
            "$schema": JSON_SCHEMA_DIALECT,
            "title": "Health request",
            "type": "object",
            "properties": {"protocol": {"const": PROTOCOL_VERSION}, "health": {"const": True}},
            "required": ["protocol", "health"],
        },
        "response": health_reply_schema(),
        "timeout_s": HEALTH_TIMEOUT_S,
        "description": (
            "Before an agent is entered (an admin saving it, a team registering it, an "
            "admin resuming it) the arena POSTs this body to the agent's endpoint, signed "
            f"like every request, with an {REQUEST_ID_HEADER} starting "
            f"'{HEALTH_REQUEST_ID_PREFIX}'. Answer 200 with the reply above, without "
            "acting. One attempt, no retry, within timeout_s: an endpoint that does not "
            "answer it, refuses the signature, or speaks another protocol version is not "
            "entered, and the person saving it is told why."
        ),
    }


def validate_health_reply(obj: Any) -> str:
    """Checks a parsed health reply; returns the protocol version it names. Raises
    ``ProtocolError`` naming what is wrong."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"the health reply must be a JSON object, not {_json_type(obj)}")
    version = obj.get("protocol")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"the health reply names protocol {_excerpt(version)}; the arena speaks "
            f"{PROTOCOL_VERSION!r}"
        )
    if obj.get("ok") is not True:
        raise ProtocolError('the health reply must say "ok": true')
    return version


# --- replies ----------------------------------------------------------------------------


def validate_reply(obj: Any) -> Action | GiveUp:
    """Checks a parsed reply against ``reply_schema`` and returns what it asks for.
    Raises ``ProtocolError`` naming the first thing that is wrong."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"the reply must be a JSON object, not {_json_type(obj)}")
    unknown = sorted(set(obj) - set(_REPLY_KEYS))
    if unknown:
        raise ProtocolError(f"the reply has unknown fields: {', '.join(unknown)}")
    if "action" in obj and "give_up" in obj:
        raise ProtocolError("the reply has both 'action' and 'give_up'; send one")
    if "thought" in obj:
        _check_string(obj["thought"], "thought", THOUGHT_MAX_CHARS)
    if "give_up" in obj:
        give_up = _check_object(obj["give_up"], "give_up", required=("message",))
        _check_string(give_up["message"], "give_up.message", MESSAGE_MAX_CHARS)
        return GiveUp(give_up["message"])
    if "action" not in obj:
        raise ProtocolError("the reply needs 'action' or 'give_up'")
    action = _check_object(obj["action"], "action", required=("tool",), optional=("args",))
    tool = action["tool"]
    if not isinstance(tool, str) or tool not in TOOL_SCHEMAS:
        raise ProtocolError(
            f"action.tool must be one of {', '.join(TOOL_SCHEMAS)}; got {_excerpt(tool)}"
        )
    args = action.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError(f"action.args must be an object, not {_json_type(args)}")
    return Action(tool, args)


def _check_object(
    value: Any, where: str, *, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} must be an object, not {_json_type(value)}")
    missing = [name for name in required if name not in value]
    if missing:
        raise ProtocolError(f"{where} needs {', '.join(missing)}")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        raise ProtocolError(f"{where} has unknown fields: {', '.join(unknown)}")
    return value


def _check_string(value: Any, where: str, max_chars: int) -> None:
    if not isinstance(value, str):
        raise ProtocolError(f"{where} must be a string, not {_json_type(value)}")
    if len(value) > max_chars:
        raise ProtocolError(f"{where} is longer than {max_chars} characters")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _excerpt(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- signing ----------------------------------------------------------------------------


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``X-Arena-Signature`` value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_SCHEME}={digest}"


def verify(
    secret: bytes,
    timestamp: int | str | None,
    body: bytes,
    signature: str | None,
    now: float,
    tolerance_s: int = SIGNATURE_TOLERANCE_S,
) -> bool:
    """For entrants: whether ``signature`` (the header as received) signs ``body`` with
    ``secret`` at ``timestamp`` (the header, as received), and that timestamp is within
    ``tolerance_s`` of ``now``. Missing or malformed headers are simply False."""
    if signature is None or timestamp is None:
        return False
    if isinstance(timestamp, str):
        if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
            return False
        timestamp = int(timestamp)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body).encode(), signature.encode())

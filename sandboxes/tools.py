"""The fixed tool set: its schemas (identical for every agent and lane) and the one
dispatcher the orchestrator calls. Bad arguments become an ``ok=False`` result the
agent sees, never an exception that ends the run."""

from pathlib import Path
from typing import Any

from sandboxes.base import TOOL_NAMES, Sandbox, ToolError, ToolResult
from sandboxes.edit import EDIT_SCHEMA, sandbox_edit

_INT = {"type": "integer", "minimum": 0}
TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "screenshot": {
        "description": "Take a screenshot of the desktop (PNG).",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
    "mouse_move": {
        "description": "Move the pointer to (x, y) in screen pixels.",
        "parameters": {
            "type": "object",
            "properties": {"x": _INT, "y": _INT},
            "required": ["x", "y"],
            "additionalProperties": False,
        },
    },
    "click": {
        "description": "Click at (x, y); button left, middle or right; count 1-3.",
        "parameters": {
            "type": "object",
            "properties": {
                "x": _INT,
                "y": _INT,
                "button": {"type": "string", "enum": ["left", "middle", "right"]},
                "count": {"type": "integer", "minimum": 1, "maximum": 3},
            },
            "required": ["x", "y"],
            "additionalProperties": False,
        },
    },
    "drag": {
        "description": "Press at (x1, y1), move to (x2, y2), release.",
        "parameters": {
            "type": "object",
            "properties": {"x1": _INT, "y1": _INT, "x2": _INT, "y2": _INT},
            "required": ["x1", "y1", "x2", "y2"],
            "additionalProperties": False,
        },
    },
    "scroll": {
        "description": "Scroll at (x, y) by dx, dy notches (positive: right, down).",
        "parameters": {
            "type": "object",
            "properties": {
                "x": _INT,
                "y": _INT,
                "dx": {"type": "integer", "minimum": -50, "maximum": 50},
                "dy": {"type": "integer", "minimum": -50, "maximum": 50},
            },
            "required": ["x", "y"],
            "additionalProperties": False,
        },
    },
    "type": {
        "description": "Type text with the keyboard.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 10000}},
            "required": ["text"],
            "additionalProperties": False,
        },
    },
    "key": {
        "description": "Press a key combination, e.g. 'Return', 'ctrl+l', 'shift+Tab'.",
        "parameters": {
            "type": "object",
            "properties": {"combo": {"type": "string", "maxLength": 100}},
            "required": ["combo"],
            "additionalProperties": False,
        },
    },
    "navigate": {
        "description": "Open an http(s) URL in the browser.",
        "parameters": {
            "type": "object",
            "properties": {"url": {"type": "string", "maxLength": 2000}},
            "required": ["url"],
            "additionalProperties": False,
        },
    },
    "shell": {
        "description": "Run a shell command in /work (bounded time and output).",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "maxLength": 20000},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    "deliver": {
        "description": "Finish: deliver a final message and optionally files from /work.",
        "parameters": {
            "type": "object",
            "properties": {
                "message": {"type": "string", "maxLength": 20000},
                "files": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
            },
            "required": ["message"],
            "additionalProperties": False,
        },
    },
}
# Besides the fixed set every lane may be offered: ``edit``, offered on repo tasks only
# (battles.services.coding.CODING_TOOLS), never on a desktop (docs/coding.md).
TOOL_SCHEMAS["edit"] = EDIT_SCHEMA
# And on a battle's desktop lanes: ``ask_user``, a question to the person who submitted
# the task. The lane answers it (battles.services.conversation), never the sandbox; it
# counts as a step (docs/conversations.md).
ASK_USER = "ask_user"
QUESTION_MAX_CHARS = 2000
TOOL_SCHEMAS[ASK_USER] = {
    "description": (
        "Ask the person who gave you the task a short question and wait for the answer "
        "(at most 120 s, and never past your time budget): the result's stdout holds the "
        "answer, or the result fails with 'no answer' and you carry on. Counts as a step."
    ),
    "parameters": {
        "type": "object",
        "properties": {"question": {"type": "string", "maxLength": QUESTION_MAX_CHARS}},
        "required": ["question"],
        "additionalProperties": False,
    },
}
assert tuple(TOOL_SCHEMAS) == (*TOOL_NAMES, "edit", ASK_USER)


def _check_args(tool: str, args: Any) -> dict[str, Any]:
    """A small validator for the schemas above (flat objects of ints, numbers,
    strings, string arrays); messages say what to fix."""
    if not isinstance(args, dict):
        raise ToolError(f"{tool} takes a JSON object of arguments; got {str(args)[:200]!r}")
    schema = TOOL_SCHEMAS[tool]["parameters"]
    properties = schema["properties"]
    unknown = sorted(set(args) - set(properties))
    if unknown:
        raise ToolError(f"{tool} has no argument {', '.join(unknown)}")
    missing = [name for name in schema.get("required", []) if name not in args]
    if missing:
        raise ToolError(f"{tool} needs {', '.join(missing)}")
    for name, value in args.items():
        rule = properties[name]
        kind = rule.get("type")
        if kind == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
            raise ToolError(f"{tool}: {name} must be an integer")
        if kind == "number" and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise ToolError(f"{tool}: {name} must be a number")
        if kind == "string" and not isinstance(value, str):
            raise ToolError(f"{tool}: {name} must be a string")
        if kind == "array" and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise ToolError(f"{tool}: {name} must be a list of strings")
        if "minimum" in rule and value < rule["minimum"]:
            raise ToolError(f"{tool}: {name} must be at least {rule['minimum']}")
        if "maximum" in rule and value > rule["maximum"]:
            raise ToolError(f"{tool}: {name} must be at most {rule['maximum']}")
        if "exclusiveMinimum" in rule and value <= rule["exclusiveMinimum"]:
            raise ToolError(f"{tool}: {name} must be more than {rule['exclusiveMinimum']}")
        if "maxLength" in rule and len(value) > rule["maxLength"]:
            raise ToolError(f"{tool}: {name} is longer than {rule['maxLength']} characters")
        if "maxItems" in rule and len(value) > rule["maxItems"]:
            raise ToolError(f"{tool}: {name} has more than {rule['maxItems']} items")
        if "enum" in rule and value not in rule["enum"]:
            raise ToolError(f"{tool}: {name} must be one of {', '.join(rule['enum'])}")
    return args


def check_ask_user(args: Any) -> str:
    """The question of an ``ask_user`` call, checked as every tool's arguments are;
    raises ``ToolError`` saying what to fix."""
    question = _check_args(ASK_USER, args)["question"].strip()
    if not question:
        raise ToolError("ask_user: question must not be empty")
    return question


def tool_call(sandbox: Sandbox, tool: str, args: Any, *, deliver_dir: Path) -> ToolResult:
    """Runs one call of the fixed tool set in ``sandbox``. ``deliver_dir`` receives
    delivered files. Every failure comes back as a result with ``ok=False``."""
    if tool not in TOOL_SCHEMAS:
        return ToolResult(ok=False, tool=str(tool)[:40], error=f"there is no tool {tool!r}")
    try:
        a = _check_args(tool, args)
        if tool == "screenshot":
            return sandbox.screenshot()
        if tool == "mouse_move":
            return sandbox.mouse_move(a["x"], a["y"])
        if tool == "click":
            return sandbox.click(a["x"], a["y"], a.get("button", "left"), a.get("count", 1))
        if tool == "drag":
            return sandbox.drag(a["x1"], a["y1"], a["x2"], a["y2"])
        if tool == "scroll":
            return sandbox.scroll(a["x"], a["y"], a.get("dx", 0), a.get("dy", 0))
        if tool == "type":
            return sandbox.type(a["text"])
        if tool == "key":
            return sandbox.key(a["combo"])
        if tool == "navigate":
            return sandbox.navigate(a["url"])
        if tool == "shell":
            return sandbox.shell(a["command"], a.get("timeout_s"))
        if tool == "edit":
            return sandbox_edit(sandbox, a)
        if tool == ASK_USER:  # the lane's to answer (check_ask_user), never the sandbox's
            raise ToolError("ask_user is answered by the battle's lane, not the sandbox")
        files = sandbox.collect_files(a.get("files", []), deliver_dir)
        return ToolResult(
            ok=True,
            tool="deliver",
            data={"files": [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in files]},
        )
    except ToolError as exc:
        return ToolResult(ok=False, tool=tool, error=str(exc))

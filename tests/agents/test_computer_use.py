"""The native computer-use adapters: Anthropic's computer tool and OpenAI's
computer-use model (Responses API), on the official SDKs against fake servers on
127.0.0.1 that speak their wire formats (tests/agents/fake_computer_use.py).

Each native action maps to one call of the fixed tool set with its coordinates scaled
from the screen the model sees to the real one; screenshots go back scaled, in each
provider's format; an action the arena cannot run becomes an error step the model
reads; the agent's params reach the wire; a whole battle ends with the models'
final messages."""

import io
import json
import random

import pytest
from PIL import Image as PILImage

from agents.policies import Action, GiveUp, Observation
from agents.providers.anthropic_computer import AnthropicComputerUseClient
from agents.providers.base import ProviderError, Text, Turn
from agents.providers.computer_actions import (
    ActionError,
    Geometry,
    anthropic_display,
    key_combo,
    png_size,
    xdotool_combo,
)
from agents.providers.openai_computer import OpenAIComputerUseClient
from agents.providers.registry import ProviderDefaults, client_for
from agents.scaffold import ScaffoldPolicy
from sandboxes.tools import tool_call as dispatch
from tests.agents.conftest import loopback_outbound
from tests.agents.fake_computer_use import (
    FakeAnthropicComputer,
    FakeOpenAIResponses,
    Output,
    computer_call,
    function_call,
    message,
    reasoning,
)
from tests.agents.fake_providers import HttpError, RawJSON, text, tool_call

KEY = "sk-ant-test-computer-0123456789abcdef"
OPENAI_KEY = "sk-test-computer-0123456789abcdef"


def screen_png(width: int = 1280, height: int = 800) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), (30, 90, 160)).save(out, format="PNG")
    return out.getvalue()


SCREEN = screen_png()


def observation(step: int = 0, last_result: dict | None = None, png: bytes = SCREEN):
    return Observation(
        step=step,
        instruction="Open the demo site and search for owls",
        start_url="http://demo.arena.test/",
        last_result=last_result,
        steps_left=10 - step,
        seconds_left=300,
        screenshot_png=png,
    )


def anthropic_policy(fake, **params) -> ScaffoldPolicy:
    client = AnthropicComputerUseClient(
        "claude-test", KEY, fake.base_url, params=params, outbound=loopback_outbound()
    )
    return ScaffoldPolicy(client=client, max_tokens=params.get("max_tokens", 1024))


def openai_policy(fake, **params) -> ScaffoldPolicy:
    client = OpenAIComputerUseClient(
        "computer-use-preview",
        OPENAI_KEY,
        fake.base_url,
        params=params,
        outbound=loopback_outbound(),
    )
    return ScaffoldPolicy(client=client, max_tokens=params.get("max_tokens", 1024))


# -- pure parts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("real", "expected"),
    [
        ((1280, 800), (1280, 800)),  # WXGA already
        ((2560, 1600), (1280, 800)),  # 16:10 → WXGA
        ((2048, 1536), (1024, 768)),  # 4:3 → XGA
        ((1920, 1080), (1365, 768)),  # ~16:9 → FWXGA, aspect kept
        ((1000, 1000), (1000, 1000)),  # no target of that ratio: unscaled
        ((800, 500), (800, 500)),  # smaller than WXGA: never upscaled
    ],
)
def test_anthropic_display_is_the_recommended_target_of_the_screens_ratio(real, expected):
    assert anthropic_display(real) == expected


def test_geometry_scales_model_points_to_the_real_screen_and_refuses_outside_points():
    geometry = Geometry(real=(1280, 800), model=(1024, 640))
    assert geometry.to_real(512, 320) == (640, 400)
    assert geometry.to_real(0, 0) == (0, 0)
    assert geometry.to_real(1023, 639) == (1279, 799)
    assert geometry.to_model(640, 400) == (512, 320)
    with pytest.raises(ActionError, match=r"\(1024, 10\) is outside the 1024×640 screen"):
        geometry.to_real(1024, 10)
    with pytest.raises(ActionError, match="must be numbers"):
        geometry.to_real("12", 10)
    with pytest.raises(ActionError, match="must be numbers"):
        geometry.to_real(True, 10)


@pytest.mark.parametrize(
    ("text", "combo"),
    [
        ("Return", "Return"),
        ("ctrl+l", "ctrl+l"),
        ("ctrl+shift+T", "ctrl+shift+t"),
        ("alt+Tab", "alt+Tab"),
        ("super", "super"),
        ("cmd+c", "super+c"),
        ("Enter", "Return"),
        ("Escape", "Escape"),
        ("Page_Down", "Next"),
        ("KP_0", "KP_0"),
        ("F5", "F5"),
        ("ctrl+/", "ctrl+slash"),
        ("ctrl++", "ctrl+plus"),
        ("space", "space"),
    ],
)
def test_anthropic_key_text_becomes_a_combination_the_key_tool_takes(text, combo):
    assert xdotool_combo(text) == combo
    assert set(combo) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+_-")


@pytest.mark.parametrize(
    ("keys", "combo"),
    [
        (["CTRL", "L"], "ctrl+l"),
        (["ENTER"], "Return"),
        (["ESC"], "Escape"),
        (["SHIFT", "TAB"], "shift+Tab"),
        (["ARROWDOWN"], "Down"),
        (["PAGEUP"], "Prior"),
        (["BACKSPACE"], "BackSpace"),
        (["ALT", "F4"], "alt+F4"),
        (["META", "SPACE"], "super+space"),
        (["/"], "slash"),
    ],
)
def test_openai_keypress_keys_become_xdotool_names(keys, combo):
    assert key_combo(keys) == combo


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ctrl+a Delete", "one key combination per action"),
        ("", "key needs text"),
        ("ctrl+", "malformed key combination"),
        ("ctrl+é", "unknown key"),
    ],
)
def test_bad_key_text_is_a_clear_error(text, message):
    with pytest.raises(ActionError, match=message):
        xdotool_combo(text)


# -- Anthropic -------------------------------------------------------------------------

ANTHROPIC_CASES = [
    # (native input, arena tool, arena args) with the model seeing 1024×640 of 1280×800
    ({"action": "screenshot"}, "screenshot", {}),
    ({"action": "wait", "duration": 2}, "screenshot", {}),
    ({"action": "left_click", "coordinate": [512, 320]}, "click", {"x": 640, "y": 400}),
    (
        {"action": "right_click", "coordinate": [100, 80]},
        "click",
        {"x": 125, "y": 100, "button": "right"},
    ),
    (
        {"action": "middle_click", "coordinate": [8, 8]},
        "click",
        {"x": 10, "y": 10, "button": "middle"},
    ),
    (
        {"action": "double_click", "coordinate": [400, 200]},
        "click",
        {"x": 500, "y": 250, "count": 2},
    ),
    (
        {"action": "triple_click", "coordinate": [400, 200]},
        "click",
        {"x": 500, "y": 250, "count": 3},
    ),
    ({"action": "mouse_move", "coordinate": [1023, 639]}, "mouse_move", {"x": 1279, "y": 799}),
    (
        {"action": "left_click_drag", "start_coordinate": [80, 80], "coordinate": [160, 240]},
        "drag",
        {"x1": 100, "y1": 100, "x2": 200, "y2": 300},
    ),
    (
        {
            "action": "scroll",
            "coordinate": [512, 320],
            "scroll_direction": "down",
            "scroll_amount": 5,
        },
        "scroll",
        {"x": 640, "y": 400, "dx": 0, "dy": 5},
    ),
    (
        {"action": "scroll", "coordinate": [0, 0], "scroll_direction": "left", "scroll_amount": 2},
        "scroll",
        {"x": 0, "y": 0, "dx": -2, "dy": 0},
    ),
    (
        {"action": "scroll", "coordinate": [0, 0], "scroll_direction": "up", "scroll_amount": 99},
        "scroll",
        {"x": 0, "y": 0, "dx": 0, "dy": -50},
    ),
    ({"action": "type", "text": "owls\n"}, "type", {"text": "owls\n"}),
    ({"action": "key", "text": "ctrl+l"}, "key", {"combo": "ctrl+l"}),
    ({"action": "hold_key", "text": "shift", "duration": 1}, "key", {"combo": "shift"}),
    ({"action": "cursor_position"}, "screenshot", {}),
]


@pytest.mark.parametrize(("native", "tool", "args"), ANTHROPIC_CASES)
def test_each_anthropic_action_becomes_one_arena_call_with_scaled_coordinates(native, tool, args):
    with FakeAnthropicComputer(api_key=KEY) as fake:
        fake.push(tool_call("computer", native))
        policy = anthropic_policy(fake, display_width_px=1024, display_height_px=640)
        decision = policy.next_action(observation())
    assert decision == Action(tool, args)
    request = fake.last_request
    assert request.path.split("?")[0] == "/v1/messages"
    assert request.headers["anthropic-beta"] == "computer-use-2025-01-24"
    computer = [t for t in request.json["tools"] if t.get("name") == "computer"]
    assert computer == [
        {
            "type": "computer_20250124",
            "name": "computer",
            "display_width_px": 1024,
            "display_height_px": 640,
        }
    ]
    # The pointer and keyboard tools are the computer tool; the rest stay as tools.
    assert sorted(t["name"] for t in request.json["tools"] if "type" not in t) == [
        "deliver",
        "navigate",
        "shell",
    ]
    # The model saw the screen at its size.
    assert [png_size(p) for p in FakeAnthropicComputer.images(request.json)] == [(1024, 640)]
    assert "1024×640" in request.json["system"]


def test_anthropic_results_go_back_as_scaled_images_and_the_native_call_is_replayed():
    with FakeAnthropicComputer(api_key=KEY) as fake:
        fake.push(
            tool_call(
                "computer", {"action": "left_click", "coordinate": [512, 320]}, text="Click."
            ),
            tool_call("computer", {"action": "cursor_position"}),
            tool_call("deliver", {"message": "Found the owls page."}),
        )
        policy = anthropic_policy(fake, display_width_px=1024, display_height_px=640)
        assert policy.next_action(observation()) == Action("click", {"x": 640, "y": 400})
        ok = {"ok": True, "tool": "click"}
        assert policy.next_action(observation(1, ok)) == Action("screenshot", {})
        last = policy.next_action(observation(2, {"ok": True, "tool": "screenshot"}))
    assert last == Action("deliver", {"message": "Found the owls page."})

    second = fake.requests[1].json["messages"]
    # The assistant's content exactly as the model sent it.
    assert second[1]["content"][0] == {"type": "text", "text": "Click."}
    native = second[1]["content"][1]
    assert (native["name"], native["input"]) == (
        "computer",
        {"action": "left_click", "coordinate": [512, 320]},
    )
    result = second[2]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == native["id"]
    assert [b["type"] for b in result["content"]] == ["image"]
    assert "is_error" not in result
    assert [png_size(p) for p in FakeAnthropicComputer.images(fake.requests[1].json)] == [
        (1024, 640),
        (1024, 640),
    ]
    # cursor_position is answered with the pointer in the model's coordinates.
    third = fake.requests[2].json["messages"]
    assert third[-1]["content"][0]["content"][0] == {"type": "text", "text": "X=512,Y=320"}


def test_anthropic_older_screenshots_are_dropped_as_the_scaffold_says():
    with FakeAnthropicComputer(api_key=KEY) as fake:
        fake.push(
            tool_call("computer", {"action": "screenshot"}),
            tool_call("computer", {"action": "screenshot"}),
            text("done"),
        )
        policy = anthropic_policy(fake)
        policy.keep_screenshots = 1
        policy.next_action(observation())
        policy.next_action(observation(1, {"ok": True, "tool": "screenshot"}))
        policy.next_action(observation(2, {"ok": True, "tool": "screenshot"}))
    messages = fake.last_request.json["messages"]
    older = messages[2]["content"][0]
    assert older["content"] == [{"type": "text", "text": "[an older screenshot was omitted]"}]
    assert len(FakeAnthropicComputer.images(fake.last_request.json)) == 1


def test_anthropic_params_pass_through_to_the_wire():
    with FakeAnthropicComputer(api_key=KEY) as fake:
        fake.push(tool_call("computer", {"action": "screenshot"}))
        policy = anthropic_policy(
            fake,
            tool_version="computer_20251124",
            betas=["token-efficient-tools-2025-02-19"],
            thinking={"type": "enabled", "budget_tokens": 2048},
            temperature=1,
            top_k=40,
            max_tokens=4096,
        )
        policy.next_action(observation())
    request = fake.last_request
    assert request.headers["anthropic-beta"] == (
        "computer-use-2025-11-24,token-efficient-tools-2025-02-19"
    )
    assert request.json["max_tokens"] == 4096
    assert request.json["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert (request.json["temperature"], request.json["top_k"]) == (1, 40)
    assert request.json["tools"][0]["type"] == "computer_20251124"
    # The arena's screen is WXGA: no scaling unless params ask.
    assert request.json["tools"][0]["display_width_px"] == 1280
    assert [png_size(p) for p in FakeAnthropicComputer.images(request.json)] == [(1280, 800)]


def test_anthropic_thinking_blocks_are_replayed_with_their_signatures():
    thinking = {"type": "thinking", "thinking": "Click the box.", "signature": "sig-abc"}
    with FakeAnthropicComputer(api_key=KEY) as fake:
        first = tool_call("computer", {"action": "left_click", "coordinate": [10, 10]})
        body = {
            "id": "msg_01thinking",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [
                thinking,
                {
                    "type": "tool_use",
                    "id": "toolu_01abc",
                    "name": "computer",
                    "input": first.tool_calls[0].arguments,
                },
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        fake.push(RawJSON(body), text("done"))
        policy = anthropic_policy(fake, thinking={"type": "enabled", "budget_tokens": 1024})
        policy.next_action(observation())
        policy.next_action(observation(1, {"ok": True, "tool": "click"}))
    assert fake.requests[1].json["messages"][1]["content"][0] == thinking


@pytest.mark.parametrize(
    ("native", "tool", "message"),
    [
        (
            {"action": "left_mouse_down"},
            "computer.left_mouse_down",
            "left_mouse_down: the arena has no held mouse button: use left_click_drag",
        ),
        (
            {"action": "left_click", "coordinate": [2000, 10]},
            "click",
            "left_click: coordinate (2000, 10) is outside the 1280×800 screen",
        ),
        (
            {"action": "left_click"},
            "click",
            "left_click: coordinate [x, y] is required: the pointer has not moved yet",
        ),
        (
            {"action": "scroll", "coordinate": [5, 5], "scroll_direction": "sideways"},
            "scroll",
            "scroll: scroll_direction must be up, down, left or right",
        ),
        ({"action": "key", "text": "ctrl+a Delete"}, "key", "key: one key combination"),
        ({"action": "teleport"}, "computer.teleport", "teleport: unknown action 'teleport'"),
        ({"coordinate": [1, 1]}, "computer.?", "?: action is required"),
    ],
)
def test_an_anthropic_action_the_arena_cannot_run_is_an_error_step_the_model_reads(
    native, tool, message
):
    with FakeAnthropicComputer(api_key=KEY) as fake:
        fake.push(tool_call("computer", native), text("I give up."))
        policy = anthropic_policy(fake, final_text="give_up")
        decision = policy.next_action(observation())
        assert decision.tool == tool and isinstance(decision.args, str)
        assert decision.args.startswith(message)
        # The dispatcher records it as an error step (before touching any sandbox).
        result = dispatch(None, decision.tool, decision.args, deliver_dir=None)
        assert result.ok is False and result.error
        assert policy.next_action(observation(1, result.as_dict())) == GiveUp("I give up.")
    answer = fake.requests[1].json["messages"][-1]["content"][0]
    assert answer["is_error"] is True
    assert answer["content"][0]["text"].startswith(f"Error: {message}")
    # The span keeps what the model sent.
    assert policy.spans[0].output["tool_uses"][0]["raw"].startswith(message)


def test_a_text_only_anthropic_reply_delivers_it_as_the_final_message():
    with FakeAnthropicComputer(api_key=KEY) as fake:
        fake.push(text("The search shows 3 owls."))
        decision = anthropic_policy(fake).next_action(observation())
    assert decision == Action("deliver", {"message": "The search shows 3 owls."})


def test_anthropic_bad_params_are_refused_when_the_client_is_built():
    for params, refusal in [
        ({"tool_version": "computer_1999"}, "tool_version must be one of"),
        ({"display_width_px": 0, "display_height_px": 600}, "display_width_px must be"),
        ({"betas": "x"}, "betas must be a list"),
        ({"final_text": "shout"}, "final_text must be"),
    ]:
        with pytest.raises(ProviderError, match=refusal):
            AnthropicComputerUseClient("m", KEY, "http://127.0.0.1:9", params=params)


def test_a_provider_error_stays_a_provider_error():
    with FakeAnthropicComputer(api_key=KEY) as fake:
        fake.push(HttpError(400, message="messages: bad"))
        with pytest.raises(ProviderError, match="HTTP 400"):
            anthropic_policy(fake).next_action(observation())


# -- OpenAI ----------------------------------------------------------------------------

OPENAI_CASES = [
    ({"type": "screenshot"}, "screenshot", {}),
    ({"type": "wait"}, "screenshot", {}),
    ({"type": "click", "button": "left", "x": 512, "y": 320}, "click", {"x": 640, "y": 400}),
    (
        {"type": "click", "button": "right", "x": 100, "y": 80},
        "click",
        {"x": 125, "y": 100, "button": "right"},
    ),
    (
        {"type": "click", "button": "wheel", "x": 100, "y": 80},
        "click",
        {"x": 125, "y": 100, "button": "middle"},
    ),
    ({"type": "click", "button": "back", "x": 1, "y": 1}, "key", {"combo": "alt+Left"}),
    ({"type": "double_click", "x": 400, "y": 200}, "click", {"x": 500, "y": 250, "count": 2}),
    (
        {"type": "drag", "path": [{"x": 80, "y": 80}, {"x": 120, "y": 90}, {"x": 160, "y": 240}]},
        "drag",
        {"x1": 100, "y1": 100, "x2": 200, "y2": 300},
    ),
    ({"type": "move", "x": 1023, "y": 639}, "mouse_move", {"x": 1279, "y": 799}),
    (
        {"type": "scroll", "x": 512, "y": 320, "scroll_x": 0, "scroll_y": 300},
        "scroll",
        {"x": 640, "y": 400, "dx": 0, "dy": 3},
    ),
    (
        {"type": "scroll", "x": 0, "y": 0, "scroll_x": -40, "scroll_y": -250},
        "scroll",
        {"x": 0, "y": 0, "dx": -1, "dy": -2},
    ),
    ({"type": "keypress", "keys": ["CTRL", "L"]}, "key", {"combo": "ctrl+l"}),
    ({"type": "keypress", "keys": ["ENTER"]}, "key", {"combo": "Return"}),
    ({"type": "type", "text": "owls"}, "type", {"text": "owls"}),
]


@pytest.mark.parametrize(("action", "tool", "args"), OPENAI_CASES)
def test_each_openai_action_becomes_one_arena_call_with_scaled_coordinates(action, tool, args):
    with FakeOpenAIResponses(api_key=OPENAI_KEY) as fake:
        fake.push(Output((reasoning("Looking."), computer_call(action))))
        policy = openai_policy(fake, display_width=1024, display_height=640)
        decision = policy.next_action(observation())
    assert decision == Action(tool, args)
    request = fake.last_request.json
    assert request["truncation"] == "auto"
    assert request["tools"][0] == {
        "type": "computer_use_preview",
        "display_width": 1024,
        "display_height": 640,
        "environment": "linux",
    }
    assert sorted(t["name"] for t in request["tools"][1:]) == ["deliver", "navigate", "shell"]
    assert [png_size(p) for p in FakeOpenAIResponses.images(request)] == [(1024, 640)]
    assert "previous_response_id" not in request


def test_openai_episode_chains_responses_acknowledges_safety_checks_and_passes_params():
    check = {"id": "cu_sc_1", "code": "malicious_instructions", "message": "Odd page text."}
    with FakeOpenAIResponses(api_key=OPENAI_KEY) as fake:
        fake.push(
            Output(
                (
                    computer_call(
                        {"type": "click", "button": "left", "x": 10, "y": 20}, checks=(check,)
                    ),
                )
            ),
            Output((function_call("navigate", {"url": "http://demo.arena.test/search"}),)),
            Output((reasoning("Done."), message("There are 3 owls."))),
        )
        policy = openai_policy(
            fake,
            reasoning_effort="high",
            reasoning_summary="concise",
            temperature=0.2,
            max_tokens=777,
            environment="browser",
        )
        assert policy.next_action(observation()) == Action("click", {"x": 10, "y": 20})
        assert policy.next_action(observation(1, {"ok": True, "tool": "click"})) == Action(
            "navigate", {"url": "http://demo.arena.test/search"}
        )
        final = policy.next_action(observation(2, {"ok": True, "tool": "navigate"}))
    assert final == Action("deliver", {"message": "There are 3 owls."})
    first, second, third = (r.json for r in fake.requests)
    assert first["reasoning"] == {"effort": "high", "summary": "concise"}
    assert (first["temperature"], first["max_output_tokens"]) == (0.2, 777)
    assert first["tools"][0]["environment"] == "browser"
    # Each later request continues the previous response with only the new items.
    ids = list(fake.issued)
    assert second["previous_response_id"] == ids[0] and third["previous_response_id"] == ids[1]
    output = second["input"][0]
    assert output["type"] == "computer_call_output"
    assert output["acknowledged_safety_checks"] == [check]
    assert output["output"]["type"] == "input_image"
    assert [png_size(p) for p in FakeOpenAIResponses.images(second)] == [(1280, 800)]
    assert third["input"][0]["type"] == "function_call_output"
    assert json.loads(third["input"][0]["output"]) == {"ok": True, "tool": "navigate"}
    # The span records the checks the arena acknowledged.
    assert "malicious_instructions" in policy.spans[0].output["tool_uses"][0]["raw"]


def test_openai_safety_checks_end_the_run_when_the_agent_says_refuse():
    check = {"id": "cu_sc_2", "code": "sensitive_domain", "message": "A bank."}
    with FakeOpenAIResponses(api_key=OPENAI_KEY) as fake:
        fake.push(Output((computer_call({"type": "screenshot"}, checks=(check,)),)))
        with pytest.raises(ProviderError, match=r"sensitive_domain: A bank.*safety_checks: refuse"):
            openai_policy(fake, safety_checks="refuse").next_action(observation())


@pytest.mark.parametrize(
    ("action", "tool", "error"),
    [
        ({"type": "click", "button": "left", "x": 5000, "y": 1}, "click", "click: coordinate"),
        ({"type": "drag", "path": [{"x": 1, "y": 1}]}, "drag", "drag: drag needs a path"),
        ({"type": "keypress", "keys": "CTRL+L"}, "key", "keypress: keypress needs keys"),
        (
            {"type": "click", "button": "left", "x": 1, "y": 1, "keys": ["CTRL"]},
            "click",
            "click: holding keys",
        ),
        ({"type": "levitate"}, "computer.levitate", "levitate: unknown action type"),
    ],
)
def test_an_openai_action_the_arena_cannot_run_is_an_error_step_the_model_reads(
    action, tool, error
):
    with FakeOpenAIResponses(api_key=OPENAI_KEY) as fake:
        fake.push(Output((computer_call(action),)), Output((message("I cannot continue."),)))
        policy = openai_policy(fake, final_text="give_up")
        decision = policy.next_action(observation())
        assert decision.tool == tool and isinstance(decision.args, str)
        assert decision.args.startswith(error)
        result = dispatch(None, decision.tool, decision.args, deliver_dir=None)
        assert result.ok is False
        assert isinstance(policy.next_action(observation(1, result.as_dict())), GiveUp)
    second = fake.requests[1].json
    assert second["input"][0]["type"] == "computer_call_output"  # still answered, with the screen
    assert any(
        t.startswith(f"That action failed: {error}") for t in FakeOpenAIResponses.texts(second)
    )


# -- the registry and a whole battle ---------------------------------------------------


def test_the_registry_builds_the_adapters_with_the_agents_params(monkeypatch):
    monkeypatch.setenv("CU_TEST_ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("CU_TEST_OPENAI_API_KEY", OPENAI_KEY)
    defaults = ProviderDefaults(outbound=loopback_outbound())
    anthropic = client_for(
        "anthropic-computer-use",
        "claude-test",
        params={"base_url": "http://127.0.0.1:9", "api_key_env": "CU_TEST_ANTHROPIC_API_KEY",
                "tool_version": "computer_20251124"},
        defaults=defaults,
    )  # fmt: skip
    assert isinstance(anthropic, AnthropicComputerUseClient)
    assert anthropic.betas == ["computer-use-2025-11-24"]
    openai = client_for(
        "openai-computer-use",
        "computer-use-preview",
        params={"base_url": "http://127.0.0.1:9/v1", "api_key_env": "CU_TEST_OPENAI_API_KEY",
                "reasoning_effort": "low"},
        defaults=defaults,
    )  # fmt: skip
    assert isinstance(openai, OpenAIComputerUseClient)
    assert openai.reasoning == {"effort": "low"}
    with pytest.raises(ProviderError, match="set OPENAI_API_KEY"):
        client_for("openai-computer-use", "m", params={}, defaults=defaults, environ={})


@pytest.mark.django_db(transaction=True)
def test_a_whole_battle_between_the_two_computer_use_adapters(alice, monkeypatch):
    """Both lanes in real desktop sandboxes; the models click, type and press keys on
    the real screen and end with their final messages."""
    from agents.models import Agent, Arena
    from battles.models import Battle, Run, Span
    from battles.services import battle_run, task_submit

    def claude(request):
        done = sum(1 for m in request["messages"] if m["role"] == "assistant")
        script = [
            tool_call("computer", {"action": "left_click", "coordinate": [320, 200]}),
            tool_call("computer", {"action": "type", "text": "owls"}),
            tool_call("computer", {"action": "key", "text": "Return"}),
            text("I typed owls into the page."),
        ]
        return script[done]

    turns = iter(
        [
            Output((computer_call({"type": "click", "button": "left", "x": 640, "y": 400}),)),
            Output((computer_call({"type": "keypress", "keys": ["CTRL", "L"]}),)),
            Output(
                (
                    computer_call(
                        {"type": "scroll", "x": 10, "y": 10, "scroll_x": 0, "scroll_y": 200}
                    ),
                )
            ),
            Output((message("Scrolled the page."),)),
        ]
    )
    monkeypatch.setenv("CU_LANE_ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("CU_LANE_OPENAI_API_KEY", OPENAI_KEY)
    with (
        FakeAnthropicComputer(api_key=KEY, policy=claude) as fake_a,
        FakeOpenAIResponses(api_key=OPENAI_KEY, policy=lambda _request: next(turns)) as fake_b,
    ):
        arena = Arena.objects.public()
        a = Agent.objects.create(
            arena=arena, slug="claude-cu", display_name="Claude CU", kind="scaffold",
            provider="anthropic-computer-use", model_id="claude-test",
            params={"base_url": fake_a.base_url, "api_key_env": "CU_LANE_ANTHROPIC_API_KEY",
                    "display_width_px": 640, "display_height_px": 400, "max_tokens": 300},
        )  # fmt: skip
        b = Agent.objects.create(
            arena=arena, slug="openai-cu", display_name="OpenAI CU", kind="scaffold",
            provider="openai-computer-use", model_id="computer-use-preview",
            params={"base_url": fake_b.base_url, "api_key_env": "CU_LANE_OPENAI_API_KEY",
                    "reasoning_effort": "medium"},
        )  # fmt: skip
        battle = task_submit(
            user=alice, instruction="Search the page for owls", rng=random.Random(0)
        )
        Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
        Run.objects.filter(battle=battle, side="A").update(agent=a)
        Run.objects.filter(battle=battle, side="B").update(agent=b)
        battle_run(battle_id=battle.pk)

    run_a, run_b = battle.runs.order_by("side")
    assert (run_a.end_reason, run_a.error) == ("delivered", "")
    assert run_a.final_message == "I typed owls into the page."
    steps_a = list(run_a.steps.order_by("index").values_list("tool", "args"))
    assert steps_a == [
        ("click", {"x": 640, "y": 400}),  # (320, 200) on a 640×400 view of 1280×800
        ("type", {"text": "owls"}),
        ("key", {"combo": "Return"}),
        ("deliver", {"message": "I typed owls into the page."}),
    ]
    assert all(s.result["ok"] for s in run_a.steps.all())
    assert (run_b.end_reason, run_b.error) == ("delivered", "")
    assert run_b.final_message == "Scrolled the page."
    assert list(run_b.steps.order_by("index").values_list("tool", flat=True)) == [
        "click",
        "key",
        "scroll",
        "deliver",
    ]
    assert run_b.steps.get(index=2).args == {"x": 10, "y": 10, "dx": 0, "dy": 2}
    # The models saw real screenshots at their sizes.
    assert {png_size(p) for p in FakeAnthropicComputer.images(fake_a.requests[-1].json)} == {
        (640, 400)
    }
    assert {png_size(p) for p in FakeOpenAIResponses.images(fake_b.requests[-1].json)} == {
        (1280, 800)
    }
    assert fake_b.requests[0].json["reasoning"] == {"effort": "medium"}
    assert Span.objects.filter(run=run_a, kind="model").count() == 4
    assert Span.objects.filter(run=run_b, kind="model").count() == 4


def test_a_reply_not_in_the_responses_shape_is_retried_then_a_provider_error():
    with FakeOpenAIResponses(api_key=OPENAI_KEY) as fake:
        fake.push(RawJSON({"id": "resp_x", "output": "nope"}), RawJSON({"id": "resp_y"}))
        client = OpenAIComputerUseClient(
            "computer-use-preview", OPENAI_KEY, fake.base_url, params={},
            outbound=loopback_outbound(), max_retries=1, sleep=lambda _s: None,
        )  # fmt: skip
        with pytest.raises(ProviderError, match=r"no output list \(gave up after 2 attempts\)"):
            ScaffoldPolicy(client=client).next_action(observation())


def test_a_final_text_the_arena_could_not_deliver_goes_back_as_a_message():
    with FakeOpenAIResponses(api_key=OPENAI_KEY) as fake:
        fake.push(Output((message("x" * 20_001),)), Output((message("Short answer."),)))
        policy = openai_policy(fake)
        first = policy.next_action(observation())
        assert first.tool == "deliver"
        result = dispatch(None, "deliver", first.args, deliver_dir=None)
        assert result.ok is False  # longer than the deliver tool takes
        second = policy.next_action(observation(1, result.as_dict()))
    assert second == Action("deliver", {"message": "Short answer."})
    request = fake.last_request.json
    assert all(item.get("type") != "function_call_output" for item in request["input"])
    assert any(
        "Your final message: deliver: message is longer" in t
        for t in FakeOpenAIResponses.texts(request)
    )


def test_openai_bad_params_are_refused_when_the_client_is_built():
    for params, refusal in [
        ({"display_width": 5000, "display_height": 600}, "params display_width must be"),
        ({"display_width": 800}, "params display_height must be"),
        ({"final_text": "shout"}, "final_text must be deliver or give_up"),
        ({"environment": "amiga"}, "environment must be one of"),
        ({"safety_checks": "ignore"}, "safety_checks must be acknowledge or refuse"),
        ({"scroll_pixels_per_notch": 0}, "scroll_pixels_per_notch must be"),
    ]:
        with pytest.raises(ProviderError, match=f"^openai-computer-use: {refusal}"):
            OpenAIComputerUseClient("m", OPENAI_KEY, "http://127.0.0.1:9", params=params)


def test_a_text_only_reply_ends_the_run_as_given_up_when_deliver_is_not_offered():
    # given an agent whose final text is delivered, asked without the deliver tool
    with FakeOpenAIResponses(api_key=OPENAI_KEY) as fake:
        fake.push(Output((message("   "),)), Output((message("All done."),)))
        client = OpenAIComputerUseClient(
            "computer-use-preview", OPENAI_KEY, fake.base_url, outbound=loopback_outbound()
        )
        turns = [Turn("user", [Text("Search for owls.")])]
        blank = client.complete(system="", turns=turns, tools=[], max_tokens=64)
        said = client.complete(system="", turns=turns, tools=[], max_tokens=64)
    # then neither a blank text nor a text without deliver on offer becomes a delivery
    assert blank.tool_uses == [] and said.tool_uses == []
    assert said.text == "All done." and said.stop_reason == "end_turn"

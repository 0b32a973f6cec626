"""What the native computer-use adapters share: the screen the model is told about and
how its coordinates come back to the real screen, key names in the words the arena's
``key`` tool takes, and screenshots scaled for the model.

Pure functions and small value types; no SDK, no ORM. The adapters
(:mod:`agents.providers.anthropic_computer`, :mod:`agents.providers.openai_computer`)
turn a native action into one call of the fixed tool set with these, and raise
:class:`ActionError` (a message the model can act on) for one they cannot map.

Scaling. The model sees screenshots of ``model`` size and answers in its coordinates;
the sandbox's screen is ``real`` size. A model point ``(x, y)`` lands on
``(round(x * real_w / model_w), round(y * real_h / model_h))``. Anthropic recommends
that the model see at most XGA (1024×768), WXGA (1280×800) or FWXGA (1366×768), the
one of the screen's aspect ratio; :func:`anthropic_display` picks it (the arena's
1280×800 screen is WXGA already: no scaling). An agent's params may set the size.
"""

import io
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from PIL import Image as PILImage

# The fixed-set tools the native "computer" tool stands for; the rest (navigate, shell,
# deliver) are offered beside it as ordinary function tools.
POINTER_TOOLS = frozenset({"screenshot", "mouse_move", "click", "drag", "scroll", "type", "key"})

# The sandbox's screen when no screenshot tells (sandboxes.base.SandboxSpec defaults).
DEFAULT_SCREEN = (1280, 800)

# Anthropic's recommended targets (name, width, height).
ANTHROPIC_TARGETS = (("XGA", 1024, 768), ("WXGA", 1280, 800), ("FWXGA", 1366, 768))
_ASPECT_TOLERANCE = 0.02

SCROLL_NOTCHES_MAX = 50  # sandboxes.tools: scroll dx/dy within ±50
TYPE_MAX_CHARS = 10_000
_DISPLAY_MAX = 4096


class ActionError(ValueError):
    """A native action the arena cannot run as given; the message says what to send."""


@dataclass(frozen=True)
class Geometry:
    """The real screen and the one the model is told about."""

    real: tuple[int, int]
    model: tuple[int, int]

    @property
    def scaled(self) -> bool:
        return self.real != self.model

    def to_real(self, x: object, y: object, *, what: str = "coordinate") -> tuple[int, int]:
        """A model point on the real screen. Raises :class:`ActionError` for a point
        that is not two numbers inside the model's screen."""
        mx, my = _number(x, what), _number(y, what)
        width, height = self.model
        if not (0 <= mx < width and 0 <= my < height):
            raise ActionError(
                f"{what} ({mx:g}, {my:g}) is outside the {width}×{height} screen "
                f"(x 0-{width - 1}, y 0-{height - 1})"
            )
        rw, rh = self.real
        return (
            min(rw - 1, round(mx * rw / width)),
            min(rh - 1, round(my * rh / height)),
        )

    def to_model(self, x: int, y: int) -> tuple[int, int]:
        """A real point in model coordinates (for reporting the pointer back)."""
        (rw, rh), (width, height) = self.real, self.model
        return round(x * width / rw), round(y * height / rh)


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ActionError(f"{what} must be numbers, got {value!r}")
    return float(value)


def point(value: object, *, what: str = "coordinate") -> tuple[object, object]:
    """``[x, y]`` as the Anthropic tool sends it."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ActionError(f"{what} must be [x, y], got {str(value)[:80]}")
    return value[0], value[1]


def display_param(params: dict, width_key: str, height_key: str) -> tuple[int, int] | None:
    """The model's screen size an agent's params set, None when they set none. Raises
    :class:`ActionError` (reported at client construction) for a bad pair."""
    width, height = params.get(width_key), params.get(height_key)
    if width is None and height is None:
        return None
    for name, value in ((width_key, width), (height_key, height)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _DISPLAY_MAX:
            raise ActionError(f"params {name} must be a whole number of pixels 1-{_DISPLAY_MAX}")
    return int(width), int(height)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ComputerParams:
    """The agent params both computer-use adapters read: the screen size the model is
    told about (None: the real screen's, or Anthropic's recommendation for it), what a
    reply in text only means (``final_text``: ``deliver``, the default, delivers it as
    the final message; ``give_up`` ends the run as given up), and the sampling keys the
    adapter passes on."""

    display: tuple[int, int] | None
    final_text: str
    sampling: dict[str, Any]

    @classmethod
    def read(
        cls, params: dict[str, Any], *, display_keys: tuple[str, str], sampling: frozenset[str]
    ) -> "ComputerParams":
        """Raises :class:`ActionError` (reported at client construction) for a bad
        value."""
        display = display_param(params, *display_keys)
        final_text = params.get("final_text", "deliver")
        if final_text not in ("deliver", "give_up"):
            raise ActionError("final_text must be deliver or give_up")
        return cls(display, final_text, {k: v for k, v in params.items() if k in sampling})

    def delivers(self, text: str, tool_names: Iterable[str]) -> bool:
        """Whether a reply of ``text`` only, with no action, is the model's final
        message (the vendors' own computer-use loops end so): ``final_text`` says
        deliver, the text says something, and the ``deliver`` tool is offered."""
        return self.final_text == "deliver" and bool(text.strip()) and "deliver" in tool_names


def anthropic_display(real: tuple[int, int]) -> tuple[int, int]:
    """The size Anthropic recommends the model see for a ``real`` screen: scaled down
    (aspect kept) to the recommended target of the same aspect ratio; unscaled when the
    screen is no larger or no target has its ratio."""
    width, height = real
    ratio = width / height
    for _name, tw, th in ANTHROPIC_TARGETS:
        if abs(tw / th - ratio) < _ASPECT_TOLERANCE:
            if width <= tw and height <= th:
                return real
            scale = min(tw / width, th / height)
            return max(1, round(width * scale)), max(1, round(height * scale))
    return real


def png_size(png: bytes) -> tuple[int, int] | None:
    """A PNG's (width, height) from its header; None when it is not a PNG."""
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", png[16:24])
    return (width, height) if width and height else None


def scaled_png(png: bytes, size: tuple[int, int]) -> bytes:
    """``png`` resized to ``size`` (unchanged when it already is that size or cannot
    be read: the provider then sees what the sandbox sent)."""
    if png_size(png) in (size, None):
        return png
    try:
        with PILImage.open(io.BytesIO(png)) as image:
            resized = image.convert("RGB").resize(size, PILImage.Resampling.LANCZOS)
    except (OSError, ValueError, PILImage.DecompressionBombError):
        return png
    out = io.BytesIO()
    resized.save(out, format="PNG", optimize=False)
    return out.getvalue()


def notches(value: object, *, what: str) -> int:
    """A scroll amount in wheel notches, within the arena's bound."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ActionError(f"{what} must be a number of wheel clicks, got {value!r}")
    amount = round(value)
    if amount < 1:
        raise ActionError(f"{what} must be at least 1")
    return min(amount, SCROLL_NOTCHES_MAX)


def text_arg(value: object, *, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ActionError(f"{what} must be non-empty text")
    if len(value) > TYPE_MAX_CHARS:
        raise ActionError(f"{what} is longer than {TYPE_MAX_CHARS} characters; type it in parts")
    return value


# -- keys --------------------------------------------------------------------------

# Names models use → the xdotool keysym names the sandbox's key tool takes. Looked up
# lower-cased; anything else must already be a keysym name (letters, digits, _).
_KEY_NAMES = {
    # modifiers
    "ctrl": "ctrl", "control": "ctrl", "ctl": "ctrl", "control_l": "ctrl",
    "alt": "alt", "option": "alt", "alt_l": "alt",
    "shift": "shift", "shift_l": "shift",
    "super": "super", "meta": "super", "cmd": "super", "command": "super", "win": "super",
    "windows": "super", "super_l": "super",
    # editing and navigation
    "enter": "Return", "return": "Return", "kp_enter": "KP_Enter",
    "esc": "Escape", "escape": "Escape",
    "tab": "Tab", "space": "space", "spacebar": "space",
    "backspace": "BackSpace", "back_space": "BackSpace",
    "delete": "Delete", "del": "Delete", "insert": "Insert", "ins": "Insert",
    "home": "Home", "end": "End",
    "pageup": "Prior", "page_up": "Prior", "prior": "Prior", "pgup": "Prior",
    "pagedown": "Next", "page_down": "Next", "next": "Next", "pgdn": "Next",
    "up": "Up", "down": "Down", "left": "Left", "right": "Right",
    "arrowup": "Up", "arrowdown": "Down", "arrowleft": "Left", "arrowright": "Right",
    "capslock": "Caps_Lock", "caps_lock": "Caps_Lock", "printscreen": "Print", "print": "Print",
    "menu": "Menu",
    # punctuation, as keysym names (the key tool takes no symbols)
    " ": "space", "/": "slash", "\\": "backslash", ".": "period", ",": "comma",
    ";": "semicolon", ":": "colon", "'": "apostrophe", '"': "quotedbl", "`": "grave",
    "~": "asciitilde", "!": "exclam", "@": "at", "#": "numbersign", "$": "dollar",
    "%": "percent", "^": "asciicircum", "&": "ampersand", "*": "asterisk",
    "(": "parenleft", ")": "parenright", "-": "minus", "_": "underscore", "=": "equal",
    "+": "plus", "[": "bracketleft", "]": "bracketright", "{": "braceleft",
    "}": "braceright", "|": "bar", "<": "less", ">": "greater", "?": "question",
}  # fmt: skip
_KEYSYM = re.compile(r"[A-Za-z0-9_]{1,40}")
_FUNCTION_KEY = re.compile(r"f([1-9]|1[0-9]|2[0-4])")
KEY_COMBO_MAX_CHARS = 100


def key_name(name: object) -> str:
    """One key in the name the arena's key tool takes (xdotool keysym names)."""
    if not isinstance(name, str) or not name:
        raise ActionError(f"a key must be a name like 'Return' or 'a', got {name!r}")
    lowered = name.lower()
    if lowered in _KEY_NAMES:
        return _KEY_NAMES[lowered]
    if _FUNCTION_KEY.fullmatch(lowered):
        return lowered.upper()
    if len(name) == 1 and name.isalnum() and name.isascii():
        return name.lower() if name.isalpha() else name
    if _KEYSYM.fullmatch(name):
        return name  # an xdotool keysym name already (KP_0, XF86Back, …)
    raise ActionError(f"unknown key {name[:40]!r}; use xdotool names like Return, Tab, ctrl")


def key_combo(keys: list[object]) -> str:
    """Keys pressed together (``["ctrl", "L"]``) as one combination (``ctrl+l``)."""
    if not keys:
        raise ActionError("a key press needs at least one key")
    combo = "+".join(key_name(k) for k in keys)
    if len(combo) > KEY_COMBO_MAX_CHARS:
        raise ActionError(f"the key combination is longer than {KEY_COMBO_MAX_CHARS} characters")
    return combo


def xdotool_combo(text: object) -> str:
    """An xdotool ``key`` argument as Anthropic's tool sends it (``ctrl+shift+t``,
    ``Return``, ``KP_0``) in the key tool's form. One combination per action: the
    arena's key tool presses one (``ctrl+a Delete`` is two actions)."""
    if not isinstance(text, str) or not text.strip():
        raise ActionError("key needs text: a combination like 'ctrl+l' or 'Return'")
    text = text.strip()
    if " " in text:
        raise ActionError(
            f"one key combination per action, got {text[:60]!r}: send each in its own action"
        )
    if text == "+":
        return "plus"
    # "ctrl++" is ctrl and the plus key.
    parts = [*text[:-2].split("+"), "+"] if text.endswith("++") else text.split("+")
    if any(p == "" for p in parts):
        raise ActionError(f"malformed key combination {text[:60]!r}")
    return key_combo(list(parts))

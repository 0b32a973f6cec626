"""The page as text, as the host passes it on: the display supervisor's ``page_text``
reply (``sandboxes/inside/sv_page_text.py``, ``PAGE_TEXT_JS``) checked field by field,
bounded and made storable. The page is untrusted (an entrant's, or the web's) and so
is the supervisor that read it: nothing here is sized from what it says, a field of
the wrong type is left out, and a coordinate off the screen is no coordinate.

Pure: no Django. The shape (every key optional but ``url``, ``title``, ``text`` and
``elements``) is what ``Observation.page`` carries and the remote protocol publishes.
"""

from typing import Any

from sandboxes.untrusted import storable_text

TEXT_MAX_CHARS = 8000
ELEMENTS_MAX = 150
NAME_MAX_CHARS = 200
VALUE_MAX_CHARS = 500
URL_MAX_CHARS = 2000
TITLE_MAX_CHARS = 500
OPTIONS_MAX = 30
ROLES = frozenset(
    {"link", "button", "textbox", "searchbox", "combobox", "listbox", "checkbox", "radio"}
    | {"slider", "tab", "menuitem", "generic"}
)
OFFSCREEN = frozenset({"above", "below", "beside"})
_STRINGS = {
    "name": NAME_MAX_CHARS,
    "tag": 20,
    "type": 20,
    "field": 100,
    "placeholder": NAME_MAX_CHARS,
    "value": VALUE_MAX_CHARS,
    "href": URL_MAX_CHARS,
}


def _string(value: object, limit: int) -> tuple[str, bool]:
    return storable_text(value[:limit] if isinstance(value, str) else "")


def _int(value: object, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = int(value)
    return number if low <= number <= high else None


def _element(raw: object, index: int, width: int, height: int) -> tuple[dict[str, Any], bool]:
    item = raw if isinstance(raw, dict) else {}
    escaped = False
    role, _ = _string(item.get("role"), 20)
    out: dict[str, Any] = {"i": index, "role": role if role in ROLES else "generic"}
    for key, limit in _STRINGS.items():
        if key in item:
            text, flag = _string(item[key], limit)
            escaped |= flag
            out[key] = text
    out.setdefault("name", "")
    for flag_key in ("checked", "disabled", "focused"):
        if isinstance(item.get(flag_key), bool):
            out[flag_key] = item[flag_key]
    options = item.get("options")
    if isinstance(options, list):
        kept = [_string(o, 100) for o in options[:OPTIONS_MAX]]
        out["options"] = [text for text, _ in kept]
        escaped |= any(flag for _, flag in kept)
    x, y = _int(item.get("x"), 0, width - 1), _int(item.get("y"), 0, height - 1)
    if x is not None and y is not None:
        out["x"], out["y"] = x, y
    else:
        where = item.get("offscreen")
        out["offscreen"] = where if where in OFFSCREEN else "beside"
    return out, escaped


def page_text_bounded(reply: dict[str, Any], *, width: int, height: int) -> dict[str, Any]:
    """The supervisor's ``page_text`` reply as an observation: ``url``, ``title``,
    ``text`` (at most TEXT_MAX_CHARS), ``text_truncated``, ``elements`` (at most
    ELEMENTS_MAX; ``x``/``y`` only when on a ``width`` × ``height`` screen, else
    ``offscreen``), ``elements_total``, ``viewport`` and ``escaped`` when any text had
    to be escaped to be storable."""
    url, e1 = _string(reply.get("url"), URL_MAX_CHARS)
    title, e2 = _string(reply.get("title"), TITLE_MAX_CHARS)
    text, e3 = _string(reply.get("text"), TEXT_MAX_CHARS)
    raw_elements = reply.get("elements")
    raw_elements = raw_elements[:ELEMENTS_MAX] if isinstance(raw_elements, list) else []
    elements, escaped = [], e1 or e2 or e3
    for index, raw in enumerate(raw_elements):
        element, flag = _element(raw, index, width, height)
        elements.append(element)
        escaped |= flag
    total = _int(reply.get("elements_total"), 0, 10**7)
    page: dict[str, Any] = {
        "url": url,
        "title": title,
        "text": text,
        "text_truncated": bool(reply.get("text_truncated") is True)
        or (isinstance(reply.get("text"), str) and len(reply["text"]) > TEXT_MAX_CHARS),
        "elements": elements,
        "elements_total": max(total or 0, len(elements)),
    }
    viewport = reply.get("viewport")
    if isinstance(viewport, dict):
        page["viewport"] = {
            key: value
            for key in ("width", "height", "left", "top", "scroll_y", "page_height")
            if (value := _int(viewport.get(key), -(10**7), 10**7)) is not None
        }
    if escaped:
        page["escaped"] = True
    return page

"""Text that comes out of a sandbox, made storable without losing what it said.

Tool output, the supervisor's replies, page titles, file names and an entrant's own
arguments are untrusted: any byte can be in them. PostgreSQL's text and JSON columns
refuse NUL, and UTF-8 cannot encode the lone surrogates that stand for bytes that were
not UTF-8 (the supervisor decodes with ``surrogateescape``). Such text is escaped the
way Python's ``backslashreplace`` writes it: NUL as ``\\x00``, an undecodable byte as
``\\xNN``, any other lone surrogate as ``\\uNNNN``, and every backslash doubled, so
the escaped text reads back unambiguously; the caller flags it (``escaped``) and judges
are shown the escaped text. Text that needs none of this is returned unchanged.

Pure: no Django, so the leak scan (``judging.visible``) can use :func:`unescaped`."""

import re
from typing import Any

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_ESCAPE = re.compile(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4})")


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    if code == 0:
        return "\\x00"
    return f"\\u{code:04x}"


def storable_text(value: str) -> tuple[str, bool]:
    """``value`` escaped if it holds NUL or lone surrogates, and whether it was."""
    if not _UNSTORABLE.search(value):
        return value, False
    return _UNSTORABLE.sub(_escape_one, value.replace("\\", "\\\\")), True


def storable(value: Any) -> tuple[Any, bool]:
    """Every string in a JSON-like value (dictionary keys included) made storable, and
    whether any needed escaping. Other values pass unchanged."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list | tuple):
        items = [storable(item) for item in value]
        return [item for item, _ in items], any(changed for _, changed in items)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        changed = False
        for key, item in value.items():
            safe_key, key_changed = storable(key) if isinstance(key, str) else (key, False)
            safe_item, item_changed = storable(item)
            out[safe_key] = safe_item
            changed = changed or key_changed or item_changed
        return out, changed
    return value, False


def unescaped(value: str) -> str:
    """What a reader sees through escaped text: the escapes dropped, doubled backslashes
    single again (the leak scan reads this too, so a name split by NUL bytes is still
    the name)."""
    return _ESCAPE.sub(lambda m: "\\" if m.group(1) == "\\" else "", value)

"""Strict JSON for every JSON the project writes: no ``NaN``, ``Infinity`` or
``-Infinity``, which JSON does not have and strict readers (JavaScript's JSON.parse,
Go, jq, many Java parsers) refuse.

The rule, in one place: a float that is not finite becomes ``null``, which everywhere in
the project means "not available" (an interval with no end, a rate of nothing). It is
applied where JSON is made: the DRF renderer (``arena_site.renderers``), Django JSON
responses (``arena_site.renderers.StrictJSONMiddleware``), the open-data export
(``exports.writers``, the manifest), ``python -m ratings fit`` and websocket frames
(``arena_site.realtime.frame_text``). Everything is then dumped with
``allow_nan=False``, so a value that slipped past would fail loudly, never be written.

Pure: the standard library only (the CLI imports it without Django). numpy scalars are
plain ``float``/``int`` subclasses or convertible with ``float()``, so they are handled too.
"""

import json
import math
from typing import Any

NON_FINITE = (b"NaN", b"Infinity")


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth of dicts, lists and tuples)
    replaced by None; other values as they are. Returns the same object when there is
    nothing to replace."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        items = {k: finite(v) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    if isinstance(value, list | tuple):
        items = [finite(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    numpy_float = type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0
    if numpy_float and value.dtype.kind == "f":
        return float(value) if math.isfinite(float(value)) else None
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` with non-finite floats as null and ``allow_nan=False``. The fast
    path dumps as it is; only a document that holds a non-finite number is walked."""
    kwargs["allow_nan"] = False
    try:
        return json.dumps(value, **kwargs)
    except ValueError as exc:
        if "Out of range float values" not in str(exc):
            raise
    return json.dumps(finite(value), **kwargs)


def dump(value: Any, handle: Any, **kwargs: Any) -> None:
    """``dumps`` into a text file."""
    handle.write(dumps(value, **kwargs))


class StrictJSONEncoder(json.JSONEncoder):
    """A ``json.JSONEncoder`` (for ``cls=``) that writes non-finite floats as null and
    refuses to write NaN. ``default`` of a subclass still serialises other types."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_nan"] = False
        super().__init__(*args, **kwargs)

    def encode(self, o: Any) -> str:
        try:
            return super().encode(o)
        except ValueError as exc:
            if "Out of range float values" not in str(exc):
                raise
        return super().encode(finite(o))

    def iterencode(self, o: Any, _one_shot: bool = False):
        return super().iterencode(finite(o), _one_shot)


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` that refuses NaN, Infinity and -Infinity (as strict readers do)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)

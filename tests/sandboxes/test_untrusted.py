"""Text out of a sandbox made storable (sandboxes.untrusted): NUL and bytes that are not
UTF-8 escaped and flagged, everything else untouched, and readable back."""

import pytest

from sandboxes.untrusted import storable, storable_text, unescaped


@pytest.mark.parametrize(
    ("text", "stored", "escaped"),
    [
        ("plain text, é, 中文, emoji 🙂", "plain text, é, 中文, emoji 🙂", False),
        ("a backslash \\ alone is left alone", "a backslash \\ alone is left alone", False),
        ("", "", False),
        ("a\x00b", "a\\x00b", True),
        # surrogateescape's stand-ins for the bytes 0xff and 0x80
        ("bad\udcffbyte\udc80", "bad\\xffbyte\\x80", True),
        # a lone surrogate that stands for no byte (JSON "\ud800")
        ("half\ud800pair", "half\\ud800pair", True),
        # once escaping is needed, backslashes double: "\x00" typed is not a NUL
        ("\\x00 typed, then \x00", "\\\\x00 typed, then \\x00", True),
    ],
)
def test_storable_text(text, stored, escaped):
    assert storable_text(text) == (stored, escaped)
    stored.encode("utf-8")  # always encodable
    assert "\x00" not in stored


def test_storable_walks_json_values_keys_included():
    value = {"ok": True, "n": 3, "out": ["fine", "n\x00ul"], "k\udcfe": {"x": None}}
    assert storable(value) == (
        {"ok": True, "n": 3, "out": ["fine", "n\\x00ul"], "k\\xfe": {"x": None}},
        True,
    )
    assert storable({"a": ["b", 1.5]}) == ({"a": ["b", 1.5]}, False)


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("Cl\\x00au\\x00de", "Claude"),
        ("G\\xffPT", "GPT"),
        ("a \\\\x00 b", "a \\x00 b"),
        ("half\\ud800pair", "halfpair"),
        ("nothing escaped", "nothing escaped"),
    ],
)
def test_unescaped_is_what_a_reader_sees_through_the_escapes(text, read):
    assert unescaped(text) == read

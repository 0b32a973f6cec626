"""Folding text so that what reads the same to a person compares equal: the first half of
the identity-leak scan (``agents.identity`` matches on folded text). Pure: no ORM.

Both the identities and the text are *folded* (``fold``), character by character:

- compatibility decomposition (NFKD, as in NFKC: fullwidth, mathematical
  alphanumerics, circled and parenthesised letters, ligatures), and the regional
  indicator and negative squared/circled letters, which have none;
- combining marks dropped ("Cláude", "C̲l̲a̲u̲d̲e̲"), and everything that renders as
  nothing: format characters (zero-width space, joiner and non-joiner, soft hyphen,
  bidi controls, word joiner, tag characters), variation selectors, fillers, and
  control characters other than whitespace; ANSI escape sequences are cut out;
- Latin letters drawn another way that neither NFKD nor the confusables table takes
  to their letter: small capitals ("ᴄʟᴀᴜᴅᴇ"), letters with a stroke, hook, curl, bar or
  tail ("ł", "ø", "ƈ"), the dotless i and j (``_letterlike``, from the Unicode names);
- Unicode's confusables table (UTS #39, through ``confusable-homoglyphs``) maps each
  character to its prototype: Cyrillic "С" → "C", Greek "ο" → "o", "1", "I", "|" → "l",
  "0" → "O", "m" → "rn"; then casefold. An identity letter matches every fold of its
  case variants, so "i" matches both "i" and "I" (whose prototype is "l").

Besides the text as stored, ``views`` gives the other readings a person sees: in display
order (text after a right-to-left override U+202E shows reversed) and percent-decoded
("%43laude"); each view keeps a map from its positions back to the original, so a match
can be blanked exactly. A text with more direction controls than anyone honest writes is
refused (``TooComplex``) rather than guessed at.
"""

import re
import unicodedata
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache

# Default-ignorable characters outside category Cf (which is dropped whole): they
# render as nothing. Variation selectors are combining marks and go with those.
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0")
# Letters drawn in a box or a flag that have no compatibility decomposition.
_LETTER_BLOCKS = ((0x1F1E6, 0x1F1FF), (0x1F150, 0x1F169), (0x1F170, 0x1F189))
# Where Latin letters in other forms are (Latin-1 to Latin Extended-G), and which of
# them read as one plain letter: small capitals, letters with a stroke, hook, curl, bar
# or tail, the dotless i and j. (Turned and reversed letters are not: "ɐ" is no "a".)
_LATIN_BLOCKS = (
    (0x00C0, 0x02AF),
    (0x1D00, 0x1DBF),
    (0x1E00, 0x1EFF),
    (0x2C60, 0x2C7F),
    (0xA720, 0xA7FF),
    (0xAB30, 0xAB6F),
    (0x10780, 0x107BF),
    (0x1DF00, 0x1DFFF),
)
_ONE_LETTER = re.compile(
    r"LATIN (?:LETTER SMALL CAPITAL|SMALL CAPITAL LETTER|SMALL LETTER|CAPITAL LETTER) "
    r"([A-Z])(?: WITH .+)?|LATIN SMALL LETTER DOTLESS ([IJ])"
)
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_PERCENT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_OVERRIDES = {"\u202e": True, "\u202d": False, "\u202a": False, "\u202b": False}
_OVERRIDES |= dict.fromkeys("\u2066\u2067\u2068", False)  # isolates reorder no Latin
_POPS = frozenset("\u202c\u2069")
_MAX_DEPTH = 125  # of nested embeddings, overrides and isolates (UAX #9)
DIRECTION_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# Each costs a little memory when a text is put in display order (a few hundred bytes).
MAX_DIRECTION_CONTROLS = 10_000
_DIRECTION_OR_LINE_END = re.compile(
    "[\u202a-\u202e\u2066-\u2069\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]"
)


@cache
def _prototypes() -> dict[str, str]:
    """Single character → its confusable prototype, from Unicode's confusables table
    as ``confusable-homoglyphs`` ships it (each source lists its prototype, each
    prototype its sources; the table's LRM marks around RTL characters are dropped).
    Where two characters only name each other, the ASCII one (else the lower code
    point) is taken as the prototype: any consistent choice matches the same."""
    from confusable_homoglyphs.confusables import confusables_data

    def clean(value: str) -> str:
        return value.replace("\u200e", "").replace("\u200f", "")

    table = {clean(k): [clean(e["c"]) for e in v] for k, v in confusables_data.items()}
    prototypes = {}
    for key, targets in table.items():
        if len(key) != 1 or len(targets) != 1 or targets[0] in ("", key):
            continue  # a multi-character prototype, or a prototype of several sources
        target = targets[0]
        mutual = len(target) == 1 and len(table.get(target, ())) == 1
        if mutual and (not key.isascii(), ord(key)) < (not target.isascii(), ord(target)):
            continue  # they name only each other and ``key`` is the prototype
        prototypes[key] = target
    return prototypes


@cache
def _letterlike() -> dict[str, str]:
    """Latin letter forms → the plain letter they read as, by their Unicode names
    ("LATIN LETTER SMALL CAPITAL L", "LATIN SMALL LETTER O WITH STROKE"). Applied
    before the confusables, which would take some elsewhere (small capital M → "ʍ")."""
    table = {}
    for lo, hi in _LATIN_BLOCKS:
        for code in range(lo, hi + 1):
            named = _ONE_LETTER.fullmatch(unicodedata.name(chr(code), ""))
            if named is not None:
                table[chr(code)] = (named.group(1) or named.group(2)).lower()
    return table


def _fold_char(char: str) -> str:
    code = ord(char)
    for lo, hi in _LETTER_BLOCKS:
        if lo <= code <= hi:
            return chr(ord("a") + code - lo)
    prototypes, letters = _prototypes(), _letterlike()
    text = char
    for _ in range(4):  # to a fixed point: a casefold can open a new decomposition
        kept = []
        for c in unicodedata.normalize("NFKD", text):
            category = unicodedata.category(c)
            if category[0] == "M" or category == "Cf" or c in _INVISIBLE:
                continue
            if category == "Cc" and not c.isspace():
                continue
            c = letters.get(c, c)
            kept.append(prototypes.get(c, c))
        folded = "".join(kept).casefold()
        if folded == text:
            break
        text = folded
    return text


class _FoldTable(dict):
    """``str.translate`` table filled on first use of each code point, up to a bound
    (a text of every code point must not grow a worker by a few hundred megabytes)."""

    LIMIT = 200_000

    def __missing__(self, code: int) -> str:
        value = _fold_char(chr(code))
        if len(self) < self.LIMIT:
            self[code] = value
        return value


_FOLD = _FoldTable()


def fold(text: str) -> str:
    """``text`` as the scan compares it (module docstring). Not length-preserving."""
    return text.translate(_FOLD)


@dataclass
class _View:
    """A reading of ``text``: its characters ``chars`` (before folding), each with the
    span of the original it stands for (``lo``/``hi``; None: ``chars`` is ``text``),
    to map matches back. About 8 bytes per character besides the strings."""

    text: str
    chars: str
    lo: array | None = None
    hi: array | None = None
    folded: str = field(init=False)

    def __post_init__(self) -> None:
        self.folded = fold(self.chars)

    def spans(self, matches: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """The original (start, end) covering each folded (start, end) of ``matches``
        (sorted), in one pass; marks and invisibles right after a match go with it
        (direction controls stay: blanking a pop would reverse what follows)."""
        found: list[tuple[int, int]] = []
        pending = list(reversed(matches))
        lo = hi = -1
        closing = False  # the match ended: take the zero-width characters that follow
        position = 0
        for i, char in enumerate(self.chars):
            width = len(_FOLD[ord(char)])
            start = i if self.lo is None else self.lo[i]
            end = i + 1 if self.hi is None else self.hi[i]
            if closing:
                if not width and char not in DIRECTION_CONTROLS:  # a pop ends no name
                    hi = max(hi, end)
                    continue
                found.append((lo, hi))
                lo = hi = -1
                closing = False
            while width and pending and position + width > pending[-1][0]:
                lo = start if lo < 0 else min(lo, start)
                hi = max(hi, end)
                if position + width < pending[-1][1]:
                    break
                pending.pop()
                closing = True
                if pending and position + width > pending[-1][0]:
                    found.append((lo, hi))  # the next match begins in the same character
                    lo = hi = -1
                    closing = False
            position += width
            if not pending and not closing:
                break
        if closing:
            found.append((lo, hi))
        return found


class _Reading:
    """Builds a ``_View`` from stretches of the original, as they are, reversed, or
    standing for other characters (decoded)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pieces: list[str] = []
        self.lo = array("i")
        self.hi = array("i")

    def same(self, start: int, end: int) -> None:
        self.pieces.append(self.text[start:end])
        self.lo.extend(range(start, end))
        self.hi.extend(range(start + 1, end + 1))

    def reversed(self, start: int, end: int) -> None:
        self.pieces.append(self.text[start:end][::-1])
        self.lo.extend(range(end - 1, start - 1, -1))
        self.hi.extend(range(end, start, -1))

    def standing_for(self, chars: str, start: int, end: int) -> None:
        self.pieces.append(chars)
        self.lo.extend([start] * len(chars))
        self.hi.extend([end] * len(chars))

    def view(self) -> _View:
        return _View(self.text, "".join(self.pieces), self.lo, self.hi)


def _kept(text: str) -> list[tuple[int, int]]:
    """The stretches of ``text`` outside ANSI escape sequences."""
    kept, last = [], 0
    for hit in _ANSI.finditer(text):
        kept.append((last, hit.start()))
        last = hit.end()
    kept.append((last, len(text)))
    return [(a, b) for a, b in kept if a < b]


def _display_order(text: str, kept: list[tuple[int, int]]) -> _View:
    """``text`` in the order it is shown: what follows a right-to-left override (up to
    its pop or the line's end) reversed, embeddings inside it kept whole."""
    reading = _Reading(text)
    root: list = [False, []]  # a frame: [right to left?, items]; items: (a, b) or frames
    stack = [root]

    def emit(frame: list) -> None:
        rtl, items = frame
        for item in reversed(items) if rtl else items:
            if isinstance(item, list):
                emit(item)
            elif rtl:
                reading.reversed(*item)
            else:
                reading.same(*item)

    for a, b in kept:
        position = a
        for control in _DIRECTION_OR_LINE_END.finditer(text, a, b):
            if position < control.start():
                stack[-1][1].append((position, control.start()))
            position = control.end()
            char = control.group()
            if char in _OVERRIDES:
                if len(stack) > _MAX_DEPTH:
                    continue  # as Unicode's bidi algorithm does past its depth limit
                frame = [_OVERRIDES[char], []]
                stack[-1][1].append(frame)
                stack.append(frame)
            elif char in _POPS:
                if len(stack) > 1:
                    stack.pop()
            else:  # a line ends every override
                emit(root)
                reading.same(control.start(), control.end())
                root[1] = []
                del stack[1:]
        if position < b:
            stack[-1][1].append((position, b))
    emit(root)
    return reading.view()


def _percent_decoded(text: str, kept: list[tuple[int, int]]) -> _View:
    """``text`` with runs of ``%XX`` decoded as UTF-8 (invalid bytes: U+FFFD); a
    decoded run stands for its whole stretch of the original."""
    reading = _Reading(text)
    for a, b in kept:
        position = a
        for run in _PERCENT_RUN.finditer(text, a, b):
            reading.same(position, run.start())
            decoded = bytes.fromhex(run.group().replace("%", "")).decode("utf-8", "replace")
            reading.standing_for(decoded, run.start(), run.end())
            position = run.end()
        reading.same(position, b)
    return reading.view()


class TooComplex(ValueError):
    """A text whose display order the scan does not work out: more direction controls
    than ``MAX_DIRECTION_CONTROLS`` (no honest text has them; the caller fails closed)."""


def views(text: str) -> Iterator[_View]:
    """Every reading of ``text`` the scan looks at: as stored (without ANSI escapes),
    in display order when it holds a right-to-left override, percent-decoded when it
    holds ``%XX``. Raises ``TooComplex`` for a text with more direction controls than
    the bound, before yielding anything."""
    reversing = "\u202e" in text
    if reversing:
        controls = sum(text.count(c) for c in DIRECTION_CONTROLS)
        if controls > MAX_DIRECTION_CONTROLS:
            raise TooComplex(f"{controls:,} direction controls is over {MAX_DIRECTION_CONTROLS:,}")
    return _readings(text, reversing)


def _readings(text: str, reversing: bool) -> Iterator[_View]:
    escaped = "\x1b" in text
    kept = _kept(text) if escaped else [(0, len(text))]
    if escaped:
        reading = _Reading(text)
        for a, b in kept:
            reading.same(a, b)
        yield reading.view()
    else:
        yield _View(text, text)
    if reversing:
        yield _display_order(text, kept)
    if "%" in text and _PERCENT_RUN.search(text):
        yield _percent_decoded(text, kept)

"""Finding a roster agent's identity in text (SPEC §5.1): does a text name an agent
(display name, slug, model id, alias)? Pure: no ORM. The battle-level scan (which
texts, files and screenshots a judge sees) is ``judging.services.screening``; the
blind presenter redacts with the same scanner.

Both the identities and the text are first folded (``agents.textfold``: compatibility
forms, invisible characters, combining marks and confusable characters mapped away,
casefolded), so that what reads the same to a person compares equal.

Matching is by whole tokens on the folded text: an identity matches where it is not
glued to further letters or digits, so ``claude`` matches "Claude-3", "claude's" and
"my_claude_key" but not "Claudette". Between an identity's tokens any run of
separators (space, ``-``, ``_``, ``.``, ``/``, ``:``, ``+``) or none matches, so
``claude-3-5-sonnet`` also matches "Claude 3.5 Sonnet". Within a token the letters
may be spread out, but only evenly: the *same* separator run between every two
letters ("C l a u d e", "C.l.a.u.d.e", "c-l-a-u-d-e", one per line), so "survey or"
is not "surveyor" and "rule book" is not "rulebook". Besides the text as stored, the
scan reads it as a person may see it (``agents.textfold.views``: in display order behind a
right-to-left override, percent-decoded).

Model ids are also looked for without a provider prefix (``anthropic/claude-x`` →
``claude-x``) and without a date or ``latest`` suffix. An identity too weak to name
anything is not looked for: under three letters or digits, only digits, or one
ordinary word (``idle``, ``agent``, ``default``): such a word in a shell command or an
answer is no leak, and a roster entrant should carry a distinctive alias instead.
"""

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache

from agents.textfold import DIRECTION_CONTROLS, TooComplex, fold, views

MIN_IDENTITY_CHARS = 3
_TOKEN = re.compile(r"[^\W_]+")
_VERSION_SUFFIX = re.compile(r"[-_.@:](?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$", re.IGNORECASE)

# Ordinary words that are no evidence of an identity on their own (single-token
# identities only; a phrase such as "Idle baseline" is still looked for).
_COMMON_WORDS_TEXT = """
    about after again agent agents all also and answer any api app are around assistant
    auto back base baseline basic best better big bot browser but can chat check click
    code command computer copy could data day default demo did does done down dummy each
    echo edit even file find first fast for from get give good great had has have help
    helper her here him his home how human idle image into its just key know large last
    let like line list long look make mini model more most much must new next not now
    null number off old one only open operator other our out over page part people pro
    random read right run say search see shell should show small some start step still
    stop such sure system take task team tell test text than that the their them then
    there these they thing think this time tool try turbo two type use user very want
    was way web well were what when where which who why will with work worker would
    write yes you your
"""
COMMON_WORDS = frozenset(_COMMON_WORDS_TEXT.split())

_BETWEEN_TOKENS = r"[\s\-_./:+]*"
_WORD_AFTER = r"(?![^\W_])"


@cache
def _gap() -> str:
    """What may stand, always the same run, between every two letters of a spread-out
    token: whitespace and punctuation (folded, as the text will be)."""
    chars = {c for c in fold("-_./\\:;*+,~=·•'\"`^()[]{}<>!?#") if not c.isalnum()}
    return "[" + re.escape("".join(sorted(chars))) + r"\s]{1,16}"


@dataclass(frozen=True)
class Leak:
    where: str
    identity: str
    excerpt: str


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def is_distinctive(identity: str) -> bool:
    """Whether ``identity`` is worth looking for (see the module docstring)."""
    tokens = _tokens(identity)
    if not tokens or len("".join(tokens)) < MIN_IDENTITY_CHARS:
        return False
    if all(token.isdigit() for token in tokens):
        return False
    return not (len(tokens) == 1 and tokens[0] in COMMON_WORDS)


def identity_variants(identity: str) -> set[str]:
    """The spellings of one identity string the scan looks for."""
    variants = {identity.strip()}
    if "/" in identity:
        variants.add(identity.rsplit("/", 1)[1].strip())
    for variant in list(variants):
        variants.add(_VERSION_SUFFIX.sub("", variant))
    return {v for v in variants if is_distinctive(v)}


def _letter(char: str) -> list[str]:
    """The folded forms one identity character matches: those of all its cases."""
    cases = {char, char.upper(), char.lower(), char.casefold(), char.title()}
    return sorted({fold(c) for c in cases} - {""}, key=lambda f: (-len(f), f))


def _either(forms: list[str]) -> str:
    singles = "".join(f for f in forms if len(f) == 1)
    parts = [re.escape(f) for f in forms if len(f) > 1]
    if singles:
        parts.append(re.escape(singles) if len(singles) == 1 else f"[{re.escape(singles)}]")
    return parts[0] if len(parts) == 1 else f"(?:{'|'.join(parts)})"


def _token_rest(letters: list[str], group: str) -> str:
    """A token after its first letter: the other letters together, or each behind the
    same separator run as the first gap."""
    if not letters:
        return ""
    spaced = f"(?P<{group}>{_gap()})" + f"(?P={group})".join(letters)
    return f"(?:{''.join(letters)}|{spaced})"


def _branches(variant: str, prefix: str) -> list[tuple[str, str]]:
    """The regex of one identity spelling as (first character, rest) branches, one per
    folded form of its first letter."""
    tokens = [[_letter(c) for c in token] for token in _tokens(variant)]
    tokens = [[forms for forms in token if forms] for token in tokens]
    tokens = [token for token in tokens if token]
    if not tokens:
        return []
    first, others = tokens[0], tokens[1:]
    branches = []
    for b, form in enumerate(first[0]):
        group = f"{prefix}b{b}t"
        rest = re.escape(form[1:])
        rest += _token_rest([_either(f) for f in first[1:]], f"{group}0")
        for t, token in enumerate(others, 1):
            rest += _BETWEEN_TOKENS + _either(token[0])
            rest += _token_rest([_either(f) for f in token[1:]], f"{group}{t}")
        branches.append((form[0], rest + _WORD_AFTER))
    return branches


def _joined(branches: Iterable[tuple[str, str]]) -> str:
    """All branches in one pattern that opens with a set of first characters (which
    the regex engine skips to in C) and the word-boundary check, made once, before
    choosing among the branches by the character just read."""
    by_first: dict[str, list[str]] = {}
    for char, rest in branches:
        by_first.setdefault(char, []).append(rest)
    firsts = re.escape("".join(by_first))
    choice = "|".join(f"(?<={re.escape(c)})(?:{'|'.join(rests)})" for c, rests in by_first.items())
    return rf"[{firsts}](?<![^\W_].)(?:{choice})"


@lru_cache(maxsize=16)
def _compiled(variants: tuple[str, ...]) -> tuple[list[re.Pattern], re.Pattern | None]:
    """One pattern per variant (to tell which one matched) and all of them in one, in
    the order given (the first variant that matches at a place wins)."""
    branches = [_branches(v, f"v{i}") for i, v in enumerate(variants)]
    each = [re.compile(_joined(b)) for b in branches]
    every = [branch for group in branches for branch in group]
    return each, (re.compile(_joined(every)) if every else None)


class LeakScanner:
    """Compiled once per roster (cached) from every roster identity string."""

    def __init__(self, identities: Iterable[str]) -> None:
        variants: dict[str, str] = {}
        for identity in identities:
            for variant in identity_variants(identity):
                variants.setdefault(variant, identity)
        # Longest first: the excerpt then shows the fullest name that matched.
        ordered = tuple(sorted(variants, key=lambda v: (-len(v), v)))
        self._names = [variants[v] for v in ordered]
        self._each, self._any = _compiled(ordered)

    def _name_at(self, folded: str, hit: re.Match) -> str:
        for name, pattern in zip(self._names, self._each, strict=True):
            found = pattern.match(folded, hit.start())
            if found is not None and found.end() == hit.end():
                return name
        return hit.group(0)

    def first(self, text: str) -> tuple[str, str] | None:
        """(identity, excerpt of the original text) of the first identity named in
        ``text`` in any of its readings, else None. Raises ``TooComplex`` (``views``)."""
        if self._any is None or not text:
            return None
        for view in views(text):
            hit = self._any.search(view.folded)
            if hit is not None:
                [(start, end)] = view.spans([(hit.start(), hit.end())])
                return self._name_at(view.folded, hit), text[max(0, start - 30) : end + 30]
        return None

    def redact(self, text: str, mark: str) -> str:
        """``text`` with every stretch the scan would find (in any reading) replaced by
        ``mark``: exactly the original characters the match covers. A text too
        complex to put in display order loses its direction controls first (then it
        shows as it was scanned)."""
        if self._any is None or not text:
            return text
        try:
            readings = views(text)
        except TooComplex:
            text = text.translate(dict.fromkeys(map(ord, DIRECTION_CONTROLS)))
            readings = views(text)
        spans: list[tuple[int, int]] = []
        for view in readings:
            matches = [(m.start(), m.end()) for m in self._any.finditer(view.folded)]
            spans += view.spans(matches) if matches else []
        if not spans:
            return text
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        parts, last = [], 0
        for start, end in merged:
            parts += [text[last:start], mark]
            last = end
        return "".join(parts) + text[last:]

    def scan(self, texts: Iterable[tuple[str, str]]) -> list[Leak]:
        leaks = []
        for where, text in texts:
            found = self.first(text)
            if found is not None:
                leaks.append(Leak(where=where, identity=found[0], excerpt=found[1]))
        return leaks

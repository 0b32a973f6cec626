"""Finding a roster agent's identity in text (SPEC §5.1): does a text name an agent
(display name, slug, model id, alias, entrant team)? Pure: no ORM. The battle-level
scan (which texts, files and screenshots a judge sees) is
``judging.services.screening``; the blind presenter redacts with the same scanner.
The rules and their reasons: docs/leak-scan.md, "Matching".

Both the identities and the text are first folded (``agents.textfold``: compatibility
forms, Latin letter forms, invisible characters, combining marks and confusable
characters mapped away, casefolded), so that what reads the same to a person compares
equal.

An identity is looked for as its pieces: its runs of letters or digits, split also
where a capital follows a small letter and between letters and digits ("GPT-4o
(OpenAI)" is gpt, 4, o, open, ai). Matching is by whole tokens on the folded text: an
identity matches where it is not glued to further letters or digits, so ``claude``
matches "Claude-3", "claude's" and "my_claude_key" but not "Claudette". Between its
pieces any run of what is neither letter nor digit (spaces, punctuation, brackets,
quotes; up to 16) or none matches, so the name matches written exactly, "gpt4o openai"
and "GPT 4o Open-AI". Within a piece the letters may be spread out, but only evenly:
the *same* separator run between every two letters ("C l a u d e", "C.l.a.u.d.e"), so
"survey or" is not "surveyor". An identity's letter also matches its leetspeak
stand-ins ("C14ud3", "cl@ude"); its digits match only themselves. Each spelling is
also looked for reversed ("edualC"). Besides the text as stored, the scan reads it as
a person may see it (``agents.textfold.views``: in display order behind a
right-to-left override, percent-decoded).

Which spellings: the parts of a name that identify on their own (``name_phrases``);
model ids also without a provider prefix (``anthropic/claude-x`` → ``claude-x``) and
without a date or ``latest`` suffix. An identity too weak to name anything is not
looked for: under three letters or digits, only digits, or one ordinary word
(``idle``, ``agent``, ``research``): such a word in a shell command or an answer is no
leak, and a roster entrant should carry a distinctive alias instead.
"""

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import count

from agents.textfold import DIRECTION_CONTROLS, TooComplex, fold, views

MIN_IDENTITY_CHARS = 3
_TOKEN = re.compile(r"[^\W_]+")
_VERSION_SUFFIX = re.compile(r"[-_.@:](?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$", re.IGNORECASE)

# Ordinary words that are no evidence of an identity on their own (single-token
# identities only; a phrase such as "Idle baseline" is still looked for), and words that
# name a model's size, tier, release or maker's kind rather than a model (the second
# paragraph): a team called "Research" or an alias "Flash" is not looked for alone.
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

    alpha beta coder company corp edition exp experimental flash group haiku inc instruct
    lab labs latest lite llc ltd max medium micro nano opus plus preview project reasoning
    release research sonnet studio systems thinking ultra version vision
"""
COMMON_WORDS = frozenset(_COMMON_WORDS_TEXT.split())

# Between an identity's tokens: any run of what is neither letter nor digit (spaces,
# punctuation, brackets, quotes), up to 16 characters, or none.
_BETWEEN_TOKENS = r"[\W_]{0,16}"
_WORD_AFTER = r"(?![^\W_])"
# Leetspeak: what else reads as an identity's letter (the digits 0 and 1 and the bar are
# already folded to "o" and "l", confusables). Only an identity's letters get these: a
# digit in an identity matches only itself, so "gpt-4o" is not "gpt-ao".
_LEET = {
    "a": "4@",
    "b": "8",
    "c": "(",
    "e": "3",
    "g": "96",
    "i": "!",
    "s": "5$",
    "t": "7+",
    "z": "2",
}
# A bracketed part of a name: "(OpenAI)", "[new]", "{beta}", "<acme>".
_BRACKETED = re.compile(r"[(\[{<]([^()\[\]{}<>]*)[)\]}>]")


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


def _pieces(text: str) -> tuple[str, ...]:
    """The tokens of an identity as the scan looks for them: split also where a
    capital follows a small letter and between letters and digits ("OpenAI" is "open
    ai", "Qwen2.5" is "qwen 2 5"), so that "Open AI", "Deep-Seek" and "qwen 2.5" match."""
    pieces = []
    for word in _TOKEN.findall(unicodedata.normalize("NFKC", text)):
        start = 0
        for i in range(1, len(word)):
            before, char = word[i - 1], word[i]
            if (before.islower() and char.isupper()) or before.isdigit() != char.isdigit():
                pieces.append(word[start:i])
                start = i
        pieces.append(word[start:])
    return tuple(piece.casefold() for piece in pieces)


def is_distinctive(identity: str) -> bool:
    """Whether ``identity`` is worth looking for (see the module docstring)."""
    tokens = _tokens(identity)
    if not tokens or len("".join(tokens)) < MIN_IDENTITY_CHARS:
        return False
    if all(token.isdigit() for token in tokens):
        return False
    return not (len(tokens) == 1 and tokens[0] in COMMON_WORDS)


def _is_version(word: str) -> bool:
    """A version or size, not a name: digits with at most two letters ("3.5", "2.0",
    "v2", "4o", "70B", "R1", "2024-08-06")."""
    chars = "".join(_tokens(word))
    return any(c.isdigit() for c in chars) and sum(c.isalpha() for c in chars) <= 2


def _written_as_a_name(word: str) -> bool:
    """A word of a name that is written as a name ("Gemini", "OpenAI", "GPT-4o",
    "O'Brien"): capitalised, or with a capital or digit after its first letter; neither
    a version nor an ordinary word, and distinctive."""
    if _is_version(word) or not is_distinctive(word):
        return False
    return word[:1].isupper() or any(c.isupper() or c.isdigit() for c in word[1:])


def name_phrases(name: str) -> set[str]:
    """The parts of a name that identify its agent on their own (docs/leak-scan.md,
    "Sub-phrases"): the name whole; what stands outside brackets and each bracketed
    part, whole ("GPT-4o", "OpenAI" of "GPT-4o (OpenAI)"); within each part, every run of
    two or more words that holds a word written as a name ("Gemini 2.0", "Acme Agent"),
    and the part without its versions ("Gemini Flash" of "Gemini 2.0 Flash"). A single
    word alone is looked for only as a whole part: "Gemini" alone is a zodiac sign, "Acme"
    a word; an entrant known by one word carries it as an alias."""
    phrases = {name.strip()}
    parts = [_BRACKETED.sub(" ", name), *_BRACKETED.findall(name)]
    for part in parts:
        words = [word for word in part.split() if _tokens(word)]  # not "&" alone
        phrases.add(" ".join(words))
        for start in range(len(words)):
            for end in range(start + 2, len(words) + 1):
                if any(_written_as_a_name(word) for word in words[start:end]):
                    phrases.add(" ".join(words[start:end]))
        named = [word for word in words if not _is_version(word)]
        if 1 < len(named) < len(words) and any(map(_written_as_a_name, named)):
            phrases.add(" ".join(named))
    return {phrase for phrase in phrases if phrase}


def identity_variants(identity: str) -> set[str]:
    """The spellings of one identity string the scan looks for: its sub-phrases
    (``name_phrases``), and a model id also without its provider prefix and date."""
    variants = set()
    for phrase in name_phrases(identity):
        variants.add(phrase)
        if "/" in phrase:
            variants.add(phrase.rsplit("/", 1)[1].strip())
    for variant in list(variants):
        variants.add(_VERSION_SUFFIX.sub("", variant))
    return {v for v in variants if is_distinctive(v)}


def _letter(char: str) -> list[str]:
    """The folded forms one identity character matches: those of all its cases, and a
    letter's leetspeak stand-ins."""
    cases = {char, char.upper(), char.lower(), char.casefold(), char.title()}
    forms = {fold(c) for c in cases} - {""}
    forms |= {fold(stand_in) for form in forms for stand_in in _LEET.get(form, "")}
    return sorted(forms, key=lambda f: (-len(f), f))


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


def _folded_letters(token: str) -> list[list[str]]:
    return [forms for forms in map(_letter, token) if forms]


def _trie(spellings: Iterable[tuple[str, ...]]) -> dict:
    """The spellings as a tree of tokens; the key "" marks where a spelling ends."""
    root: dict = {}
    for tokens in spellings:
        node = root
        for token in (t for t in tokens if _folded_letters(t)):
            node = node.setdefault(token, {})
        if node is not root:
            node[""] = {}
    return root


def _depth(node: dict) -> int:
    return max((1 + _depth(child) for token, child in node.items() if token), default=0)


def _pattern(spellings: Iterable[tuple[str, ...]]) -> str | None:
    """One regex for the spellings (folded tokens), their shared first tokens matched
    once: a tree of tokens, the longer continuation tried first (a match is the
    fullest name at its place), then the end of the name (not glued to a further
    letter or digit). Opens with the word-boundary check and one alternative per set of
    first characters: the single-character forms of a first letter, each longer form
    ("m" folds to "rn")."""
    names = count()

    def children(node: dict) -> list[tuple[str, dict]]:
        return sorted(((t, c) for t, c in node.items() if t), key=lambda item: -_depth(item[1]))

    def after(node: dict) -> str:
        options = []
        for token, child in children(node):
            letters = [_either(forms) for forms in _folded_letters(token)]
            rest = _token_rest(letters[1:], f"g{next(names)}")
            options.append(_BETWEEN_TOKENS + letters[0] + rest + after(child))
        if "" in node:
            options.append(_WORD_AFTER)
        return options[0] if len(options) == 1 else f"(?:{'|'.join(options)})"

    by_first: dict[str, list[str]] = {}
    for token, child in children(_trie(spellings)):
        first, *others = _folded_letters(token)
        letters = [_either(forms) for forms in others]
        singles = "".join(form for form in first if len(form) == 1)
        starts = [(singles, "")] if singles else []
        starts += [(form[0], form[1:]) for form in first if len(form) > 1]
        for chars, more in starts:
            rest = re.escape(more) + _token_rest(letters, f"g{next(names)}") + after(child)
            by_first.setdefault(chars, []).append(rest)
    if not by_first:
        return None
    # The engine skips in C an alternative that opens with a set the character is not in.
    firsts = re.escape("".join(sorted(set("".join(by_first)))))
    choice = "|".join(f"[{re.escape(c)}](?:{'|'.join(rests)})" for c, rests in by_first.items())
    return rf"(?=[{firsts}])(?<![^\W_])(?:{choice})"


@lru_cache(maxsize=16)
def _compiled(spellings: tuple[tuple[str, ...], ...]) -> tuple[list[re.Pattern], re.Pattern | None]:
    """One pattern per spelling (to tell which one matched) and all of them in one."""
    each = [re.compile(_pattern([tokens]) or "(?!)") for tokens in spellings]
    every = _pattern(spellings)
    return each, (re.compile(every) if every else None)


def _holds(tokens: tuple[str, ...], part: tuple[str, ...]) -> bool:
    return any(tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


@lru_cache(maxsize=16)
def _spellings(identities: tuple[str, ...]) -> dict[tuple[str, ...], str]:
    """Every spelling the scan looks for, as its tokens (spellings that differ only in
    separators are one), → the identity it stands for: each variant, longest first
    (an excerpt then shows the fullest name that matched); then reversed ("edualC"),
    those that hold no shorter spelling (a reversed "claude 3 5 sonnet" holds a reversed
    "claude 3 5", which is enough to find it), unless it reads the same backwards or is
    not distinctive."""
    variants: dict[str, str] = {}
    for identity in identities:
        for variant in identity_variants(identity):
            variants.setdefault(variant, identity)
    spellings: dict[tuple[str, ...], str] = {}
    for variant in sorted(variants, key=lambda v: (-len(v), v)):
        spellings.setdefault(_pieces(variant), variants[variant])
    forwards = list(spellings.items())
    for tokens, identity in forwards:
        if any(other != tokens and _holds(tokens, other) for other, _ in forwards):
            continue
        backwards = tuple(token[::-1] for token in reversed(tokens))
        if is_distinctive(" ".join(backwards)):
            spellings.setdefault(backwards, identity)
    return spellings


class LeakScanner:
    """Compiled once per roster (cached) from every roster identity string."""

    def __init__(self, identities: Iterable[str]) -> None:
        spellings = _spellings(tuple(identities))
        self._names = list(spellings.values())
        self._each, self._any = _compiled(tuple(spellings))

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

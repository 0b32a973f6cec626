"""The identity-leak scan of SPEC §5.1: does any judge-visible text of a battle name a
roster agent (display name, slug, model id, alias)?

Matching is case-insensitive and by whole tokens: an identity matches where it is not
glued to further letters or digits, so ``claude`` matches "Claude-3", "claude's" and
"my_claude_key" but not "Claudette". Between an identity's tokens any run of
separators (space, ``-``, ``_``, ``.``, ``/``, ``:``) or none matches, so
``claude-3-5-sonnet`` also matches "Claude 3.5 Sonnet". Model ids are also looked for
without a provider prefix (``anthropic/claude-x`` → ``claude-x``) and without a date
or ``latest`` suffix.

An identity too weak to name anything is not looked for: under three letters or
digits, only digits, or one ordinary word (``idle``, ``agent``, ``default``): such a
word in a shell command or an answer is no leak, and a roster entrant should carry a
distinctive alias instead. Screenshots are images and are not scanned.
"""

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

MIN_IDENTITY_CHARS = 3
_SEPARATORS = r"[\s\-_./:]*"
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


@dataclass(frozen=True)
class Leak:
    where: str
    identity: str
    excerpt: str


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


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


def _pattern(identity: str) -> str:
    body = _SEPARATORS.join(re.escape(token) for token in _tokens(identity))
    return rf"(?<![^\W_]){body}(?![^\W_])"


class LeakScanner:
    """Compiled once per battle from every roster identity string."""

    def __init__(self, identities: Iterable[str]) -> None:
        variants: dict[str, str] = {}
        for identity in identities:
            for variant in identity_variants(identity):
                variants.setdefault(variant, identity)
        # Longest first: the excerpt then shows the fullest name that matched.
        ordered = sorted(variants, key=len, reverse=True)
        self._each = [(variants[v], re.compile(_pattern(v), re.IGNORECASE)) for v in ordered]
        self._any = (
            re.compile("|".join(_pattern(v) for v in ordered), re.IGNORECASE) if ordered else None
        )

    def first(self, text: str) -> tuple[str, str] | None:
        """(identity, excerpt) of the first identity named in ``text``, else None."""
        if self._any is None or not text:
            return None
        hit = self._any.search(text)
        if hit is None:
            return None
        identity = next(
            (name for name, pattern in self._each if pattern.fullmatch(hit.group(0))),
            hit.group(0),
        )
        start, end = max(0, hit.start() - 30), hit.end() + 30
        return identity, text[start:end]

    def redact(self, text: str, mark: str) -> str:
        """``text`` with every identity the scan would find replaced by ``mark``."""
        if self._any is None or not text:
            return text
        return self._any.sub(mark, text)

    def scan(self, texts: Iterable[tuple[str, str]]) -> list[Leak]:
        leaks = []
        for where, text in texts:
            found = self.first(text)
            if found is not None:
                leaks.append(Leak(where=where, identity=found[0], excerpt=found[1]))
        return leaks


def strings_in(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value, dictionary keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)


def judge_visible_texts(runs: Iterable[Any]) -> Iterator[tuple[str, str]]:
    """(where, text) for everything a judge reads of a battle's runs: final messages,
    delivered file names, each step's tool arguments (typed text, shell commands,
    URLs) and its result text. ``runs`` are Run rows with their steps prefetched."""
    for run in runs:
        side = f"side {run.side}"
        yield f"{side} final message", run.final_message
        for entry in run.delivered_files or []:
            yield f"{side} delivered file name", str(entry.get("name", ""))
        for step in run.steps.all():
            label = f"{side} step {step.index} ({step.tool})"
            for text in strings_in(step.args):
                yield f"{label} arguments", text
            result = step.result or {}
            for key in ("stdout", "stderr", "error"):
                value = result.get(key)
                if isinstance(value, str):
                    yield f"{label} {key}", value

"""Personal data redacted from what an environment exports: the instruction
(``redact_text``), the reference state (``redact_json``) and the attachments' text
(``redact_attachment``). docs/environments.md "Redaction" says what is found and what
is missed.

Microsoft Presidio's analyzer finds the entities: spaCy's en_core_web_sm (installed
from the lock, never downloaded) for names and places, Presidio's recognizers for
e-mail addresses, phone numbers, credit cards, IBANs and IP addresses, and ours
(``redaction_patterns``) for street addresses, postcodes and credentials. This module
decides what is replaced: overlapping detections become one replacement covering them
all, loopback and unspecified addresses stay. Each value becomes a placeholder such as
``<PERSON_1>``; the same value gets the same placeholder wherever one ``Placeholders``
book is passed (one book per environment keeps its texts coherent).

A replacement records the entity type, the replaced span's offsets in the original,
the placeholder, the detector and its score, and never the value. No mapping back to
the values is kept: the book holds keyed digests under a random key that dies with it.

The analyzer (``redaction_engine``: spaCy's pipeline, seconds to load, ~200 MB) is
built on first use, once per process; importing this module imports neither spaCy nor
Presidio. Long texts are analysed in overlapping chunks, which bounds both spaCy's
memory and any regular expression's worst case. Pure: no Django."""

from __future__ import annotations

import bisect
import hmac
import ipaddress
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from exports.redaction_engine import CHUNK_CHARS, analyzer

# A chunk (CHUNK_CHARS) is analysed on its own; the next one starts OVERLAP_CHARS
# before its end, so an entity shorter than that (a 4096-bit PEM key is ~3.3k
# characters) lies whole in one chunk.
OVERLAP_CHARS = 4_096

# The types replaced, most trusted first: when detections overlap, the first type in
# this order names the merged span (then the higher score).
ENTITY_TYPES = (
    "PRIVATE_KEY",
    "URL_CREDENTIALS",
    "JWT",
    "API_KEY",
    "AWS_ACCESS_KEY",
    "BEARER_TOKEN",
    "PASSWORD",
    "CREDIT_CARD",
    "IBAN_CODE",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "IP_ADDRESS",
    "STREET_ADDRESS",
    "POSTAL_CODE",
    "PERSON",
    "LOCATION",
)
_PRIORITY = {entity: rank for rank, entity in enumerate(ENTITY_TYPES)}


@dataclass(frozen=True)
class Replacement:
    """One replaced span: ``start``/``end`` index the original text (the code points
    of a Python ``str``); ``path`` is the JSON Pointer of the string it was found in
    (``redact_json``), empty for a plain text."""

    entity_type: str
    start: int
    end: int
    placeholder: str
    score: float
    detector: str
    path: str = ""


@dataclass(frozen=True)
class Redacted:
    text: str
    replacements: tuple[Replacement, ...]


@dataclass(frozen=True)
class RedactedJson:
    value: Any
    replacements: tuple[Replacement, ...]


@dataclass(frozen=True)
class RedactedAttachment:
    """An attachment's redacted text, or ``unredactable`` with the ``reason``: bytes
    that are not text cannot be redacted, and the pipeline must not export them."""

    name: str
    text: str | None
    replacements: tuple[Replacement, ...]
    unredactable: bool
    reason: str = ""


@dataclass(frozen=True)
class _Detection:
    entity_type: str
    start: int
    end: int
    score: float
    detector: str


class Placeholders:
    """The placeholders of one environment: the same value of one entity type gets
    the same ``<TYPE_n>`` across every text redacted with this book, numbered per type
    in order of first sight. Values are compared after a per-type normalisation (case
    and spacing for names and addresses, digits for phone and card numbers) and kept
    only as HMAC digests under a random key. Not shared between threads."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._by_digest: dict[bytes, str] = {}
        self._counts: dict[str, int] = {}

    def placeholder(self, entity_type: str, value: str) -> str:
        normal = _normalise(entity_type, value)
        digest = hmac.digest(
            self._key, f"{entity_type}\0{normal}".encode("utf-8", "surrogatepass"), "sha256"
        )
        known = self._by_digest.get(digest)
        if known is not None:
            return known
        number = self._counts.get(entity_type, 0) + 1
        self._counts[entity_type] = number
        placeholder = f"<{entity_type}_{number}>"
        self._by_digest[digest] = placeholder
        return placeholder


_SPACES = re.compile(r"\s+")


def _normalise(entity_type: str, value: str) -> str:
    if entity_type in ("PHONE_NUMBER", "CREDIT_CARD"):
        return "".join(ch for ch in value if ch.isdigit())
    if entity_type == "IBAN_CODE":
        return "".join(ch for ch in value if ch.isalnum()).upper()
    if entity_type in ("PERSON", "LOCATION", "EMAIL_ADDRESS", "STREET_ADDRESS", "POSTAL_CODE"):
        return _SPACES.sub(" ", value).strip().casefold()
    return value


def redact_text(text: str, *, placeholders: Placeholders | None = None) -> Redacted:
    """``text`` with every detected entity replaced by its placeholder. A lone
    surrogate (no character: it cannot be encoded) becomes U+FFFD, offsets unchanged."""
    book = placeholders if placeholders is not None else Placeholders()
    text = _without_surrogates(text)
    return _apply(text, _detect(text), book, path="")


_SURROGATE = re.compile("[\ud800-\udfff]")
# Control characters glue words together for spaCy's tokenizer ("name\0Angela" is one
# token): the analysis reads them as spaces (one for one, offsets unchanged).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _without_surrogates(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def redact_json(value: Any, *, placeholders: Placeholders | None = None) -> RedactedJson:
    """A JSON value (a reference state) with its strings redacted: the keys and the
    shape are kept, strings inside lists and objects are redacted, and a string under
    a credential-named key (``password``, ``api_key``, ...) is replaced whole."""
    book = placeholders if placeholders is not None else Placeholders()
    found: list[Replacement] = []
    redacted = _redact_node(value, "", None, book, found)
    return RedactedJson(redacted, tuple(found))


def redact_attachment(
    name: str, data: bytes, *, placeholders: Placeholders | None = None
) -> RedactedAttachment:
    """An attachment's text redacted, when it is text: UTF-8 (a byte-order mark
    allowed) without NUL bytes. Anything else (images, PDFs, archives, other
    encodings) comes back ``unredactable``."""
    if b"\0" in data:
        return RedactedAttachment(name, None, (), True, "binary: it holds NUL bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return RedactedAttachment(
            name, None, (), True, f"not UTF-8 text (byte {error.start} does not decode)"
        )
    done = redact_text(text, placeholders=placeholders)
    return RedactedAttachment(name, done.text, done.replacements, False)


def _detect(text: str) -> list[_Detection]:
    """The spans to replace in ``text``, sorted and disjoint (overlaps merged)."""
    text = _CONTROL.sub(" ", text)
    if not text.strip():
        return []
    engine = analyzer()
    found: list[_Detection] = []
    for start, end in _chunks(text):
        for result in engine.analyze(text=text[start:end], language="en"):
            found.append(
                _Detection(
                    entity_type=result.entity_type,
                    start=start + result.start,
                    end=start + result.end,
                    score=float(result.score),
                    detector=str(result.recognition_metadata.get("recognizer_name", "")),
                )
            )
    wanted = [d for d in found if _wanted(d, text)]
    # "https://user:pass@host": the e-mail pattern sees "pass@host"; the userinfo is
    # the credential, the host stays
    userinfo = _merge([d for d in wanted if d.entity_type == "URL_CREDENTIALS"])
    starts = [d.start for d in userinfo]
    return _merge(
        [
            d
            for d in wanted
            if d.entity_type != "EMAIL_ADDRESS" or not _inside(d.start, starts, userinfo)
        ]
    )


def _inside(position: int, starts: list[int], spans: list[_Detection]) -> bool:
    """Whether ``position`` lies in one of ``spans`` (sorted, disjoint)."""
    index = bisect.bisect_right(starts, position) - 1
    return index >= 0 and position < spans[index].end


def _wanted(detection: _Detection, text: str) -> bool:
    if detection.entity_type not in _PRIORITY or detection.end <= detection.start:
        return False
    if detection.entity_type in ("PERSON", "LOCATION"):
        return _name_like(text[detection.start : detection.end])
    if detection.entity_type == "IP_ADDRESS":
        value = text[detection.start : detection.end].split("/")[0].split("%")[0]
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            return True
        return not (address.is_loopback or address.is_unspecified)
    return True


# Not in a name or a place: what spaCy's small model at times calls one in a URL, a
# command or a run of symbols ("https://docs.python.org/3/" as a person, "git push").
_NOT_IN_NAMES = re.compile(r"[\d/\\:@=<>{}\[\]|_#$%^*~+]")


def _name_like(span: str) -> bool:
    if _NOT_IN_NAMES.search(span) or not any(ch.isalpha() for ch in span):
        return False
    # in a cased script a name has a capital (scripts without case pass)
    return any(ch.isupper() for ch in span) or not any(ch.islower() for ch in span)


def _merge(detections: list[_Detection]) -> list[_Detection]:
    """Overlapping detections become one covering their union, named by the most
    trusted type among them (then the highest score): a span is never half replaced."""
    merged: list[_Detection] = []
    group: list[_Detection] = []
    group_end = -1
    for detection in sorted(detections, key=lambda d: (d.start, -d.end)):
        if group and detection.start >= group_end:
            merged.append(_union(group))
            group = []
        group_end = max(group_end, detection.end) if group else detection.end
        group.append(detection)
    if group:
        merged.append(_union(group))
    return merged


def _union(group: list[_Detection]) -> _Detection:
    best = min(group, key=lambda d: (_PRIORITY[d.entity_type], -d.score))
    return _Detection(
        entity_type=best.entity_type,
        start=min(d.start for d in group),
        end=max(d.end for d in group),
        score=best.score,
        detector=best.detector,
    )


def _apply(text: str, detections: list[_Detection], book: Placeholders, path: str) -> Redacted:
    parts: list[str] = []
    replacements: list[Replacement] = []
    cursor = 0
    for d in detections:
        placeholder = book.placeholder(d.entity_type, text[d.start : d.end])
        parts.append(text[cursor : d.start])
        parts.append(placeholder)
        cursor = d.end
        score = round(d.score, 4)
        replacements.append(
            Replacement(d.entity_type, d.start, d.end, placeholder, score, d.detector, path)
        )
    parts.append(text[cursor:])
    return Redacted("".join(parts), tuple(replacements))


_CREDENTIAL_KEY = re.compile(
    r"(?i)(?:^|[_.\-])(?:password|passwd|passphrase|pwd|secret|token|api[_\-]?key|apikey"
    r"|access[_\-]?key|secret[_\-]?key|private[_\-]?key|credentials?|client[_\-]?secret"
    r"|authorization|auth[_\-]?token|cookie|session[_\-]?id)$"
)


def _redact_node(
    node: Any, path: str, key: str | None, book: Placeholders, found: list[Replacement]
) -> Any:
    if isinstance(node, dict):
        return {
            k: _redact_node(v, f"{path}/{_pointer(str(k))}", str(k), book, found)
            for k, v in node.items()
        }
    if isinstance(node, list | tuple):
        return [
            _redact_node(item, f"{path}/{index}", None, book, found)
            for index, item in enumerate(node)
        ]
    if not isinstance(node, str):
        return node
    if key is not None and node and _CREDENTIAL_KEY.search(key):
        placeholder = book.placeholder("PASSWORD", node)
        found.append(
            Replacement("PASSWORD", 0, len(node), placeholder, 1.0, "credential key", path)
        )
        return placeholder
    node = _without_surrogates(node)
    done = _apply(node, _detect(node), book, path)
    found.extend(done.replacements)
    return done.text


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _chunks(text: str) -> Iterator[tuple[int, int]]:
    """Overlapping windows of at most CHUNK_CHARS, cut after a line (else a space)
    in their second half, and never inside a PEM block that starts there."""
    length = len(text)
    start = 0
    while True:
        end = start + CHUNK_CHARS
        if end >= length:
            yield start, length
            return
        end = _cut(text, start, end)
        yield start, end
        start = max(end - OVERLAP_CHARS, start + 1)
        space = _next_space(text, start, end)
        start = space if space is not None else start


def _cut(text: str, start: int, end: int) -> int:
    half = start + CHUNK_CHARS // 2
    cut = text.rfind("\n", half, end)
    if cut == -1:
        cut = max(text.rfind(" ", half, end), text.rfind("\t", half, end))
    cut = end if cut == -1 else cut + 1
    begin = text.rfind("-----BEGIN", half, cut)
    if begin != -1 and text.find("-----END", begin, cut) == -1:
        cut = begin
    return cut


def _next_space(text: str, start: int, limit: int) -> int | None:
    for index in range(start, min(limit, start + 200)):
        if text[index].isspace():
            return index
    return None

"""Reading for the built-ins: what a task asks (from its words alone) and what a page
says (``Observation.page``: its text and its interactive elements). Pure functions;
no site's layout or URLs are known here beyond what the task and the page show."""

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

_URL = re.compile(r"https?://[^\s<>\"'“”‘’]+")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
PHONE = re.compile(r"(?<![\w-])\+?\(?\d[\d ()./-]{4,}\d(?![\w-])")
REFERENCE = re.compile(r"\b[A-Z]{2,5}-[0-9A-Z]{4,12}\b")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_STOPWORDS_TEXT = """a an the of on in at to for from and or about by with into is are was be it
    its this that tell me my please find open go use give show what which who how many much
    article articles page site news story"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
FIELD_ROLES = ("textbox", "searchbox", "combobox", "listbox")
FILE_SUFFIXES = (".csv", ".txt", ".json", ".tsv", ".md", ".xml")


def url_in(text: str) -> str:
    """The first http(s) URL in ``text``, without the punctuation that ends a sentence."""
    match = _URL.search(text)
    return match.group().rstrip(".,;:!?)]") if match else ""


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` that carry meaning (no stopwords, crude stems)."""
    found = re.findall(r"[a-z0-9]+", text.lower())
    return [w[:-1] if len(w) > 4 and w.endswith("s") else w for w in found if w not in STOPWORDS]


def overlap(a: str, b: str) -> int:
    return len(set(words(a)) & set(words(b)))


@dataclass(frozen=True)
class Task:
    """What an instruction asks, as far as rules can tell. ``kind`` is one of
    ``newest``, ``lookup``, ``form``, ``download``, ``article``, ``file`` (the URL is
    a file's), ``browse`` (a page to read, nothing more specific) or ``other`` (no
    page)."""

    kind: str
    url: str
    target: str = ""  # the entry looked up, or the article's subject
    attribute: str = ""  # what of the entry: "phone", "opening hours", ...


_LOOKUP = re.compile(
    r"(?P<attribute>phone(?:\s+number)?|telephone|opening\s+hours|hours|district|address)"
    r"\s+(?:number\s+)?(?:of|for)\s+(?:the\s+)?(?P<target>.+?)"
    r"(?=\s+(?:in|on|at|from|using|via)\s|[?.,;]\s|[?.]?$)",
    re.IGNORECASE,
)
_ABOUT = re.compile(
    r"\babout\s+(?P<subject>.+?)(?=\s+(?:on|at|from|in)\s+https?://|\s+and\s+summar|[.?]\s|[.?]?$)",
    re.IGNORECASE,
)


def task_of(instruction: str, start_url: str = "") -> Task:
    text = " ".join(instruction.split())
    url = url_in(text) or start_url
    low = _URL.sub(" ", text).lower()
    if not url:
        return Task("other", "")
    if urlsplit(url).path.lower().endswith(FILE_SUFFIXES):
        return Task("file", url)
    if re.search(r"\b(?:form|send (?:a|the) message|fill)\b", low):
        return Task("form", url)
    if "download" in low:
        return Task("download", url, target=text)
    if match := _LOOKUP.search(text):
        attribute = " ".join(match["attribute"].lower().split())
        attribute = "phone" if attribute.startswith(("phone", "tele")) else attribute
        return Task("lookup", url, target=match["target"].strip(" '\"“”"), attribute=attribute)
    if re.search(r"\b(?:newest|latest|most recent)\b", low):
        return Task("newest", url)
    if (match := _ABOUT.search(text)) and re.search(r"\b(?:article|story|post)\b", low):
        return Task("article", url, target=match["subject"].strip(" '\"“”"))
    return Task("browse", url)


# --- the page ---------------------------------------------------------------------------


def lines(page: dict[str, Any] | None) -> list[str]:
    text = (page or {}).get("text") or ""
    return [line.strip() for line in text.split("\n") if line.strip()]


def elements(page: dict[str, Any] | None, *roles: str) -> list[dict[str, Any]]:
    found = (page or {}).get("elements") or []
    return [e for e in found if not roles or e.get("role") in roles]


def on_screen(element: dict[str, Any] | None) -> bool:
    return bool(element) and "x" in element and "y" in element  # type: ignore[operator]


def label(element: dict[str, Any]) -> str:
    return " ".join(str(element.get(key) or "") for key in ("name", "field", "placeholder")).strip()


def field_like(page: dict[str, Any] | None, *hints: str) -> dict[str, Any] | None:
    """The first form field whose label, name or placeholder holds one of ``hints``."""
    for element in elements(page, *FIELD_ROLES, "textarea"):
        text = label(element).lower()
        if any(hint in text for hint in hints):
            return element
    return None


def button_like(page: dict[str, Any] | None, *hints: str) -> dict[str, Any] | None:
    for element in elements(page, "button"):
        if any(hint in str(element.get("name", "")).lower() for hint in hints):
            return element
    return None


def link_to(page: dict[str, Any] | None, text: str) -> dict[str, Any] | None:
    """The link whose name is ``text`` (or contains it, or is contained in it)."""
    links = elements(page, "link")
    wanted = text.strip().lower()
    for test in (
        lambda n: n == wanted,
        lambda n: wanted and wanted in n,
        lambda n: n and n in wanted and len(n) > 3,
    ):
        for link in links:
            if test(str(link.get("name", "")).strip().lower()):
                return link
    return None


def dated_lines(page: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(date, line) for every line of the page's text holding an ISO date."""
    return [(m.group(), line) for line in lines(page) if (m := DATE.search(line))]


def without_date(line: str) -> str:
    return " ".join(DATE.sub(" ", line).replace("\t", " ").split()).strip(" -–—·|:,")


def first_sentence(text: str) -> str:
    match = re.match(r"(.+?[.!?])(?:\s|$)", text.strip())
    return (match.group(1) if match else text.strip()).strip()


def prose(page: dict[str, Any] | None, *, skip: tuple[str, ...] = ()) -> list[str]:
    """The page's paragraphs: lines long enough to be sentences, nav and skipped
    lines left out."""
    return [
        line
        for line in lines(page)
        if len(line) >= 60 and line.count(" ") >= 8 and line not in skip and "\t" not in line
    ]


def table(page: dict[str, Any] | None) -> tuple[list[str], list[list[str]]]:
    """The first table of the page's text (innerText writes cells tab-separated): its
    header cells and rows."""
    rows = [[cell.strip() for cell in line.split("\t")] for line in lines(page) if "\t" in line]
    if not rows:
        return [], []
    return rows[0], rows[1:]


def form_values(instruction: str, labels: list[str]) -> dict[str, str]:
    """The value the instruction gives for each form field label ("name Ada Lovelace,
    email ada@example.org, message 'The map is broken'"): what follows the label's
    word, quoted or up to the next comma or label."""
    text = " ".join(instruction.split())
    keys = {lab: lab.lower().split()[0] for lab in labels if lab.strip()}
    alternation = "|".join(re.escape(k) for k in sorted(set(keys.values()), key=len, reverse=True))
    values: dict[str, str] = {}
    for lab, key in keys.items():
        pattern = (
            rf"\b{re.escape(key)}\b\s*(?:is|:|=|of|as)?\s*"
            r"(?:[\"'“‘](?P<quoted>[^\"'”’]+)[\"'”’]"
            rf"|(?P<plain>.+?)(?=,|;|\.\s|\s+and\s+(?:{alternation})\b|\s+(?:{alternation})\b|\.?$))"
        )
        # The last mention: a field list follows the preamble ("send a message: ...").
        if match := ([None, *re.finditer(pattern, text, re.IGNORECASE)])[-1]:
            value = (match["quoted"] or match["plain"] or "").strip().rstrip(".")
            if value and value.lower() not in {"form", "field"}:
                values[lab] = value
    return values

"""What a judge will read of a battle's runs, as (where, text) pairs: the input of the
identity-leak scan (SPEC §5.1, exclusion rule 1) that screens a battle before any judge
is served it. Pure: the runs come in loaded and file contents as bytes; reading the
files and the screenshots (OCR) is the screening's (``judging.services.screening``)."""

import codecs
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import Any

from battles import diffview
from sandboxes.untrusted import unescaped

MARKUP_SUFFIXES = frozenset({".htm", ".html", ".xhtml", ".svg", ".xml"})
# Elements a browser sets apart from their neighbours: their text is not run together.
_BLOCKS_TEXT = """
    address article aside blockquote br dd div dl dt figcaption footer form h1 h2 h3 h4 h5
    h6 header hr li main nav ol option p pre script section select style table tbody td
    textarea tfoot th thead title tr ul
"""
_BLOCKS = frozenset(_BLOCKS_TEXT.split())
# Attributes whose values a browser shows (tooltips, placeholders, alt text, labels).
_SHOWN_ATTRIBUTES = frozenset({"alt", "title", "placeholder", "value", "label", "aria-label"})


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
    """(where, text) for every text a judge reads of a battle's runs: final messages,
    delivered file names, each step's tool name and arguments (typed text, shell
    commands, URLs), its result text and the page it left the browser on (URL and
    title), and
    the text typed over consecutive ``type`` steps run together (what the field
    shows). ``runs`` are Run rows with their steps prefetched, in index order."""
    for run in runs:
        side = f"side {run.side}"
        yield f"{side} final message", run.final_message
        for entry in run.delivered_files or []:
            yield f"{side} delivered file name", str(entry.get("name", ""))
        typed: list[tuple[int, str]] = []
        for step in run.steps.all():
            label = f"{side} step {step.index}"
            yield f"{label} tool name", step.tool  # the agent's, when it asked for no tool
            result = step.result if isinstance(step.result, dict) else {}
            # A step stored escaped (NUL, bytes that are not UTF-8) is read twice: as
            # judges see it and with the escapes skipped (a name split by NUL bytes is
            # still the name).
            escaped = bool(result.get("escaped"))
            for text in strings_in(step.args):
                yield f"{label} ({step.tool}) arguments", text
                if escaped:
                    yield f"{label} ({step.tool}) arguments, escapes skipped", unescaped(text)
            for key in ("stdout", "stderr", "error"):
                value = result.get(key)
                if isinstance(value, str):
                    yield f"{label} ({step.tool}) {key}", value
                    if escaped:
                        yield f"{label} ({step.tool}) {key}, escapes skipped", unescaped(value)
            page = result.get("page")
            if isinstance(page, dict):
                for key, name in (("title", "page title"), ("url", "page URL")):
                    value = page.get(key)
                    if isinstance(value, str) and value:
                        yield f"{label} {name}", value
            text = step.args.get("text") if isinstance(step.args, dict) else None
            if step.tool == "type" and isinstance(text, str):
                typed.append((step.index, text))
                continue
            yield from _typed_together(side, typed)
            typed = []
        yield from _typed_together(side, typed)


def coding_visible_texts(outcomes: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, str]]:
    """(where, text) for what a judge reads of a coding battle's runs beyond their steps
    (``battles.coding_presenters.outcome_payload``): each side's diff as the page shows
    it (``battles.diffview.split``: the files, notes and lines it keeps, each line cut
    as shown; what it leaves out is only counted, so it is not read here), the errors
    shown, and what the judge sandbox printed (the success and test commands' output,
    shown whole as stored). Tokens, cost and the scores are numbers. ``outcomes``:
    (side, CodingOutcome) pairs."""
    for side, outcome in outcomes:
        texts = [("diff error", outcome.diff_error), ("judge error", outcome.judge_error)]
        shown = diffview.split(outcome.diff).files if outcome.diff else []
        for file in shown:
            texts += [
                ("changed file path", file.path),
                ("diff", "\n".join([*file.notes, *(line.text for line in file.lines)])),
            ]
        checks = outcome.checks if isinstance(outcome.checks, dict) else {}
        for name in ("success", "tests"):
            record = checks.get(name)
            if isinstance(record, dict) and isinstance(record.get("output"), str):
                texts.append((f"{name} command output", record["output"]))
        for where, text in texts:
            if not text:
                continue
            yield f"side {side} {where}", text
            if "\\x" in text:  # stored escaped (NUL, bytes that are not UTF-8)
                yield f"side {side} {where}, escapes skipped", unescaped(text)


def _typed_together(side: str, typed: list[tuple[int, str]]) -> Iterator[tuple[str, str]]:
    if len(typed) > 1:
        steps = f"steps {typed[0][0]}–{typed[-1][0]}"
        yield f"{side} {steps} typed text, run together", "".join(t for _, t in typed)


def decoded(data: bytes) -> Iterator[tuple[str, str]]:
    """(reading, text) of a file's bytes: as UTF-8, and also as UTF-16 or UTF-32 when
    a byte-order mark says so (what an editor would show); bytes that do not decode
    become U+FFFD."""
    yield "text", data.decode("utf-8-sig", errors="replace")
    for bom, codec in (
        (codecs.BOM_UTF32_LE, "utf-32"),
        (codecs.BOM_UTF32_BE, "utf-32"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            yield f"text as {codec.upper()}", data.decode(codec, errors="replace")
            return


class _TextOfMarkup(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS:
            self.parts.append("\n")
        for name, value in attrs:
            if name in _SHOWN_ATTRIBUTES and value:
                self.parts.append(f"\n{value}\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def markup_text(markup: str) -> str:
    """The text a browser shows of HTML (or SVG, XML): tags removed, entities and
    character references resolved, inline elements run together ("Cl<b>aude</b>"
    reads "Claude") and block elements apart, plus the attribute values a browser
    shows."""
    parser = _TextOfMarkup()
    parser.feed(markup)
    parser.close()
    return "".join(parser.parts)


def delivered_file_texts(name: str, data: bytes) -> Iterator[tuple[str, str]]:
    """(reading, text) of a delivered file that is not an image: its bytes as text
    (``decoded``) and, for markup (by name, or text that opens with a tag), the text a
    browser shows of it."""
    markup = PurePosixPath(name).suffix.lower() in MARKUP_SUFFIXES
    for reading, text in decoded(data):
        yield reading, text
        if "<" in text and (markup or text.lstrip().startswith("<")):
            yield f"{reading} shown as HTML", markup_text(text)

"""The strongest built-in: reads the page as text and works it as a person would —
follows links by clicking them, fills a search box or a form by clicking each field
and typing, reads the result — and fetches files with the shell. Without a page to
read it falls back on its workspace rules (create a file, compute, list files)."""

import ast
import operator
import re
import shlex
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from agents.builtins import reading as r
from agents.builtins.script import (
    Script,
    ScriptPolicy,
    click,
    deliver,
    key,
    navigate,
    scroll_down,
    shell,
    stdout,
    type_text,
)
from agents.policies import Action, Observation

_CREATE_FILE = re.compile(
    r"(?:create|write|make)\s+(?:a\s+)?file\s+(?:named|called)\s+[\"'`]?(?P<name>[\w.\-]+)[\"'`]?"
    r"\s+(?:containing|with(?:\s+the)?\s+(?:text|content|contents))\s+(?P<text>.+)",
    re.IGNORECASE | re.DOTALL,
)
_ARITHMETIC = re.compile(
    r"(?:what\s+is|compute|calculate|evaluate)\s+(?P<expr>[0-9+\-*/().\s]+[0-9)])", re.IGNORECASE
)
_LISTING = re.compile(r"\b(?:list|which|what)\b.*\bfiles?\b", re.IGNORECASE)
_SAVE_AS = re.compile(r"\bas\s+[\"'`]?(?P<name>[\w.\-]+\.\w+)", re.IGNORECASE)
_HOW_MANY = re.compile(r"\bhow\s+many\s+(?P<noun>[a-z]+)", re.IGNORECASE)


class RulebookPolicy(ScriptPolicy):
    def follow_up_note(self, text: str) -> str:
        """A follow-up that asks a sum it can work out by its rules gets the sum."""
        if (match := _ARITHMETIC.search(text)) and (value := _evaluate(match["expr"])) is not None:
            expr = " ".join(match["expr"].split())
            return self.voice.say(
                "follow_up_sum",
                ("You also asked {expr}: that is {value}.", "As for {expr}, it comes to {value}."),
                expr=expr,
                value=f"{value:.10g}",
            )
        return super().follow_up_note(text)

    def unfinished(self) -> str:
        return self.voice.pick(
            "unfinished",
            (
                "I ran out of ideas before finding the answer on the page.",
                "The page did not give me what the task asks for, so I stop here.",
                "I could not find the answer in what the site showed me.",
            ),
        )

    # -- the plan ----------------------------------------------------------------------

    def script(self, observation: Observation) -> Script:
        task = r.task_of(observation.instruction, observation.start_url)
        if task.kind == "other":
            yield from self.workspace(observation)
            return
        if task.kind == "file":
            yield from self.fetch_file(task.url, observation.instruction)
            return
        yield navigate(task.url)
        handler = {
            "newest": self.newest,
            "lookup": self.lookup,
            "form": self.form,
            "download": self.download,
            "article": self.article,
        }.get(task.kind, self.browse)
        yield from handler(task, observation.instruction)

    def into_view(self, find) -> Script:
        """Scrolls until the element ``find(page)`` names is on the screen (at most
        six times); returns it, or None."""
        for _ in range(6):
            element = find(self.page)
            if element is None or r.on_screen(element):
                return element
            notches = -5 if element.get("offscreen") == "above" else 5
            action = scroll_down(self.page, notches)
            yield action
        return None

    # -- browsing tasks ---------------------------------------------------------------

    def newest(self, task: r.Task, instruction: str) -> Script:
        dated = r.dated_lines(self.page)
        if not dated:
            news = r.link_to(self.page, "news")
            if news is not None and r.on_screen(news):
                yield click(news)
                dated = r.dated_lines(self.page)
        if not dated:
            return
        date, line = max(dated, key=lambda item: item[0])
        title = self._title_in(line)
        link = r.link_to(self.page, title)
        if link is not None:
            link = yield from self.into_view(lambda page: r.link_to(page, title))
        if link is not None:
            yield click(link)
            heading = r.lines(self.page)
            if title not in heading:  # the article did not open: keep what the list said
                title = self._title_in(line)
        self.answer_so_far = self.voice.say(
            "newest",
            (
                "The newest article is {title}, dated {date}.",
                "Most recent: {title} ({date}).",
                "{title} is the latest one; it was published on {date}.",
                "At the top of the list, dated {date}: {title}.",
            ),
            title=self.voice.quote(title),
            date=date,
        )
        yield deliver(self.answer_so_far)

    def _title_in(self, line: str) -> str:
        for link in r.elements(self.page, "link"):
            name = str(link.get("name", ""))
            if len(name) > 3 and name in line:
                return name
        return r.without_date(line)

    def lookup(self, task: r.Task, instruction: str) -> Script:
        queries = [task.target]
        distinctive = max(r.words(task.target), key=len, default="")
        if distinctive and distinctive != task.target.lower():
            queries.append(distinctive)
        for attempt, query in enumerate(queries):
            box = yield from self.into_view(
                lambda page: (
                    r.field_like(page, "search", "find", "query", "q")
                    or next(iter(r.elements(page, "searchbox", "textbox")), None)
                )
            )
            if box is None:
                break
            yield click(box)
            if box.get("value"):
                yield key("ctrl+a")
            yield type_text(query)
            button = r.button_like(self.page, "search", "find", "go")
            if attempt == 0 and button is not None and r.on_screen(button):
                yield click(button)
            else:
                yield key("Return")
            value = self._value_in_results(task)
            if value:
                self.answer_so_far = self.voice.say(
                    "lookup",
                    (
                        "The {attribute} of {target} is {value}.",
                        "{target}: {value} ({attribute}, from the directory).",
                        "According to the directory, {target}'s {attribute} is {value}.",
                        "I searched the directory for {query}; the {attribute} listed for "
                        "{target} is {value}.",
                    ),
                    attribute="phone number" if task.attribute == "phone" else task.attribute,
                    target=task.target,
                    value=value,
                    query=self.voice.quote(query),
                )
                yield deliver(self.answer_so_far)
                return

    def _value_in_results(self, task: r.Task) -> str:
        header, rows = r.table(self.page)
        wanted = task.target.lower()
        hint = {"phone": "phone", "opening hours": "hour", "hours": "hour"}.get(
            task.attribute, task.attribute.split()[0]
        )
        column = next((i for i, cell in enumerate(header) if hint in cell.lower()), None)
        for row in rows:
            if wanted in " ".join(row).lower() and column is not None and column < len(row):
                return row[column]
        for line in r.lines(self.page):  # no table: a phone number on the entry's line
            if wanted in line.lower() and task.attribute == "phone" and r.PHONE.search(line):
                return r.PHONE.search(line).group()  # type: ignore[union-attr]
        return ""

    def form(self, task: r.Task, instruction: str) -> Script:
        fields = r.elements(self.page, *r.FIELD_ROLES, "textarea")
        labels = [str(f.get("name") or f.get("field") or "") for f in fields]
        values = r.form_values(instruction, labels)
        if not values:
            return
        for _ in range(2):  # a second pass puts right what the first did not take
            for label, value in values.items():
                field = yield from self.into_view(lambda page, lab=label: _field(page, lab))
                if field is None or _has(field, value):
                    continue
                yield click(field)
                if field.get("role") in ("combobox", "listbox"):
                    # A select opens its list on the click: typing picks the option.
                    yield type_text(value)
                    yield key("Return")
                    continue
                if field.get("value"):
                    yield key("ctrl+a")
                yield type_text(value)
            if all(_has(_field(self.page, lab), value) for lab, value in values.items()):
                break
        button = yield from self.into_view(
            lambda page: (
                r.button_like(page, "send", "submit", "post")
                or next(iter(r.elements(page, "button")), None)
            )
        )
        if button is None:
            return
        yield click(button)
        text = "\n".join(r.lines(self.page))
        reference = r.REFERENCE.search(text)
        if reference is None:
            return
        heading = next((line for line in r.lines(self.page) if "thank" in line.lower()), "")
        self.answer_so_far = self.voice.say(
            "form",
            (
                "Sent. The reference number is {ref}.",
                "The message went through (the site said: {heading}); reference {ref}.",
                "Form submitted with {fields}. Reference number: {ref}.",
                "Done: the confirmation page shows reference {ref}.",
            ),
            ref=reference.group(),
            heading=heading or "sent",
            fields=", ".join(f"{k.lower()} {v}" for k, v in values.items()),
        )
        yield deliver(self.answer_so_far)

    def download(self, task: r.Task, instruction: str) -> Script:
        links = [link for link in r.elements(self.page, "link") if link.get("href")]
        wanted = set(r.words(r._URL.sub(" ", instruction)))

        def score(link: dict[str, Any]) -> int:
            href = str(link["href"]).lower()
            points = len(wanted & set(r.words(f"{link.get('name', '')} {href}")))
            suffix = PurePosixPath(urlsplit(href).path).suffix.lstrip(".")
            return points + (3 if suffix and suffix in wanted else 0) - (0 if suffix else 5)

        best = max(links, key=score, default=None)
        if best is None or score(best) <= 0:
            return
        href = str(best["href"])
        link = yield from self.into_view(lambda page: r.link_to(page, str(best.get("name", ""))))
        if link is not None:
            yield click(link)  # the browser saves it; the shell fetches a copy to read
        yield from self.fetch_file(href, instruction)

    def fetch_file(self, url: str, instruction: str) -> Script:
        saved = _SAVE_AS.search(r._URL.sub(" ", instruction))
        name = saved["name"] if saved else PurePosixPath(urlsplit(url).path).name or "download"
        quoted = shlex.quote(name)
        observation = yield shell(
            f"curl -fsS --max-time 15 -o {quoted} {shlex.quote(url)} && cat {quoted}", 20
        )
        content = stdout(observation)
        if not (observation.last_result or {}).get("ok") or not content:
            return
        answer = _answer_from_file(content, instruction, name, self.voice)
        self.answer_so_far = answer
        yield deliver(answer, [name])

    def article(self, task: r.Task, instruction: str) -> Script:
        def best(page: dict[str, Any] | None) -> dict[str, Any] | None:
            links = [
                (r.overlap(task.target, str(link.get("name", ""))), link)
                for link in r.elements(page, "link")
            ]
            score, link = max(links, key=lambda item: item[0], default=(0, None))
            return link if score > 0 else None

        link = yield from self.into_view(best)
        if link is None:
            return
        title = str(link.get("name", ""))
        yield click(link)
        paragraphs = r.prose(self.page)
        if not paragraphs:
            return
        sentence = r.first_sentence(paragraphs[0])
        self.answer_so_far = self.voice.say(
            "article",
            (
                "{title}: {sentence}",
                "In one sentence — {sentence}",
                "The article ({title}) says: {sentence}",
                "Summary of {title}: {sentence}",
            ),
            title=self.voice.quote(title),
            sentence=sentence,
        )
        yield deliver(self.answer_so_far)

    def browse(self, task: r.Task, instruction: str) -> Script:
        page = self.page or {}
        paragraphs = r.prose(page)
        title = str(page.get("title") or task.url)
        lead = r.first_sentence(paragraphs[0]) if paragraphs else ""
        self.answer_so_far = self.voice.say(
            "browse",
            (
                "The page {title} says: {lead}",
                "I opened {title}. {lead}",
                "{title} — {lead}",
            ),
            title=self.voice.quote(title),
            lead=lead or "nothing more than its heading.",
        )
        yield deliver(self.answer_so_far)

    # -- workspace tasks (no page) ------------------------------------------------------

    def workspace(self, observation: Observation) -> Script:
        text = observation.instruction.strip()
        if match := _CREATE_FILE.search(text):
            name = match["name"]
            content = match["text"].strip().strip("\"'`").rstrip(".")
            yield shell(f"printf '%s\\n' {shlex.quote(content)} > {shlex.quote(name)}")
            observation = yield shell(f"cat {shlex.quote(name)}")
            message = self.voice.say(
                "created",
                (
                    "Created {name} containing: {content}",
                    "{name} is written; it reads: {content}",
                    "Done. {name} now holds: {content}",
                    "I wrote {name} with the text: {content}",
                ),
                name=name,
                content=stdout(observation),
            )
            yield deliver(message, [name])
            return
        if match := _ARITHMETIC.search(text):
            expr = " ".join(match["expr"].split())
            program = f'BEGIN {{ printf "%.10g\\n", {expr} }}'
            observation = yield shell(f"awk {shlex.quote(program)}")
            yield deliver(
                self.voice.say(
                    "sum",
                    ("{expr} = {value}", "It comes to {value} ({expr}).", "{value}, since {expr}."),
                    expr=expr,
                    value=stdout(observation),
                )
            )
            return
        if _LISTING.search(text):
            observation = yield shell("ls -la")
            yield deliver(
                self.voice.pick(
                    "files", ("The files here:", "This is what the workspace holds:", "Listing:")
                )
                + "\n"
                + stdout(observation)
            )
            return
        observation = yield shell("pwd && ls -la")
        yield deliver(
            self.voice.pick(
                "norule",
                (
                    "I know no rule for this task. What I found in the workspace:",
                    "This is beyond what I can do; here is the workspace as I found it:",
                    "I cannot work this one out. The workspace contains:",
                ),
            )
            + "\n"
            + stdout(observation)
        )


def _field(page: dict[str, Any] | None, label: str) -> dict[str, Any] | None:
    for element in r.elements(page, *r.FIELD_ROLES, "textarea"):
        if str(element.get("name") or element.get("field") or "") == label:
            return element
    return None


def _has(field: dict[str, Any] | None, value: str) -> bool:
    return bool(field) and str(field.get("value", "")).strip() == value.strip()  # type: ignore[union-attr]


def _answer_from_file(content: str, instruction: str, name: str, voice) -> str:
    """Answers a question about a fetched file: how many rows a table has, which rows
    have a value in a column the question names, or what a column says for a row."""
    rows = [line for line in content.splitlines() if line.strip()]
    question = r._URL.sub(" ", instruction)
    asked = set(r.words(question))
    commas = rows[0].count(",") if rows else 0
    if commas and len(rows) > 1 and all(line.count(",") == commas for line in rows[1:]):
        table = [[cell.strip() for cell in line.split(",")] for line in rows]
        header, body = table[0], table[1:]
        if match := _HOW_MANY.search(question):
            return voice.say(
                "count",
                (
                    "{name} lists {n} {noun} (one per row under the header).",
                    "There are {n} {noun} in {name}.",
                    "I count {n} {noun}: {name} has {n} data rows after its header.",
                ),
                name=name,
                n=len(body),
                noun=match["noun"].lower(),
            )
        # A column the question names whose cells hold a word it names ("closed on
        # Sundays": the Sunday column, the rows that say closed).
        for column, cell in enumerate(header):
            if not set(r.words(cell)) & asked:
                continue
            values = sorted({row[column].lower() for row in body if column < len(row)})
            value = next((v for v in values if v in asked), None)
            if value is not None:
                names = [
                    row[0] for row in body if column < len(row) and row[column].lower() == value
                ]
                return voice.say(
                    "filter",
                    (
                        "Saved as {name}. {header} {value}: {names}.",
                        "{names} — those are the ones marked {value} under {header} ({name}).",
                        "According to {name}, {value} on {header}: {names}.",
                    ),
                    name=name,
                    header=header[column],
                    value=value,
                    names=", ".join(names),
                )
    # A text table: columns apart by two spaces or more; the header is the first such
    # line naming something the question asks about.
    tabular = [line for line in rows if len(re.split(r"\s{2,}", line.strip())) >= 2]
    header_line = next((line for line in tabular if set(r.words(line)) & asked), "")
    for line in tabular:
        if line is header_line or not (set(r.words(line)) & asked - set(r.words(header_line))):
            continue
        for word in sorted(set(r.words(header_line)) & asked, key=len, reverse=True):
            at = header_line.lower().find(word)
            cell = line[at:].split()[:1] if at >= 0 and len(line) > at else []
            if cell:
                return voice.say(
                    "cell",
                    (
                        "{cell} (from {name}: {line}).",
                        "It is {cell}, per this line of {name}: {line}",
                        "{name} says {cell} — the line reads: {line}",
                    ),
                    cell=cell[0],
                    name=name,
                    line=" ".join(line.split()),
                )
    return voice.say(
        "fetched",
        (
            "I saved {name}; it starts with: {head}",
            "{name} is in the workspace. First lines: {head}",
        ),
        name=name,
        head=" / ".join(rows[:3]),
    )


__all__ = ["Action", "RulebookPolicy"]


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(expr: str) -> float | None:
    """An arithmetic expression of numbers, + - * / and brackets (what ``_ARITHMETIC``
    matches), or None when it is anything else or divides by zero."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("not arithmetic")

    if len(expr) > 200:
        return None
    try:
        return value(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None

"""The middle built-in: reads pages and follows links by clicking them, starts on a form
(the first field it has a value for) but never finishes or sends it, never searches and
never fetches a file. It answers what reading alone can (a
list's first entry, an article's opening, a row it can see) and reports the rest as
unfinished, saying what it saw. Without a page it looks around the workspace."""

from agents.builtins import reading as r
from agents.builtins.script import (
    Script,
    ScriptPolicy,
    click,
    deliver,
    navigate,
    shell,
    stdout,
    type_text,
)
from agents.policies import Observation

# How much of a page it reads: about a screenful of lines.
LINES_READ = 40


class SurveyorPolicy(ScriptPolicy):
    def unfinished(self) -> str:
        return self.voice.pick(
            "unfinished",
            (
                "I read the page but could not get further with this task.",
                "I got as far as reading the page; the rest of the task I left undone.",
            ),
        )

    def script(self, observation: Observation) -> Script:
        task = r.task_of(observation.instruction, observation.start_url)
        if task.kind == "other":
            yield from self.look_around()
            return
        yield navigate(task.url)
        seen = r.lines(self.page)[:LINES_READ]
        title = str((self.page or {}).get("title") or task.url)
        if task.kind == "newest":
            dated = [line for line in seen if r.DATE.search(line)]
            if dated:
                first = dated[0]
                self.answer_so_far = self.voice.say(
                    "newest",
                    (
                        "The first entry on the list: {entry}.",
                        "At the top I see {entry}.",
                        "The list starts with {entry}.",
                    ),
                    entry=r.without_date(first) + " — " + r.DATE.search(first).group(),
                )
                yield deliver(self.answer_so_far)
            return
        if task.kind == "article":
            links = [
                (r.overlap(task.target, str(link.get("name", ""))), link)
                for link in r.elements(self.page, "link")
                if r.on_screen(link)
            ]
            score, link = max(links, key=lambda item: item[0], default=(0, None))
            if link is None or score == 0:
                return
            yield click(link)
            paragraphs = r.prose(self.page)
            opening = r.first_sentence(paragraphs[0]) if paragraphs else ""
            self.answer_so_far = self.voice.say(
                "article",
                ("{name}. {opening}", "I opened {name}: {opening}", "{opening} ({name})"),
                name=self.voice.quote(str(link.get("name", ""))),
                opening=opening,
            )
            yield deliver(self.answer_so_far)
            return
        if task.kind == "lookup":
            wanted = task.target.lower()
            row = next((line for line in seen if wanted in line.lower()), "")
            if row:
                self.answer_so_far = self.voice.say(
                    "row",
                    ("The directory's line for it: {row}", "I found this entry: {row}"),
                    row=" | ".join(part.strip() for part in row.split("\t")),
                )
                yield deliver(self.answer_so_far)
                return
            yield deliver(
                self.voice.say(
                    "no-row",
                    (
                        "I did not see {target} on the page {title}; I did not search.",
                        "{target} is not among the entries I read on {title}.",
                    ),
                    target=task.target,
                    title=self.voice.quote(title),
                )
            )
            return
        if task.kind == "download":
            links = [link for link in r.elements(self.page, "link") if r.on_screen(link)]
            files = [link for link in links if "." in str(link.get("href", "")).rsplit("/", 1)[-1]]
            if files:
                yield click(files[0])
            yield deliver(
                self.voice.say(
                    "download",
                    (
                        "The page {title} offers {names}. I clicked the first; I cannot open "
                        "what the browser saved, so I have no count.",
                        "I found these files on {title}: {names}. The contents I did not read.",
                    ),
                    title=self.voice.quote(title),
                    names=", ".join(str(f.get("name", "")) for f in files) or "no files",
                )
            )
            return
        if task.kind == "form":
            fields = r.elements(self.page, *r.FIELD_ROLES, "textarea")
            labels = [str(f.get("name") or f.get("field") or "") for f in fields]
            values = r.form_values(observation.instruction, labels)
            # It starts on the first text field it has a value for, then loses heart: the
            # form is never sent.
            first = next(
                (
                    (field, label)
                    for field, label in zip(fields, labels, strict=True)
                    if label in values
                    and r.on_screen(field)
                    and field.get("role") not in ("combobox", "listbox")
                ),
                None,
            )
            if first is not None:
                yield click(first[0])
                yield type_text(values[first[1]])
            yield deliver(
                self.voice.say(
                    "form",
                    (
                        "The form on {title} asks for {fields}. I {started}did not send it.",
                        "I found a form ({fields}); I {started}left it unsent.",
                    ),
                    title=self.voice.quote(title),
                    fields=", ".join(labels) or "nothing I could read",
                    started=f"typed the {first[1].lower()} but " if first else "",
                )
            )
            return
        wanted = set(r.words(observation.instruction))
        relevant = [line for line in seen if set(r.words(line)) & wanted][:3]
        yield deliver(
            self.voice.say(
                "browse",
                ("On {title} I read: {lines}", "{title} shows: {lines}"),
                title=self.voice.quote(title),
                lines=" / ".join(" ".join(line.split()) for line in relevant) or "nothing relevant",
            )
        )

    def look_around(self) -> Script:
        observation = yield shell("uname -sr; id -u; pwd; ls -la")
        yield deliver(
            self.voice.pick(
                "survey",
                (
                    "I looked around instead of doing the task. I see:",
                    "Rather than attempt it, I took stock of the machine:",
                    "This is not something I can do; what is here:",
                ),
            )
            + "\n"
            + stdout(observation)
        )

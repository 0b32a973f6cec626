"""The built-ins' pure parts: what a task asks, the values a form task gives, answers
read from a fetched file, and wording that varies by task but not by rerun."""

from collections import Counter

import pytest

from agents.builtins.reading import form_values, task_of
from agents.builtins.rulebook import _answer_from_file
from agents.builtins.wording import Voice
from sandboxes.demoweb import DEMO_TASKS, answer_matches
from sandboxes.demoweb import data as demo


@pytest.mark.parametrize(
    ("instruction", "start_url", "kind", "target", "attribute"),
    [
        (DEMO_TASKS[0]["instruction"], "", "newest", "", ""),
        (DEMO_TASKS[1]["instruction"], "", "lookup", "Riverside Library", "phone"),
        (DEMO_TASKS[2]["instruction"], "", "form", "", ""),
        (DEMO_TASKS[3]["instruction"], "", "download", DEMO_TASKS[3]["instruction"], ""),
        (DEMO_TASKS[4]["instruction"], "", "article", "the new footbridge", ""),
        (DEMO_TASKS[5]["instruction"], "", "file", "", ""),
        (DEMO_TASKS[6]["instruction"], "", "file", "", ""),
        ("What are the opening hours of Town Museum?", "http://x.test/", "lookup",
         "Town Museum", "opening hours"),
        ("Tell me the latest headline", "http://x.test/news", "newest", "", ""),
        ("What does this page say?", "http://x.test/", "browse", "", ""),
        ("what is 6*7", "", "other", "", ""),
        ("Create a file named a.txt containing hi", "", "other", "", ""),
    ],
)  # fmt: skip
def test_what_a_task_asks(instruction, start_url, kind, target, attribute):
    task = task_of(instruction, start_url)
    assert (task.kind, task.target, task.attribute) == (kind, target, attribute)


def test_the_form_values_are_read_from_the_last_mention_of_each_label():
    values = form_values(DEMO_TASKS[2]["instruction"], ["Name", "Email", "Topic", "Message"])

    assert values == {
        "Name": "Ada Lovelace",
        "Email": "ada@example.org",
        "Topic": "Technical",
        "Message": "The map page is broken",
    }
    assert form_values("Send it: email is bo@x.org and name Bo", ["Name", "Email"]) == {
        "Name": "Bo",
        "Email": "bo@x.org",
    }
    assert form_values("Fill the form.", ["Name"]) == {}


@pytest.mark.parametrize(
    ("task", "content", "name"),
    [
        (DEMO_TASKS[3], demo.opening_hours_csv(), "opening-hours.csv"),
        (DEMO_TASKS[5], demo.opening_hours_csv(), "hours.csv"),
        (DEMO_TASKS[6], demo.bin_collection_txt(), "bin-collection.txt"),
    ],
)
def test_answers_read_from_a_fetched_file(task, content, name):
    answer = _answer_from_file(content, task["instruction"], name, Voice(task["instruction"]))
    assert answer_matches(task, answer), answer


def test_wording_is_fixed_per_task_and_varies_across_tasks():
    options = ("one {x}", "two {x}", "three {x}", "four {x}")
    instructions = [f"task number {n}" for n in range(200)]

    said = [Voice(i).say("k", options, x="!") for i in instructions]

    assert said == [Voice(i).say("k", options, x="!") for i in instructions]
    assert set(Counter(said)) == {f"{w} !" for w in ("one", "two", "three", "four")}
    assert max(Counter(said).values()) < 80  # roughly even: 50 each expected
    # What is being said varies the choice too, within one task.
    assert len({Voice("one task").pick(f"key {n}", options) for n in range(20)}) > 1

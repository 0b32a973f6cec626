"""Derived graders that check content (issue 40 item 5): what the instruction asks of a
file (asked phrases, a CSV's shape, a copied file's content, JSON keys, a number of
lines), the answer the reference's final message gives, and the validation that a
grader refuses the reference made wrong (its files mutated, its answer taken out)
before it is accepted. The mutation and the new checks run for real in bubblewrap
sandboxes; the validations replay real trajectories."""

import json
from dataclasses import replace

import pytest

from environments import derive
from environments.grader_script import mutated
from environments.graders import GraderInvalid, grader_run, grader_validate, mutation_command
from environments.models import Environment
from environments.mutation import _mutate_files, artifact_paths, message_mutated
from environments.validation import environment_validate
from sandboxes.services import lane_sandbox_spec, sandbox_session
from tests.environments.environment_factories import desktop_state, environment, source_battle
from tests.environments.test_graders import grader, make, put
from tests.ratings.factories import judges

Delivered = derive.Delivered


# -- what the instruction asks of a file ---------------------------------------------


@pytest.mark.parametrize(
    ("instruction", "phrases"),
    [
        ("Create a file named groceries.txt containing milk, eggs and bread",
         ["milk, eggs and bread"]),
        ("Write notes.txt containing the word banana.", ["banana"]),
        ("Save a.txt with the text 'hello there' and tell me when done", ["hello there"]),
        ('Make report.md with the header "Weekly report", then send it', ["Weekly report"]),
        ("Create a file named hello.txt containing hello arena and tell me its size",
         ["hello arena"]),
        ("List the files in the workspace", []),
        ("Create out.txt containing `notes.txt`", []),  # a file name is not content
    ],
)  # fmt: skip
def test_the_phrases_an_instruction_asks_a_file_to_contain(instruction, phrases):
    assert derive.asked_phrases(instruction) == phrases


def checks_of(instruction: str, path: str, data: bytes, message: str = "") -> list[dict]:
    return derive.artifact_grader(instruction, [Delivered(path, data)], message)["checks"]


def test_a_gave_up_grader_checks_the_asked_word_not_only_the_file():
    checks = checks_of("Write notes.txt containing the word banana.", "notes.txt", b"A banana\n")
    assert checks == [
        {"type": "file_exists", "path": "notes.txt"},
        {"type": "file_kind", "path": "notes.txt", "kind": "text"},
        {"type": "text_contains", "path": "notes.txt", "text": "banana"},
    ]


def test_a_list_the_reference_wrote_as_items_is_checked_item_by_item():
    instruction = "Create a file named groceries.txt containing milk, eggs and bread"
    checks = checks_of(instruction, "groceries.txt", b"- milk\n- eggs\n- bread\n")
    assert [c["text"] for c in checks if c["type"] == "text_contains"] == ["milk", "eggs", "bread"]


def test_a_requirement_the_reference_does_not_meet_is_left_out():
    checks = checks_of("Write notes.txt containing the word banana.", "notes.txt", b"apple\n")
    assert [c["type"] for c in checks] == ["file_exists", "file_kind"]


def test_a_csv_is_checked_by_its_header_and_rows_and_an_asked_line_count_by_its_lines():
    table = b"name,day\nMill,Mon\nHall,Tue\n"
    assert {"type": "csv_shape", "path": "t.csv", "header": ["name", "day"], "rows": 2} in (
        checks_of("Make t.csv of the places", "t.csv", table)
    )
    lines = checks_of("Write three lines into a.txt", "a.txt", b"x\ny\n\nz\n")
    assert {"type": "text_lines", "path": "a.txt", "lines": 3} in lines
    assert not [c for c in checks_of("Write 4 lines into a.txt", "a.txt", b"x\ny\n")
                if c["type"] == "text_lines"]  # fmt: skip


def test_a_copied_file_is_checked_by_its_whole_content_and_json_by_its_keys():
    copied = checks_of(
        "Save http://demo.arena.test/downloads/opening-hours.csv as hours.csv", "hours.csv",
        b"place,sunday\nMill,closed\n",
    )  # fmt: skip
    assert [c["type"] for c in copied] == ["file_exists", "file_kind", "text_equals"]
    keyed = checks_of(
        "Write cfg.json with a name and a size", "cfg.json", b'{"size": 3, "name": 1}'
    )
    assert {"type": "json_keys", "path": "cfg.json", "keys": ["name", "size"]} in keyed


def test_a_file_redaction_changed_is_checked_by_its_shape_never_its_hash():
    """A replay that fetches the file again gets the original bytes, not the redacted."""
    hours = Delivered("hours.csv", b"place,sunday\n<LOCATION_1>,closed\nMill,9-12\n", exact=False)
    copied = derive.artifact_grader("Download http://demo.arena.test/h.csv as hours.csv", [hours])
    assert copied["checks"][2:] == [
        {"type": "csv_shape", "path": "hours.csv", "header": ["place", "sunday"], "rows": 2},
        {"type": "text_lines", "path": "hours.csv", "lines": 3},
    ]
    named = Delivered("bins.txt", b"<PERSON_1> collects\nmonday\n", exact=False)
    result = derive.result_grader("Save the bin schedule", [named], "Thursday")["checks"]
    assert [c["type"] for c in result] == ["file_exists", "file_kind", "text_lines",
                                          "message_contains"]  # fmt: skip
    header = Delivered("a.csv", b"<PERSON_1>,x\n1,2\n", exact=False)
    assert [c["type"] for c in derive.result_grader("Make a.csv", [header], "")["checks"]] == [
        "file_exists", "file_kind", "text_lines",
    ]  # fmt: skip


# -- the answer in the final message ---------------------------------------------------


@pytest.mark.parametrize(
    ("instruction", "message", "atoms"),
    [
        ("Tell me the title and date of the newest article.",
         'The newest article is "Spring Market Returns to Market Hall", published 2026-03-18.',
         ["Spring Market Returns to Market Hall", "2026-03-18"]),
        ("Find the phone number of the Riverside Library",
         "The Riverside Library's phone number is 555-0142.", ["555-0142"]),
        ("Send the form and tell me the reference", "Sent. The reference is REF-074CAA.",
         ["REF-074CAA"]),
        ("On which day is recycling collected in Riverside?",
         "Recycling in Riverside is collected on Thursday.", ["Thursday"]),
        ("On which day is recycling collected in Riverside?", "Thursday", ["Thursday"]),
        ("What is 17 * 23 + 4?", "17 * 23 + 4 = 395", ["395"]),
        ("Which places close on Sundays?", "Closed: Old Mill Bakery and Town Hall.",
         ["Old Mill Bakery", "Town Hall"]),
        ("Which places close on Sundays?", "They are Old Mill Bakery and Town Hall.",
         ["Old Mill Bakery", "Town Hall"]),
        ("Create groceries.txt containing milk", "I created groceries.txt with milk.", []),
        ("Say nothing", "I give up", []),
    ],
)  # fmt: skip
def test_the_answer_a_final_message_gives_beyond_its_instruction(instruction, message, atoms):
    assert derive.answer_atoms(instruction, message) == atoms


def test_a_gave_up_grader_asks_the_references_answer_of_the_final_message():
    grader = derive.artifact_grader("What is 17 * 23 + 4?", [], "It comes to 395 (17 * 23 + 4).")
    assert grader == {"version": 1, "checks": [{"type": "message_contains", "text": "395"}]}
    assert derive.artifact_grader("What is 17 * 23 + 4?", [], "I give up") is None


# -- the new checks are data, validated ------------------------------------------------


def test_the_new_check_types_validate_and_refuse_bad_fields():
    good = grader(
        {"type": "text_contains", "path": "a.txt", "text": "banana"},
        {"type": "text_lines", "path": "a.txt", "lines": 3},
        {"type": "json_keys", "path": "a.json", "keys": ["a", ""]},
    )
    assert grader_validate(good) == good
    for bad, message in (
        ({"type": "text_contains", "path": "a.txt", "text": "  "}, "only whitespace"),
        ({"type": "text_contains", "path": "/etc/passwd", "text": "x"}, "absolute"),
        ({"type": "text_lines", "path": "a.txt", "lines": -1}, "lines must be a whole number"),
        ({"type": "json_keys", "path": "a.json", "keys": []}, "keys must be a list"),
        ({"type": "json_keys", "path": "a.json", "keys": [3]}, "a key must be a string"),
    ):
        with pytest.raises(GraderInvalid, match=message):
            grader_validate(grader(bad))
    with pytest.raises(GraderInvalid, match="climbs out"):
        mutation_command(["../etc/passwd"], [])


# -- the mutation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "data", "words", "wrong"),
    [
        ("a.txt", b"Milk\neggs 12\nbread\n", {"milk", "bread"}, b"\neggs 23\n\n"),
        ("a.txt", b"one\ntwo 9\n", set(), b"one\n"),
        ("a.txt", b"hello arena", {"hello", "arena"}, b" "),
        ("a.txt", b"same", set(), b""),  # nothing to change: emptied
        ("a.json", b'{"n": 9, "l": [1, 2], "s": "banana", "b": true}', {"banana"},
         b'{"n": 10, "l": [2], "s": "", "b": false}'),
        ("a.png", b"\x89PNG\r\n\x1a\nAB", set(), b"\x89PNG\r\n\x1a\nA\xbd"),
    ],
)  # fmt: skip
def test_a_mutated_file_is_wrong_in_what_was_asked(path, data, words, wrong):
    assert mutated(path, data, words) == wrong


def test_a_mutated_message_keeps_only_the_instructions_own_words():
    assert message_mutated("It is 395, not 17.", "What is 17 * 23 + 4?") == " is ,  17."


def test_the_files_mutated_are_those_the_instruction_asks_for():
    def deliver(message: str) -> list[dict]:
        files = ["/work/out/a.txt", "b.csv"]
        return [{"tool": "shell", "args": {}},
                {"tool": "deliver", "args": {"files": files, "message": message}}]  # fmt: skip

    # Named ones, whatever was delivered.
    assert artifact_paths("Write b.csv and c.txt", deliver("ok"), "ok") == ["b.csv", "c.txt"]
    # None named: what was delivered, unless it lies beside an answer to a question ...
    assert artifact_paths("Tidy up", deliver("done"), "done") == ["out/a.txt", "b.csv"]
    assert artifact_paths("Which day is it?", deliver("Monday"), "Monday") == []
    # ... that asks to fetch or save it.
    fetch = "Download http://demo.arena.test/h.csv and count its rows"
    assert artifact_paths(fetch, deliver("12"), "12") == ["out/a.txt", "b.csv"]


@pytest.fixture
def box(db, settings):
    spec = replace(lane_sandbox_spec(), run_id=None, desktop=False, egress=False)
    with sandbox_session(spec) as sandbox:
        yield sandbox


@pytest.mark.django_db(transaction=True)
def test_the_new_checks_and_the_mutation_run_in_the_sandbox_never_through_a_link(box):
    put(box, "notes.txt", b"A Banana\nand  more\n")
    put(box, "cfg.json", b'{"a": 1, "b": 2}')
    make(box, "echo secret > /tmp/outside && ln -s /tmp/outside link.txt && mkfifo pipe.txt")
    checks = grader(
        {"type": "text_contains", "path": "notes.txt", "text": "banana AND more"},
        {"type": "text_lines", "path": "notes.txt", "lines": 2},
        {"type": "json_keys", "path": "cfg.json", "keys": ["a", "b"]},
        {"type": "text_contains", "path": "link.txt", "text": "secret"},
    )
    result = grader_run(box, checks, final_message="")
    assert [c["passed"] for c in result.checks] == [True, True, True, False]

    done = _mutate_files(box, ["notes.txt", "cfg.json", "link.txt", "pipe.txt", "none.txt"],
                         ["banana"])  # fmt: skip
    assert [(d["path"], d["mutated"]) for d in done] == [
        ("notes.txt", True), ("cfg.json", True), ("link.txt", False), ("pipe.txt", False),
        ("none.txt", False),
    ]  # fmt: skip
    assert "link" in done[2]["detail"] and "not a regular file" in done[3]["detail"]
    assert box.shell("cat /tmp/outside").stdout == "secret\n"  # the link's target untouched
    assert box.shell("cat /work/notes.txt").stdout == "A \n"
    assert json.loads(box.shell("cat /work/cfg.json").stdout) == {"a": 2, "b": 3}
    result = grader_run(box, checks, final_message="")
    assert [c["passed"] for c in result.checks] == [False, False, True, False]


# -- validation refuses a grader that accepts the reference made wrong ----------------

INSTRUCTION = "Create a file named notes.txt containing the word banana and tell me its size."
REFERENCE = [
    {"tool": "shell", "args": {"command": "echo 'one banana' > notes.txt"}},
    {"tool": "deliver", "args": {"message": "Done: notes.txt holds 11 bytes.",
                                 "files": ["notes.txt"]}},
]  # fmt: skip
GIVE_UP: list = []


def graded(battle, checks: list[dict], reference=REFERENCE, instruction=INSTRUCTION) -> Environment:
    state = {**desktop_state(instruction=instruction, attachments={}), "screen": None}
    return environment(
        battle, status=Environment.Status.GRADED, state=state, grader=grader(*checks),
        failing=GIVE_UP, reference=reference,
    )  # fmt: skip


@pytest.fixture
def battle(alice, roster):
    return source_battle(alice, roster, judges(1)[0], days=30)


def validated(env: Environment) -> Environment:
    environment_validate(environment_id=env.pk)
    env.refresh_from_db()
    return env


def derived(instruction: str, data: bytes, message: str) -> list[dict]:
    return derive.artifact_grader(instruction, [Delivered("notes.txt", data)], message)["checks"]


@pytest.mark.django_db(transaction=True)
def test_a_derived_content_grader_is_validated_and_refused_its_mutated_reference(battle):
    said = REFERENCE[1]["args"]["message"]
    env = validated(graded(battle, derived(INSTRUCTION, b"one banana\n", said)))

    assert env.status == "validated", env.status_detail
    roles = [(r["role"], r.get("mutation"), r["passed"]) for r in env.replays]
    assert roles == [("failing", None, False), ("reference", None, True),
                     ("mutated", "message", False), ("mutated", "artifact", False)]  # fmt: skip
    message, artifact = env.replays[2:]
    assert message["detail"] == message_mutated(said, INSTRUCTION) == ": notes.txt   ."
    assert [c["passed"] for c in message["grader"]["checks"]] == [True, True, True, False]
    assert artifact["detail"][0]["path"] == "notes.txt" and artifact["detail"][0]["mutated"]
    assert [c["passed"] for c in artifact["grader"]["checks"]] == [True, True, False, True]


@pytest.mark.django_db(transaction=True)
def test_a_grader_that_only_checks_the_file_exists_is_refused(battle):
    forged = [{"type": "file_exists", "path": "notes.txt"},
              {"type": "message_contains", "text": "11"}]  # fmt: skip
    env = validated(graded(battle, forged))

    assert env.status == "invalid"
    assert env.status_detail == (
        "the grader accepted the reference with its artifact made wrong: it does not check "
        "what the instruction asks"
    )
    assert env.validated_at is None


@pytest.mark.django_db(transaction=True)
def test_a_grader_that_ignores_the_answer_in_the_message_is_refused(battle):
    forged = [{"type": "text_contains", "path": "notes.txt", "text": "banana"}]
    env = validated(graded(battle, forged))

    assert env.status == "invalid"
    assert env.status_detail.startswith("the grader accepted the reference with its message")


@pytest.mark.django_db(transaction=True)
def test_a_reference_with_nothing_to_mutate_cannot_validate(battle):
    quiet = [REFERENCE[0], {"tool": "deliver", "args": {"message": "done", "files": []}}]
    checks = [{"type": "message_contains", "text": "done"}]
    env = validated(graded(battle, checks, quiet, "Tidy up the workspace."))

    assert env.status == "invalid"
    assert "nothing to mutate" in env.status_detail

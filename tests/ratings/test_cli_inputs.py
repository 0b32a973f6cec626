"""Bad input to `python -m ratings fit` (issue 15): every bad file or flag is one line
on stderr with exit status 2, never a traceback; duplicate rows and rows with extra
cells are reported (stderr warnings and ``input_report``), and refused with --strict.

BAD_FILES is shared with tests/judging/test_import_votes.py, which feeds the same
files to ``manage.py import_votes``."""

import json

import pytest

from tests.ratings.test_cli import cli

HEADER = "agent_a,agent_b,winner\n"
GOOD = "rulebook,idle,A\nidle,surveyor,B\n"


def _long_open_quote() -> bytes:
    """A quote opened on line 3 and never closed, with more than csv's field limit
    (131072 characters) after it."""
    return (HEADER + GOOD + 'idle,"rulebook,A\n' + "rulebook,idle,A\n" * 12000).encode()


# name → (file bytes, extra flags, fragments the one error line must contain)
BAD_FILES = {
    "latin-1": (
        (HEADER + GOOD).encode() + b"surveyor,caf\xe9,A\n",
        (),
        ("not UTF-8", "line 4", "byte 67", "0xe9", "re-save it as UTF-8"),
    ),
    "utf-16": ((HEADER + GOOD).encode("utf-16"), (), ("UTF-16", "not UTF-8", "re-save")),
    "utf-16 without a byte-order mark": (
        (HEADER + GOOD).encode("utf-16-le"),
        (),
        ("not UTF-8", "NUL", "line 1", "re-save it as UTF-8"),
    ),
    "short row": (
        (HEADER.replace("\n", ",w\n") + "rulebook,idle,A,1\nidle,surveyor,B\n").encode(),
        (),
        ("line 3 has 3 fields, the header has 4",),
    ),
    "unterminated quote": (
        (HEADER + GOOD + 'idle,"rulebook,A\nsurveyor,idle,B\n').encode(),
        (),
        ("line 4", "quote", "never closed"),
    ),
    "unterminated quote after a multi-line cell": (
        (HEADER + 'rulebook,"idle\nand more",A\nidle,rulebook,"B\nrulebook,idle,A\n').encode(),
        (),
        ("line 4", "quote", "never closed"),
    ),
    "unterminated quote longer than a cell may be": (
        _long_open_quote(),
        (),
        ("line 4", "longer than 131072 characters", "opened on line 4", "never closed"),
    ),
    "text after a closing quote": (
        (HEADER + 'rulebook,"idle"x,A\n').encode(),
        (),
        ("line 2", "bad CSV quoting", 'written ""'),
    ),
    "duplicate column names": (
        ("agent_a,agent_b,winner,agent_b,winner\n" + "rulebook,idle,A,x,y\n").encode(),
        (),
        ("names column(s) 'agent_b', 'winner' more than once",),
    ),
    "weight not a number": (
        (HEADER.replace("\n", ",w\n") + "rulebook,idle,A,nan\n").encode(),
        ("--weight", "w"),
        ("line 2", "'nan'", "non-negative number"),
    ),
    "infinite weight": (
        (HEADER.replace("\n", ",w\n") + "rulebook,idle,A,inf\n").encode(),
        ("--weight", "w"),
        ("line 2", "'inf'", "non-negative number"),
    ),
}


def assert_one_line_error(done, *fragments: str) -> str:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("python -m ratings")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_files_are_one_line_errors(tmp_path, name):
    content, flags, fragments = BAD_FILES[name]
    path = tmp_path / "votes.csv"
    path.write_bytes(content)
    assert_one_line_error(cli(str(path), "--bootstrap", "0", *flags), *fragments)


@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        (("--ridge", "nan"), ("--ridge", "finite", "nan")),
        (("--ridge", "inf"), ("--ridge", "finite", "inf")),
        (("--ridge=-1e-3",), ("--ridge", "0 or more")),
        (("--r0", "nan"), ("--r0", "finite")),
        (("--r0", "inf"), ("--r0", "finite")),
        (("--r0=-inf",), ("--r0", "finite")),
        (("--seed", "-1"), ("--seed must be 0 or more",)),
        (("--provisional", "-1"), ("--provisional must be 0 or more",)),
        (("--bootstrap", "-1"), ("--bootstrap must be 0 or more",)),
        (("--seed", "x"), ("--seed", "invalid int value: 'x'", "--help")),
        (("--cluster", "rater"), ("--cluster", "invalid choice", "--help")),
    ],
)
def test_bad_flags_are_one_line_errors(tmp_path, flags, fragments):
    path = tmp_path / "votes.csv"
    path.write_text(HEADER + GOOD)
    assert_one_line_error(cli(str(path), *flags), *fragments)


def test_a_zero_ridge_and_a_byte_order_mark_are_accepted(tmp_path):
    path = tmp_path / "votes.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + GOOD + "surveyor,rulebook,B\n").encode())
    done = cli(str(path), "--ridge", "0", "--bootstrap", "0")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["ridge"] == 0 and document["battles"] == 3


def test_duplicates_and_extra_fields_are_reported_and_kept(tmp_path):
    rows = [
        "rulebook,idle,A",  # line 2
        "idle,surveyor,B",
        "rulebook,idle,A",  # line 4 = line 2
        "rulebook,idle,A,extra",  # line 5: an extra cell (not a duplicate of line 2)
        "idle,surveyor,B",  # line 6 = line 3
        "x,y,abstain",
        "x,y,abstain",  # skipped rows are no battles, so no duplicates either
    ]
    path = tmp_path / "votes.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    done = cli(str(path), "--skip", "abstain", "--bootstrap", "0")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["battles"] == 5 and document["skipped_rows"] == 2
    assert document["input_report"] == {
        "duplicate_rows": [4, 6],
        "duplicate_row_count": 2,
        "extra_field_rows": [5],
        "extra_field_row_count": 1,
    }
    assert done.stderr.splitlines() == [
        "python -m ratings fit: warning: 2 duplicate rows (lines 4, 6), counted as battles; "
        "pass --strict to refuse them",
        "python -m ratings fit: warning: 1 row with more fields than the header (line 5), "
        "extra cells ignored; pass --strict to refuse them",
    ]


def test_a_clean_file_reports_nothing(tmp_path):
    path = tmp_path / "votes.csv"
    path.write_text(HEADER + GOOD)
    done = cli(str(path), "--bootstrap", "0")
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout)["input_report"] == {
        "duplicate_rows": [],
        "duplicate_row_count": 0,
        "extra_field_rows": [],
        "extra_field_row_count": 0,
    }


def test_the_report_lists_at_most_twenty_lines(tmp_path):
    path = tmp_path / "votes.csv"
    path.write_text(HEADER + "rulebook,idle,A\n" * 26 + "idle,rulebook,B\n")
    done = cli(str(path), "--bootstrap", "0")
    report = json.loads(done.stdout)["input_report"]
    assert report["duplicate_row_count"] == 25
    assert report["duplicate_rows"] == list(range(3, 23))
    assert "(lines 3, 4, 5," in done.stderr and "22 and 5 more)" in done.stderr


@pytest.mark.parametrize(
    ("rows", "fragments"),
    [
        (
            ["rulebook,idle,A", "idle,surveyor,B", "rulebook,idle,A", "idle,surveyor,B"],
            ("line 4 repeats line 2", "--strict"),
        ),
        (
            ["rulebook,idle,A", "idle,surveyor,B,", "rulebook,idle,A,extra"],
            ("line 3 has 4 fields, the header has 3", "--strict"),
        ),
    ],
)
def test_strict_refuses_what_is_otherwise_reported(tmp_path, rows, fragments):
    path = tmp_path / "votes.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    assert cli(str(path), "--bootstrap", "0").returncode == 0
    assert_one_line_error(cli(str(path), "--bootstrap", "0", "--strict"), *fragments)

"""Graders: validation (hostile input refused with a message a person can act on), the
two normalisations, the untrusted report, and the checks for real in a bubblewrap
sandbox (links out of /work, FIFOs, forged reports, timeouts)."""

import base64
import hashlib
import io
import json
import zipfile
from dataclasses import replace

import pytest

from environments.grader_script import REPORT_MARK
from environments.graders import (
    CHECKS_MAX,
    COMMAND_MAX_CHARS,
    GraderInvalid,
    canonical_json_sha256,
    grader_command,
    grader_run,
    grader_timeout_s,
    grader_validate,
    message_contains,
    normalised_text_sha256,
    report_parse,
)
from sandboxes.services import lane_sandbox_spec, sandbox_session


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def grader(*checks: dict) -> dict:
    return {"version": 1, "checks": list(checks)}


# -- validation ----------------------------------------------------------------------


def test_a_valid_grader_comes_back_normalised():
    raw = grader(
        {"type": "file_exists", "path": "out/report.txt"},
        {"type": "file_sha256", "path": "a.bin", "sha256": "AB" * 32},
        {"type": "command", "run": "pytest -q"},
        {"type": "csv_shape", "path": "t.csv", "header": ["a", "b"], "rows": 0},
    )
    assert grader_validate(raw) == grader(
        {"type": "file_exists", "path": "out/report.txt"},
        {"type": "file_sha256", "path": "a.bin", "sha256": "ab" * 32},
        {"type": "command", "run": "pytest -q", "cwd": "", "timeout_s": 120, "expect_exit": 0},
        {"type": "csv_shape", "path": "t.csv", "header": ["a", "b"], "rows": 0},
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "a grader is an object"),
        ({"version": 2, "checks": [{"type": "file_exists", "path": "a"}]}, "version must be 1"),
        ({"version": 1, "checks": []}, "non-empty list of checks"),
        ({"version": 1, "checks": [], "code": "x"}, "a grader has no field 'code'"),
        (grader({"type": "python", "code": "import os"}), "check 1 has unknown type 'python'"),
        (grader("file_exists"), "check 1 must be an object"),
        (grader({"type": "file_exists", "path": "/etc/passwd"}), "is absolute; paths are relative"),
        (grader({"type": "file_exists", "path": "../x"}), "climbs out with '..'"),
        (grader({"type": "file_exists", "path": "a/../../x"}), "climbs out with '..'"),
        (grader({"type": "file_exists", "path": "a\x00b"}), "control character"),
        (grader({"type": "file_exists", "path": "a\nb"}), "control character"),
        (grader({"type": "file_exists", "path": "a//b"}), "empty or '.' component"),
        (grader({"type": "file_exists", "path": ""}), "path must not be empty"),
        (grader({"type": "file_exists", "path": 3}), "path must be a string"),
        (grader({"type": "file_exists", "path": "a", "mode": 1}), "has no field 'mode'"),
        (grader({"type": "file_kind", "path": "a", "kind": "exe"}), "kind must be one of"),
        (grader({"type": "file_sha256", "path": "a", "sha256": "xyz"}), "64 hexadecimal"),
        (grader({"type": "csv_shape", "path": "a", "header": [], "rows": 1}), "header must be"),
        (grader({"type": "csv_shape", "path": "a", "header": ["a"], "rows": -1}), "rows must be"),
        (grader({"type": "csv_shape", "path": "a", "header": ["a"], "rows": True}), "rows must"),
        (grader({"type": "message_contains", "text": "  \n"}), "only whitespace"),
        (grader({"type": "command", "run": "true", "cwd": "/"}), "cwd must be 'repo'"),
        (grader({"type": "command", "run": "true", "timeout_s": 0}), "timeout_s must be"),
        (grader({"type": "command", "run": "true", "timeout_s": 10_000}), "timeout_s must be"),
        (grader({"type": "command", "run": "true", "expect_exit": 256}), "expect_exit must"),
        (grader({"type": "command", "run": "x" * (COMMAND_MAX_CHARS + 1)}), "at most 2000"),
        (grader({"type": "message_contains", "text": "x" * 4001}), "at most 4000"),
        (grader(*[{"type": "file_exists", "path": "a"}] * (CHECKS_MAX + 1)), "at most 50 checks"),
    ],
)
def test_hostile_or_broken_graders_are_refused_with_the_reason(raw, message):
    with pytest.raises(GraderInvalid, match=None) as caught:
        grader_validate(raw)
    assert message in str(caught.value)


def test_the_command_refuses_an_invalid_grader_too():
    with pytest.raises(GraderInvalid, match="unknown type"):
        grader_command(grader({"type": "eval", "run": "rm -rf /"}))


def test_the_command_holds_only_the_fixed_interpreter_and_the_in_sandbox_checks():
    checks = grader(
        {"type": "message_contains", "text": "Done"},
        {"type": "file_exists", "path": "it's; $(rm -rf /)"},
    )
    command = grader_command(checks)
    assert command.startswith("python3 -I -S -c 'import base64,zlib;exec(zlib.decompress(")
    payload = json.loads(base64.b64decode(command.rsplit(" ", 1)[1]))
    assert payload == [{"type": "file_exists", "path": "it's; $(rm -rf /)"}]
    assert grader_command(checks) == command  # deterministic: exportable as is


def test_the_time_bound_counts_each_command():
    checks = grader(
        {"type": "file_exists", "path": "a"},
        {"type": "command", "run": "true", "timeout_s": 30},
        {"type": "command", "run": "true", "timeout_s": 100},
    )
    assert grader_timeout_s(checks) == 60 + 35 + 105


# -- normalisations ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "same_as"),
    [
        (b"a\nb", b"a\nb"),
        (b"a\r\nb\r\n", b"a\nb"),
        (b"a  \nb\t\n\n\n", b"a\nb"),
        (b"\xef\xbb\xbfa\nb\n", b"a\nb"),
        (b"a\n\nb", b"a\n\nb"),  # blank lines inside stay
        (b"  a\nb", b"  a\nb"),  # leading whitespace stays
        (b"", b""),
        (b"\n\n", b""),
    ],
)
def test_text_normalisation(data, same_as):
    assert normalised_text_sha256(data) == sha(same_as)


def test_text_normalisation_keeps_what_matters():
    assert normalised_text_sha256(b"a\nb") != normalised_text_sha256(b"a\n\nb")
    assert normalised_text_sha256(b"a b") != normalised_text_sha256(b"ab")
    assert normalised_text_sha256(b"A") != normalised_text_sha256(b"a")


@pytest.mark.parametrize(
    ("data", "canonical"),
    [
        (b'{"b": 1, "a": [1, 2]}', '{"a":[1,2],"b":1}'),
        (b'{\n  "a": "\\u00e9"\n}\n', '{"a":"\u00e9"}'),
        ('{"a": "é"}'.encode(), '{"a":"\u00e9"}'),
        (b"[]", "[]"),
        (b"3", "3"),
    ],
)
def test_json_canonical_form(data, canonical):
    assert canonical_json_sha256(data) == sha(canonical.encode())


@pytest.mark.parametrize("data", [b"", b"{", b"{'a': 1}", b"\xff", b"[" * 100_000])
def test_what_is_not_json_has_no_canonical_hash(data):
    assert canonical_json_sha256(data) is None


@pytest.mark.parametrize(
    ("message", "text", "found"),
    [
        ("The total is 42 EUR.", "total is 42", True),
        ("The TOTAL\n  is\t42", "total is 42", True),
        ("The total is 41", "total is 42", False),
        ("", "anything", False),
    ],
)
def test_message_contains(message, text, found):
    assert message_contains(message, text) is found


# -- the report is untrusted ---------------------------------------------------------

EXPECTED = [{"type": "file_exists", "path": "a"}]
GOOD = {"passed": True, "checks": [{"type": "file_exists", "path": "a", "passed": True}]}


def line(report) -> str:
    return REPORT_MARK + json.dumps(report)


@pytest.mark.parametrize(
    ("stdout", "reason"),
    [
        ("", "printed no report"),
        ("garbage\n", "printed no report"),
        (line(GOOD) + "\nmore after it\n", "printed no report"),
        (REPORT_MARK + "{not json", "not JSON"),
        (REPORT_MARK + "[" * 50_000, "not JSON"),
        (line({"passed": True, "checks": []}), "does not list"),
        (line({"passed": True}), "does not list"),
        (line([1, 2]), "does not list"),
        (
            line({"checks": [{"type": "file_exists", "path": "b", "passed": True}]}),
            "does not match",
        ),
        (line({"checks": [{"type": "command", "passed": True}]}), "does not match"),
        (line({"checks": [{"type": "file_exists", "path": "a", "passed": 1}]}), "does not match"),
    ],
)
def test_garbage_reports_are_refused(stdout, reason):
    with pytest.raises(ValueError, match=reason):
        report_parse(stdout, EXPECTED)


def test_the_last_report_line_wins_and_its_detail_is_bounded_and_escaped():
    forged = line({"checks": [{"type": "file_exists", "path": "a", "passed": True}]})
    real = {
        "checks": [{"type": "file_exists", "path": "a", "passed": False, "detail": "\x00" * 900}]
    }
    (found,) = report_parse(f"{forged}\n{line(real)}\n", EXPECTED)
    assert found["passed"] is False
    assert found["detail"].startswith("\\x00") and len(found["detail"]) <= 300 * 4


# -- for real, in a sandbox ----------------------------------------------------------


@pytest.fixture
def box(db, settings):
    spec = replace(lane_sandbox_spec(), run_id=None, desktop=False, egress=False)
    with sandbox_session(spec) as sandbox:
        yield sandbox


def make(sandbox, script: str) -> None:
    result = sandbox.shell(script, timeout_s=20)
    assert result.exit_code == 0, result.stderr


def png() -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"\0" * 20


def zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.txt", "a")
    return buffer.getvalue()


def put(sandbox, name: str, data: bytes) -> None:
    encoded = base64.b64encode(data).decode()
    make(sandbox, f"mkdir -p \"$(dirname '{name}')\" && echo {encoded} | base64 -d > '{name}'")


@pytest.mark.django_db(transaction=True)
def test_every_file_check_passes_on_the_right_files_and_fails_on_the_wrong(box):
    put(box, "out/notes.txt", b"Total: 42  \r\nDone\r\n\r\n")
    put(box, "table.csv", b"name,amount\r\nA,1\r\n\r\nB,2\r\n")
    put(box, "data.json", b'{"b": [1, 2], "a": "\xc3\xa9"}')
    put(box, "pic.png", png())
    put(box, "doc.pdf", b"%PDF-1.4\n")
    put(box, "bundle.zip", zip_bytes())
    put(box, "latin.txt", b"caf\xe9")
    passing = grader(
        {"type": "file_exists", "path": "out/notes.txt"},
        {"type": "file_kind", "path": "out/notes.txt", "kind": "text"},
        {"type": "file_kind", "path": "table.csv", "kind": "csv"},
        {"type": "file_kind", "path": "data.json", "kind": "json"},
        {"type": "file_kind", "path": "pic.png", "kind": "png"},
        {"type": "file_kind", "path": "doc.pdf", "kind": "pdf"},
        {"type": "file_kind", "path": "bundle.zip", "kind": "zip"},
        {"type": "file_sha256", "path": "pic.png", "sha256": sha(png())},
        {"type": "text_equals", "path": "out/notes.txt", "sha256": sha(b"Total: 42\nDone")},
        {"type": "csv_shape", "path": "table.csv", "header": ["name", "amount"], "rows": 2},
        {"type": "json_equals", "path": "data.json", "sha256": sha('{"a":"é","b":[1,2]}'.encode())},
        {"type": "message_contains", "text": "total is 42"},
    )
    result = grader_run(box, passing, final_message="The total is 42.")
    assert (result.passed, result.error) == (True, "")
    assert [c["passed"] for c in result.checks] == [True] * 12
    assert result.checks[0] == {
        "type": "file_exists",
        "path": "out/notes.txt",
        "passed": True,
        "detail": "a regular file",
    }

    failing = grader(
        {"type": "file_exists", "path": "missing.txt"},
        {"type": "file_kind", "path": "latin.txt", "kind": "text"},
        {"type": "file_kind", "path": "out/notes.txt", "kind": "json"},
        {"type": "file_kind", "path": "doc.pdf", "kind": "png"},
        {"type": "file_sha256", "path": "pic.png", "sha256": "0" * 64},
        {"type": "text_equals", "path": "out/notes.txt", "sha256": sha(b"Total: 41\nDone")},
        {"type": "csv_shape", "path": "table.csv", "header": ["name", "amount"], "rows": 3},
        {"type": "csv_shape", "path": "table.csv", "header": ["name"], "rows": 2},
        {"type": "json_equals", "path": "data.json", "sha256": sha(b'{"a":"e"}')},
        {"type": "message_contains", "text": "total is 42"},
    )
    result = grader_run(box, failing, final_message="I could not find it")
    assert (result.passed, result.error) == (False, "")
    assert [c["passed"] for c in result.checks] == [False] * 10
    details = [c["detail"] for c in result.checks]
    assert details[0] == "no such file"
    assert details[1] == "not UTF-8 text without NUL bytes"
    assert details[6] == "2 rows after the header (expected 3)"
    assert details[7] == 'header is ["name", "amount"]'
    assert details[9] == "the final message does not say it"


@pytest.mark.django_db(transaction=True)
def test_links_out_of_the_work_dir_and_fifos_are_never_read(box):
    make(
        box,
        "ln -s /etc/passwd out.txt && ln -s /etc d && printf x > real.txt && "
        "ln -s real.txt inner.txt && mkfifo pipe && mkdir sub && ln -s /etc sub/e",
    )
    checks = grader(
        {"type": "file_exists", "path": "out.txt"},
        {"type": "file_kind", "path": "out.txt", "kind": "text"},
        {"type": "text_equals", "path": "out.txt", "sha256": "0" * 64},
        {"type": "file_exists", "path": "d/passwd"},
        {"type": "file_exists", "path": "sub/e/passwd"},
        {"type": "file_sha256", "path": "inner.txt", "sha256": sha(b"x")},
        {"type": "file_exists", "path": "pipe"},
        {"type": "file_exists", "path": "sub"},
        {"type": "file_sha256", "path": "real.txt", "sha256": sha(b"x")},
    )
    result = grader_run(box, checks, final_message="")
    assert result.passed is False and result.error == ""
    assert [c["passed"] for c in result.checks] == [False] * 8 + [True]
    assert "link" in result.checks[0]["detail"]
    assert "link" in result.checks[3]["detail"]
    assert result.checks[6]["detail"] == "not a regular file"
    assert result.checks[7]["detail"] == "not a regular file"


@pytest.mark.django_db(transaction=True)
def test_commands_their_exit_codes_and_timeouts(box):
    make(box, "mkdir -p repo && printf 'print(1)' > repo/ok.py")
    checks = grader(
        {"type": "command", "run": "python3 ok.py", "cwd": "repo", "timeout_s": 10},
        {"type": "command", "run": "pwd; exit 3", "timeout_s": 10, "expect_exit": 3},
        {"type": "command", "run": "echo nope; exit 1", "timeout_s": 10},
        {"type": "command", "run": "sleep 30", "timeout_s": 1},
    )
    result = grader_run(box, checks, final_message="")
    assert [c["passed"] for c in result.checks] == [True, True, False, False]
    assert result.checks[0]["detail"] == "exit 0 (expected 0); output ends: 1\n"
    assert result.checks[1]["detail"] == "exit 3 (expected 3); output ends: /work\n"
    assert result.checks[2]["detail"] == "exit 1 (expected 0); output ends: nope\n"
    assert result.checks[3]["detail"].startswith("timed out after 1 s")
    assert result.passed is False


@pytest.mark.django_db(transaction=True)
def test_a_command_cannot_forge_the_report_nor_leave_anything_running(box):
    forged = REPORT_MARK + json.dumps(
        {"passed": True, "checks": [{"type": "command", "passed": True}] * 3}
    )
    put(box, "forged.txt", forged.encode() + b"\n")
    # Straight into the interpreter's stdout, then from a process that left the
    # command's session and would write once the interpreter is done with its checks.
    run = (
        "cat /work/forged.txt > /proc/$PPID/fd/1; gp=$PPID; "
        'setsid sh -c "sleep 2; cat /work/forged.txt > /proc/$gp/fd/1" & exit 1'
    )
    checks = grader(
        {"type": "command", "run": run, "timeout_s": 10},
        {"type": "command", "run": "setsid sleep 100 & exit 0", "timeout_s": 10},
        {"type": "command", "run": "! grep -qx sleep /proc/[0-9]*/comm", "timeout_s": 10},
    )
    result = grader_run(box, checks, final_message="")
    assert result.error == ""
    assert [c["passed"] for c in result.checks] == [False, True, True]
    assert result.passed is False
    assert box.shell("cat /proc/1/comm").stdout.strip() == "bwrap"


@pytest.mark.django_db(transaction=True)
def test_a_grader_with_only_host_checks_still_runs_its_empty_sandbox_part(box):
    checks = grader({"type": "message_contains", "text": "done"})
    assert grader_run(box, checks, final_message="All DONE").passed is True
    result = box.shell(grader_command(checks))
    assert result.exit_code == 0
    assert result.stdout.strip() == REPORT_MARK + '{"passed": true, "checks": []}'

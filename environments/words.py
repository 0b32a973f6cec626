"""The environments' codes in words, for the pages (the API and the packages keep the
codes): a status as a short label and a sentence, a grader check's type as a label.
Plain data, no ORM."""

# status code → (short label, what it means)
STATUS_WORDS = {
    "candidate": ("being built", "Picked from a failed run; its build has not finished yet."),
    "held": ("held", "Held back: no current consent, or a file that cannot be redacted."),
    "needs_grader": (
        "needs a grader",
        "No grader could be derived from the failure: an operator must write one.",
    ),
    "graded": ("validating", "Graded; its replays are checking the grader."),
    "validated": (
        "ready",
        "Validated: both replays agreed with the grader, and it refused the reference made wrong.",
    ),
    "invalid": ("refused", "Refused: a replay contradicted the grader."),
    "rejected": ("rejected", "Rejected by an operator."),
}

CHECK_WORDS = {
    "file_exists": "the file exists",
    "file_kind": "the file is of the right kind",
    "file_sha256": "the file has exactly the right bytes",
    "text_equals": "the file's text is right",
    "csv_shape": "the table has the right columns and rows",
    "json_equals": "the JSON file's content is right",
    "text_contains": "the file's text says",
    "text_lines": "the file has the right number of lines",
    "json_keys": "the JSON object has the keys",
    "message_contains": "the final message says",
    "command": "a command succeeds",
}

FIELD_WORDS = {
    "path": "file",
    "kind": "kind",
    "sha256": "fingerprint",
    "header": "columns",
    "rows": "rows",
    "lines": "lines",
    "keys": "keys",
    "text": "text",
    "run": "command",
    "cwd": "in",
    "timeout_s": "time limit (s)",
    "expect_exit": "exit code",
}


def status_label(status: str) -> str:
    return STATUS_WORDS.get(status, (status.replace("_", " "), ""))[0]


def status_sentence(status: str) -> str:
    return STATUS_WORDS.get(status, ("", ""))[1]


def check_label(check_type: str) -> str:
    return CHECK_WORDS.get(check_type, check_type.replace("_", " "))


def field_label(field: str) -> str:
    return FIELD_WORDS.get(field, field.replace("_", " "))

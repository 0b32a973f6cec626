"""Suites and rubrics stored for a team: parsed and checked (``evals.suites``), kept
with their bytes, once per SHA-256; and the files an evaluation's desktop tasks hand
their lanes (``eval_attachments_store``)."""

from collections.abc import Mapping
from pathlib import Path

from django.core.files.base import ContentFile

from accounts.models import Team
from arena_site.exceptions import ApplicationError
from arena_site.media import media_exists, media_store_file
from battles.attachments import (
    DISK_FULL_ERRNOS,
    Pending,
    attachments_check,
    attachments_stage,
    storage_full_error,
)
from evals import suites
from evals.models import EvalAttachment, Evaluation, Rubric, Suite

# In the private storage (arena_site/media.py): <team id>/<sha256>, one copy per team
# and content.
ATTACHMENTS_DIR = Path("evals") / "attachments"


def suite_store(*, team: Team, name: str, data: bytes) -> Suite:
    """The team's suite of these bytes (parsed and checked; stored once per hash).
    Raises ``ApplicationError`` with the parser's message naming file, task and field."""
    try:
        parsed = suites.parse_suite(data, name=name)
    except suites.SuiteError as error:
        raise ApplicationError(str(error), code="invalid_suite") from None
    tasks = [
        {
            "id": t.id,
            "kind": t.kind,
            "prompt": t.prompt,
            "reference": t.reference,
            "expected": t.expected,
            "meta": t.meta,
            "start_url": t.start_url,
            "attachments": list(t.attachments),
            "success_cmd": t.success_cmd,
            **(
                {"choices": list(t.choices), "scorers": list(t.scorers)}
                if t.choices or t.scorers
                else {}
            ),
            **(
                {
                    "repo": t.repo,
                    "ref": t.ref,
                    "judge_ref": t.judge_ref,
                    "test_cmd": t.test_cmd,
                    "time_limit_s": t.time_limit_s,
                }
                if t.kind == "repo"
                else {}
            ),
        }
        for t in parsed.tasks
    ]
    suite, _ = Suite.objects.get_or_create(
        team=team,
        sha256=parsed.sha256,
        defaults={"name": name, "source": data, "tasks": tasks},
    )
    return suite


def rubric_store(*, team: Team, name: str, data: bytes) -> Rubric:
    try:
        parsed = suites.parse_rubric(data, name=name)
    except suites.SuiteError as error:
        raise ApplicationError(str(error), code="invalid_rubric") from None
    criteria = [
        {"name": c.name, "description": c.description, "scale": c.scale, "weight": c.weight}
        for c in parsed.criteria
    ]
    rubric, _ = Rubric.objects.get_or_create(
        team=team,
        sha256=parsed.sha256,
        defaults={"name": name, "source": data, "criteria": criteria},
    )
    return rubric


def _needed(evaluation: Evaluation) -> list[tuple[str, list[str]]]:
    return [
        (task["id"], list(task["attachments"]))
        for task in evaluation.suite.tasks
        if task["kind"] == "desktop" and task["attachments"]
    ]


def attachment_paths(suite: Suite) -> list[str]:
    """Every attachment path the suite's desktop tasks name, once, in file order."""
    paths: dict[str, None] = {}
    for task in suite.tasks:
        for path in task["attachments"] if task["kind"] == "desktop" else ():
            paths.setdefault(path)
    return list(paths)


def _checked(task_id: str, paths: list[str], files: Mapping[str, bytes]) -> list[Pending]:
    """battles.attachments' rules for one lane's files (count, sizes, total, name,
    type by extension), with the task named in the refusal."""
    try:
        return attachments_check([ContentFile(files[path], name=path) for path in paths])
    except ApplicationError as error:
        raise ApplicationError(
            f"task {task_id!r}: {error.message}", code=error.code, status=error.status
        ) from None


def _keep(team_id: int, pending: Pending) -> tuple[str, int, str, str]:
    """Stages the file (hashing it, checking its bytes against its type) and moves it
    to its content address; (sha256, size, content type, stored path)."""
    staged = attachments_stage([pending])
    item = staged.files[0]
    relative = str(ATTACHMENTS_DIR / str(team_id) / item.sha256)
    try:
        if media_exists(relative):  # the same bytes, stored before: keep that copy
            staged.discard()
        else:
            media_store_file(relative, item.temp_path)
    except OSError as exc:
        staged.discard()
        if exc.errno in DISK_FULL_ERRNOS:
            raise storage_full_error(exc) from exc
        raise
    return item.sha256, item.size, item.content_type, relative


def eval_attachments_store(
    *, evaluation: Evaluation, files: Mapping[str, bytes]
) -> list[EvalAttachment]:
    """The files of the evaluation's desktop tasks, ``files`` by the path the suite
    names them with: each checked by the battle attachments' rules per task (at most
    ``ARENA_ATTACHMENTS_MAX_COUNT`` per task, ``ARENA_ATTACHMENT_MAX_BYTES`` each,
    ``ARENA_ATTACHMENTS_MAX_TOTAL_BYTES`` per task, allowed types whose bytes agree),
    stored once per team and SHA-256, and given a row per task that names it.

    Refuses (400, or 413 for sizes) a path a task needs that is missing, a path no
    task names, and any file the rules refuse, naming the task and the path. Call in
    the creating transaction; a stored file is content-addressed and may be shared,
    so a rollback leaves it (it is what any later upload of those bytes reuses)."""
    needed = _needed(evaluation)
    named = {path for _, paths in needed for path in paths}
    for task_id, paths in needed:
        for path in paths:
            if path not in files:
                raise ApplicationError(
                    f"task {task_id!r} needs the attachment {path!r}, which was not given "
                    "(the command line reads it beside the suite file; the API takes it in "
                    "'attachments')",
                    code="missing_attachment",
                )
    for path in files:
        if path not in named:
            raise ApplicationError(
                f"attachment {path!r} is not named by any desktop task of the suite",
                code="unknown_attachment",
            )
    kept: dict[str, tuple[str, int, str, str]] = {}
    rows = []
    for task_id, paths in needed:
        for position, (path, pending) in enumerate(
            zip(paths, _checked(task_id, paths, files), strict=True)
        ):
            if path not in kept:
                try:
                    kept[path] = _keep(evaluation.team_id, pending)
                except ApplicationError as error:
                    raise ApplicationError(
                        f"task {task_id!r}: {error.message}", code=error.code, status=error.status
                    ) from None
            sha256, size, content_type, stored = kept[path]
            rows.append(
                EvalAttachment(
                    evaluation=evaluation, task_id=task_id, position=position, path=path,
                    name=pending.name, sha256=sha256, size=size, content_type=content_type,
                    stored=stored,
                )
            )  # fmt: skip
    return EvalAttachment.objects.bulk_create(rows)

"""Candidates in, graded environments out (docs/environments.md): the picker's runs
become ``candidate`` rows (``candidates_collect``), and each is built
(``environment_build``): consent, the redacted state, the two trajectories, the grader.

Redaction uses one placeholder book per environment, so a name replaced in the
instruction is the same placeholder in the attachments, the trajectories and the
reference's files: replaying the redacted reference on the redacted state reproduces
the redacted final state, and the replays (environments.validation) check exactly that."""

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from arena_site.media import media_read
from battles.media import delivery_name
from battles.models import Battle, CodingOutcome, RepoSource, Run, Step
from battles.services.coding_judge import patch_relative
from battles.snapshots import BLOB_PREFIX as SNAPSHOT_BLOBS
from battles.snapshots import blob_put, manifest_digest
from environments import derive
from environments.consent import run_export_consent
from environments.graders import GraderInvalid, grader_validate
from environments.models import BLOB_PREFIX, BattleScan, Environment
from environments.picking import Pick, battle_picks, battles_to_scan
from exports.redaction import Placeholders, redact_attachment, redact_json, redact_text

logger = logging.getLogger(__name__)

# The tools whose calls change nothing a grader reads: not replayed.
_OBSERVING = ("screenshot",)
READ_MAX_BYTES = 64 * 1024 * 1024
# Redaction reads prose at ~25 kB/s, digit-dense text at ~12 kB/s (docs/environments.md,
# "Figures"): a megabyte takes up to 1.5 min. A bigger text file would take the
# conversion past its latency target, so it is held for an operator instead.
REDACT_MAX_BYTES = 1024 * 1024


def _create(pick: Pick) -> Environment | None:
    run = pick.run
    duration = (run.ended_at - run.started_at).total_seconds() if run.started_at else 0.0
    try:
        with transaction.atomic():
            return Environment.objects.create(
                run=run,
                battle=pick.battle,
                reference_run=pick.reference,
                failure_mode=pick.mode,
                snapshot_digest=run.snapshot.digest,
                failed_at=pick.failed_at or timezone.now(),
                run_duration_s=max(duration, 0.0),
            )
    except IntegrityError:  # another collector took it first
        return None


def candidates_collect(*, limit: int = 200) -> list[int]:
    """Looks at the ended battles not yet looked at (at their stage) and makes a
    candidate of each failed run; returns the new environments' ids."""
    created: list[int] = []
    for battle in battles_to_scan(limit=limit):
        for pick in battle_picks(battle):
            env = _create(pick)
            if env is not None:
                created.append(env.pk)
        stage = (
            BattleScan.Stage.DECIDED
            if battle.status == Battle.Status.DECIDED
            else BattleScan.Stage.ENDED
        )
        BattleScan.objects.update_or_create(
            battle=battle, defaults={"stage": stage, "at": timezone.now()}
        )
    return created


# --- building -------------------------------------------------------------------------


class _Held(Exception):
    """The environment cannot be exported as it is (``status_detail`` says why)."""


def _blob(data: bytes) -> dict:
    """Stores ``data`` once among the environments' files; its manifest entry."""
    return blob_put(data, prefix=BLOB_PREFIX)


def _read(name: str, what: str) -> bytes:
    data = media_read(name, READ_MAX_BYTES)
    if data is None:
        raise _Held(f"{what} is missing from storage (past retention?)")
    return data


class _Book:
    """The environment's placeholder book and the record of what it replaced."""

    def __init__(self) -> None:
        self.placeholders = Placeholders()
        self.found: list[dict] = []

    def note(self, where: str, replacements) -> None:
        self.found += [
            {
                "where": where + (r.path or ""),
                "entity_type": r.entity_type,
                "placeholder": r.placeholder,
            }
            for r in replacements
        ]

    def text(self, where: str, text: str) -> str:
        done = redact_text(text, placeholders=self.placeholders)
        self.note(where, done.replacements)
        return done.text

    def json(self, where: str, value):
        done = redact_json(value, placeholders=self.placeholders)
        self.note(where, done.replacements)
        return done.value

    def file(self, where: str, name: str, data: bytes) -> bytes:
        if len(data) > REDACT_MAX_BYTES:
            raise _Held(
                f"{where} is {len(data)} bytes, more than the {REDACT_MAX_BYTES} redaction "
                "reads in time; an operator must clear it"
            )
        done = redact_attachment(name, data, placeholders=self.placeholders)
        if done.unredactable:
            raise _Held(f"{where} cannot be redacted ({done.reason}); an operator must clear it")
        self.note(where, done.replacements)
        return done.text.encode()


def _state(env: Environment, book: _Book) -> dict:
    snapshot = env.run.snapshot
    if snapshot is None:
        raise _Held("the run's snapshot is gone (past retention)")
    manifest = dict(snapshot.manifest)
    manifest["instruction"] = book.text("instruction", manifest["instruction"])
    attachments = []
    for item in manifest["attachments"]:
        data = _read(SNAPSHOT_BLOBS + item["sha256"], f"attachment {item['name']!r}")
        redacted = book.file(f"attachments/{item['name']}", item["name"], data)
        attachments.append({"name": item["name"], **_blob(redacted)})
    manifest["attachments"] = attachments
    if manifest.get("repo"):
        # A repository is code, kept as it is (docs/environments.md, "Redaction").
        repo = dict(manifest["repo"])
        _blob(_read(SNAPSHOT_BLOBS + repo["sha256"], "the repository bundle"))
        source = RepoSource.objects.get(task__battles=env.battle_id)
        if source.judge_bundle_path:
            judge = _blob(_read(source.judge_bundle_path, "the judge's bundle"))
            repo["judge"] = {**judge, "head": source.judge_commit}
        manifest["repo"] = repo
    return manifest


def _actions(run: Run, book: _Book, where: str) -> list[dict]:
    """The run's trajectory as replayable actions, redacted."""
    if run.battle.task.kind == "repo":
        outcome = CodingOutcome.objects.filter(run=run).first()
        if outcome is None or not outcome.diff_sha256:
            return []
        patch = _read(patch_relative(outcome.diff_sha256), f"the {where} run's patch")
        return [{"tool": "apply_patch", "args": _blob(patch)}]
    steps = Step.objects.filter(run=run).exclude(tool__in=_OBSERVING).order_by("index")
    raw = [{"tool": s.tool, "args": s.args} for s in steps if s.result.get("ok", True)]
    return book.json(f"trajectories/{where}", raw)


def _delivered(run: Run, book: _Book) -> tuple[list[derive.Delivered], str]:
    """The reference's delivered files (path under /work, redacted bytes) and message."""
    deliver = Step.objects.filter(run=run, tool="deliver").order_by("-index").first()
    asked = deliver.args.get("files", []) if deliver is not None else []
    got = deliver.result.get("data", {}).get("files", []) if deliver is not None else []
    files = []
    for path, item in zip(asked, got, strict=False):
        data = _read(delivery_name(run.pk, item["name"]), f"the delivered {item['name']!r}")
        kind = derive.kind_of(path, data)
        redacted = data
        if kind in ("text", "csv", "json"):
            redacted = book.file(f"reference/{path}", path, data)
        where = str(book.text(f"reference/{path}#path", path))
        files.append(derive.Delivered(path=where, data=redacted, exact=redacted == data))
    return files, book.text("reference/message", run.final_message)


def _grader(env: Environment, state: dict, book: _Book) -> dict | None:
    mode, reference = env.failure_mode, env.reference_run
    if mode == Environment.FailureMode.TESTS_FAILED:
        source = RepoSource.objects.get(task__battles=env.battle_id)
        return derive.tests_grader(source.success_cmd, min(source.time_limit_s, 900))
    delivered, message = _delivered(reference, book) if reference is not None else ([], "")
    if mode in (Environment.FailureMode.GAVE_UP, Environment.FailureMode.BUDGET):
        return derive.artifact_grader(state["instruction"], delivered, message)
    if reference is None:
        return None
    return derive.result_grader(state["instruction"], delivered, message)


def environment_build(*, environment_id: int) -> str:
    """Builds a candidate; returns its new status. ``graded`` means its replays are
    next (environments.validation); ``held`` and ``needs_grader`` say why not."""
    env = Environment.objects.select_related("run__snapshot", "run__battle__task").get(
        pk=environment_id
    )
    if env.status != Environment.Status.CANDIDATE:
        return env.status
    consent = run_export_consent(env.run)
    book = _Book()
    try:
        if not consent.exportable:
            raise _Held(consent.message)
        state = _state(env, book)
        failing = _actions(env.run, book, "failing")
        reference = _actions(env.reference_run, book, "reference") if env.reference_run else []
        grader = _grader(env, state, book)
    except _Held as held:
        return _finish(env, Environment.Status.HELD, str(held))
    except Exception as exc:  # a bug or a broken row: shown to operators, never retried blind
        logger.exception("building environment %s failed", env.pk)
        return _finish(env, Environment.Status.HELD, f"the build failed: {type(exc).__name__}")
    fields = {
        "state": state,
        "state_digest": manifest_digest(state),
        "redactions": book.found,
        "failing_actions": failing,
        "reference_actions": reference,
    }
    if grader is None:
        return _finish(env, Environment.Status.NEEDS_GRADER, "no check could be derived", **fields)
    try:
        grader = grader_validate(grader)
    except GraderInvalid as exc:
        return _finish(
            env, Environment.Status.NEEDS_GRADER, f"derived grader refused: {exc}", **fields
        )
    if env.reference_run is None:
        detail = "no reference run passed: an operator must supply a reference or a grader"
        return _finish(env, Environment.Status.NEEDS_GRADER, detail, grader=grader, **fields)
    return _finish(env, Environment.Status.GRADED, "", grader=grader, **fields)


def _finish(env: Environment, status: str, detail: str, **fields) -> str:
    Environment.objects.filter(pk=env.pk, status=Environment.Status.CANDIDATE).update(
        status=status, status_detail=detail, **fields
    )
    return status

"""Screening a battle whose lanes have ended, before any judge is served it: exclusion
rules 1–6 (docs/method.md §7), the first of which is the identity-leak scan over everything a
judge will see (docs/leak-scan.md). The battle waits in status "screening" meanwhile;
the scan runs outside any lock (it reads files and screenshots, OCR may take seconds),
then one short transaction opens the battle for judging or excludes it."""

from collections.abc import Iterator
from itertools import chain
from pathlib import PurePosixPath

from django.conf import settings
from django.db import transaction

from agents.identity import Leak, LeakScanner
from agents.models import Agent
from agents.textfold import TooComplex
from arena_site.media import MediaTooLarge, MediaUnreadable, media_read
from battles.coding_models import CodingOutcome
from battles.media import delivery_name
from battles.models import Battle, Run
from battles.services.live import battle_publish
from judging import archives, ocr
from judging.services.exclusions import battle_exclude_locked
from judging.services.machine import battle_machine_judge_enqueue
from judging.services.resolution import ttl_due
from judging.visible import coding_visible_texts, delivered_file_texts, judge_visible_texts

Reason = Battle.ExclusionReason

# A delivered file is scanned whole or not at all: one larger than this (only with a
# raised delivery limit) cannot be vouched for. Per battle, the same for the sum.
FILE_MAX_BYTES = 8 * 1024**2
BATTLE_FILES_MAX_BYTES = 24 * 1024**2
SCREENSHOT_MAX_BYTES = 16 * 1024**2


class Unscannable(Exception):
    """Something a judge would see that the scan cannot read in full (fails closed)."""


def battle_leak_scanner() -> LeakScanner:
    """Every identity string of every agent ever entered (a retired one still names
    a model)."""
    identities: list[str] = []
    for agent in Agent.objects.select_related("team"):
        identities.extend(agent.identity_strings())
    return LeakScanner(identities)


def _read_private(name: str, limit: int) -> bytes | None:
    """A private file's bytes, None when it is missing (a judge is served nothing
    either). A link, anything but a regular file, or more than ``limit`` bytes raise
    ``Unscannable``."""
    try:
        return media_read(name, limit)
    except MediaTooLarge:
        raise Unscannable(f"more than the scan's {limit:,} bytes") from None
    except MediaUnreadable as exc:
        raise Unscannable(str(exc)) from exc


def _delivered(runs: list[Run]) -> Iterator[tuple[str, str, bytes]]:
    """(where, name, bytes) of every delivered file a judge can download."""
    total = 0
    for run in runs:
        for position, entry in enumerate(run.delivered_files or []):
            name = str(entry.get("name", ""))
            if not name or name != PurePosixPath(name).name or name in (".", ".."):
                continue  # the judge route serves no such file
            where = f"side {run.side} delivered file {position + 1} ({name})"
            try:
                data = _read_private(delivery_name(run.pk, name), FILE_MAX_BYTES)
            except Unscannable as exc:
                raise Unscannable(f"{where}: {exc}") from exc
            if data is None:
                continue
            total += len(data)
            if total > BATTLE_FILES_MAX_BYTES:
                raise Unscannable(
                    f"{where}: the battle's files pass {BATTLE_FILES_MAX_BYTES:,} bytes"
                )
            yield where, name, data


class _FileReading:
    """The bounds the battle's delivered files share: the pixels read by OCR, and what
    their archives may still hold."""

    def __init__(self, *, images: bool) -> None:
        self.images = images
        self.tessdata = settings.ARENA.leak_tessdata
        self.pixels = 0
        self.archived = archives.Budget()

    def texts(self, where: str, name: str, data: bytes) -> Iterator[tuple[str, str]]:
        """(where, text) of one file: an image through OCR (when ``images``); an
        archive's members, each by name and then the same way (nested archives
        opened); anything else, an archive too, as text (``delivered_file_texts``)."""
        if ocr.image_format(data) is not None:
            if self.images:
                yield from self._image(where, data)
            if archives.archive_kind(data) is None:
                return
        if archives.archive_kind(data) is not None:
            try:
                for member in archives.members(name, data, self.archived):
                    label = f"{where} member {member.path}"
                    yield f"{label} name", member.path
                    for what, text in member.texts:
                        yield f"{label} {what}", text
                    if member.data is not None:
                        yield from self.texts(label, member.path, member.data)
            except archives.ArchiveUnreadable as exc:
                raise Unscannable(f"{where}: {exc}") from exc
        for reading, text in delivered_file_texts(name, data):
            yield f"{where} {reading}", text

    def _image(self, where: str, data: bytes) -> Iterator[tuple[str, str]]:
        readers: dict[str, ocr.ImageReader] = {}
        try:
            for index, backdrop, frame in ocr.image_frames(data):
                self.pixels += frame.width * frame.height
                if self.pixels > ocr.MAX_BATTLE_IMAGE_PIXELS:
                    raise ocr.Unreadable(
                        f"the battle's images pass {ocr.MAX_BATTLE_IMAGE_PIXELS:,} pixels"
                    )
                reader = readers.setdefault(backdrop, ocr.ImageReader(self.tessdata))
                label = f"{where} image (OCR{f', frame {index + 1}' if index else ''})"
                yield label, reader.read(frame)
        except ocr.Unreadable as exc:
            raise Unscannable(f"{where}: {exc}") from exc


def _file_texts(runs: list[Run], *, images: bool) -> Iterator[tuple[str, str]]:
    """(where, text) of the delivered files: text files as text (and markup as a
    browser shows it), images through OCR when ``images``, archives member by member
    (``judging.archives``)."""
    reading = _FileReading(images=images)
    for where, name, data in _delivered(runs):
        yield from reading.texts(where, name, data)


def _screenshot_texts(runs: list[Run]) -> Iterator[tuple[str, str]]:
    """(where, text) of every step screenshot through OCR: in step order, each only
    where it changed since the run's previous one, none seen before in the battle."""
    tessdata = settings.ARENA.leak_tessdata
    seen: set[bytes] = set()
    for run in runs:
        reader = ocr.ImageReader(tessdata, seen)
        for step in run.steps.all():
            if not step.screenshot:
                continue
            where = f"side {run.side} step {step.index} screenshot (OCR)"
            try:
                data = _read_private(step.screenshot, SCREENSHOT_MAX_BYTES)
                if data is not None:
                    yield where, reader.read_file(data)
            except (Unscannable, ocr.Unreadable) as exc:
                raise Unscannable(f"{where}: {exc}") from exc


def _printable(excerpt: str) -> str:
    """An excerpt fit for the log: control characters (NUL, escapes) shown as U+FFFD."""
    return "".join("\ufffd" if ord(c) < 32 and c not in "\n\t" else c for c in excerpt)


def battle_leak_note(runs: list[Run]) -> str:
    """The exclusion note when something a judge would see names a roster agent, or
    cannot be scanned in full (the scan fails closed), else "". Text first (every
    text, counted; a coding battle's diffs and check output among them), then delivered
    files, then screenshots (the first hit ends it).
    ``runs`` have their steps prefetched. Reads files: call outside any lock."""
    scanner = battle_leak_scanner()
    outcomes = CodingOutcome.objects.filter(run__in=[run.pk for run in runs]).select_related("run")
    try:
        texts = chain(
            judge_visible_texts(runs),
            coding_visible_texts((outcome.run.side, outcome) for outcome in outcomes),
        )
        leaks = [leak for where, text in texts if (leak := _leak(scanner, where, text))]
        if leaks:
            first = leaks[0]
            return (
                f"{first.where} names {first.identity!r}: …{_printable(first.excerpt)}… "
                f"({len(leaks)} text(s) with a name)"
            )
        reading = settings.ARENA.leak_ocr
        sources = [_file_texts(runs, images=reading)]
        if reading:
            sources.append(_screenshot_texts(runs))
        for source in sources:
            for where, text in source:
                leak = _leak(scanner, where, text)
                if leak is not None:
                    return f"{where} names {leak.identity!r}: …{_printable(leak.excerpt)}…"
    except Unscannable as exc:
        return f"{exc}: not scanned in full, so it may name an agent"
    return ""


def _leak(scanner: LeakScanner, where: str, text: str) -> Leak | None:
    try:
        found = scanner.first(text)
    except TooComplex as exc:
        raise Unscannable(f"{where}: {exc}") from exc
    return Leak(where=where, identity=found[0], excerpt=found[1]) if found else None


def arena_fault_note(run: Run) -> str:
    """Why a side could not run through the arena's fault ("" when it ran): its run never
    ended (it was lost), or ended in an error that is not its agent's: its sandbox or
    its repository copy could not be made, the other lane never came, the worker or
    the sandbox failed. A side that ran and did nothing, or changed nothing, ran: doing
    nothing is an outcome the other side can win against. An agent's own failure fails
    the battle before screening (battles.services.failures); a side its submitter ended
    is rule 5's."""
    if run.end_reason == Run.EndReason.ENDED_BY_SUBMITTER or run.end_requested_at:
        return ""
    if not run.end_reason:
        return "never ended"
    if run.end_reason == Run.EndReason.ERROR and not run.agent_fault:
        return f"could not run through the arena's fault: {run.error[:200] or 'no reason given'}"
    return ""


def exclusion_at_lanes_end(battle: Battle) -> tuple[str, str]:
    """Exclusion rules 1–6 (docs/method.md §7) in order, first match wins: (reason code,
    note for the log), or ("", "") when the battle may be judged."""
    runs = list(battle.runs.prefetch_related("steps").order_by("side"))
    by_side = {run.side: run for run in runs}
    note = battle_leak_note(runs)
    if note:
        return Reason.NAMED_MODEL, note
    for side in ("A", "B"):
        if side not in by_side:
            return Reason.NO_RUN, f"side {side} has no run record"
    for side in ("A", "B"):
        note = arena_fault_note(by_side[side])
        if note:
            return Reason.ARENA_FAULT, f"side {side} {note}"
    forged = (
        CodingOutcome.objects.filter(run__battle_id=battle.pk)
        .exclude(forged="")
        .select_related("run")
        .order_by("run__side")
        .first()
    )
    if forged is not None:
        return Reason.FORGED_GRADE, f"side {forged.run.side}'s test results: {forged.forged}"
    for side in ("A", "B"):
        run = by_side[side]
        if run.end_reason == Run.EndReason.ENDED_BY_SUBMITTER or run.end_requested_at:
            return Reason.ENDED_BY_SUBMITTER, f"the submitter ended side {side} early"
    if by_side["A"].step_budget != by_side["B"].step_budget:
        return Reason.BUDGET_MISMATCH, (
            f"step budgets differ: A {by_side['A'].step_budget}, B {by_side['B'].step_budget}"
        )
    return "", ""


def battle_screen(*, battle_id: int) -> str:
    """Screens a battle in status "screening": a rule that matches excludes it (never
    served to judges; its team still sees the replay), else it opens for judging.
    Returns the reason code, "" when none. Idempotent: a battle not in screening is
    left alone."""
    battle = Battle.objects.filter(pk=battle_id, status=Battle.Status.SCREENING).first()
    if battle is None:
        return ""
    reason, note = exclusion_at_lanes_end(battle)
    with transaction.atomic():
        battle = Battle.objects.select_for_update().filter(pk=battle_id).first()
        if battle is None or battle.status != Battle.Status.SCREENING:
            return ""
        battle.status = Battle.Status.JUDGING
        battle.decide_due_at = ttl_due(battle)  # no vote yet: only JUDGING_TTL can end it
        battle.save(update_fields=["status", "decide_due_at"])
        if reason:
            battle_exclude_locked(battle, reason=reason, note=note, actor=None)
        else:  # open for judging: the arena's machine judge reads it too (after commit)
            battle_machine_judge_enqueue(battle=battle)
        battle_publish(battle_id=battle_id)  # the live page: "judging" or "excluded"
    return reason


def battles_screen_pending(*, older_than_s: int = 60) -> list[int]:
    """Screens battles left in "screening" longer than ``older_than_s`` (their job was
    lost with a worker or a flushed Redis). Returns their ids."""
    from datetime import timedelta

    from django.utils import timezone

    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    ids = list(
        Battle.objects.filter(status=Battle.Status.SCREENING, ended_at__lt=cutoff)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for battle_id in ids:
        battle_screen(battle_id=battle_id)
    return ids

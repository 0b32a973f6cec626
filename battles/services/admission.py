"""Admission (SPEC §2): one service behind the submit form and the API. Checks in SPEC
order, then the task, its battle and both runs are created under the arena's row lock
and the battle job is enqueued after commit."""

import logging
import math
import random
from collections.abc import Sequence
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounts.selectors import consent_is_current
from agents.human import operators_ready
from agents.models import PUBLIC_ARENA_SLUG, Agent, Arena
from arena_site.exceptions import ApplicationError
from battles import admission_db
from battles.attachments import (
    Staged,
    attachments_check,
    attachments_stage,
    attachments_store,
)
from battles.classify import CODING, categorize, classify
from battles.coding_models import RepoSource
from battles.matchmaking import Candidate, draw_pair
from battles.models import Battle, Run, Task
from battles.services.creation import Entrant, battle_enqueue, battle_rows, redundancy_draw
from battles.services.repo_admission import (
    CheckedRepo,
    RepoRequest,
    StagedUpload,
    repo_check,
    repo_stage,
)
from battles.similarity import most_similar, signature, trigrams
from sandboxes.netpolicy import EgressRefused, check_url, default_resolver
from sandboxes.services import simulated_host_names

logger = logging.getLogger(__name__)
_system_rng = random.SystemRandom()


def _check_instruction(instruction: object) -> str:
    if not isinstance(instruction, str):
        raise ApplicationError("instruction must be a string.", code="invalid_instruction")
    text = instruction.strip()
    if not text:
        raise ApplicationError(
            "The instruction is empty: describe the task for the agents.", code="empty_instruction"
        )
    limit = settings.ARENA.instruction_max_chars
    if len(text) > limit:
        raise ApplicationError(
            f"The instruction is {len(text)} characters; the limit is {limit}.",
            code="instruction_too_long",
            status=413,
        )
    if "\x00" in text or any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        raise ApplicationError(
            "The instruction contains control characters; send plain text.",
            code="invalid_instruction",
        )
    return text


def _check_start_url(start_url: object) -> str:
    """The start URL, stripped; "" for none. Its form is checked by the egress policy's
    strict parser (the one the proxy uses): a URL that parser refuses for its form
    (scheme, user info, a malformed host or port, whitespace, control characters,
    backslashes) is ``invalid_start_url``, one whose destination it refuses
    ``start_url_not_public``."""
    if start_url in (None, ""):
        return ""
    if not isinstance(start_url, str) or len(start_url) > 2000:
        raise ApplicationError(
            "start_url must be a URL of at most 2000 characters.", code="invalid_start_url"
        )
    url = start_url.strip()
    # Without DNS, names pass (the egress proxy checks them when dialled); address
    # literals and odd spellings are checked either way.
    try:
        check_url(url, start_url_resolver() or _no_names, simulated=simulated_host_names())
    except _NameNotChecked:
        pass
    except EgressRefused as exc:
        from sandboxes import netpolicy

        malformed = (netpolicy.SCHEME, netpolicy.USERINFO, netpolicy.INVALID_HOST)
        if exc.reason in (*malformed, netpolicy.MALFORMED_URL):
            raise ApplicationError(
                "start_url must be an absolute http:// or https:// URL with a valid host "
                f"and port, no user info, spaces or control characters ({exc.reason}).",
                code="invalid_start_url",
            ) from exc
        host = urlsplit(url).hostname or "the host"  # check_url parsed it: no ValueError
        raise ApplicationError(
            f"start_url must point to a public host on port 80 or 443; "
            f"{host} is refused ({exc.reason}).",
            code="start_url_not_public",
        ) from exc
    return url


class _NameNotChecked(Exception):
    """Raised by ``_no_names``: the host is a name and no DNS may be asked."""


def _no_names(host: str, port: int) -> list:
    raise _NameNotChecked(host)


def start_url_resolver():
    """How admission resolves a start URL's host: the host's DNS, or (with
    ARENA_EGRESS_RESOLVE off) not at all."""
    return default_resolver if settings.ARENA.egress_resolve else None


class Conversation(Exception):
    """The submission was conversation, not a task: answer ``reply``, start nothing."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


def _near_duplicate_check(*, grams: frozenset, similar: list[admission_db.Earlier]) -> None:
    """SPEC §2: refuse when J ≥ θ against any of the submitter's tasks of the window (at
    most the newest DUP_MAX_TASKS). J is computed exactly, for ``similar``
    (``Submitter.similar``): the tasks whose stored MinHash signatures share an LSH
    band with the new one's (battles/similarity.py: a task with J ≥ θ is missed with
    probability ≤ 1.8e-4) and every task stored without a signature."""
    arena = settings.ARENA
    # Newest first, as the old full scan: of equal scores the newest task is named.
    earlier, score = most_similar(grams, admission_db.near_duplicate_trigrams(earlier=similar))
    if earlier is not None and score >= arena.dup_theta:
        when = admission_db.task_created_at(task_id=earlier)
        raise ApplicationError(
            f"This task is nearly the same as your task #{earlier} of "
            f"{when:%Y-%m-%d %H:%M} UTC (similarity {score:.2f} ≥ "
            f"{arena.dup_theta}); change it to submit a new one.",
            code="near_duplicate",
            status=409,
            extra={"earlier_task": earlier, "similarity": round(score, 4)},
        )


def _consent_refused() -> ApplicationError:
    return ApplicationError(
        "Accept the current publication consent terms before submitting tasks.",
        code="consent_required",
        status=403,
        extra={"consent_url": reverse("accounts:consent")},
    )


def task_check_admissible(*, user: AbstractBaseUser) -> None:
    """Authorisation half of admission: the rules that do not depend on the task."""
    if not consent_is_current(user):
        raise _consent_refused()


def _queue_check(*, locked: admission_db.Locked) -> None:
    """Bounded admission, on the counts read with the arena row locked, so concurrent
    submissions count each other."""
    if locked.queued >= settings.ARENA.queue_max:
        raise ApplicationError(
            "The arena's queue is full; try again shortly.",
            code="queue_full",
            status=429,
            headers={"Retry-After": "60"},
        )
    if locked.queued_team >= settings.ARENA.team_queue_quota:
        raise ApplicationError(
            "Your team has the maximum number of queued tasks; wait for some to start.",
            code="team_quota",
            status=429,
            headers={"Retry-After": "60"},
        )


def roster_candidate(entry: admission_db.RosterEntry) -> Candidate:
    """The matchmaker's view of an agent: its rated-battle count, the battle lanes it
    failed itself (both exposure) and current strength (θ from the streaming rating;
    none before its first rated battle)."""
    n = entry.rated_battles
    theta = None
    if n and entry.streaming_rating is not None:
        theta = (entry.streaming_rating - settings.ARENA.r0) * math.log(10) / 400
    return Candidate(entry.agent_id, n, theta, entry.failed_lanes)


def humans_ready(
    roster: Sequence[admission_db.RosterEntry], rng: random.Random
) -> list[admission_db.RosterEntry]:
    """The roster as a draw may take it (docs/human-baseline.md): a human entrant only
    while one of its operators is on duty, present (their page polled recently) and
    idle (the entrant in no lane that has not ended, nor in a battle still queued or
    running), and at most one human entrant, chosen at random among the ready ones, so
    a battle never pits two people against each other."""
    humans = [e.agent_id for e in roster if e.kind == Agent.Kind.HUMAN]
    if not humans:
        return list(roster)
    ready = operators_ready(agent_ids=humans)
    ready -= set(
        Run.objects.filter(
            agent_id__in=ready, status__in=(Run.Status.PENDING, Run.Status.RUNNING)
        ).values_list("agent_id", flat=True)
    )
    chosen = rng.choice(sorted(ready)) if ready else None
    return [e for e in roster if e.kind != Agent.Kind.HUMAN or e.agent_id == chosen]


def calibration_pair(
    roster: Sequence[admission_db.RosterEntry], rng: random.Random
) -> tuple[int, int] | None:
    """SPEC §5.4's calibration showcase for a new submitter: a pairing chosen to show
    contrast, one agent from the top third of the rated (non-provisional) field by
    streaming rating and one from the bottom third, sides in random order. None when
    fewer than two agents are rated: then the ordinary draw applies."""
    rated = sorted(
        (e for e in roster if e.rated_battles >= settings.ARENA.n0),
        key=lambda e: (-(e.streaming_rating or 0.0), e.agent_id),
    )
    if len(rated) < 2:
        return None
    third = max(1, len(rated) // 3)
    strong = rng.choice(rated[:third]).agent_id
    weak = rng.choice(rated[-third:]).agent_id
    return (strong, weak) if rng.random() < 0.5 else (weak, strong)


def task_submit(
    *,
    user: AbstractBaseUser,
    instruction: object,
    start_url: object = "",
    attachments: Sequence[object] = (),
    rng: random.Random | None = None,
    repo: RepoRequest | None = None,
) -> Battle:
    """Admits a task and creates its battle in one transaction; the battle job is
    enqueued after commit. Raises ``ApplicationError`` with the reason on refusal.

    ``attachments`` and a repo task's upload are uploaded files (Django
    ``UploadedFile``). They are checked before anything is created, streamed to a
    staging area (hashed, type-confirmed) before the arena row is locked, and moved
    into place inside the transaction after its last refusal; on any refusal or
    failure the files this call wrote are removed again, so nothing stays on disk
    (or in the media store) for a submission that was not admitted."""
    arena = settings.ARENA
    # The near-duplicate candidates are read with the consent, so the task's signature
    # comes first; a refusal of the instruction itself still comes after consent's.
    try:
        text, refused = _check_instruction(instruction), None
    except ApplicationError as exc:
        text, refused = "", exc
    grams = trigrams(text)
    minhash = signature(grams)
    submitter = admission_db.submitter_context(
        user_id=user.pk,
        cap=arena.calibration_tasks,
        since=timezone.now() - timedelta(days=arena.dup_window_days),
        limit=arena.dup_max_tasks,
        minhash=minhash,
    )
    if not submitter.consent_current:
        raise _consent_refused()
    if refused is not None:
        raise refused
    pending = attachments_check(list(attachments))
    checked_repo = None
    if repo is not None:
        # A repository with a success command is a task by construction; it runs on the
        # repository alone (docs/coding.md).
        checked_repo = repo_check(repo)
        if pending or start_url:
            raise ApplicationError(
                "A repo task takes no attachments and no start URL: put what the agents "
                "need in the repository.",
                code="invalid_repo",
            )
    else:
        verdict = classify(text)
        if not verdict.is_task:
            raise Conversation(verdict.reply)
    url = _check_start_url(start_url)
    _near_duplicate_check(grams=grams, similar=submitter.similar)
    if submitter.team_id is None:
        raise ApplicationError("Your account belongs to no team.", code="no_team", status=403)
    calibration = (
        settings.ARENA.calibration_showcase
        and submitter.earlier_tasks < settings.ARENA.calibration_tasks
    )
    staged, upload = Staged(), None
    try:
        staged = attachments_stage(pending)
        if checked_repo is not None:
            checked_repo, upload = repo_stage(checked_repo, repo.upload)
        battle = _task_create(
            user=user,
            team_id=submitter.team_id,
            text=text,
            minhash=minhash,
            url=url,
            staged=staged,
            calibration=calibration,
            rng=rng or _system_rng,
            repo=checked_repo,
            upload=upload,
        )
    except BaseException:
        staged.discard()
        if upload is not None:
            upload.discard()
        raise
    admission_db.near_duplicate_remember(task_id=battle.task_id, minhash=minhash, grams=grams)
    return battle


def _task_create(
    *,
    user: AbstractBaseUser,
    team_id: int,
    text: str,
    minhash: bytes,
    url: str,
    staged: Staged,
    calibration: bool,
    rng: random.Random,
    repo: CheckedRepo | None = None,
    upload: StagedUpload | None = None,
) -> Battle:
    """The "do" half of admission: the queue bound, the draw and every row, under the
    arena's row lock. Files land in their final places only after every refusal here
    (the queue, the roster), just before their rows."""
    with transaction.atomic():
        locked = admission_db.admission_lock(slug=PUBLIC_ARENA_SLUG, team_id=team_id)
        if locked is None:  # a flushed database lost the migration's row
            Arena.objects.public()
            locked = admission_db.admission_lock(slug=PUBLIC_ARENA_SLUG, team_id=team_id)
        _queue_check(locked=locked)
        # A team's own agents never meet its tasks (SPEC §5.1 conflicts of interest).
        kind = Task.Kind.REPO if repo is not None else Task.Kind.DESKTOP
        roster = [
            entry
            for entry in locked.roster
            if (entry.team_id is None or entry.team_id != team_id) and entry.runs(kind)
        ]
        roster = humans_ready(roster, rng)
        if len(roster) < 2:
            what = "coding agents" if repo is not None else "active agents"
            # What to do, in plain words (issue 37): coding agents all need a model.
            fix = (
                " A coding agent works on a repository: the built-in agents do not, and the "
                "bundled Claude Code, Codex and Aider run only once an admin enters them "
                "with the arena's provider key (docs/coding.md). A model agent offered the "
                "shell works too, and one on a local OpenAI-compatible server needs no key "
                "(docs/local-models.md)."
                if repo is not None
                else ""
            )
            raise ApplicationError(
                f"The arena has fewer than two {what} your team did not enter; an "
                f"admin must add some.{fix}",
                code="roster_too_small",
                status=503,
            )
        pair = calibration_pair(roster, rng) if calibration else None
        side_a, side_b = pair or draw_pair(
            [roster_candidate(entry) for entry in roster],
            rng,
            kappa=settings.ARENA.match_kappa,
            epsilon=settings.ARENA.match_epsilon,
        )
        task = Task(
            team_id=team_id, submitter=user, instruction=text, start_url=url, minhash=minhash,
            # its board (battles.classify); coding battles have a board of their own
            category=CODING if repo is not None else categorize(text, start_url=url),
            kind=kind,
        )  # fmt: skip
        by_id = {e.agent_id: Entrant(e.agent_id, e.team_id, e.step_budget, e.wall_budget_s)
                 for e in roster}  # fmt: skip
        battle, runs = battle_rows(
            arena_id=locked.arena_id,
            task=task,
            side_a=by_id[side_a],
            side_b=by_id[side_b],
            redundancy_target=redundancy_draw(rng),
            is_calibration=pair is not None,
        )
        if repo is not None:
            admission_db.rows_insert(task)
            if upload is not None:
                upload.place()  # a later failure: the caller's discard removes it again
            RepoSource.objects.create(
                task=task,
                origin=repo.origin,
                url=repo.url,
                ref=repo.ref,
                judge_ref=repo.judge_ref,
                upload_path=repo.upload_path,
                upload_sha256=repo.upload_sha256,
                success_cmd=repo.success_cmd,
                test_cmd=repo.test_cmd,
                time_limit_s=repo.time_limit_s,
            )
            admission_db.battle_and_runs_insert(battle=battle, runs=runs)
        elif staged.files:
            # The files are stored under the task's id, between its INSERT and the
            # battle's; a later failure still undoes them (the caller discards them).
            admission_db.rows_insert(task)
            attachments_store(task=task, staged=staged)
            admission_db.battle_and_runs_insert(battle=battle, runs=runs)
        else:
            admission_db.task_battle_runs_insert(task=task, battle=battle, runs=runs)
        battle_id = battle.pk
        transaction.on_commit(lambda: battle_enqueue(battle_id))
    return battle

"""Conversations with both sides of a running battle (docs/conversations.md).

**Follow-ups.** While both lanes of a desktop battle run, its team may send a follow-up
message. ``follow_up_send`` numbers it (``seq``, from 1) under the battle's row lock,
so a battle's follow-ups commit in the order of their numbers. Each lane looks for new
ones at every step boundary, just before it builds the step's observation, and
receives every follow-up committed since its previous look, in order: that is "the
same point" for both sides — the first observation each lane builds after the
follow-up was committed. Each lane records the step index at which it received each
one (``FollowUpReceipt``) and chains what it received into ``Run.
conversation_digest`` (``battles.parity.conversation_digest``): both sides got the
same texts in the same order exactly when their digests are equal.

**ask_user.** An agent may call ``ask_user {question}``. The lane stores the question
(``Question``), waits for the team's answer for that side only (at most
``ASK_TIMEOUT_S``, never past the lane's wall budget, beating meanwhile), and returns
it as the tool's result (``stdout`` and ``data.answer``), or a failed result "no
answer". The call is a step like any other: it counts against the step budget and is
stored with its question (arguments) and answer (stdout), where the leak scan and the
judges read it.

Writes by the lane go through ``fenced``: a lane that lost its run to a re-queue writes
nothing, and the next attempt starts its conversation afresh (``lane_conversation``)."""

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents.policies import FollowUp as FollowUpMessage
from arena_site.exceptions import ApplicationError
from battles.models import Battle, FollowUp, FollowUpReceipt, Question, Run, Task
from battles.parity import LaneInputs, conversation_digest
from battles.presenters import Redactor
from battles.selectors import team_ids_of
from battles.services.lane_fence import fenced
from battles.services.live import battle_publish
from sandboxes.base import ToolError, ToolResult
from sandboxes.tools import ASK_USER, check_ask_user
from sandboxes.untrusted import storable_text

FOLLOW_UP_MAX_CHARS = 2000
ANSWER_MAX_CHARS = 2000
FOLLOW_UPS_PER_BATTLE = 20
FOLLOW_UP_INTERVAL_S = 2.0  # between two follow-ups of one battle
ASK_TIMEOUT_S = 120.0
ASK_MARGIN_S = 2.0  # the wait leaves the lane this much of its wall budget
ASK_POLL_S = 0.2
ASK_BEAT_S = 5.0

_ALLOWED_CONTROLS = frozenset("\t\n\r")


# -- the team's side: send a follow-up, answer a question ------------------------------


def _team_battle(user: AbstractBaseUser, battle_id: int) -> Battle:
    """The battle under its row lock, if it is one of the user's teams' (404 otherwise:
    a judge who was served it, or another team, may read it but never talk to it)."""
    battle = (
        Battle.objects.select_for_update(of=("self",))
        .select_related("task")
        .filter(pk=battle_id, team_id__in=team_ids_of(user))
        .first()
    )
    if battle is None:
        raise ApplicationError("No such battle.", code="not_found", status=404)
    return battle


def _clean_text(text: Any, *, limit: int, what: str) -> str:
    if not isinstance(text, str):
        raise ApplicationError(f"The {what} must be text.", code=f"invalid_{what}")
    text = text.strip()
    if not text:
        raise ApplicationError(f"The {what} is empty: write something.", code=f"empty_{what}")
    if len(text) > limit:
        raise ApplicationError(
            f"The {what} is {len(text)} characters long; at most {limit} are allowed.",
            code=f"{what}_too_long",
            status=413,
        )
    if any(ord(c) < 32 and c not in _ALLOWED_CONTROLS for c in text) or "\x7f" in text:
        raise ApplicationError(
            f"The {what} holds control characters; only tab and newline are allowed.",
            code=f"invalid_{what}",
        )
    return text


def _sides_open(battle: Battle, runs: list[Run]) -> None:
    """Raises, in words, unless both lanes are running and neither was asked to stop."""
    if battle.task.kind == Task.Kind.REPO:
        raise ApplicationError(
            "Follow-ups reach desktop battles only; a coding battle runs to its tests.",
            code="follow_ups_not_offered",
            status=409,
        )
    if battle.status == Battle.Status.QUEUED or any(r.status == Run.Status.PENDING for r in runs):
        raise ApplicationError(
            "The agents have not started yet: send the follow-up once both sides run.",
            code="lanes_not_started",
            status=409,
        )
    for run in runs:
        if run.status == Run.Status.ENDED or run.end_requested_at is not None:
            raise ApplicationError(
                f"Side {run.side} has ended, so a follow-up could not reach both sides "
                "alike; nothing was sent.",
                code="lanes_ended",
                status=409,
            )


@transaction.atomic
def follow_up_send(*, user: AbstractBaseUser, battle_id: int, text: Any) -> FollowUp:
    """Sends ``text`` to both sides of the user's team's battle while both run. Bounded
    (``FOLLOW_UP_MAX_CHARS``), rate-limited (``FOLLOW_UPS_PER_BATTLE`` per battle, one
    per ``FOLLOW_UP_INTERVAL_S``). Locks the battle's row: numbers are handed out in
    commit order."""
    text = _clean_text(text, limit=FOLLOW_UP_MAX_CHARS, what="follow_up")
    battle = _team_battle(user, battle_id)
    runs = list(battle.runs.order_by("side"))
    _sides_open(battle, runs)
    sent = list(battle.follow_ups.order_by("-seq").values_list("seq", "created_at")[:1])
    last_seq, last_at = sent[0] if sent else (0, None)
    if last_seq >= FOLLOW_UPS_PER_BATTLE:
        raise ApplicationError(
            f"A battle takes at most {FOLLOW_UPS_PER_BATTLE} follow-ups; this one has them all.",
            code="follow_ups_exhausted",
            status=429,
        )
    if last_at is not None:
        wait = FOLLOW_UP_INTERVAL_S - (timezone.now() - last_at).total_seconds()
        if wait > 0:
            raise ApplicationError(
                f"One follow-up at a time: send the next in {wait:.1f} s.",
                code="follow_up_too_soon",
                status=429,
                headers={"Retry-After": str(max(1, round(wait)))},
            )
    follow_up = FollowUp.objects.create(
        battle=battle, team_id=battle.team_id, author=user, seq=last_seq + 1, text=text
    )
    battle_publish(battle_id=battle.pk)
    return follow_up


@transaction.atomic
def question_answer(
    *, user: AbstractBaseUser, battle_id: int, question_id: int, text: Any
) -> Question:
    """The team answers a side's pending question: the answer reaches that side's lane
    only (the question belongs to one run). A question no longer waiting (answered,
    past its deadline, its lane ended) is refused in words."""
    text = _clean_text(text, limit=ANSWER_MAX_CHARS, what="answer")
    battle = _team_battle(user, battle_id)
    question = (
        Question.objects.select_for_update(of=("self",))
        .select_related("run")
        .filter(pk=question_id, battle=battle)
        .first()
    )
    if question is None:
        raise ApplicationError("No such question.", code="not_found", status=404)
    side = question.run.side
    if question.status == Question.Status.ANSWERED:
        raise ApplicationError(
            f"Side {side}'s question was already answered.", code="already_answered", status=409
        )
    if (
        question.status != Question.Status.PENDING
        or question.deadline_at <= timezone.now()
        or question.run.status == Run.Status.ENDED
    ):
        raise ApplicationError(
            f"Side {side} stopped waiting for an answer and carried on without one.",
            code="question_closed",
            status=409,
        )
    question.status = Question.Status.ANSWERED
    question.answer = text
    question.answered_by = user
    question.answered_at = timezone.now()
    question.save(update_fields=["status", "answer", "answered_by", "answered_at"])
    battle_publish(battle_id=battle.pk)
    return question


# -- the lane's side -------------------------------------------------------------------


def offered_tools(run: Run, inputs: LaneInputs) -> tuple[str, ...]:
    """The tools a lane offers its agent: the battle's, plus ``ask_user`` on a battle's
    desktop lanes (both sides alike; not test drives, evaluations or repo tasks)."""
    if run.battle_id is None or inputs.repo is not None or ASK_USER in inputs.tools:
        return inputs.tools
    return (*inputs.tools, ASK_USER)


class LaneConversation:
    """One battle lane's part of the conversation; lives in the lane's thread."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.last_seq = 0
        self.digest = ""

    def receive(self, *, step: int) -> tuple[FollowUpMessage, ...]:
        """The follow-ups committed since this lane last looked, recorded as received at
        ``step`` (whose observation carries them). One indexed read when there are none."""
        pending = FollowUp.objects.filter(battle_id=self.run.battle_id, seq__gt=self.last_seq)
        if not pending.exists():
            return ()
        with fenced(self.run):
            new = list(pending.order_by("seq"))
            digest = self.digest
            for follow_up in new:
                digest = conversation_digest(digest, follow_up.seq, follow_up.text)
            FollowUpReceipt.objects.bulk_create(
                FollowUpReceipt(run=self.run, follow_up=f, step_index=step) for f in new
            )
            Run.objects.filter(pk=self.run.pk).update(conversation_digest=digest)
        self.last_seq, self.digest = new[-1].seq, digest
        return tuple(FollowUpMessage(f.seq, f.text) for f in new)

    def ask(
        self,
        *,
        step: int,
        args: Any,
        seconds_left: float,
        beat: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> ToolResult:
        """Asks the team the agent's question and waits for the answer (``beat`` keeps
        the lane alive meanwhile; it raises when the lane lost its run)."""
        try:
            question = check_ask_user(args)
        except ToolError as exc:
            return ToolResult(ok=False, tool=ASK_USER, error=str(exc))
        wait_s = max(0.0, min(ASK_TIMEOUT_S, seconds_left - ASK_MARGIN_S))
        with fenced(self.run):
            row = Question.objects.create(
                run=self.run,
                battle_id=self.run.battle_id,
                team_id=Battle.objects.values_list("team_id", flat=True).get(pk=self.run.battle_id),
                step_index=step,
                text=storable_text(question)[0],
                deadline_at=timezone.now() + timedelta(seconds=wait_s),
            )
            battle_publish(battle_id=self.run.battle_id)
        deadline = clock() + wait_s
        next_beat = clock() + ASK_BEAT_S
        asked = Question.objects.filter(pk=row.pk)
        while clock() < deadline:
            if asked.filter(status=Question.Status.ANSWERED).exists():
                break
            if Run.objects.filter(pk=self.run.pk).exclude(end_requested_at=None).exists():
                break
            if clock() >= next_beat:
                beat()
                next_beat = clock() + ASK_BEAT_S
            sleep(ASK_POLL_S)
        # Closed in one conditional statement: an answer that lands meanwhile is kept.
        asked.filter(status=Question.Status.PENDING).update(status=Question.Status.UNANSWERED)
        answer = asked.filter(status=Question.Status.ANSWERED).values_list("answer", flat=True)
        if answer:
            return ToolResult(ok=True, tool=ASK_USER, stdout=answer[0], data={"answer": answer[0]})
        return ToolResult(
            ok=False,
            tool=ASK_USER,
            error=f"no answer within {wait_s:.0f} s; carry on without one",
        )


def lane_conversation(run: Run, inputs: LaneInputs) -> LaneConversation | None:
    """The conversation of a battle's desktop lane (None for other lanes), started
    afresh: what an earlier attempt of the run received or asked is forgotten, and the
    follow-ups sent so far reach this attempt at its first step."""
    if run.battle_id is None or inputs.repo is not None:
        return None
    with fenced(run):
        FollowUpReceipt.objects.filter(run=run).delete()
        Question.objects.filter(run=run).delete()
        Run.objects.filter(pk=run.pk).update(conversation_digest="")
    return LaneConversation(run)


# -- reads for the team's page and the API ---------------------------------------------


def battle_conversation(battle: Battle) -> dict[str, Any]:
    """The battle's conversation as its team sees it: every follow-up with the step at
    which each side received it, every question (redacted, as the blind live panel is)
    with its side, status and answer,
    whether a follow-up can be sent now, and the parity of what the sides received."""
    runs = {run.side: run for run in battle.runs.all()}
    receipts: dict[int, dict[str, int]] = {}
    for seq, side, step in FollowUpReceipt.objects.filter(run__battle=battle).values_list(
        "follow_up__seq", "run__side", "step_index"
    ):
        receipts.setdefault(seq, {})[side] = step
    follow_ups = [
        {
            "seq": f.seq,
            "text": f.text,
            "sent_at": f.created_at,
            "received_at_step": {side: receipts.get(f.seq, {}).get(side) for side in "AB"},
        }
        for f in battle.follow_ups.order_by("seq")
    ]
    now = timezone.now()
    # The question is the agent's text: blind as the live panel is (battles.presenters).
    redactor = Redactor.for_roster()
    questions = []
    for q in Question.objects.filter(battle=battle).select_related("run").order_by("asked_at"):
        waiting = (
            q.status == Question.Status.PENDING
            and q.deadline_at > now
            and q.run.status == Run.Status.RUNNING
        )
        questions.append(
            {
                "id": q.pk,
                "side": q.run.side,
                "step": q.step_index,
                "question": redactor.text(q.text),
                "status": "pending" if waiting else q.status,
                "answer": q.answer,
                "seconds_left": max(0, int((q.deadline_at - now).total_seconds()))
                if waiting
                else None,
            }
        )
    try:
        _sides_open(battle, [runs[s] for s in "AB" if s in runs])
        open_reason = ""
    except ApplicationError as closed:
        open_reason = closed.message
    digests = [runs[s].conversation_digest for s in "AB" if s in runs]
    return {
        "follow_ups": follow_ups,
        "questions": questions,
        "can_send": not open_reason and len(follow_ups) < FOLLOW_UPS_PER_BATTLE,
        "closed_reason": open_reason,
        "max_chars": FOLLOW_UP_MAX_CHARS,
        "answer_max_chars": ANSWER_MAX_CHARS,
        "digests": {s: runs[s].conversation_digest for s in "AB" if s in runs},
        "same_on_both_sides": len(digests) == 2 and digests[0] == digests[1],
    }

"""Human entrants (docs/human-baseline.md): a person, one of the team's baseline
operators, drives a lane from the operator page through the same fixed tool set as
any agent. ``HumanPolicy`` is that lane's policy: it shows each observation to the
page (``HumanLane``) and waits for the operator's next action (``HumanAction``), which
it consumes exactly once. The lane records every step as it records an agent's.

The services below are the page's writes: going on and off duty, taking a lane,
submitting an action. Each checks that the person operates the lane's agent; anyone
else gets the same answer as for a lane that does not exist."""

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Agent, BaselineOperator, HumanAction, HumanLane
from agents.policies import Action, GiveUp, Observation
from agents.services import AgentFailure
from arena_site.exceptions import ApplicationError
from sandboxes.tools import TOOL_SCHEMAS

# How long an operator has to take a lane once it starts (the agent's params may set
# "take_s"); untaken, the lane ends as the entrant's failure (docs/human-baseline.md).
TAKE_S = 60.0
# An operator on duty whose page has not asked for news for this long is away: the
# matchmaker does not draw their entrant (the page polls every few seconds).
PRESENCE_S = 30.0
# How often a waiting policy looks for the operator's action, and beats for its lane.
POLL_S = 0.25
KEEPALIVE_S = 5.0
# The operator's "give up": not a tool, the policy's other answer (agents.policies.GiveUp).
GIVE_UP = "give_up"


class OperatorAbsent(AgentFailure):
    """Nobody took the lane within its bound: the entrant's failure, like an agent's
    endpoint that never answers (the battle's task runs again with a fresh pair)."""


class HumanPolicy:
    """The policy of a human entrant's lane. ``keepalive`` is set by the lane
    (battles.services.lanes) to its heartbeat: called every ``KEEPALIVE_S`` while the
    policy waits for the operator, so the battle janitor never takes a waiting lane
    for a dead one (it also raises when the lane was taken over: that ends the wait)."""

    def __init__(self, *, agent: Agent, run_id: int, tools: tuple[str, ...], take_s: float):
        self.keepalive: Callable[[], None] | None = None
        self.take_s = take_s
        self.messages: list[dict[str, Any]] = []
        # A battle offered the lane before its lanes started (``human_lane_offer``): the
        # operator may have taken it already. Otherwise the lane is offered now.
        offered = HumanLane.objects.filter(run_id=run_id, agent=agent, ended_at=None).first()
        if offered is not None:
            HumanLane.objects.filter(pk=offered.pk).update(tools=list(tools))
            offered.tools = list(tools)
            self.lane = offered
        else:
            self.lane = human_lane_offer(
                run_id=run_id, agent=agent, instruction="", tools=tools, take_s=take_s
            )

    def next_action(self, observation: Observation) -> Action | GiveUp:
        now = timezone.now()
        wall_deadline = time.monotonic() + observation.seconds_left
        if observation.messages:  # follow-ups reach the operator as they reach an agent
            self.messages += [{"seq": m.seq, "text": m.text} for m in observation.messages]
        HumanLane.objects.filter(pk=self.lane.pk).update(
            messages=self.messages,
            instruction=observation.instruction,
            step=observation.step,
            steps_left=observation.steps_left,
            deadline_at=now + timedelta(seconds=observation.seconds_left),
            screenshot=observation.screenshot_png,
            last_result=_plain_result(observation.last_result),
            page=_page_summary(observation.page),
        )
        beat = time.monotonic()
        while True:
            action = human_action_take(lane_id=self.lane.pk)
            if action is not None:
                return action
            moment = time.monotonic()
            if moment >= wall_deadline:
                # The operator went idle: the lane ends on its wall budget, as an
                # agent's that has not answered in time (the lane stops at its next
                # check; this look at the screen is the step it still takes).
                return Action("screenshot")
            if not self._taken() and timezone.now() >= self.lane.take_by:
                # Whoever was on duty is away: not drawn again until back on duty.
                BaselineOperator.objects.filter(agent_id=self.lane.agent_id).update(
                    on_duty_since=None
                )
                raise OperatorAbsent(
                    f"no operator took the lane within {self.take_s:.0f} s of its start"
                )
            if self.keepalive is not None and moment - beat >= KEEPALIVE_S:
                self.keepalive()
                beat = moment
            time.sleep(POLL_S)

    def _taken(self) -> bool:
        if self.lane.taken_at is None:
            self.lane.refresh_from_db(fields=["taken_at"])
        return self.lane.taken_at is not None

    def close(self, reason: str) -> None:
        """The lane ended (battles.services.lanes): the page stops offering it, and an
        action still waiting is never taken."""
        HumanLane.objects.filter(pk=self.lane.pk).update(ended_at=timezone.now())
        HumanAction.objects.filter(lane_id=self.lane.pk, consumed_at=None).delete()


def take_s_of(agent: Agent) -> float:
    """How long the entrant's operators have to take a lane: ``params["take_s"]``, or
    ``TAKE_S`` when it is missing or not a positive number."""
    take_s = (agent.params or {}).get("take_s", TAKE_S)
    if isinstance(take_s, bool) or not isinstance(take_s, int | float) or take_s <= 0:
        return TAKE_S
    return float(take_s)


@transaction.atomic
def human_lane_offer(
    *, run_id: int, agent: Agent, instruction: str, tools: tuple[str, ...], take_s: float
) -> HumanLane:
    """Offers a run's lane to the entrant's operators (the operator page lists it with
    "Take the lane"), to be taken within ``take_s``. A re-queued attempt offers it
    again: nothing of the last attempt's lane waits."""
    HumanLane.objects.filter(run_id=run_id).delete()
    now = timezone.now()
    take_by = now + timedelta(seconds=take_s)
    return HumanLane.objects.create(
        run_id=run_id, agent=agent, instruction=instruction, tools=list(tools),
        deadline_at=take_by, started_at=now, take_by=take_by,
    )  # fmt: skip


def human_lane_taken(*, lane_id: int) -> bool:
    return HumanLane.objects.filter(pk=lane_id).exclude(taken_at=None).exists()


@transaction.atomic
def human_lane_withdraw(*, lane_id: int) -> bool:
    """Nobody took the offered lane in time: it ends (the page stops offering it) and
    the entrant's operators go off duty (not drawn again until back). False when an
    operator took it meanwhile: it stays theirs."""
    withdrawn = HumanLane.objects.filter(pk=lane_id, taken_at=None, ended_at=None).update(
        ended_at=timezone.now()
    )
    if withdrawn:
        agent_id = HumanLane.objects.get(pk=lane_id).agent_id
        BaselineOperator.objects.filter(agent_id=agent_id).update(on_duty_since=None)
    return bool(withdrawn)


def _plain_result(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The last result as the page shows it: no image bytes (the screen is kept apart)."""
    if result is None:
        return None
    return {k: v for k, v in result.items() if k not in ("image", "image_png", "page")}


def _page_summary(page: dict[str, Any] | None) -> dict[str, Any] | None:
    """The page's url, title and the elements on the screen (bounded already by
    ``sandboxes.pagetext``): what the operator page offers to click."""
    if not page:
        return None
    elements = [
        {k: e[k] for k in ("name", "role", "x", "y") if k in e}
        for e in page.get("elements", [])
        if "x" in e and e.get("role") != "generic"
    ]
    return {"url": page.get("url", ""), "title": page.get("title", ""), "elements": elements}


def human_action_take(*, lane_id: int) -> Action | GiveUp | None:
    """Consumes the lane's waiting action, if any, exactly once: a conditional UPDATE of
    its ``consumed_at`` whose row count is checked, so two readers never both take it."""
    waiting = HumanAction.objects.filter(lane_id=lane_id, consumed_at=None).first()
    if waiting is None:
        return None
    taken = HumanAction.objects.filter(pk=waiting.pk, consumed_at=None).update(
        consumed_at=timezone.now()
    )
    if not taken:
        return None
    if waiting.tool == GIVE_UP:
        return GiveUp(str(waiting.args.get("message", "")))
    return Action(waiting.tool, waiting.args)


# --- the operator page's writes -----------------------------------------------------------


def _not_found() -> ApplicationError:
    return ApplicationError("No such lane.", code="not_found", status=404)


def operator_check(*, agent: Agent, user: AbstractBaseUser) -> None:
    """Who may operate ``agent``: it is a human entrant, entered by a team, and the
    person is a member of that team. Raises ``ApplicationError`` saying what is wrong."""
    from accounts.models import Membership

    if agent.kind != Agent.Kind.HUMAN:
        raise ApplicationError("Only a human entrant (kind human) has operators.", code="not_human")
    if (
        agent.team_id is None
        or not Membership.objects.filter(team_id=agent.team_id, user_id=user.pk).exists()
    ):
        raise ApplicationError(
            "An operator is a member of the team that entered the human entrant.",
            code="not_a_member",
        )


def operator_duty_set(*, user: AbstractBaseUser, on: bool) -> list[BaselineOperator]:
    """Puts the person on or off duty for every human entrant they operate. Refuses
    (403) someone who is no baseline operator."""
    operators = list(BaselineOperator.objects.filter(user_id=user.pk))
    if not operators:
        raise ApplicationError(
            "You are not a baseline operator: an admin marks team members as operators "
            "of their team's human entrant.",
            code="not_an_operator",
            status=403,
        )
    now = timezone.now()
    BaselineOperator.objects.filter(user_id=user.pk).update(
        on_duty_since=now if on else None, seen_at=now
    )
    return operators


def operator_seen(*, user: AbstractBaseUser) -> None:
    """The operator page asked for news: its person is present."""
    BaselineOperator.objects.filter(user_id=user.pk).update(seen_at=timezone.now())


def lane_for_operator(*, user: AbstractBaseUser, run_id: int) -> tuple[HumanLane, BaselineOperator]:
    """The lane of ``run_id`` and the person's operator row for its agent; 404 for a lane
    that is not theirs to drive (another team's, or taken by another operator)."""
    lane = HumanLane.objects.filter(run_id=run_id).first()
    if lane is None:
        raise _not_found()
    operator = BaselineOperator.objects.filter(user_id=user.pk, agent_id=lane.agent_id).first()
    if operator is None or (lane.operator_id not in (None, operator.pk)):
        raise _not_found()
    return lane, operator


def human_lane_take(*, user: AbstractBaseUser, run_id: int) -> HumanLane:
    """The operator takes the lane (a conditional UPDATE: of two operators, one wins).
    409 when it has ended or another took it first."""
    lane, operator = lane_for_operator(user=user, run_id=run_id)
    if lane.ended_at is not None:
        raise ApplicationError("This lane has ended.", code="lane_ended", status=409)
    if lane.operator_id == operator.pk:
        return lane
    taken = HumanLane.objects.filter(pk=lane.pk, operator=None, ended_at=None).update(
        operator=operator, taken_at=timezone.now()
    )
    if not taken:
        raise ApplicationError("Another operator took this lane.", code="lane_taken", status=409)
    lane.refresh_from_db()
    return lane


def human_action_check(*, tool: str, args: object, offered: list[str]) -> dict:
    """The action as the page sent it, checked as far as the page can: a tool of the
    fixed set that this lane offers (or give up), arguments an object. The arguments
    themselves are checked by the tool's schema when the lane calls it, exactly as an
    agent's (a bad one is a step with its error)."""
    if tool != GIVE_UP and tool not in TOOL_SCHEMAS:
        raise ApplicationError(
            f"{tool!r} is not a tool of the arena's fixed set: one of "
            f"{', '.join([*offered, GIVE_UP])}.",
            code="unknown_tool",
        )
    if tool != GIVE_UP and tool not in offered:
        raise ApplicationError(
            f"{tool} is not offered in this battle: one of {', '.join([*offered, GIVE_UP])}.",
            code="tool_not_offered",
        )
    if not isinstance(args, dict):
        raise ApplicationError("The action's arguments must be an object.", code="invalid_args")
    return args


def human_action_submit(
    *, user: AbstractBaseUser, run_id: int, tool: str, args: object
) -> HumanAction:
    """Queues the operator's next action for the lane they took. 409 when the lane has
    ended, is not taken by them, or an earlier action still waits for the lane."""
    lane, operator = lane_for_operator(user=user, run_id=run_id)
    if lane.operator_id != operator.pk:
        raise ApplicationError("Take the lane first.", code="lane_not_taken", status=409)
    if lane.ended_at is not None:
        raise ApplicationError("This lane has ended.", code="lane_ended", status=409)
    checked = human_action_check(tool=tool, args=args, offered=list(lane.tools))
    try:
        with transaction.atomic():
            return HumanAction.objects.create(
                lane=lane, operator=operator, step=lane.step, tool=tool, args=checked
            )
    except IntegrityError as exc:  # human_action_one_waiting
        raise ApplicationError(
            "Your previous action has not been taken yet; wait for the screen to change.",
            code="action_waiting",
            status=409,
        ) from exc


def operators_ready(*, agent_ids: list[int]) -> set[int]:
    """Of ``agent_ids`` (human entrants), those with an operator on duty, seen within
    ``PRESENCE_S`` and not in a lane that has not ended: the ones a draw may take."""
    seen_since = timezone.now() - timedelta(seconds=PRESENCE_S)
    ready = set(
        BaselineOperator.objects.filter(
            agent_id__in=agent_ids, on_duty_since__isnull=False, seen_at__gte=seen_since
        ).values_list("agent_id", flat=True)
    )
    busy = set(
        HumanLane.objects.live().filter(agent_id__in=ready).values_list("agent_id", flat=True)
    )
    return ready - busy

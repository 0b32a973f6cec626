"""The operator page (/operate/, docs/human-baseline.md): a baseline operator goes on
and off duty, and drives the lane their human entrant was drawn into through the fixed
tool set. The page works without script: each action is a form POST answered by a
redirect back to the page; a click is an image input on the screen (the browser sends
the pixel clicked); htmx refreshes the lane's panel every two seconds, which also tells
the matchmaker the operator is present. A lane that is not the person's to drive is a
404, like a missing one."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.human import (
    GIVE_UP,
    human_action_submit,
    human_lane_take,
    lane_for_operator,
    operator_duty_set,
    operator_seen,
)
from agents.models import BaselineOperator, HumanLane
from arena_site.exceptions import ApplicationError

# The form's fields for each tool, in order (all text: converted below).
TOOL_FIELDS = {
    "click": ("x", "y", "button", "count"),
    "mouse_move": ("x", "y"),
    "drag": ("x1", "y1", "x2", "y2"),
    "scroll": ("x", "y", "dx", "dy"),
    "type": ("text",),
    "key": ("combo",),
    "navigate": ("url",),
    "shell": ("command",),
    "deliver": ("message", "files"),
    "screenshot": (),
    "ask_user": ("question",),
    GIVE_UP: ("message",),
}
INTEGER_FIELDS = {"x", "y", "x1", "y1", "x2", "y2", "dx", "dy", "count"}


def _refused(request: HttpRequest, exc: ApplicationError) -> HttpResponse:
    context = {"refusal": exc.message, **_context(request)}
    return render(request, "agents/operate.html", context, status=exc.status)


def _lane_of(request: HttpRequest, operators: list[BaselineOperator]) -> HumanLane | None:
    """The lane the person may drive now: one of their agents', not ended, untaken or
    taken by them (the oldest first)."""
    mine = [o.pk for o in operators]
    lanes = (
        HumanLane.objects.live()
        .filter(agent_id__in=[o.agent_id for o in operators])
        .order_by("started_at", "pk")
    )
    for lane in lanes:
        if lane.operator_id is None or lane.operator_id in mine:
            return lane
    return None


def _context(request: HttpRequest) -> dict:
    mine = BaselineOperator.objects.filter(user_id=request.user.pk).select_related("agent")
    operators = list(mine)
    lane = _lane_of(request, operators) if operators else None
    context: dict = {
        "operators": operators,
        "on_duty": any(o.on_duty_since for o in operators),
        "lane": lane,
    }
    if lane is not None:
        context.update(
            taken=lane.operator_id is not None,
            seconds_left=max(0, int((lane.deadline_at - timezone.now()).total_seconds())),
            take_left=max(0, int((lane.take_by - timezone.now()).total_seconds())),
            tools=[t for t in TOOL_FIELDS if t in lane.tools or t == GIVE_UP],
            result=lane.last_result or {},
            # the live desktop widget (templates/battles/_live_desktop.html)
            live_lanes=[{"pk": lane.run_id, "side": "yours"}],
            live_socket=f"/ws/operate/lanes/{lane.run_id}/live/",
            # (the widget also reads a battle's runs, whatever it is given: none here)
            no_battle={"status": "", "task": {"kind": ""}, "runs": {"all": []}},
        )
    return context


@login_required
@require_GET
def operate_page(request: HttpRequest) -> HttpResponse:
    operator_seen(user=request.user)
    context = _context(request)
    status = 200 if context["operators"] else 403
    return render(request, "agents/operate.html", context, status=status)


@login_required
@require_GET
def operate_panel(request: HttpRequest) -> HttpResponse:
    """The lane's panel, polled by the page (the operator's presence)."""
    operator_seen(user=request.user)
    return render(request, "agents/_operate_lane.html", _context(request))


@login_required
@require_POST
def operate_duty(request: HttpRequest) -> HttpResponse:
    try:
        operator_duty_set(user=request.user, on=request.POST.get("on") == "1")
    except ApplicationError as exc:
        return _refused(request, exc)
    return redirect("operate")


@login_required
@require_GET
def operate_screen(request: HttpRequest, run_id: int) -> HttpResponse:
    """The lane's current screen (the observation the policy waits on)."""
    try:
        lane, _ = lane_for_operator(user=request.user, run_id=run_id)
    except ApplicationError as exc:
        return HttpResponse(exc.message, status=exc.status, content_type="text/plain")
    if not lane.screenshot:
        return HttpResponse("No screen yet.", status=404, content_type="text/plain")
    response = HttpResponse(bytes(lane.screenshot), content_type="image/png")
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def operate_take(request: HttpRequest, run_id: int) -> HttpResponse:
    try:
        human_lane_take(user=request.user, run_id=run_id)
    except ApplicationError as exc:
        return _refused(request, exc)
    return redirect("operate")


def action_from_form(data: QueryDict) -> tuple[str, dict]:
    """The tool and its arguments from the page's form: the fields of that tool, empty
    ones left out, numbers as integers (a click on the screen sends ``at.x``/``at.y``).
    Raises ``ApplicationError`` for a field that should be a number and is not."""
    tool = data.get("tool", "")
    args: dict = {}
    for name in TOOL_FIELDS.get(tool, ()):
        value = data.get(name, data.get(f"at.{name}", "") if name in ("x", "y") else "")
        if value == "":
            continue
        if name in INTEGER_FIELDS:
            try:
                args[name] = int(value)
            except ValueError as exc:
                raise ApplicationError(
                    f"{name} must be a whole number of pixels or notches, not {value!r}.",
                    code="invalid_args",
                ) from exc
        elif name == "files":
            args[name] = [f.strip() for f in value.split(",") if f.strip()]
        else:
            args[name] = value
    return tool, args


@login_required
@require_POST
def operate_act(request: HttpRequest, run_id: int) -> HttpResponse:
    try:
        tool, args = action_from_form(request.POST)
        human_action_submit(user=request.user, run_id=run_id, tool=tool, args=args)
    except ApplicationError as exc:
        return _refused(request, exc)
    return redirect("operate")

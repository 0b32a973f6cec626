"""The judge page (both sides blind, side by side, as replays), the vote, its undo
window and then its status (with the reveal once the battle is decided), the reasons a
judge gives with a vote, the blind screenshot and file routes, the staff judging-quality
page, and the agent page's "What judges said" block."""

from pathlib import PurePosixPath
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.views import consent_required, consent_required_or_token
from agents.models import Arena
from arena_site.exceptions import ApplicationError
from battles.coding_presenters import coding_sides
from battles.media import delivery_name
from battles.models import Battle
from battles.presenters import Redactor, battle_payload, battle_reveal, blind_file_name
from battles.selectors import access_battle
from battles.serving import private_download
from battles.views import screenshot_response
from judging.machine_board import machine_board_document
from judging.machine_reads import battle_machine_verdicts, machine_agreement, machine_verdict_counts
from judging.models import Assignment, Vote
from judging.presenters import replay_sides
from judging.reason_selectors import (
    agent_reason_counts,
    arena_reason_counts,
    judge_vote_reasons,
    taxonomy,
)
from judging.selectors import judging_quality, landing_url
from judging.services import judge_next, reading_time_s, vote_cast, vote_status, vote_undo
from judging.services.reasons import battle_for_reasons, vote_reasons_set
from judging.services.trust import probation_applies
from ratings.selectors import NoSuchBoard, agent_public, board_arena

SIDES = ("A", "B")
# The agent page shows the judges' tags from this many counted tag sets on.
REASONS_SHOWN_FROM = 1
# Keys per choice, in Vote.Choice order: the letter shown on the button, then a digit.
VOTE_KEYS = {"A": ("a", "1"), "B": ("b", "2"), "tie": ("t", "3"), "both_bad": ("x", "4"),
             "abstain": ("s", "0")}  # fmt: skip


def _error(request: HttpRequest, exc: ApplicationError, template: str, context: dict):
    response = render(request, template, {**context, "error": exc}, status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    return response


@consent_required
@require_GET
def judge_page(request: HttpRequest) -> HttpResponse:
    try:
        battle = judge_next(judge=request.user)
    except ApplicationError as exc:  # the per-judge rate limit, approval
        return _error(request, exc, "judging/judge.html", {"battle": None})
    context = {"battle": battle}
    if battle is not None:
        served_at = Assignment.objects.get(judge=request.user, battle=battle).served_at
        min_read = reading_time_s(battle)
        elapsed = (timezone.now() - served_at).total_seconds()
        payload = battle_payload(battle, reveal=False)
        coding = coding_sides(battle, Redactor.for_roster())
        sides = replay_sides(payload)
        for side in sides if coding else []:
            side["blank_only"] = False  # a coding agent has no browser to leave blank
        context.update(
            payload=payload,
            coding=coding,
            sides=sides,
            min_read_s=min_read,
            read_left_s=max(0.0, min_read - elapsed),
            choices=[(value, label, *VOTE_KEYS[value]) for value, label in Vote.Choice.choices],
        )
    return render(request, "judging/judge.html", context)


@login_required
@require_GET
def landing(request: HttpRequest) -> HttpResponse:
    """After log-in (settings.LOGIN_REDIRECT_URL) and consent, when no page was asked for:
    judges land on the judge page, submitters on the submit page, a new entrant on its
    agents (``judging.selectors.landing_url``)."""
    return redirect(landing_url(request.user))


def _status_response(request: HttpRequest, battle_id: int, status: int = 200) -> HttpResponse:
    state = vote_status(judge=request.user, battle_id=battle_id)
    vote = state.vote
    left = (vote.final_at - timezone.now()).total_seconds()
    context = {
        "state": state,
        "vote": vote,
        "reveal": battle_reveal(vote.battle) if state.reveal else None,
        # None while the battle is open (battle_machine_verdicts gates on its status too)
        "machine_verdicts": battle_machine_verdicts(vote.battle) if state.reveal else None,
        "undo_left_s": max(0, int(left + 0.999)),
        "poll_s": max(1, int(left + 1)) if not state.final else 10,
        "min_read_s": reading_time_s(vote.battle),
    }
    return render(request, "judging/_vote_status.html", context, status=status)


@consent_required
@require_POST
def vote(request: HttpRequest, battle_id: int) -> HttpResponse:
    try:
        vote_cast(judge=request.user, battle_id=battle_id, choice=request.POST.get("choice", ""))
    except ApplicationError as exc:
        return _error(request, exc, "judging/_vote_error.html", {})
    return _status_response(request, battle_id, status=201)


@consent_required
@require_GET
def vote_state(request: HttpRequest, battle_id: int) -> HttpResponse:
    """The judge's vote as it stands now: asked for when its undo window ends, then
    every few seconds while the battle waits for other judges."""
    try:
        return _status_response(request, battle_id)
    except ApplicationError as exc:
        return _error(request, exc, "judging/_vote_error.html", {})


@consent_required
@require_POST
def undo(request: HttpRequest, battle_id: int) -> HttpResponse:
    """Takes back the judge's vote inside its window; the page reloads with the battle
    (still theirs, the reading time still running from when it was served)."""
    try:
        vote_undo(judge=request.user, battle_id=battle_id)
    except ApplicationError as exc:
        return _error(request, exc, "judging/_vote_error.html", {})
    response = HttpResponse(status=204)
    response["HX-Refresh"] = "true"
    return response


def _blind_side(request: HttpRequest, battle_id: int, side: str) -> Battle:
    """The battle behind a blind URL, for those who may see it (its team, judges it was
    served to, staff); 404 for anyone else and for a side that is not A or B."""
    if side not in SIDES:
        raise Http404("No such side.")
    return access_battle(request.user, battle_id)


@consent_required_or_token
@require_GET
def step_screenshot(request: HttpRequest, battle_id: int, side: str, index: int) -> HttpResponse:
    """A step's screenshot at a URL that names the battle, the side and the step only."""
    return screenshot_response(_blind_side(request, battle_id, side), side, index)


@consent_required_or_token
@require_GET
def delivered_file(request: HttpRequest, battle_id: int, side: str, index: int) -> HttpResponse:
    """The side's ``index``-th delivered file (0-based), downloaded under the name the
    blind payload shows (a name that would reveal the agent is replaced)."""
    battle = _blind_side(request, battle_id, side)
    run = battle.runs.filter(side=side).first()
    files = run.delivered_files if run is not None else []
    if not 0 <= index < len(files):
        raise Http404("No such file.")
    name = files[index].get("name", "")
    if not name or name != PurePosixPath(name).name or name in (".", ".."):
        raise Http404("No such file.")
    shown = blind_file_name(name, index, Redactor.for_roster())
    return private_download(delivery_name(run.pk, name), shown)


@login_required
@require_GET
def quality_page(request: HttpRequest) -> HttpResponse:
    """Staff only: agreement on the redundancy sample, each judge's record and standing,
    exclusions. Anyone else gets 404 (the page's existence is not advertised)."""
    if not request.user.is_staff:
        raise Http404("No such page.")
    arena = Arena.objects.public()
    context = judging_quality(arena)
    context.update(
        reason_table=arena_reason_counts(arena_id=arena.pk),
        taxonomy=taxonomy(),
        probation_applies=probation_applies(),
    )
    return render(request, "judging/quality.html", context)


@require_GET
def machine_board_page(request: HttpRequest) -> HttpResponse:
    """The "machine-judged" board of the public arena (``?judge_model=&method=`` picks
    one of its boards): public, like the leaderboard, and never mixed into it."""
    arena = Arena.objects.public()
    try:
        board = machine_board_document(
            arena, request.GET.get("judge_model"), request.GET.get("method"),
            request.GET.get("style"),
        )  # fmt: skip
    except ApplicationError as exc:
        return _error(request, exc, "judging/machine_board.html", {"arena": arena})
    order = {} if board["order"] == "plain" else {"style": board["order"]}  # kept by the links
    for choice in board["boards"]:
        choice["url"] = "?" + urlencode({"judge_model": choice["judge_model"],
                                         "method": choice["method"], **order})  # fmt: skip
        choice["current"] = (choice["judge_model"], choice["method"]) == (
            board["judge_model"], board["method"])  # fmt: skip
    return render(request, "judging/machine_board.html", {"arena": arena, "board": board})


@require_GET
def machine_agreement_page(request: HttpRequest) -> HttpResponse:
    """How often the machine judge agrees with the humans on decided battles: public
    figures (decided battles only), per judge model, method and task category."""
    arena = Arena.objects.public()
    context = {
        "arena": arena,
        **machine_agreement(arena_id=arena.pk),
        "counts": machine_verdict_counts(arena_id=arena.pk),
    }
    return render(request, "judging/machine_agreement.html", context)


def _reason_sides(sides: dict) -> list[dict]:
    """Each side's form fields: every tag of the taxonomy with whether it is chosen."""
    tags = taxonomy()
    return [
        {
            "side": side,
            "note": given["note"],
            "wrong": [
                dict(t, checked=t["code"] in given["tags"]) for t in tags if t["kind"] == "wrong"
            ],
            "right": [
                dict(t, checked=t["code"] in given["tags"]) for t in tags if t["kind"] == "right"
            ],
        }
        for side, given in sides.items()
    ]


@consent_required
@require_http_methods(["GET", "POST"])
def reasons_form(request: HttpRequest, battle_id: int) -> HttpResponse:
    """The judge page's "say why" form (``templates/judging/_reasons.html``), fetched
    when the judge's vote request has ended. Without a live vote of theirs it is an empty
    placeholder that asks again after the next vote request; with one, the tags and note
    of both sides, labelled A and B only. POST stores both sides (``vote_reasons_set``);
    a refusal comes back with its status and message. 404 for a battle the judge may not
    open."""
    try:
        battle_for_reasons(judge=request.user, battle_id=battle_id)
    except ApplicationError:
        raise Http404("No such battle.") from None
    context: dict = {"reasons_battle_id": battle_id}
    status = 200
    if request.method == "POST":
        given = {
            side: {"tags": request.POST.getlist(f"tags_{side}"),
                   "note": request.POST.get(f"note_{side}", "")}
            for side in SIDES
        }  # fmt: skip
        try:
            vote_reasons_set(judge=request.user, battle_id=battle_id, sides=given)
            context["saved"] = True
        except ApplicationError as exc:
            context["error"], status = exc, exc.status
    try:
        _, sides = judge_vote_reasons(judge=request.user, battle_id=battle_id)
    except ApplicationError:  # no live vote: the placeholder
        return render(request, "judging/_reasons.html", context, status=status)
    context["reasons"] = _reason_sides(sides)
    return render(request, "judging/_reasons.html", context, status=status)


@require_GET
def agent_reasons(request: HttpRequest, slug: str) -> HttpResponse:
    """The agent page's "What judges said" block (loaded into ``templates/ratings/
    agent.html`` by htmx: ratings sits below judging in the layers and cannot read the
    tags itself). Public, like the agent page; the same ``?arena=`` choice."""
    requested = request.GET.get("arena", "").strip()
    try:  # as the agent page: without ?arena=, the public arena's agent
        arena = board_arena(requested)[0] if requested else Arena.objects.public()
    except NoSuchBoard as exc:
        raise Http404(str(exc)) from None
    agent = agent_public(arena_id=arena.pk, slug=slug)
    if agent is None:
        raise Http404("No such agent.")
    counts = agent_reason_counts(agent_id=agent.pk)
    context = {"agent": agent, "counts": counts, "min_tagged": REASONS_SHOWN_FROM}
    return render(request, "judging/_agent_reasons.html", context)

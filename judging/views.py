"""The judge page (both sides blind, side by side, as replays), the vote, its undo
window and then its status (with the reveal once the battle is decided), the blind
screenshot and file routes, and the staff judging-quality page."""

from pathlib import PurePosixPath
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

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
from judging.selectors import judging_quality, landing_url
from judging.services import judge_next, reading_time_s, vote_cast, vote_status, vote_undo

SIDES = ("A", "B")
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
    return render(request, "judging/quality.html", judging_quality(Arena.objects.public()))


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

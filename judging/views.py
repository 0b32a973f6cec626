"""The judge page: both sides blind, side by side; the vote; then the reveal."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from accounts.views import consent_required
from arena_site.exceptions import ApplicationError
from battles.presenters import battle_payload, battle_reveal
from judging.models import Vote
from judging.services import judge_next, reading_time_s, vote_cast


@consent_required
@require_GET
def judge_page(request: HttpRequest) -> HttpResponse:
    battle = judge_next(judge=request.user)
    context = {"battle": battle, "choices": Vote.Choice.choices}
    if battle is not None:
        context["payload"] = battle_payload(battle, reveal=False)
        context["min_read_s"] = reading_time_s(battle)
    return render(request, "judging/judge.html", context)


@consent_required
@require_POST
def vote(request: HttpRequest, battle_id: int) -> HttpResponse:
    try:
        cast = vote_cast(
            judge=request.user, battle_id=battle_id, choice=request.POST.get("choice", "")
        )
    except ApplicationError as exc:
        return render(request, "judging/_vote_error.html", {"error": exc}, status=exc.status)
    return render(
        request,
        "judging/_reveal.html",
        {"vote": cast, "reveal": battle_reveal(cast.battle)},
        status=201,
    )

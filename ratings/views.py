from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agents.models import Arena
from ratings.selectors import leaderboard_rows
from ratings.services import leaderboard_served


@require_GET
def leaderboard(request: HttpRequest) -> HttpResponse:
    arena = Arena.objects.public()
    leaderboard_served(arena_id=arena.pk)
    return render(
        request,
        "ratings/leaderboard.html",
        {"arena": arena, "rows": leaderboard_rows(arena_id=arena.pk)},
    )

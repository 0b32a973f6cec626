"""The judge page (both sides blind, side by side, as replays), the vote and its reveal,
retraction, the blind screenshot and file routes, and the staff judging-quality page."""

from collections import Counter, defaultdict
from pathlib import PurePosixPath

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts.views import consent_required
from agents.models import Arena
from arena_site.exceptions import ApplicationError
from battles.attachments import stored_path
from battles.models import Battle
from battles.presenters import Redactor, battle_payload, battle_reveal, blind_file_name
from battles.selectors import access_battle
from battles.views import _private_download, screenshot_response
from judging import agreement
from judging.models import Assignment, JudgeProfile, Vote
from judging.selectors import exclusion_counts, self_judged_tally
from judging.services import judge_next, reading_time_s, vote_cast, vote_retract

SIDES = ("A", "B")
# Keys per choice, in Vote.Choice order: the letter shown on the button, then a digit.
VOTE_KEYS = {"A": ("a", "1"), "B": ("b", "2"), "tie": ("t", "3"), "both_bad": ("x", "4"),
             "abstain": ("s", "0")}  # fmt: skip
REASONS = {
    "abstain": "an abstention is recorded but never counts towards a rating",
    "untrusted_judge": "an admin has marked your votes as not counted",
    "too_fast": "it came before the reading time had passed",
}
HISTORY_ROWS = 10


@consent_required
@require_GET
def judge_page(request: HttpRequest) -> HttpResponse:
    try:
        battle = judge_next(judge=request.user)
    except ApplicationError as exc:  # the per-judge rate limit
        response = render(
            request, "judging/judge.html", {"battle": None, "error": exc}, status=exc.status
        )
        for name, value in exc.headers.items():
            response[name] = value
        return response
    context = {"battle": battle}
    if battle is not None:
        served_at = Assignment.objects.get(judge=request.user, battle=battle).served_at
        min_read = reading_time_s(battle)
        elapsed = (timezone.now() - served_at).total_seconds()
        payload = battle_payload(battle, reveal=False)
        context.update(
            payload=payload,
            sides=[(side, payload["sides"][side]) for side in SIDES],
            min_read_s=min_read,
            read_left_s=max(0.0, min_read - elapsed),
            choices=[(value, label, *VOTE_KEYS[value]) for value, label in Vote.Choice.choices],
        )
    return render(request, "judging/judge.html", context)


def _reveal_context(vote: Vote) -> dict:
    battle = vote.battle
    window = settings.ARENA.vote_retract_window_s
    left = window - (timezone.now() - vote.voted_at).total_seconds()
    return {
        "vote": vote,
        "reveal": battle_reveal(battle),
        "reason": REASONS.get(vote.inadmissible_reason, vote.inadmissible_reason),
        "min_read_s": reading_time_s(battle),
        "retract_left_s": max(0, int(left)),
    }


@consent_required
@require_POST
def vote(request: HttpRequest, battle_id: int) -> HttpResponse:
    try:
        cast = vote_cast(
            judge=request.user, battle_id=battle_id, choice=request.POST.get("choice", "")
        )
    except ApplicationError as exc:
        return render(request, "judging/_vote_error.html", {"error": exc}, status=exc.status)
    return render(request, "judging/_reveal.html", _reveal_context(cast), status=201)


@consent_required
@require_POST
def retract(request: HttpRequest, battle_id: int) -> HttpResponse:
    """Takes back the judge's live vote on the battle while the window is open."""
    try:
        vote_retract(judge=request.user, battle_id=battle_id)
    except ApplicationError as exc:
        return render(request, "judging/_vote_error.html", {"error": exc}, status=exc.status)
    return render(request, "judging/_retracted.html", {"battle_id": battle_id})


def _blind_side(request: HttpRequest, battle_id: int, side: str) -> Battle:
    """The battle behind a blind URL, for those who may see it (its team, judges it was
    served to, staff); 404 for anyone else and for a side that is not A or B."""
    if side not in SIDES:
        raise Http404("No such side.")
    return access_battle(request.user, battle_id)


@consent_required
@require_GET
def step_screenshot(request: HttpRequest, battle_id: int, side: str, index: int) -> HttpResponse:
    """A step's screenshot at a URL that names the battle, the side and the step only."""
    return screenshot_response(_blind_side(request, battle_id, side), side, index)


@consent_required
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
    return _private_download(stored_path(f"deliveries/run-{run.pk}/{name}"), shown)


# --- the judging-quality page (staff) -----------------------------------------------


def _quality_context(arena: Arena) -> dict:
    votes = list(
        Vote.objects.filter(battle__arena=arena)
        .select_related("battle", "judge")
        .order_by("-voted_at", "-pk")
    )
    for v in votes:
        v.read_s = (v.voted_at - v.served_at).total_seconds()
    redundant = [
        v for v in votes if v.battle.redundancy_target > 1 and not v.retracted and v.admissible
    ]
    table = agreement.rating_table((v.battle_id, v.choice) for v in redundant)
    outcomes = {v.battle_id: v.battle.outcome for v in redundant}
    with_consensus = agreement.agreement_with_consensus(
        ((v.judge_id, v.battle_id, v.choice) for v in redundant), outcomes
    )
    by_judge: dict[int, list[Vote]] = defaultdict(list)
    for v in votes:
        by_judge[v.judge_id].append(v)
    profiles = {p.user_id: p for p in JudgeProfile.objects.filter(user_id__in=list(by_judge))}
    judges = []
    for judge_id, cast in by_judge.items():
        live = [v for v in cast if not v.retracted]
        admissible = [v for v in live if v.admissible]
        profile = profiles.get(judge_id)
        agreed, compared = with_consensus.get(judge_id, (0, 0))
        judges.append(
            {
                "user": cast[0].judge,
                "trust": profile.trust if profile else settings.ARENA.trust_new,
                "untrusted": bool(profile and profile.is_untrusted),
                "trust_agree": getattr(profile, "agree_count", None),
                "trust_seen": getattr(profile, "seen_count", None),
                "cast": len(cast),
                "retracted": len(cast) - len(live),
                "admissible_share": len(admissible) / len(live) if live else None,
                "reasons": sorted(
                    Counter(v.inadmissible_reason for v in live if not v.admissible).items()
                ),
                "agreed": agreed,
                "compared": compared,
                "history": cast[:HISTORY_ROWS],
            }
        )
    judges.sort(key=lambda j: (-j["cast"], j["user"].username))
    rated = [row for row in table if sum(row) >= 2]
    return {
        "arena": arena,
        "judges": judges,
        "kappa": agreement.fleiss_kappa(table),
        "pairwise": agreement.pairwise_agreement(table),
        "sample_battles": len(rated),
        "sample_votes": sum(sum(row) for row in rated),
        "redundancy_battles": Battle.objects.filter(arena=arena, redundancy_target__gt=1).count(),
        "exclusions": [
            (Battle.ExclusionReason(reason).label, reason, n)
            for reason, n in exclusion_counts(arena_id=arena.pk).items()
        ],
        "self_judged": self_judged_tally(arena_id=arena.pk),
        "recent": votes[:25],
        "vote_count": len(votes),
    }


@login_required
@require_GET
def quality_page(request: HttpRequest) -> HttpResponse:
    """Staff only: agreement on the redundancy sample, each judge's record, exclusions.
    Anyone else gets 404 (the page's existence is not advertised)."""
    if not request.user.is_staff:
        raise Http404("No such page.")
    return render(request, "judging/quality.html", _quality_context(Arena.objects.public()))

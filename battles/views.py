"""Pages: the submit form, the live battle page and the battle's private files."""

from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.throttling import submission_allowance, submissions_spent_words, too_many
from accounts.views import consent_required, consent_required_or_token
from arena_site.exceptions import ApplicationError
from arena_site.ratelimit import client_address
from battles.attachments import ALLOWED_TYPES, attachments_check_request_size
from battles.media import delivery_name
from battles.models import Battle, Step
from battles.presenters import battle_reveal, render_battle_panel, waterfall
from battles.selectors import access_battle, team_ids_of, user_may_see_identities
from battles.services import Conversation, battle_end_side, task_submit
from battles.services.conversation import battle_conversation, follow_up_send, question_answer
from battles.serving import private_download, private_image


@consent_required
@require_http_methods(["GET", "POST"])
def submit(request: HttpRequest) -> HttpResponse:
    form = {"instruction": "", "start_url": ""}
    if request.method == "POST":
        try:
            attachments_check_request_size(request)
            form = {k: request.POST.get(k, "") for k in form}
            with submission_allowance(user_id=request.user.pk, address=client_address(request)):
                battle = task_submit(
                    user=request.user, **form, attachments=request.FILES.getlist("attachments")
                )
        except Conversation as talk:
            messages.info(request, talk.reply)
        except ApplicationError as exc:
            if exc.code == "rate_limited":
                what = submissions_spent_words(exc.extra["per"], exc.extra["limit"])
                return too_many(request, what=what, retry_after_s=exc.extra["retry_after_s"])
            messages.error(request, exc.message)
        else:
            return redirect("battles:detail", battle_id=battle.pk)
    recent = (
        Battle.objects.for_teams(team_ids_of(request.user))
        .select_related("task")
        .order_by("-id")[:20]
    )
    arena = settings.ARENA
    context = {
        "form": form,
        "recent": recent,
        "attachment_accept": ",".join(sorted(ALLOWED_TYPES)),
        "attachment_limits": {
            "count": arena.attachments_max_count,
            "each": arena.attachment_max_bytes,
            "total": arena.attachments_max_total_bytes,
        },
    }
    return render(request, "battles/submit.html", context)


@consent_required
@require_GET
def battle_page(request: HttpRequest, battle_id: int) -> HttpResponse:
    battle = access_battle(request.user, battle_id)
    context = {
        "battle": battle,
        "panel": render_battle_panel(battle.pk),
        # Who fought, for those who may know (the battle closed; see the selector).
        "reveal": battle_reveal(battle) if user_may_see_identities(request.user, battle) else None,
        "conversation": _page_conversation(request, battle),
    }
    return render(request, "battles/detail.html", context)


@consent_required
@require_POST
def end_side(request: HttpRequest, battle_id: int, side: str) -> HttpResponse:
    """The submitter stops one side early (the battle will not be rated)."""
    try:
        battle_end_side(user=request.user, battle_id=battle_id, side=side)
    except ApplicationError as exc:
        if exc.status == 404:
            raise Http404(exc.message) from exc
        messages.error(request, exc.message)
    else:
        messages.info(request, f"Side {side} will stop before its next step.")
    return redirect("battles:detail", battle_id=battle_id)


@consent_required_or_token
@require_GET
def step_screenshot(request: HttpRequest, battle_id: int, side: str, index: int) -> HttpResponse:
    """A step's screenshot, for those who may see the battle (its team, its judges,
    staff). The URL names no agent: only the battle, the side and the step."""
    return screenshot_response(access_battle(request.user, battle_id), side, index)


def screenshot_response(battle: Battle, side: str, index: int) -> HttpResponse:
    """The PNG of a step of a battle the caller has already been allowed to see; 404
    when there is none or its stored name leaves the private storage."""
    step = Step.objects.filter(run__battle=battle, run__side=side, index=index).first()
    if step is None or not step.screenshot:
        raise Http404("No such screenshot.")
    return private_image(step.screenshot)


@consent_required_or_token
@require_GET
def attachment_download(request: HttpRequest, battle_id: int, index: int) -> HttpResponse:
    """The task's ``index``-th attachment (0-based, in submission order), for those who
    may see the battle (its team, the judges it was served to, staff)."""
    battle = access_battle(request.user, battle_id)
    attachment = battle.task.attachments.order_by("pk")[index : index + 1].first()
    if attachment is None:
        raise Http404("No such attachment.")
    return private_download(attachment.path, attachment.name)


@consent_required_or_token
@require_GET
def delivery_download(request: HttpRequest, battle_id: int, side: str, name: str) -> HttpResponse:
    """A file one side delivered, for those who may see the battle. The URL names the
    battle, the side and the file (which the agent named), never the agent."""
    battle = access_battle(request.user, battle_id)
    run = battle.runs.filter(side=side).first()
    if run is None or name != Path(name).name or name in ("", ".", ".."):
        raise Http404("No such file.")
    if not any(f.get("name") == name for f in run.delivered_files):
        raise Http404("No such file.")
    return private_download(delivery_name(run.pk, name), name)


@consent_required_or_token
@require_GET
def run_page(request: HttpRequest, battle_id: int, side: str) -> HttpResponse:
    """One run's spans as a waterfall beside its screenshots. Spans name the model, so
    only those who may see identities (staff, or after their vote) get the page."""
    battle = access_battle(request.user, battle_id)
    if not user_may_see_identities(request.user, battle):
        raise Http404("No such run.")
    run = battle.runs.select_related("agent").filter(side=side).first()
    if run is None:
        raise Http404("No such run.")
    return render(request, "battles/run.html", {"battle": battle, "run": run, **waterfall(run)})


@consent_required
@require_GET
def battle_panel(request: HttpRequest, battle_id: int) -> HttpResponse:
    """The same panel over HTTP, for pages re-syncing after a dropped socket."""
    battle = access_battle(request.user, battle_id)
    return HttpResponse(render_battle_panel(battle.pk))


# -- conversations with both sides (docs/conversations.md): the team's page part ---------


def _page_conversation(request: HttpRequest, battle: Battle) -> dict | None:
    """The box on the team's page of a desktop battle: while it may still run, or when
    anything was said."""
    if battle.team_id not in team_ids_of(request.user) or battle.task.kind == "repo":
        return None
    conversation = battle_conversation(battle)
    live = battle.status in (Battle.Status.QUEUED, Battle.Status.RUNNING)
    return conversation if live or conversation["follow_ups"] or conversation["questions"] else None


def _conversation_fragment(
    request: HttpRequest, battle: Battle, error: str = "", *, log_only: bool = False
) -> HttpResponse:
    context = {
        "battle": battle,
        "conversation": battle_conversation(battle),
        "error": error,
        "log_only": log_only,
    }
    return render(request, "battles/_conversation.html", context)


def _team_battle(request: HttpRequest, battle_id: int) -> Battle:
    """The battle if it is the user's team's (judges who may read it cannot talk to it)."""
    battle = (
        Battle.objects.filter(pk=battle_id, team_id__in=team_ids_of(request.user))
        .select_related("task")
        .first()
    )
    if battle is None:
        raise Http404("No such battle.")
    return battle


@consent_required
@require_GET
def conversation_part(request: HttpRequest, battle_id: int) -> HttpResponse:
    """The battle page's conversation box (polled while the battle runs)."""
    return _conversation_fragment(request, _team_battle(request, battle_id), log_only=True)


@consent_required
@require_POST
def follow_up_post(request: HttpRequest, battle_id: int) -> HttpResponse:
    return _conversation_post(
        request,
        battle_id,
        lambda: follow_up_send(
            user=request.user, battle_id=battle_id, text=request.POST.get("text", "")
        ),
    )


@consent_required
@require_POST
def answer_post(request: HttpRequest, battle_id: int, question_id: int) -> HttpResponse:
    return _conversation_post(
        request,
        battle_id,
        lambda: question_answer(
            user=request.user,
            battle_id=battle_id,
            question_id=question_id,
            text=request.POST.get("text", ""),
        ),
    )


def _conversation_post(request: HttpRequest, battle_id: int, act) -> HttpResponse:
    """Runs the command; htmx gets the box again (with the refusal in words, status 200
    so htmx swaps it), a plain form post the page."""
    battle = _team_battle(request, battle_id)
    error = ""
    try:
        act()
    except ApplicationError as exc:
        if exc.status == 404:
            raise Http404(exc.message) from exc
        error = exc.message
    if request.headers.get("HX-Request"):
        return _conversation_fragment(request, battle, error)
    if error:
        messages.error(request, error)
    return redirect("battles:detail", battle_id=battle_id)

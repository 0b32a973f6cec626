"""Pages: the submit form and the live battle page."""

from django.conf import settings
from django.contrib import messages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.views import consent_required
from arena_site.exceptions import ApplicationError
from battles.models import Battle, Step
from battles.presenters import battle_payload, waterfall
from battles.selectors import access_battle, team_ids_of, user_may_see_identities
from battles.services import Conversation, battle_end_side, task_submit


def render_battle_panel(battle_id: int) -> str:
    """The blind live panel of a battle (status + both lanes), as sent over the socket."""
    battle = Battle.objects.select_related("task").get(pk=battle_id)
    return render_to_string(
        "battles/_panel.html", {"battle": battle, "payload": battle_payload(battle, reveal=False)}
    )


@consent_required
@require_http_methods(["GET", "POST"])
def submit(request: HttpRequest) -> HttpResponse:
    form = {"instruction": "", "start_url": ""}
    if request.method == "POST":
        form = {k: request.POST.get(k, "") for k in form}
        try:
            battle = task_submit(user=request.user, **form)
        except Conversation as talk:
            messages.info(request, talk.reply)
        except ApplicationError as exc:
            messages.error(request, exc.message)
        else:
            return redirect("battles:detail", battle_id=battle.pk)
    recent = (
        Battle.objects.for_teams(team_ids_of(request.user))
        .select_related("task")
        .order_by("-id")[:20]
    )
    return render(request, "battles/submit.html", {"form": form, "recent": recent})


@consent_required
@require_GET
def battle_page(request: HttpRequest, battle_id: int) -> HttpResponse:
    battle = access_battle(request.user, battle_id)
    return render(
        request, "battles/detail.html", {"battle": battle, "panel": render_battle_panel(battle.pk)}
    )


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


@consent_required
@require_GET
def step_screenshot(request: HttpRequest, battle_id: int, side: str, index: int) -> HttpResponse:
    """A step's screenshot, for those who may see the battle (its team, its judges,
    staff). The URL names no agent: only the battle, the side and the step."""
    battle = access_battle(request.user, battle_id)
    step = Step.objects.filter(run__battle=battle, run__side=side, index=index).first()
    if step is None or not step.screenshot:
        raise Http404("No such screenshot.")
    root = settings.PRIVATE_MEDIA_ROOT.resolve()
    path = (root / step.screenshot).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise Http404("No such screenshot.")
    response = FileResponse(path.open("rb"), content_type="image/png")
    response["Cache-Control"] = "private, max-age=3600"
    return response


@consent_required
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

"""Pages of test drives: an agent's status and its drives (with a form to start one),
and one drive's trajectory (steps, screenshots, final message). Only the agent's
entrant team and the admins see them; anyone else gets 404, as for a missing agent."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from accounts.selectors import user_teams
from agents.selectors import access_agent, agent_status, agents_visible_to
from arena_site.exceptions import ApplicationError
from battles.drive_presenters import render_test_drive_panel
from battles.selectors import access_test_drive, forged_runs_of
from battles.services import SAMPLE_TASKS, test_drive_start
from battles.services.test_drives import DEFAULT_SAMPLE
from battles.serving import private_image


@login_required
@require_GET
def agents_status(request: HttpRequest) -> HttpResponse:
    """The user's teams' agents (every agent for staff): whether each is drawn, why
    not, and a link to its test drives."""
    agents = list(agents_visible_to(request.user).filter(retired_at=None).order_by("display_name"))
    forged = forged_runs_of([agent.pk for agent in agents])
    mine = {team.pk for team in user_teams(request.user)}  # staff see others' too
    rows = [
        {
            "agent": agent,
            "status": agent_status(agent),
            "forged": forged.get(agent.pk, []),
            "mine": agent.team_id in mine,
        }
        for agent in agents
    ]
    return render(request, "battles/agents_status.html", {"rows": rows})


@login_required
@require_http_methods(["GET", "POST"])
def agent_test_drives(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = access_agent(request.user, agent_id)
    if request.method == "POST":
        try:
            drive = test_drive_start(
                user=request.user,
                agent_id=agent.pk,
                sample=request.POST.get("sample") or DEFAULT_SAMPLE,
            )
        except ApplicationError as exc:
            if exc.status == 404:
                raise Http404(exc.message) from exc
            messages.error(request, exc.message)
        else:
            return redirect("battles:test-drive", drive_id=drive.pk)
    drives = agent.test_drives.all()[:20]
    context = {
        "agent": agent,
        "status": agent_status(agent),
        "drives": drives,
        "samples": SAMPLE_TASKS.values(),
    }
    return render(request, "battles/agent_test_drives.html", context)


@login_required
@require_GET
def test_drive_page(request: HttpRequest, drive_id: int) -> HttpResponse:
    """The drive's page; its panel follows the drive live over the socket
    ``/ws/test-drives/<id>/`` (battles.consumers.TestDriveConsumer)."""
    drive = access_test_drive(request.user, drive_id)
    context = {"drive": drive, "panel": render_test_drive_panel(drive.pk)}
    return render(request, "battles/test_drive.html", context)


@login_required
@require_GET
def test_drive_screenshot(request: HttpRequest, drive_id: int, index: int) -> HttpResponse:
    drive = access_test_drive(request.user, drive_id)
    run = drive.runs.first()
    step = run.steps.filter(index=index).first() if run else None
    if step is None or not step.screenshot:
        raise Http404("No such screenshot.")
    return private_image(step.screenshot)

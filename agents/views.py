"""A team's agent pages: register an agent (/my-agents/new/) and one agent's page
(/my-agents/<id>/: edit it, rotate its secret or replace its key, check it, pause and
resume it, withdraw it, start a test drive). The same service functions as the API
(agents/registration.py, agents/entry_changes.py), so the same rules: another team's
agent is a 404 like a missing one; a member who is not an owner sees the agent and is
refused (403) every change."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from accounts.selectors import user_is_owner, user_owned_teams, user_team
from agents.entry_changes import agent_edit, agent_pause, agent_resume, agent_withdraw
from agents.forms import AgentEditForm, AgentRegisterForm, PauseForm
from agents.models import Agent
from agents.registration import KEYED_PROVIDERS, agent_entry_check_asked, agent_register
from agents.selectors import access_team_agent, agent_status
from arena_site.exceptions import ApplicationError


def _refused(request: HttpRequest, refused: ApplicationError) -> HttpResponse:
    context = {"heading": "Only the team's owners can do this", "message": refused.message}
    return render(request, "accounts/invite_refused.html", context, status=refused.status)


@login_required
@require_http_methods(["GET", "POST"])
def agent_new(request: HttpRequest) -> HttpResponse:
    """The registration form (owners of a team only: the form offers their teams). A
    remote agent's secret is shown on the answer, once."""
    teams = user_owned_teams(request.user)
    form = AgentRegisterForm(request.POST or None, teams=teams)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            team = user_team(request.user, form.cleaned_data["team"])
            if team is None:
                raise Http404("No such team among yours.")
            try:
                agent, secret = agent_register(
                    team=team, actor=request.user, **form.service_fields()
                )
            except ApplicationError as refused:
                if refused.status == 403:
                    return _refused(request, refused)
                form.add_error(None, refused.message)
                status = refused.status
            else:
                if secret:
                    return _agent_page(request, agent, secret=secret, registered=True)
                messages.success(request, f"{agent.display_name} is registered.")
                return redirect("battles:agent", agent_id=agent.pk)
    context = {"form": form, "teams": teams, "keyed": KEYED_PROVIDERS}
    return render(request, "agents/new.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def agent_page(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = access_team_agent(request.user, agent_id)
    if request.method == "GET":
        return _agent_page(request, agent)
    action = request.POST.get("action", "")
    edit_form = None
    try:
        if action == "edit":
            edit_form = AgentEditForm(request.POST, agent=agent)
            if not edit_form.is_valid():
                return _agent_page(request, agent, edit_form=edit_form, status=400)
            agent, _ = agent_edit(agent=agent, actor=request.user, **edit_form.changes())
            messages.success(request, f"{agent.display_name} is saved.")
        elif action == "rotate":
            agent, secret = agent_edit(agent=agent, actor=request.user, rotate_secret=True)
            return _agent_page(request, agent, secret=secret)
        elif action == "pause":
            pause_form = PauseForm(request.POST)
            reason = pause_form.cleaned_data["reason"] if pause_form.is_valid() else ""
            agent = agent_pause(agent=agent, actor=request.user, reason=reason)
            messages.success(request, f"{agent.display_name} is paused.")
        elif action == "resume":
            agent = agent_resume(agent=agent, actor=request.user)
            messages.success(request, f"{agent.display_name} is running again.")
        elif action == "check":
            problems = agent_entry_check_asked(agent=agent)
            return _agent_page(request, agent, problems=problems, checked=True)
        elif action == "withdraw":
            agent = agent_withdraw(agent=agent, actor=request.user)
            messages.success(
                request,
                f"{agent.display_name} is withdrawn: it is no longer drawn into battles; "
                "its battles and ratings stay.",
            )
            return redirect("battles:agents-status")
        else:
            messages.error(request, "Unknown action.")
            return _agent_page(request, agent, status=400)
    except ApplicationError as refused:
        if refused.status == 403:
            return _refused(request, refused)
        if refused.status == 404:
            raise Http404(refused.message) from None
        if edit_form is not None:
            edit_form.add_error(None, refused.message)
        else:
            messages.error(request, refused.message)
        agent.refresh_from_db()
        return _agent_page(request, agent, edit_form=edit_form, status=refused.status)
    return redirect("battles:agent", agent_id=agent.pk)


def _agent_page(
    request: HttpRequest,
    agent: Agent,
    *,
    edit_form: AgentEditForm | None = None,
    status: int = 200,
    **extra,
) -> HttpResponse:
    context = {
        "agent": agent,
        "status": agent_status(agent),
        "owner": user_is_owner(request.user, agent.team),
        "endpoint": (agent.params or {}).get("endpoint", "") if agent.kind == "remote" else "",
        "edit_form": edit_form or AgentEditForm(agent=agent),
        "pause_form": PauseForm(),
        **extra,
    }
    return render(request, "agents/agent.html", context, status=status)

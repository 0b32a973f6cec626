"""Pages of offline evaluations, private to the team: the list with the "New
evaluation" form (a tournament's schedule included), the run page (live progress over
``ws/evaluations/<id>/``, the results so far), its HTTP partial for re-syncing, cancel,
the run record as a download, a tournament's audit report (a download, or a standalone
page under its own policy) and one run's page with its waterfall. Another team's
evaluation is a 404."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.csp import CSP
from django.views.decorators.csp import csp_override
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.models import Team
from accounts.selectors import user_primary_team
from accounts.views import consent_required
from agents.models import Agent
from arena_site.exceptions import ApplicationError
from evals import services
from evals.forms import EvaluationForm
from evals.jobs import evaluation_publish
from evals.keyless import judge_unready, sample_files
from evals.models import Candidate, Evaluation
from evals.presenters import access_evaluation, progress_of, results_view, run_view
from evals.report import audit_report_html
from evals.services.creation import evaluable_candidates
from evals.tournament_presenters import tournament_results_view
from evals.tournament_selectors import record_of

EVALUATIONS_PER_PAGE = 20
FIELDS_MARKED = "The evaluation was not created: see the fields marked below."
# The audit report is a standalone document with its own <style> and nothing else to
# load: its policy allows that style and refuses everything else (the site's refuses
# inline styles, so it cannot serve the report).
REPORT_CSP = {
    "default-src": [CSP.NONE],
    "style-src": [CSP.UNSAFE_INLINE],
    "img-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
}


def _create(request: HttpRequest, team: Team, form: EvaluationForm) -> Evaluation:
    """Stores the files and creates the evaluation in one transaction (a refused one
    leaves nothing behind), then starts it once that commits."""
    data = form.cleaned_data
    repos = None
    if data.get("sample"):
        sample = sample_files(data["sample"])
        name, source, repos = sample.name, sample.suite, sample.repos
    else:
        name, source = data["suite"].name, data["suite"].read()
    with transaction.atomic():
        suite = services.suite_store(team=team, name=name, data=source)
        rubric = None
        if data.get("rubric"):
            rubric = services.rubric_store(
                team=team, name=data["rubric"].name, data=data["rubric"].read()
            )
        evaluation = services.evaluation_create(
            team=team,
            suite=suite,
            agent_slugs=data["candidates"],
            rubric=rubric,
            judge_slug=data.get("judge") or None,
            pairwise=data["pairwise"],
            baseline_slug=data.get("baseline") or None,
            max_tokens=data["max_tokens"],
            user=request.user,
            tournament=data["tournament"],
            best_of=data["best_of"],
            seed=data["seed"],
            opening=data["opening"],
            repos=repos,
            epochs=data["epochs"],
            reducer=data["reducer_k"],
        )
        services.evaluation_enqueue(evaluation.pk)
    return evaluation


@consent_required
@require_http_methods(["GET", "POST"])
def evaluation_list(request: HttpRequest) -> HttpResponse:
    team = user_primary_team(request.user)
    agents = evaluable_candidates(team) if team is not None else []
    models = [a for a in agents if a.kind == Agent.Kind.SCAFFOLD and a.model_id]
    choices = {"agents": agents, "judges": [(a, judge_unready(a)) for a in models]}
    form = EvaluationForm(**choices)
    refused, status = None, 200
    if request.method == "POST":
        form = EvaluationForm(request.POST, request.FILES, **choices)
        if team is None:
            refused, status = "Your account belongs to no team; ask a team owner to add you.", 403
        elif not form.is_valid():
            refused, status = FIELDS_MARKED, 400
        else:
            try:
                evaluation = _create(request, team, form)
            except ApplicationError as exc:
                refused = FIELDS_MARKED if form.refusal_mark(exc) else exc.message
                status = 400
            else:
                return redirect("evals:detail", evaluation_id=evaluation.pk)
    evaluations = (
        Evaluation.objects.filter(team__in=Team.objects.filter(memberships__user=request.user))
        .select_related("suite", "rubric")
        .defer("suite__source", "rubric__source")
        .prefetch_related(
            Prefetch("candidates", queryset=Candidate.objects.select_related("agent"))
        )
        .order_by("-created_at", "-id")
    )
    page = Paginator(evaluations, EVALUATIONS_PER_PAGE).get_page(request.GET.get("page"))
    progress = progress_of(page.object_list)
    rows = [{"evaluation": e, "progress": progress[e.pk]} for e in page.object_list]
    context = {"page": page, "rows": rows, "form": form, "refused": refused, "team": team}
    return render(request, "evals/list.html", context, status=status)


def _live_context(request: HttpRequest, evaluation: Evaluation) -> dict:
    record = record_of(evaluation)
    shape = tournament_results_view if evaluation.tournament else results_view
    return {
        "evaluation": evaluation,
        "progress": progress_of([evaluation])[evaluation.pk],
        "results": shape(evaluation, record, page=request.GET.get("page")),
    }


@consent_required
@require_GET
def evaluation_page(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    evaluation = access_evaluation(request.user, evaluation_id)
    context = _live_context(request, evaluation)
    context["agents"] = [c.agent for c in evaluation.candidates.select_related("agent")]
    return render(request, "evals/detail.html", context)


@consent_required
@require_GET
def evaluation_live(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    """The live part of the run page over HTTP (progress, cancel, results): what the
    page re-reads when a frame arrives and when its socket reconnects."""
    evaluation = access_evaluation(request.user, evaluation_id)
    return render(request, "evals/_live.html", _live_context(request, evaluation))


@consent_required
@require_POST
def evaluation_cancel(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    evaluation = services.evaluation_cancel(
        evaluation=access_evaluation(request.user, evaluation_id)
    )
    evaluation_publish(evaluation.pk)
    if evaluation.status == Evaluation.Status.CANCELLED:
        messages.info(request, "Cancelled: nothing more is asked; what is stored stays.")
    else:
        messages.info(request, f"The evaluation had already finished ({evaluation.status}).")
    return redirect("evals:detail", evaluation_id=evaluation.pk)


@consent_required
@require_GET
def evaluation_record_download(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    """The run record as a file: a tournament's (evals/tournament_record.schema.json)
    when it has one, else the evaluation record (evals/record.schema.json)."""
    evaluation = access_evaluation(request.user, evaluation_id)
    response = JsonResponse(record_of(evaluation), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="evaluation-{evaluation.pk}.json"'
    response["Cache-Control"] = "private, no-store"
    return response


@consent_required
@require_GET
@csp_override(REPORT_CSP)
def evaluation_report(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    """A tournament's audit report (evals.report) from its record: a file to download,
    or with ``?inline=1`` the document itself to read in the browser. An evaluation
    without a tournament has no report (404)."""
    evaluation = access_evaluation(request.user, evaluation_id)
    if not evaluation.tournament:
        raise Http404("No audit report: this evaluation has no tournament (see its record).")
    response = HttpResponse(audit_report_html(record_of(evaluation)))
    disposition = "inline" if request.GET.get("inline") == "1" else "attachment"
    response["Content-Disposition"] = (
        f'{disposition}; filename="evaluation-{evaluation.pk}-report.html"'
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, no-store"
    return response


@consent_required
@require_GET
def evaluation_run_page(request: HttpRequest, evaluation_id: int, run_id: int) -> HttpResponse:
    evaluation = access_evaluation(request.user, evaluation_id)
    context = {"evaluation": evaluation, **run_view(evaluation, run_id)}
    return render(request, "evals/run.html", context)

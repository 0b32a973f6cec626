from django.contrib import admin
from django.core.exceptions import (
    DisallowedHost,
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path, register_converter
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView

from accounts.api import (
    InviteAcceptApi,
    TeamInviteDetailApi,
    TeamInviteListCreateApi,
    TeamListApi,
    TeamMemberDetailApi,
    TeamMemberListApi,
)
from agents.api import AgentCheckApi, AgentDetailApi, AgentListCreateApi
from agents.protocol_api import AgentProtocolApi
from arena_site.api_docs import SwaggerDocs
from arena_site.exceptions import error_body
from arena_site.parsers import ID_MAX
from battles.api import BattleDetailApi, BattleListApi, TaskDetailApi, TaskListCreateApi
from environments.api import EnvironmentListApi, EnvironmentPackageApi
from evals.api import EvaluationCancelApi, EvaluationDetailApi, EvaluationListCreateApi
from exports.api import TABLE_APIS, OpenDataArchiveApi, OpenDataIndexApi, OpenDataUnknownApi
from judging.api import JudgeNextApi, VoteCreateApi, VoteMineApi
from judging.machine_api import BattleMachineVerdictsApi, MachineAgreementApi, MachineBoardApi
from ratings.api import LeaderboardApi
from ratings.metrics_views import MetricsApi, metrics_page


class IdConverter:
    """A row id in a path: 1 to 2**63 - 1 (PostgreSQL's bigint), so a longer number is
    a 404 like any missing row, never an overflow in the database."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= ID_MAX:
            raise ValueError(value)  # Django: this pattern does not match
        return number

    def to_url(self, value: int) -> str:
        return str(int(value))


register_converter(IdConverter, "id")

api = [
    path("tasks/", TaskListCreateApi.as_view(), name="tasks"),
    path("tasks/<id:pk>/", TaskDetailApi.as_view(), name="task"),
    path("battles/", BattleListApi.as_view(), name="battles"),
    path("battles/<id:pk>/", BattleDetailApi.as_view(), name="battle"),
    path("battles/<id:pk>/votes/", VoteCreateApi.as_view(), name="votes"),
    path("battles/<id:pk>/votes/mine/", VoteMineApi.as_view(), name="vote-mine"),
    # issue 16 point 6: machine judges on live battles (docs/evaluations.md)
    path(
        "battles/<id:pk>/machine-verdicts/",
        BattleMachineVerdictsApi.as_view(),
        name="battle-machine-verdicts",
    ),
    path("machine-board/", MachineBoardApi.as_view(), name="machine-board"),
    path("machine-agreement/", MachineAgreementApi.as_view(), name="machine-agreement"),
    path("judge/next/", JudgeNextApi.as_view(), name="judge-next"),
    path("leaderboard/", LeaderboardApi.as_view(), name="leaderboard"),
    path("metrics/", MetricsApi.as_view(), name="metrics"),
    path("agent-protocol/", AgentProtocolApi.as_view(), name="agent-protocol"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # issue 14 point 6: the schema as a page (Swagger UI), its assets served from here
    path("docs/", SwaggerDocs.as_view(), name="docs"),
    # issue 14 point 4: labs enter on their own (teams, invites, their own agents)
    path("teams/", TeamListApi.as_view(), name="teams"),
    path("teams/<id:team>/invites/", TeamInviteListCreateApi.as_view(), name="team-invites"),
    path("teams/<id:team>/invites/<id:pk>/", TeamInviteDetailApi.as_view(), name="team-invite"),
    path("teams/<id:team>/members/", TeamMemberListApi.as_view(), name="team-members"),
    path("teams/<id:team>/members/<id:user>/", TeamMemberDetailApi.as_view(), name="team-member"),
    path("invites/accept/", InviteAcceptApi.as_view(), name="invite-accept"),
    path("agents/", AgentListCreateApi.as_view(), name="agents"),
    path("agents/<id:pk>/", AgentDetailApi.as_view(), name="agent"),
    path("agents/<id:pk>/check/", AgentCheckApi.as_view(), name="agent-check"),
    path("evaluations/", EvaluationListCreateApi.as_view(), name="evaluations"),
    path("evaluations/<id:pk>/", EvaluationDetailApi.as_view(), name="evaluation"),
    path("evaluations/<id:pk>/cancel/", EvaluationCancelApi.as_view(), name="evaluation-cancel"),
    path("", include("evals.api_report")),  # issue 40 item 7: progress, audit report
    path("", include("evals.api_run")),  # issue 40 item 7: one prompt on one agent
    # issue 20 point 6: open data (docs/open-data.md)
    path("open-data/", OpenDataIndexApi.as_view(), name="open-data"),
    path("open-data/archive.tar.gz", OpenDataArchiveApi.as_view(), name="open-data-archive"),
    *(
        path(f"open-data/{t}.jsonl", v.as_view(), name=f"open-data-{t}")
        for t, v in TABLE_APIS.items()
    ),
    path("open-data/<path:rest>", OpenDataUnknownApi.as_view()),
    # issue 20: training environments (docs/environments.md)
    path("environments/", EnvironmentListApi.as_view(), name="environments"),
    path(
        "environments/<id:pk>/package.tar.gz",
        EnvironmentPackageApi.as_view(),
        name="environment-package",
    ),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include((api, "api"))),
    path("accounts/", include("accounts.urls")),
    path("metrics/", metrics_page, name="metrics"),
    path("", include("battles.urls")),
    path("", include("judging.urls")),
    path("", include("ratings.urls")),
    path("", include("evals.urls")),
    path("", include("environments.urls")),
    path("", include("agents.operator_urls")),  # the human baseline's operator page
]


# Errors Django answers itself, before or outside any DRF view (an unknown path, a bad
# Host header, a body over DATA_UPLOAD_*, an uncaught exception): under /api/ in the
# API's envelope, elsewhere Django's HTML pages.


def _is_api(request: HttpRequest) -> bool:
    return request.path_info == "/api" or request.path_info.startswith("/api/")


def _api_error(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse(error_body(code, message), status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig | TooManyFieldsSent | TooManyFilesSent):
        return _api_error("request_too_large", f"The request is too large: {exception}", 413)
    if isinstance(exception, DisallowedHost):
        return _api_error("disallowed_host", "The Host header names no host served here.", 400)
    return _api_error("bad_request", "The request was refused as malformed.", 400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _is_api(request):
        return defaults.permission_denied(request, exception)
    return _api_error("permission_denied", "You do not have permission to do this.", 403)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    return _api_error("not_found", "Not found.", 404)


def server_error(request: HttpRequest) -> HttpResponse:
    # Django has logged the traceback (django.request) before calling this.
    if not _is_api(request):
        return defaults.server_error(request)
    return _api_error("server_error", "Internal server error; it has been logged.", 500)


handler400 = bad_request
handler403 = permission_denied
handler404 = page_not_found
handler500 = server_error

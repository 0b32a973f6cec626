"""Tenant scoping for the API, made structural.

Every tenant-owned API view inherits ``TenantScopedApiMixin``, which owns
``get_queryset`` and ``get_object``. A view only says which rows the request's teams
may see (``scoped_queryset(team_ids)``); it cannot forget the filter, and anything
outside the scope answers 404 exactly as a missing row does (never 403, which would
confirm that the row exists). A subclass cannot override either method: the class is
refused when it is defined. A deliberate bypass is a method named ``dangerously_*``.

The API views that are not tenant-scoped are listed in ``UNSCOPED_API_VIEWS`` with the
reason; tests/accounts/test_api_tenancy.py walks the URL patterns and fails on any
``/api/`` view that is neither scoped nor listed.
"""

from django.db.models import Model, QuerySet
from rest_framework.exceptions import NotFound
from rest_framework.request import Request

from accounts.models import Team
from accounts.selectors import user_primary_team
from arena_site.exceptions import ApplicationError

# Dotted path of the view class -> why it is not tenant-scoped.
UNSCOPED_API_VIEWS: dict[str, str] = {
    # Public: aggregates of the public arena, no team data (SPEC §7, §6).
    "ratings.api.LeaderboardApi": "public: the public arena's leaderboard",
    "ratings.metrics_views.MetricsApi": "public: latency and capacity aggregates",
    # Public: what an entrant needs before having an account.
    "agents.protocol_api.AgentProtocolApi": "public: the remote-agent protocol document",
    "drf_spectacular.views.SpectacularAPIView": "public: the OpenAPI schema",
    "arena_site.api_docs.SwaggerDocs": "public: the API's documentation page (the schema)",
    # Cross-tenant by design: crowd judging. A judge reads and votes on other teams'
    # battles, but only those served to them: access goes through the judge's own
    # assignments (judging.services), which answer 404 for any other battle.
    "judging.api.JudgeNextApi": "crowd judging: the next battle assigned to this judge",
    "judging.api.VoteCreateApi": "crowd judging: a vote on a battle served to this judge",
    "judging.api.VoteMineApi": "crowd judging: this judge's own vote on a battle",
    "judging.api.VoteReasonsApi": "crowd judging: the reasons of this judge's own vote",
    # Public: the reasons' fixed taxonomy (codes and definitions), no team data.
    "judging.api.ReasonTagsApi": "the vote reasons' taxonomy: no team data",
    # Public: the machine judge's board and its agreement with people, over decided
    # battles of the public arena only (docs/evaluations.md, "Machine judges").
    "judging.machine_api.MachineBoardApi": "public: the machine-judged board",
    "judging.machine_api.MachineAgreementApi": "public: human-machine agreement, decided battles",
    # Cross-tenant by design, as a battle's page is: its team, the judges it was served
    # to and staff (battles.selectors.access_battle, 404 for anyone else), once decided.
    "judging.machine_api.BattleMachineVerdictsApi": "a battle's machine verdicts, once decided",
    # Joining a team: the user is not a member yet; the invite's token is the authority
    # (accounts.services.team_invite_accept checks it, one use per person).
    "accounts.api.InviteAcceptApi": "joining a team through an invite link's token",
    # Public: open data of public arenas only, consented and past the publication delay,
    # judges pseudonymised (docs/open-data.md, "Who may call it").
    "exports.api.OpenDataIndexApi": "public: what the open data holds",
    "exports.api.OpenDataBattlesApi": "public: decided battles (open data)",
    "exports.api.OpenDataVotesApi": "public: final votes, judges pseudonymised (open data)",
    "exports.api.OpenDataExclusionsApi": "public: excluded battles and their rules (open data)",
    "exports.api.OpenDataRatingsApi": "public: the published board (open data)",
    "exports.api.OpenDataVote_ReasonsApi": "public: the exported votes' tags (open data)",
    "exports.api.OpenDataFollow_UpsApi": "public: the published battles' follow-ups, redacted",
    "exports.api.OpenDataArchiveApi": "public: the open data as one archive",
    "exports.api.OpenDataUnknownApi": "public: a 404 naming the open-data files there are",
    # Public like the open data: validated environments whose source battle the open data
    # publishes; staff see every one; any other is a 404 (docs/environments.md).
    "environments.api.EnvironmentListApi": "public: published training environments",
    "environments.api.EnvironmentPackageApi": "public: a published environment's package",
}

_OWNED = ("get_queryset", "get_object")


class TenantScopedApiMixin:
    """Set ``scoped_queryset(team_ids)``: the rows the request's teams may see. The
    path's ``lookup_url_kwarg`` (``pk``) names the object of a detail view."""

    request: Request
    kwargs: dict
    lookup_url_kwarg = "pk"

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in _OWNED:
            if getattr(cls, name) is not getattr(TenantScopedApiMixin, name):
                raise TypeError(
                    f"{cls.__qualname__} must not override or shadow {name}: tenant views "
                    "define scoped_queryset(team_ids) (accounts/tenancy.py). List "
                    "TenantScopedApiMixin before the DRF base class."
                )

    def get_team(self) -> Team:
        team = user_primary_team(self.request.user)
        if team is None:
            raise ApplicationError(
                "Your account belongs to no team; ask a team owner to add you.",
                code="no_team",
                status=403,
            )
        return team

    def get_team_ids(self) -> list[int]:
        user = self.request.user
        if not user.is_authenticated:
            return []
        return list(Team.objects.filter(memberships__user=user).values_list("id", flat=True))

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:  # pragma: no cover - abstract
        raise NotImplementedError

    def get_queryset(self) -> QuerySet:
        return self.scoped_queryset(self.get_team_ids())

    def get_object(self) -> Model:
        """The path's object within the scope; 404 for anything else."""
        queryset = self.get_queryset()
        try:
            obj = queryset.get(pk=self.kwargs[self.lookup_url_kwarg])
        except (queryset.model.DoesNotExist, ValueError, TypeError):
            raise NotFound("Not found.") from None
        self.check_object_permissions(self.request, obj)  # type: ignore[attr-defined]
        return obj

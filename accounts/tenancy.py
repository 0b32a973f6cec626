"""Tenant scoping. Every API view inherits ``TenantScopedApiMixin``: it owns the team a
request acts for and the scoped queryset, so a view cannot forget the filter. Any
bypass must be named ``dangerously_*``."""

from django.db.models import QuerySet
from rest_framework.request import Request

from accounts.models import Team
from accounts.selectors import user_primary_team
from arena_site.exceptions import ApplicationError


class TenantScopedApiMixin:
    """Views set ``scoped_queryset(team_ids)`` returning rows the teams may see."""

    request: Request

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
        return list(Team.objects.filter(memberships__user=user).values_list("id", flat=True))

    def scoped_queryset(self, team_ids: list[int]) -> QuerySet:  # pragma: no cover - abstract
        raise NotImplementedError

    def get_queryset(self) -> QuerySet:
        return self.scoped_queryset(self.get_team_ids())

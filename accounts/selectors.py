"""Reads for accounts."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Subquery

from accounts.models import Consent, ConsentTerms, Membership, Team, TeamInvite
from accounts.services import consent_terms_current


def user_teams(user: AbstractBaseUser) -> list[Team]:
    if not user.is_authenticated:
        return []
    return list(Team.objects.filter(memberships__user=user).order_by("memberships__created_at"))


def user_primary_team(user: AbstractBaseUser) -> Team | None:
    """The team a user acts for: their earliest membership."""
    if not user.is_authenticated:
        return None
    return Team.objects.filter(memberships__user=user).order_by("memberships__created_at").first()


def consent_is_current(user: AbstractBaseUser) -> bool:
    """True when the user has accepted the newest published terms (or none exist).
    One query on the path every submission takes."""
    newest = ConsentTerms.objects.order_by("-version").values("pk")[:1]
    if Consent.objects.filter(user=user, terms_id=Subquery(newest)).exists():
        return True
    return consent_terms_current() is None


def user_team(user: AbstractBaseUser, team_id: object) -> Team | None:
    """The team ``team_id`` if ``user`` is one of its members, else None (a missing
    team and another team's are the same None)."""
    if not user.is_authenticated:
        return None
    try:
        pk = int(team_id)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    if not 1 <= pk <= 2**63 - 1:  # PostgreSQL's bigint: a longer number names no row
        return None
    return Team.objects.filter(pk=pk, memberships__user=user).first()


def user_is_owner(user: AbstractBaseUser, team: Team) -> bool:
    return Membership.objects.filter(team=team, user=user, role=Membership.Role.OWNER).exists()


def user_owned_teams(user: AbstractBaseUser) -> list[Team]:
    """The teams ``user`` owns (who registers agents and invites people), oldest
    membership first."""
    if not user.is_authenticated:
        return []
    return list(
        Team.objects.filter(
            memberships__user=user, memberships__role=Membership.Role.OWNER
        ).order_by("memberships__created_at")
    )


def user_memberships(user: AbstractBaseUser) -> list[Membership]:
    """The user's memberships with their teams, oldest first (the first is the team
    they act for)."""
    if not user.is_authenticated:
        return []
    return list(Membership.objects.filter(user=user).select_related("team").order_by("created_at"))


def team_members(team: Team) -> list[Membership]:
    return list(team.memberships.select_related("user").order_by("created_at"))


def team_invites(team: Team) -> list[TeamInvite]:
    """The team's invites, newest first (owners only: the caller checks)."""
    return list(team.invites.select_related("created_by").order_by("-created_at", "-pk"))

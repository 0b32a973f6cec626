"""Reads for accounts."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Subquery

from accounts.models import Consent, ConsentTerms, Team
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

"""Writes for accounts: sign-up, consent, API tokens."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from accounts.models import ApiToken, Consent, ConsentTerms, Membership, Team
from arena_site.exceptions import ApplicationError

User = get_user_model()


@transaction.atomic
def team_create(*, name: str, owner: AbstractBaseUser) -> Team:
    if Team.objects.filter(name__iexact=name).exists():
        raise ApplicationError(
            f"A team named {name!r} already exists.", code="team_exists", status=409
        )
    team = Team.objects.create(name=name)
    Membership.objects.create(team=team, user=owner, role=Membership.Role.OWNER)
    return team


@transaction.atomic
def user_sign_up(*, username: str, password: str, team_name: str = "") -> AbstractBaseUser:
    """Creates the user and, with it, a team they own (their own name unless given)."""
    user = User.objects.create_user(username=username, password=password)
    team_create(name=team_name or username, owner=user)
    return user


def consent_terms_current() -> ConsentTerms | None:
    return ConsentTerms.objects.order_by("-version").first()


@transaction.atomic
def consent_terms_publish(*, text: str) -> ConsentTerms:
    """Publishes a new version; every user must accept it before submitting again."""
    latest = ConsentTerms.objects.select_for_update().order_by("-version").first()
    return ConsentTerms.objects.create(version=(latest.version + 1) if latest else 1, text=text)


def consent_accept(*, user: AbstractBaseUser, terms: ConsentTerms) -> Consent:
    consent, _ = Consent.objects.get_or_create(user=user, terms=terms)
    return consent


def api_token_create(*, user: AbstractBaseUser, name: str = "default") -> tuple[ApiToken, str]:
    """Returns the row and the plain token. The plain token is never stored: show it once."""
    plain = ApiToken.PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        hint=plain[: len(ApiToken.PREFIX) + 6],
        digest=ApiToken.digest_of(plain),
    )
    return token, plain


def api_token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())

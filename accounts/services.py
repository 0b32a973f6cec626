"""Writes for accounts: sign-up, consent, API tokens, team invites."""

import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import ApiToken, Consent, ConsentTerms, Membership, Team, TeamInvite
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


# --- team owners and invites ------------------------------------------------------------


def team_owner_check(*, user: AbstractBaseUser, team: Team, doing: str) -> None:
    """Only an owner of ``team`` may do ``doing`` (e.g. "invite people"). The caller has
    already made sure ``user`` is a member (a non-member gets 404 from the view, as
    for any row of another team); a member who is not an owner gets 403."""
    is_owner = Membership.objects.filter(team=team, user=user, role=Membership.Role.OWNER).exists()
    if not is_owner:
        raise ApplicationError(
            f"Only an owner of team {team.name} may {doing}; ask one of its owners.",
            code="not_team_owner",
            status=403,
        )


@transaction.atomic
def team_invite_create(
    *,
    team: Team,
    actor: AbstractBaseUser,
    max_uses: int = 1,
    days: int = TeamInvite.DEFAULT_DAYS,
) -> tuple[TeamInvite, str]:
    """An invite link for ``team``: ``max_uses`` people (1–50) may join through it
    within ``days`` (1–30). Returns the row and the plain token, which is never stored
    (only its digest): show it once. Only an owner may create one."""
    team_owner_check(user=actor, team=team, doing="invite people")
    if not 1 <= max_uses <= TeamInvite.MAX_USES:
        raise ApplicationError(
            f"max_uses must be 1 to {TeamInvite.MAX_USES}, got {max_uses}.", code="invalid"
        )
    if not 1 <= days <= TeamInvite.MAX_DAYS:
        raise ApplicationError(
            f"days must be 1 to {TeamInvite.MAX_DAYS}, got {days}.", code="invalid"
        )
    plain = TeamInvite.PREFIX + secrets.token_urlsafe(24)
    invite = TeamInvite.objects.create(
        team=team,
        created_by=actor,
        hint=plain[: len(TeamInvite.PREFIX) + 6],
        digest=TeamInvite.digest_of(plain),
        max_uses=max_uses,
        expires_at=timezone.now() + timedelta(days=days),
    )
    return invite, plain


@transaction.atomic
def team_invite_revoke(*, invite: TeamInvite, actor: AbstractBaseUser) -> TeamInvite:
    """Ends the link at once (idempotent). Only an owner of its team may."""
    team_owner_check(user=actor, team=invite.team, doing="revoke invites")
    TeamInvite.objects.filter(pk=invite.pk, revoked_at=None).update(revoked_at=timezone.now())
    invite.refresh_from_db(fields=["revoked_at"])
    return invite


def team_invite_find(plain: str) -> TeamInvite:
    """The invite whose token is ``plain``, whatever its state; ``ApplicationError``
    404 ``invite_not_found`` for a token that names none (mistyped, cut short)."""
    invite = (
        TeamInvite.objects.select_related("team", "created_by")
        .filter(digest=TeamInvite.digest_of(plain))
        .first()
        if isinstance(plain, str) and plain.startswith(TeamInvite.PREFIX) and len(plain) <= 100
        else None
    )
    if invite is None:
        raise ApplicationError(
            "This invite link is not valid: check that it was copied whole, or ask the "
            "team's owner for a new one.",
            code="invite_not_found",
            status=404,
        )
    return invite


INVITE_REFUSALS = {
    "revoked": "This invite link was revoked by the team's owner; ask them for a new one.",
    "used": "This invite link has been used as many times as it allows; ask the team's "
    "owner for a new one.",
    "expired": "This invite link has expired; ask the team's owner for a new one.",
}


def team_invite_check(invite: TeamInvite) -> None:
    """Raises ``ApplicationError`` 410 (invite_revoked / invite_used / invite_expired)
    unless the invite still admits someone."""
    state = invite.state(timezone.now())
    if state != "active":
        raise ApplicationError(INVITE_REFUSALS[state], code=f"invite_{state}", status=410)


@transaction.atomic
def team_invite_accept(*, plain: str, user: AbstractBaseUser) -> Membership:
    """``user`` joins the invite's team as a member, spending one use. The caller has
    checked that ``user`` is signed in and has accepted the current consent terms.
    Someone already in the team gets 409 ``already_member`` and spends nothing.

    The use is taken by one conditional UPDATE (still unrevoked, unexpired, with a use
    left) whose row count is checked, so a link of N uses admits at most N people
    however many open it at once."""
    invite = team_invite_find(plain)
    team_invite_check(invite)
    if Membership.objects.filter(team=invite.team, user=user).exists():
        raise ApplicationError(
            f"You are already a member of team {invite.team.name}.",
            code="already_member",
            status=409,
        )
    taken = TeamInvite.objects.filter(
        pk=invite.pk,
        revoked_at=None,
        expires_at__gt=timezone.now(),
        uses__lt=F("max_uses"),
    ).update(uses=F("uses") + 1)
    if taken != 1:  # someone took the last use, or an owner revoked it, meanwhile
        invite.refresh_from_db()
        team_invite_check(invite)
        raise ApplicationError(INVITE_REFUSALS["used"], code="invite_used", status=410)
    membership, created = Membership.objects.get_or_create(
        team=invite.team, user=user, defaults={"role": Membership.Role.MEMBER}
    )
    if not created:  # joined through another link meanwhile: give the use back
        TeamInvite.objects.filter(pk=invite.pk).update(uses=F("uses") - 1)
    return membership

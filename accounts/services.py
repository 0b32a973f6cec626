"""Writes for accounts: sign-up, consent, API tokens, team invites and members, and
what a log-out or a membership removed tells the user's open sockets."""

import logging
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from accounts import token_cache
from accounts.models import ApiToken, Consent, ConsentTerms, Membership, Team, TeamInvite
from arena_site.exceptions import ApplicationError
from arena_site.realtime import sockets_recheck, sockets_session_ended

User = get_user_model()
logger = logging.getLogger(__name__)


@transaction.atomic
def team_create(*, name: str, owner: AbstractBaseUser) -> Team:
    if Team.objects.filter(name__iexact=name).exists():
        raise ApplicationError(
            f"A team named {name!r} already exists.", code="team_exists", status=409
        )
    team = Team.objects.create(name=name)
    Membership.objects.create(team=team, user=owner, role=Membership.Role.OWNER)
    return team


def user_sign_up(
    *, username: str, password: str, team_name: str = "", invited: bool = False
) -> AbstractBaseUser | None:
    """Creates the user and, with it, a team they own (their own name unless given), or
    nothing at all when the username or the team's name is taken (either compared
    without case): then None. The caller answers both alike, so sign-up does not tell
    whether an account or a team exists (docs/security.md "Sign-up"); the password is
    hashed and both names are looked up either way, so both take about as long. The
    password has passed the validators (the form's job).

    ``invited``: the visitor came from a valid invite link, whose team becomes theirs
    once they join through it (after logging in and accepting the consent terms), so
    no team of their own is made (and ``team_name`` is ignored)."""
    encoded = make_password(password)
    name = team_name or username
    try:
        with transaction.atomic():
            _sign_ups_serialised()
            user_taken = User.objects.filter(username__iexact=username).exists()
            team_taken = not invited and Team.objects.filter(name__iexact=name).exists()
            if user_taken or team_taken:
                return None
            user = User(username=User.normalize_username(username), password=encoded)
            user.save()
            if not invited:
                team = Team.objects.create(name=name)
                Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    except IntegrityError:  # a sign-up racing for the same name committed first
        return None
    return user


# pg_advisory_xact_lock's key for sign-ups (any constant no other lock uses).
_SIGN_UP_LOCK = 0x5167_6E55


def _sign_ups_serialised() -> None:
    """Sign-ups take turns (for milliseconds: the password is hashed before): the unique
    constraints compare names with case, the rule without, so two sign-ups of "Ann" and
    "ann" at once must not both pass the look-up. SQLite's writers take turns anyway."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_SIGN_UP_LOCK])


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
    """The token stops working for every web process from the next request on."""
    api_tokens_forget(digests=[token.digest])
    ApiToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())


def api_tokens_forget(*, digests: list[str]) -> None:
    """Call before a change that may end these tokens (a revocation, an edit, a
    deletion) in the same transaction: their cached entries (accounts.token_cache)
    give way to tombstones at once, so every web process reads the database for them
    from the next request on; raises, and so stops the change, when Redis cannot be
    told. Told again after the commit (logged on failure), in case the transaction
    outlasted the tombstones."""
    token_cache.forget(digests)

    def again() -> None:
        try:
            token_cache.forget(digests)
        except Exception:
            logger.exception("forgetting %d API tokens after the commit failed", len(digests))

    transaction.on_commit(again)


def user_tokens_forget(*, user_ids: Iterable[int]) -> None:
    """``api_tokens_forget`` for every token of these users: call before deactivating,
    changing (staff, superuser, username) or deleting them, in the same transaction."""
    digests = ApiToken.objects.filter(user_id__in=list(user_ids)).values_list("digest", flat=True)
    api_tokens_forget(digests=list(digests))


def api_tokens_last_used_flush() -> int:
    """Writes the tokens' last-used times that requests recorded in Redis to the
    database, in one statement; returns how many tokens it wrote. A time recorded
    again meanwhile stays for the next flush."""
    taken = token_cache.last_used_taken()
    if taken:
        used = [
            ApiToken(pk=pk, last_used_at=datetime.fromtimestamp(at, UTC))
            for pk, at in taken.items()
        ]
        ApiToken.objects.bulk_update(used, ["last_used_at"])
        token_cache.last_used_drop(taken)
    return len(taken)


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


# --- members leaving, and what their sockets hear -----------------------------------------


@transaction.atomic
def team_member_remove(*, team: Team, member: AbstractBaseUser, actor: AbstractBaseUser) -> None:
    """``member`` leaves ``team``: removed by one of its owners, or by themselves. A team
    keeps at least one owner (409 ``last_owner``); someone not in the team is a 404
    ``not_member``. The owners' rows are locked first, so two owners removing each
    other at once cannot leave the team without one. After the commit the member's
    open sockets check their access again: a battle of the team stops reaching them
    at once (arena_site/realtime.py)."""
    owners = list(
        Membership.objects.select_for_update()
        .filter(team=team, role=Membership.Role.OWNER)
        .values_list("user_id", flat=True)
    )
    if actor.pk != member.pk and actor.pk not in owners:
        team_owner_check(user=actor, team=team, doing="remove members")  # raises 403
    membership = Membership.objects.filter(team=team, user=member).first()
    if membership is None:
        raise ApplicationError(
            f"{member.get_username()} is not a member of team {team.name}.",
            code="not_member",
            status=404,
        )
    if owners == [member.pk]:
        raise ApplicationError(
            f"{member.get_username()} is the only owner of team {team.name}; make another "
            "member an owner first (an operator can, in the admin).",
            code="last_owner",
            status=409,
        )
    membership.delete()
    user_sockets_recheck(user_ids=[member.pk])


def user_sockets_recheck(*, user_ids: list[int]) -> None:
    """After the commit, the users' open sockets check whether they may still hear what
    they hear, and close if not (a membership removed, a team deleted)."""
    for user_id in user_ids:
        transaction.on_commit(lambda user_id=user_id: sockets_recheck(user_id))


def user_logged_out_sockets(sender, request, user, **kwargs) -> None:
    """Receiver of Django's ``user_logged_out`` (the one signal both the site's and the
    admin's log-out send, before the session is flushed): the sockets opened with that
    session close at once; the user's other sessions keep theirs."""
    session = getattr(request, "session", None)
    if user is not None and session is not None and session.session_key:
        sockets_session_ended(user.pk, session.session_key)

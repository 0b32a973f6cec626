"""Bearer-token authentication for the API: ``Authorization: Bearer arena_…``.

A request with a token costs one Redis round trip and no database statement while the
token's entry is cached (``accounts.token_cache``: at most a minute, ended at once for
every web process by a revocation, a deactivation or a change of the user). The same
round trip checks the client address's failed tokens, records the token's last use
(written to the database a minute at a time by ``api_tokens_last_used_flush``) and
counts the per-user rate limits the view names (``rate_windows``, by HTTP method; the
counts are on ``request.auth.counted``). Without an entry the token and its user are
read (one SELECT) and the entry stored in a second round trip.

Failed tokens are counted per client address (``accounts.throttling.BAD_TOKENS``, in
Redis); once an address has used up its failures, its bearer requests are answered 429
without the token being looked up."""

from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import router
from rest_framework import authentication, exceptions

from accounts import token_cache
from accounts.models import ApiToken
from accounts.throttling import BAD_TOKENS
from arena_site.ratelimit import UserWindow, client_address


@dataclass(frozen=True)
class TokenAuth:
    """``request.auth`` of a bearer request: the token's id, and what its round trip
    counted per rate window (``arena_site.ratelimit.counted_in_request``)."""

    token_id: int
    counted: dict[str, int] = field(default_factory=dict)


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode(errors="replace") not in self.keywords:
            return None
        address = client_address(request)
        if len(header) != 2:
            _refuse_if_spent(BAD_TOKENS.exhausted(address))
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        digest = ApiToken.digest_of(header[1].decode(errors="replace"))
        windows = _rate_windows(request)
        found = token_cache.look_up(
            digest=digest, address=address, bad_tokens=BAD_TOKENS, windows=windows
        )
        _refuse_if_spent(found.refused_for)
        if found.entry is not None:
            return _user_of(found.entry), TokenAuth(int(found.entry["t"]), found.counted)
        token = (
            ApiToken.objects.select_related("user").filter(digest=digest, revoked_at=None).first()
        )
        if token is None or not token.user.is_active:
            BAD_TOKENS.hit(address)
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        filled = token_cache.look_up(
            digest=digest,
            address=address,
            bad_tokens=BAD_TOKENS,
            windows=windows,
            fill=token_cache.entry_for(token_id=token.pk, user=token.user),
        )
        return token.user, TokenAuth(token.pk, filled.counted)

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


def _refuse_if_spent(retry: int | None) -> None:
    if retry is not None:
        raise exceptions.Throttled(
            wait=retry,
            detail=f"Too many invalid API tokens from your address: at most "
            f"{BAD_TOKENS.limit} in {BAD_TOKENS.window_s // 60} minutes.",
        )


def _rate_windows(request) -> tuple[UserWindow, ...]:
    """The per-user windows the view counts for this method (DRF's request knows its
    view; a plain Django request, ``consent_required_or_token``, names none)."""
    view = (getattr(request, "parser_context", None) or {}).get("view")
    return tuple(getattr(view, "rate_windows", {}).get(request.method, ()))


def _user_of(entry: dict[str, str]):
    """The user, as loaded from the database with only the entry's fields: any other
    field is read when first used (Django's deferred fields), never made up."""
    User = get_user_model()
    known = {
        User._meta.pk.attname: int(entry["u"]),
        User.USERNAME_FIELD: entry["n"],
        "is_active": True,
        "is_staff": entry["s"] == "1",
        "is_superuser": entry["S"] == "1",
    }
    names = [f.attname for f in User._meta.concrete_fields if f.attname in known]
    return User.from_db(router.db_for_read(User), names, [known[name] for name in names])

"""Bearer-token authentication for the API: ``Authorization: Bearer arena_…``.

Failed tokens are counted per client address (``accounts.throttling.BAD_TOKENS``, in
Redis); once an address has used up its failures, its bearer requests are answered 429
without the token being looked up. A good token costs one Redis read, no write."""

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from accounts.models import ApiToken
from accounts.throttling import BAD_TOKENS
from arena_site.ratelimit import client_address

LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode(errors="replace") not in self.keywords:
            return None
        address = client_address(request)
        retry = BAD_TOKENS.exhausted(address)
        if retry is not None:
            raise exceptions.Throttled(
                wait=retry,
                detail=f"Too many invalid API tokens from your address: at most "
                f"{BAD_TOKENS.limit} in {BAD_TOKENS.window_s // 60} minutes.",
            )
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        plain = header[1].decode(errors="replace")
        token = (
            ApiToken.objects.select_related("user")
            .filter(digest=ApiToken.digest_of(plain), revoked_at=None)
            .first()
        )
        if token is None or not token.user.is_active:
            BAD_TOKENS.hit(address)
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        now = timezone.now()
        # "last used" to the minute: a write per request would tax every API call
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'

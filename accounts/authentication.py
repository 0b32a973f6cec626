"""Bearer-token authentication for the API: ``Authorization: Bearer arena_…``."""

from django.utils import timezone
from rest_framework import authentication, exceptions

from accounts.models import ApiToken


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode(errors="replace") not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        plain = header[1].decode(errors="replace")
        token = (
            ApiToken.objects.select_related("user")
            .filter(digest=ApiToken.digest_of(plain), revoked_at=None)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'

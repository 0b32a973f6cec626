"""ASGI entry point: HTTP through Django, websockets through Channels."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
django.setup(set_prefix=False)

from arena_site.handlers import OneHopASGIHandler  # noqa: E402
from arena_site.heap import freeze_loaded  # noqa: E402

django_asgi_app = OneHopASGIHandler()

from django.urls import get_resolver  # noqa: E402

# The URLconf (every view, and through them the provider SDKs) loads now, before the
# server listens, not inside the first request: a cold first request holds one of the
# ARENA_MAX_INFLIGHT slots for seconds, and every request behind it would be shed.
get_resolver().url_patterns  # noqa: B018

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from arena_site.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

# What is loaded now lives as long as the process: frozen out of the collector's scans,
# whose full collections stopped every request for 240-440 ms (arena_site/heap.py).
freeze_loaded()

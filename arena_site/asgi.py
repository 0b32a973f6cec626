"""ASGI entry point: HTTP through Django, websockets through Channels."""

import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
django.setup(set_prefix=False)

from arena_site.handlers import OneHopASGIHandler  # noqa: E402

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

# What is loaded now (Django, the URLconf, the provider SDKs: about 400,000 objects)
# lives as long as the process. Left to the collector, every full collection scans it
# all: 240-440 ms with the event loop and every request thread stopped, several times
# a minute under votes (measured: bench_votes.py's slow seconds were these pauses, p99
# 300-600 ms at 300/s). Frozen, they are never scanned again; only what requests make
# is collected. The same as Python's docs advise for a server's start-up (gc.freeze).
gc.collect()
gc.freeze()

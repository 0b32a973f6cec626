"""The ASGI handler for HTTP: Django's, with its middleware chain loaded synchronously
and entered once per request from the event loop.

Django's own ASGI handler loads the chain in async mode: every middleware that can run
both ways (the ``MiddlewareMixin`` ones: security, CSP, sessions, common, CSRF, auth,
messages, clickjacking) then runs its ``process_request``/``process_response`` through
``sync_to_async``, a thread hop each, and a sync-only one (WhiteNoise) hops back with
``async_to_sync``; the views are all synchronous (DRF) anyway. Measured on a 2-core
machine, those hops were about a third of the CPU of a request that runs no query.
Loaded in sync mode, the whole chain and the view run in one thread per request
(``ThreadSensitiveContext``: requests still run concurrently, each in its own thread),
entered through a single ``sync_to_async``."""

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class OneHopASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)

"""The ASGI handler for HTTP: Django's, with its middleware chain loaded synchronously
and entered once per request from the event loop, on threads kept between requests.

Django's own ASGI handler loads the chain in async mode: every middleware that can run
both ways (the ``MiddlewareMixin`` ones: security, CSP, sessions, common, CSRF, auth,
messages, clickjacking) then runs its ``process_request``/``process_response`` through
``sync_to_async``, a thread hop each, and a sync-only one (WhiteNoise) hops back with
``async_to_sync``; the views are all synchronous (DRF) anyway. Measured on a 2-core
machine, those hops were about a third of the CPU of a request that runs no query.
Loaded in sync mode, the whole chain and the view run in one thread per request,
entered through a single ``sync_to_async``.

**Kept threads.** Django gives each request a ``ThreadSensitiveContext`` of its own,
whose executor starts a new thread for the request and joins it at the end: profiled
under uvicorn, starting, waking and joining that thread was about a third of a 404's
CPU. Here a request takes one of ``ARENA_MAX_INFLIGHT`` + ``SPARE_THREADS`` kept
single-thread executors (``ThreadSensitiveContext(executor=…)``, asgiref's own way to
pass one) and gives it back when its response is sent, so every thread-sensitive hop
of the request (the ``request_started`` signal, the chain, a streamed body, the close
that ends with ``request_finished``) still runs on one thread, as before, and each
thread serves one request at a time. When every kept thread is busy (a burst beyond
the in-flight bound: shedding answers it inside the chain), the request gets a thread
of its own, exactly as Django does it, so nothing ever waits for a kept thread.
Nothing of ours keeps per-thread state between requests; Django's database
connection goes back to the pool at ``request_finished``, as under any threaded WSGI
server."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse
from django.urls import set_script_prefix, set_urlconf
from django.utils.log import log_response

# Kept threads beyond the in-flight bound: static files are not counted by it.
SPARE_THREADS = 8


class _Sent(Exception):
    """A streamed response was sent in full (ends the task group)."""


class OneHopASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self._keep = settings.ARENA.max_inflight + SPARE_THREADS
        self._made = 0
        self._idle: list[ThreadPoolExecutor] = []

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        self._sync_chain = self._middleware_chain
        self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)
        self._respond = sync_to_async(self._respond_sync, thread_sensitive=True)

    async def handle(self, scope, receive, send):
        """Django's ``ASGIHandler.handle`` with one thread hop for a whole request whose
        response is in memory: ``request_started``, the request, the middleware chain
        and the view, and the response's ``close`` (``request_finished``: its database
        connection back to the pool) all run in one call on the request's thread;
        the event loop then only sends the bytes. A streamed response (server-sent
        events, files) is sent as Django sends it, watching for the client leaving,
        and closed on the same thread afterwards."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            set_script_prefix(get_script_prefix(scope))
            response = await self._respond(scope, body_file)
            if not response.streaming:
                await self.send_response(response, send)
                return
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.listen_for_disconnect(receive))
                    await self.send_response(response, send)
                    raise _Sent
            except* (_Sent, RequestAborted):
                pass
            await sync_to_async(response.close, thread_sensitive=True)()
        finally:
            body_file.close()

    def _respond_sync(self, scope, body_file):
        """On the request's thread: the response, closed unless it is streamed."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            set_urlconf(settings.ROOT_URLCONF)
            response = self._sync_chain(request)
            response._resource_closers.append(request.close)
            if response.status_code >= 400:
                log_response("%s: %s", response.reason_phrase, request.path,
                             response=response, request=request)  # fmt: skip
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if not response.streaming:
            response.close()  # the content stays; request_finished runs here
        return response

    def _take(self) -> ThreadPoolExecutor | None:
        """A kept executor, or None when every one is busy (runs on the event loop:
        no lock needed)."""
        if self._idle:
            return self._idle.pop()
        if self._made < self._keep:
            self._made += 1
            name = f"arena-request-{self._made}"
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self._take()
        if executor is None:
            async with ThreadSensitiveContext():
                await self.handle(scope, receive, send)
            return
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self._idle.append(executor)

"""Egress without a shared file system: the worker's end of a sandbox's ``egress``
channel (docs/sandboxes.md, "The network contract").

Inside, the front (``sandboxes/inside/relay.py``) listens where the supervisor forwards
its ``127.0.0.1:3128`` (``/run/arena/egress.sock``) and carries each connection as a
numbered stream over one authenticated channel (``relay.Mux``: bounded per-stream
windows, a stream that does not read pauses its sender). Here each stream the sandbox
opens is connected to the worker's egress proxy on a listener the proxy serves for the
run alone (``EgressProxyThread.serve_unix`` on a path in a directory only the worker
reaches): the proxy sees an ordinary connection of that run, with the run's identity,
bounds, refusals and counters, as it sees a local sandbox's.

:class:`TunnelLoop` is one event loop on a thread of its own serving every tunnel of
the process; :func:`open_egress_tunnel` wires one sandbox.
"""

import asyncio
import contextlib
import os
import secrets
import socket
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxes.channel import handshake
from sandboxes.inside import relay

if TYPE_CHECKING:
    from sandboxes.egress import EgressProxyThread

CONNECT_TIMEOUT_S = 10.0  # a stream's connect to the proxy's listener
STOP_TIMEOUT_S = 5.0


class Tunnel:
    """One sandbox's egress tunnel on a :class:`TunnelLoop`: streams the sandbox opens
    go to ``proxy_path``. :meth:`close` ends it (and every stream)."""

    def __init__(self, loop: "TunnelLoop", proxy_path: str) -> None:
        self.loop = loop
        self.proxy_path = proxy_path
        self.mux: relay.Mux | None = None
        self.task: asyncio.Task[None] | None = None
        self.ended = threading.Event()
        self.error: str | None = None

    async def opener(self, stream_id: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.wait_for(
            asyncio.open_unix_connection(self.proxy_path), CONNECT_TIMEOUT_S
        )

    async def serve(self, sock: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=sock)
            self.mux = relay.Mux(reader, writer, first_id=2, opener=self.opener)
            await self.mux.run()
        except relay.WireError as exc:
            self.error = str(exc)
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.error = repr(exc)
        finally:
            self.ended.set()

    def open_streams(self) -> int:
        """Streams open now (read on the tunnel's loop)."""

        async def count() -> int:
            return len(self.mux.streams) if self.mux else 0

        return self.loop.call(count())

    def close(self) -> None:
        """Ends the tunnel and its streams; waits until they are gone. Idempotent."""

        async def stop() -> None:
            if self.mux is not None:
                self.mux.close()
            if self.task is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(self.task), STOP_TIMEOUT_S)

        if not self.ended.is_set():
            self.loop.call(stop())


class TunnelLoop:
    """An event loop on a daemon thread that serves egress tunnels."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="egress-tunnels", daemon=True
        )
        self._thread.start()

    def call[T](self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the loop and returns its result (waits at most 10 s)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(STOP_TIMEOUT_S * 2)

    def attach(self, sock: socket.socket, proxy_path: str) -> Tunnel:
        """Serves a tunnel on ``sock`` (an authenticated ``egress`` channel; this loop
        owns it from now) whose streams go to ``proxy_path``."""
        tunnel = Tunnel(self, proxy_path)
        sock.setblocking(False)

        async def start() -> None:
            tunnel.task = asyncio.get_running_loop().create_task(tunnel.serve(sock))

        self.call(start())
        return tunnel

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self.call(cancel_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()


def proxy_listener(egress: "EgressProxyThread", run_id: int, socket_dir: Path) -> str:
    """A listener of the egress proxy for ``run_id`` alone, in ``socket_dir`` (made
    0700 here: only the worker connects to it); ``egress.release(run_id)`` removes it."""
    socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(socket_dir, 0o700)
    path = socket_dir / f"egress-{run_id}-{secrets.token_hex(4)}.sock"
    return egress.serve_unix(path, run_id)


def open_egress_tunnel(
    loop: TunnelLoop,
    egress: "EgressProxyThread",
    run_id: int,
    sock: socket.socket,
    secret: bytes,
    *,
    socket_dir: Path,
    timeout_s: float = relay.HANDSHAKE_TIMEOUT_S,
) -> Tunnel:
    """Authenticates ``sock`` (a byte stream to the sandbox's front, e.g. an
    ``ExecStream``'s socket) as its ``egress`` channel and serves it on ``loop``, every
    stream connected to a listener of ``egress`` for ``run_id``. Raises ChannelError
    (ChannelRefused: the front refused) and closes ``sock`` on failure."""
    try:
        handshake(sock, secret, "egress", timeout_s=timeout_s)
        path = proxy_listener(egress, run_id, socket_dir)
    except BaseException:
        sock.close()
        raise
    return loop.attach(sock, path)

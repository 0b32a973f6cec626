"""The worker's end of the network contract (docs/sandboxes.md, "The network contract"):
an authenticated, versioned channel to a sandbox's front (``sandboxes/inside/relay.py``),
over any byte stream.

Two transports carry it here: a unix socket the worker can reach (a local sandbox's
``channel.sock``) and :class:`ExecStream`, a process's stdio inside a running container
through the engine's exec API (``relay.py pipe``), which needs nothing of the engine's
host but its API: no shared file system, no port. A Kubernetes backend would carry the
same bytes over the API server's exec stream.

On the stream: :func:`handshake` (version, kind and a challenge answered with the
per-sandbox secret), then frames of a bounded size (``relay.HEADER``). A ``control``
channel carries one JSON request and one JSON reply at a time (:class:`ChannelClient`);
an ``egress`` channel carries streams (``sandboxes.egress_tunnel``).
"""

import contextlib
import json
import logging
import secrets
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from sandboxes.base import ToolError
from sandboxes.control import reply_of
from sandboxes.inside import relay

logger = logging.getLogger(__name__)

RELAY = "/opt/arena/inside/relay.py"
PYTHON = "/usr/bin/python3"
SECRET_BYTES = 32
# The engine's multiplexed stdio (an exec without a TTY): a stream type, three zero
# bytes, the payload's length.
ENGINE_HEADER_BYTES = 8
STDOUT, STDERR = 1, 2
STDERR_KEEP_BYTES = 4096  # of the relay's stderr, for error messages
CHUNK_BYTES = 64 * 1024


class ChannelError(ToolError):
    """The channel failed: the sandbox went away, broke the protocol or timed out."""


class ChannelRefused(ChannelError):
    """The other end refused the channel (a wrong secret or version, a frame too big)."""


def new_secret() -> bytes:
    """A per-sandbox secret, made by the worker at provisioning."""
    return secrets.token_bytes(SECRET_BYTES)


def relay_argv(
    socket_path: str = relay.CHANNEL_SOCKET, wait_s: float = relay.CONNECT_TIMEOUT_S
) -> list[str]:
    """The in-container end of an :class:`ExecStream`: ``relay.py pipe``."""
    return [PYTHON, "-I", RELAY, "pipe", socket_path, "--wait", f"{wait_s:g}"]


def front_argv(command: list[str], *, egress: bool) -> list[str]:
    """A container's command that puts the front before ``command`` (the supervisor's):
    its environment must carry the secret in ``relay.SECRET_ENV``."""
    return [PYTHON, "-I", RELAY, "front", *(["--egress"] if egress else []), "--", *command]


# -- frames over a blocking socket ---------------------------------------------------


def _recv_exact(sock: socket.socket, size: int, deadline: float) -> bytes:
    chunks, left = [], size
    while left:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            chunk = sock.recv(min(left, CHUNK_BYTES))
        except TimeoutError:
            raise ChannelError("the sandbox did not answer in time") from None
        except OSError as exc:
            raise ChannelError(f"the channel broke: {exc}") from None
        if not chunk:
            raise ChannelError("the channel closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket, limits: dict[int, int], deadline: float) -> tuple[int, bytes]:
    """The next frame's type and payload. A header claiming more than its type's limit
    is refused before its payload is read (the channel is then unusable); an ERROR
    frame raises :class:`ChannelRefused` with the peer's reason."""
    header = _recv_exact(sock, relay.HEADER.size, deadline)
    try:
        ftype, _, length = relay.check_header(
            header, {**limits, relay.ERROR: relay.MAX_HANDSHAKE_BYTES}
        )
    except relay.WireError as exc:
        raise ChannelError(f"the sandbox broke the protocol: {exc}") from None
    payload = _recv_exact(sock, length, deadline) if length else b""
    if ftype == relay.ERROR:
        raise ChannelRefused(relay.error_text(payload))
    return ftype, payload


def send_frame(sock: socket.socket, ftype: int, payload: bytes, deadline: float) -> None:
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    try:
        sock.sendall(relay.frame(ftype, 0, payload))
    except TimeoutError:
        raise ChannelError("the sandbox did not take the request in time") from None
    except OSError as exc:
        raise ChannelError(f"the channel broke: {exc}") from None


def handshake(
    sock: socket.socket,
    secret: bytes,
    kind: str,
    *,
    timeout_s: float = relay.HANDSHAKE_TIMEOUT_S,
    version: int = relay.VERSION,
) -> None:
    """The connecting end of the handshake (``relay.accept_handshake``); raises
    :class:`ChannelRefused` with the front's reason when it refuses. ``version`` is a
    test's way to speak another version."""
    deadline = time.monotonic() + timeout_s
    limits = {relay.HANDSHAKE: relay.MAX_HANDSHAKE_BYTES}

    def message() -> dict[str, Any]:
        _, payload = read_frame(sock, limits, deadline)
        try:
            value = json.loads(payload)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise ChannelError("the sandbox answered the handshake with garbage")
        return value

    hello = {"version": version, "kind": kind}
    send_frame(sock, relay.HANDSHAKE, json.dumps(hello).encode(), deadline)
    challenge = message()
    try:
        nonce = bytes.fromhex(str(challenge.get("nonce")))
    except ValueError:
        raise ChannelError("the sandbox answered the handshake with garbage") from None
    if challenge.get("version") != relay.VERSION or len(nonce) < 16:
        raise ChannelError("the sandbox answered the handshake with garbage")
    answer = {"proof": relay.proof(secret, kind, nonce)}
    send_frame(sock, relay.HANDSHAKE, json.dumps(answer).encode(), deadline)
    if message().get("ok") is not True:
        raise ChannelError("the sandbox did not accept the channel")


class ChannelClient:
    """One request and one reply at a time over an authenticated ``control`` channel;
    ``connect`` opens a fresh byte stream to the front when there is none (the first
    call, or after a failure). Replies over ``max_reply_bytes`` are refused unread."""

    def __init__(
        self,
        connect: Callable[[float], socket.socket],
        secret: bytes,
        *,
        max_reply_bytes: int = relay.MAX_MESSAGE_BYTES,
    ) -> None:
        self.connect = connect
        self.secret = secret
        self.max_reply_bytes = max_reply_bytes
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()

    def call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        payload = json.dumps(request).encode()
        if len(payload) > relay.MAX_MESSAGE_BYTES:
            raise ToolError("the request exceeds the channel's frame limit")
        with self.lock:
            deadline = time.monotonic() + timeout_s
            try:
                if self.sock is None:
                    sock = self.connect(timeout_s)
                    try:
                        handshake(sock, self.secret, "control", timeout_s=timeout_s)
                    except BaseException:
                        sock.close()
                        raise
                    self.sock = sock
                send_frame(self.sock, relay.MESSAGE, payload, deadline)
                _, line = read_frame(self.sock, {relay.MESSAGE: self.max_reply_bytes}, deadline)
            except BaseException:
                self._close()
                raise
        return reply_of(line)

    def _close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
        self.sock = None

    def close(self) -> None:
        with self.lock:
            self._close()


def unix_connector(path: str) -> Callable[[float], socket.socket]:
    """A transport for :class:`ChannelClient`: the front's socket, reached directly."""

    def connect(timeout_s: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise ChannelError(f"cannot reach the sandbox's channel: {exc}") from None
        return sock

    return connect


# -- the engine's exec stream ----------------------------------------------------------


class ExecStream:
    """A process in a running container (``argv``, by default ``relay.py pipe``), its
    stdin and stdout as one byte stream: :attr:`socket` is this end, a plain socket
    (any code that speaks to a socket speaks to the process). Two threads move the
    bytes: the engine's multiplexed output is split by its 8-byte headers (stdout to
    :attr:`socket`, stderr kept for :meth:`stderr`), and what is written to
    :attr:`socket` goes to the process's stdin. Closing :attr:`socket` half-closes the
    process's stdin where the connection to the engine allows it (plain TCP or a unix
    socket; over TLS the whole connection closes) and ends the stream."""

    def __init__(
        self,
        api: Any,
        container: str,
        argv: list[str] | None = None,
        *,
        user: str = "",
        environment: dict[str, str] | None = None,
    ) -> None:
        created = api.exec_create(
            container,
            argv or relay_argv(),
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            user=user,
            environment=environment,
        )
        self.api, self.exec_id = api, created["Id"]
        raw = api.exec_start(self.exec_id, socket=True)
        self.engine: socket.socket = getattr(raw, "_sock", raw)
        self.engine.settimeout(None)
        self._tls = threading.Lock() if isinstance(self.engine, ssl.SSLSocket) else None
        # The engine's HTTP response (docker-py hangs it on the socket): it must live as
        # long as the stream, or its collection closes the socket.
        self._raw, self._response = raw, getattr(raw, "_response", raw)
        self.socket, self._near = socket.socketpair()
        self._stderr = bytearray()
        self._closed = threading.Event()
        self._threads = [
            threading.Thread(target=self._output, name="exec-out", daemon=True),
            threading.Thread(target=self._input, name="exec-in", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _recv(self, size: int) -> bytes:
        """The engine's next bytes (b"" at its end). TLS: one thread at a time in the
        connection's SSL object, never waiting inside it (OpenSSL forbids concurrent use
        of one connection); a plain socket reads and writes at once."""
        if self._tls is None:
            return self.engine.recv(size)
        while True:
            if not self.engine.pending():
                select.select([self.engine], [], [])
            with self._tls:
                self.engine.settimeout(0)
                try:
                    return self.engine.recv(size)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                finally:
                    self.engine.settimeout(None)

    def _send(self, data: bytes) -> None:
        if self._tls is None:
            self.engine.sendall(data)
            return
        with self._tls:
            self.engine.sendall(data)

    def _output(self) -> None:
        try:
            buffer = b""
            while True:
                while len(buffer) < ENGINE_HEADER_BYTES:
                    chunk = self._recv(CHUNK_BYTES)
                    if not chunk:
                        return
                    buffer += chunk
                stream, length = buffer[0], int.from_bytes(buffer[4:8], "big")
                buffer = buffer[ENGINE_HEADER_BYTES:]
                while length:
                    if not buffer:
                        buffer = self._recv(min(CHUNK_BYTES, length))
                        if not buffer:
                            return
                    part, buffer = buffer[:length], buffer[length:]
                    length -= len(part)
                    if stream == STDOUT:
                        self._near.sendall(part)
                    elif stream == STDERR and len(self._stderr) < STDERR_KEEP_BYTES:
                        self._stderr += part[: STDERR_KEEP_BYTES - len(self._stderr)]
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self._near.shutdown(socket.SHUT_RDWR)
            self.close()

    def _input(self) -> None:
        try:
            while data := self._near.recv(CHUNK_BYTES):
                self._send(data)
            if self._tls is None:
                self.engine.shutdown(socket.SHUT_WR)  # EOF on the process's stdin
                return
        except OSError:
            pass
        self.close()

    def detach(self) -> socket.socket:
        """:attr:`socket`, now the caller's alone: closing it (or dropping the last
        reference to it) ends the stream; the stream keeps no reference to it."""
        sock, self.socket = self.socket, None  # type: ignore[assignment]
        return sock

    def stderr(self) -> str:
        """What the process wrote to stderr (its first few kilobytes)."""
        return self._stderr.decode(errors="replace")

    def exit_code(self) -> int | None:
        return self.api.exec_inspect(self.exec_id).get("ExitCode")

    def close(self) -> None:
        """Ends the stream (and with it the relay in the container). Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        for sock in (self.engine, self._near):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        # The HTTP response the connection was hijacked from, before its socket (it
        # flushes on close), and never back into the client's pool.
        with contextlib.suppress(Exception):
            self._response.raw.close()
        for part in (self.engine, self._near, self._raw):
            with contextlib.suppress(OSError):
                part.close()


def exec_connector(
    api: Any, container: str, *, user: str = "", socket_path: str = relay.CHANNEL_SOCKET
) -> Callable[[float], socket.socket]:
    """A transport for :class:`ChannelClient`: a fresh :class:`ExecStream` to the
    front's socket per connect. Closing the returned socket ends the exec."""

    def connect(timeout_s: float) -> socket.socket:
        try:
            stream = ExecStream(api, container, relay_argv(socket_path), user=user)
        except Exception as exc:  # the engine's errors: docker's or requests'
            raise ChannelError(f"the engine did not open a stream: {exc}") from None
        return stream.detach()

    return connect

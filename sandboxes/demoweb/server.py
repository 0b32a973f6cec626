"""The demo web's HTTP server: one per worker process, on 127.0.0.1, started on first use.

Why the standard library's ``http.server.ThreadingHTTPServer`` with a handler of our
own, and not a WSGI stack: the site is a dozen fixed pages (:mod:`sandboxes.demoweb.pages`
renders them, pure), it runs inside the battle worker next to the egress proxy, and it
needs no routing, sessions or templates beyond that, so a framework would only add a
second configuration to get right. The server is threaded (one daemon thread per
connection) so a slow sandbox never holds up another's page; each connection's socket
has a timeout (``REQUEST_TIMEOUT_S``) and a request body a bound (``BODY_MAX_BYTES``),
so a sandbox that trickles or floods costs one thread for a bounded time. Sandboxes
cannot reach it on their own (no route from their network namespace, and the address
policy refuses loopback); only the egress proxy dials it, for ``demo.arena.test``
(netpolicy.SimulatedHost, docs/demo-web.md).
"""

import ipaddress
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from arena_site.perprocess import PerProcess
from sandboxes.demoweb import data
from sandboxes.demoweb.pages import Response, respond
from sandboxes.netpolicy import IPAddress, SimulatedHost

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0  # a request's head and body, on the socket
BODY_MAX_BYTES = 16 * 1024  # the contact form needs a few hundred


class _Handler(BaseHTTPRequestHandler):
    server_version = "DemoTown/1.0"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S

    def do_GET(self) -> None:
        self._serve()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def _serve(self) -> None:
        body = b""
        if self.headers.get("Transfer-Encoding"):
            self._send(Response(411, b"Send the body with a Content-Length.\n", "text/plain"))
            self.close_connection = True
            return
        length_text = self.headers.get("Content-Length", "0").strip()
        if not (length_text.isascii() and length_text.isdigit()):
            self._send(Response(400, b"Content-Length must be a number.\n", "text/plain"))
            self.close_connection = True
            return
        length = int(length_text)
        if length > BODY_MAX_BYTES:
            self._send(
                Response(413, b"The request body is larger than this site accepts.\n", "text/plain")
            )
            self.close_connection = True  # the unread body must not be taken for a request
            return
        if length:
            body = self.rfile.read(length)
        response = respond(
            self.command, self.path, content_type=self.headers.get("Content-Type", ""), body=body
        )
        self._send(response)

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in response.headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("demo web: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


class DemoWebServer:
    """The demo web on ``host`` (loopback) at an ephemeral port. ``start`` serves it on
    a daemon thread; ``close`` stops it. Thread-safe once started."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        address = ipaddress.ip_address(host)
        if not address.is_loopback:
            raise ValueError(f"the demo web binds loopback only, not {host!r}")
        self.host = host
        self._requested_port = port
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._httpd is not None:
            raise RuntimeError("already started")
        self._httpd = _Server((self.host, self._requested_port), _Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="demo-web", daemon=True
        )
        self._thread.start()
        logger.info("demo web serving %s at %s:%s", data.HOST, self.host, self.port)
        return self

    @property
    def address(self) -> IPAddress:
        return ipaddress.ip_address(self.host)

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The server's own loopback URL (tests; sandboxes use ``data.ORIGIN``)."""
        return f"http://{self.host}:{self.port}"

    def simulated_host(self) -> SimulatedHost:
        """``demo.arena.test`` on port 80, dialled to this server (the egress proxy's)."""
        return SimulatedHost(name=data.HOST, address=self.address, upstream_port=self.port)

    def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)


# This process's (a forked child's own: the parent's server thread is not copied, and
# its object is dropped unclosed, the socket being the parent's)
_server: PerProcess[DemoWebServer] = PerProcess(lambda: DemoWebServer().start())


def demo_server() -> DemoWebServer:
    """This process's demo web server, started on first use (a forked child's own)."""
    return _server.get()

"""A fake Docker Engine API on a unix socket, for testing the docker backend where no
engine runs. The real ``docker`` SDK talks to it (``FakeEngine.client()``), so the tests
see exactly the requests the SDK sends: every call is recorded (method, path without
the API version, query, JSON body).

It answers what the backend and its janitor use: ``/_ping``, ``/version``, ``/info``,
``/images/{name}/json``, ``/containers/create``, ``/containers/{id}/start``,
``/containers/{id}/json``, ``/containers/{id}/logs``, ``DELETE /containers/{id}`` and
``/containers/json`` with label filters. Anything else answers 404 (and is recorded,
so a test can prove nothing else was asked, e.g. no image pull).

No container really runs. ``on_start`` stands in for the container's first process:
:class:`FakeSupervisor` serves the supervisor's protocol on the bound control dir and
writes a framebuffer file into the bound ``/fb`` dir, which is all the host side sees of
a real sandbox.
"""

import contextlib
import json
import re
import secrets
import socket
import socketserver
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import docker

API_VERSION = "1.45"
_VERSION_PREFIX = re.compile(r"^/v\d+\.\d+(?=/)")


@dataclass(frozen=True)
class Call:
    method: str
    path: str  # without the /v1.xx prefix
    query: dict[str, list[str]]
    body: Any


@dataclass
class FakeContainer:
    id: str
    name: str
    image: str
    body: dict[str, Any]  # the create request's JSON body
    status: str = "created"
    exit_code: int = 0
    logs: bytes = b""
    stoppers: list[Callable[[], None]] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return self.body.get("Labels") or {}

    def mount_source(self, target: str) -> Path:
        for mount in self.body.get("HostConfig", {}).get("Mounts") or []:
            if mount["Target"] == target:
                return Path(mount["Source"])
        raise KeyError(target)

    def summary(self) -> dict[str, Any]:
        return {
            "Id": self.id,
            "Names": [f"/{self.name}"],
            "Image": self.image,
            "Labels": self.labels,
            "State": self.status,
            "Status": self.status,
        }

    def inspect(self) -> dict[str, Any]:
        return {
            "Id": self.id,
            "Name": f"/{self.name}",
            "Image": f"sha256:{self.image}",
            "Config": {
                "Image": self.image,
                "Labels": self.labels,
                "Tty": False,
                "Cmd": self.body.get("Cmd"),
                "Env": self.body.get("Env"),
                "User": self.body.get("User", ""),
            },
            "HostConfig": self.body.get("HostConfig", {}),
            "State": {
                "Status": self.status,
                "Running": self.status == "running",
                "ExitCode": self.exit_code,
            },
            "Mounts": [],
        }


StartHook = Callable[[FakeContainer], None]


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    engine: "FakeEngine"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet; and unix peers have no address to log

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        call = Call(
            method=method,
            path=_VERSION_PREFIX.sub("", unquote(url.path)),
            query=parse_qs(url.query, keep_blank_values=True),
            body=body,
        )
        status, payload, content_type = self.server.engine.handle(call)
        self.send_response(status)
        self.send_header("Api-Version", API_VERSION)
        if status == 204:
            self.end_headers()
            return
        if isinstance(payload, bytes):
            data = payload
        elif isinstance(payload, str):
            data = payload.encode()
        else:
            data = json.dumps(payload).encode()
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)


def _multiplexed(stream: int, data: bytes) -> bytes:
    """One frame of the engine's stdout/stderr multiplexing (non-tty containers)."""
    return struct.pack(">BxxxL", stream, len(data)) + data if data else b""


class FakeEngine:
    """Serve with ``with FakeEngine(path, images={...}) as engine:``. State is guarded by
    one lock; ``on_start`` runs on the request's thread before ``start`` answers."""

    def __init__(
        self,
        socket_path: Path,
        *,
        images: set[str] | None = None,
        info: dict[str, Any] | None = None,
        on_start: StartHook | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.images = set(images or ())
        self.info = (
            info if info is not None else {"SecurityOptions": ["name=seccomp,profile=builtin"]}
        )
        self.on_start = on_start
        self.calls: list[Call] = []
        self.containers: dict[str, FakeContainer] = {}
        self.lock = threading.RLock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self) -> "FakeEngine":
        self._server = _Server(str(self.socket_path), _Handler)
        self._server.engine = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one interval
            name="fake-engine",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self.lock:
            containers = list(self.containers.values())
        for container in containers:
            self._stop(container)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def __enter__(self) -> "FakeEngine":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def client(self) -> docker.DockerClient:
        """A real SDK client for this engine (API version detected from ``/version``)."""
        return docker.DockerClient(base_url=self.url, timeout=5)

    # -- test helpers ----------------------------------------------------------------

    def calls_to(self, method: str, pattern: str) -> list[Call]:
        """Recorded calls of ``method`` whose path fully matches the regex ``pattern``."""
        with self.lock:
            return [c for c in self.calls if c.method == method and re.fullmatch(pattern, c.path)]

    def add_container(
        self, name: str, labels: dict[str, str], *, status: str = "running"
    ) -> FakeContainer:
        """A container that exists without this test having created it."""
        container = FakeContainer(
            id=secrets.token_hex(32),
            name=name,
            image="other",
            body={"Image": "other", "Labels": labels},
            status=status,
        )
        with self.lock:
            self.containers[container.id] = container
        return container

    def find(self, ref: str) -> FakeContainer | None:
        with self.lock:
            for container in self.containers.values():
                if ref in (container.id, container.name) or (
                    len(ref) >= 12 and container.id.startswith(ref)
                ):
                    return container
        return None

    # -- the API ---------------------------------------------------------------------

    def handle(self, call: Call) -> tuple[int, Any, str]:
        with self.lock:
            self.calls.append(call)
        path, method = call.path, call.method
        if path == "/_ping":
            return 200, "OK", "text/plain"
        if path == "/version" and method == "GET":
            return 200, {"ApiVersion": API_VERSION, "Version": "fake", "Os": "linux"}, _JSON
        if path == "/info" and method == "GET":
            return 200, self.info, _JSON
        if match := re.fullmatch(r"/images/(.+)/json", path):
            if self._has_image(match[1]):
                config = {"Labels": {"arena.image-version": "1"}}  # (as scripts/image.sh)
                image = {"Id": f"sha256:{match[1]}", "RepoTags": [match[1]], "Config": config}
                return 200, image, _JSON
            return 404, {"message": f"No such image: {match[1]}"}, _JSON
        if path == "/containers/create" and method == "POST":
            return self._create(call)
        if path == "/containers/json" and method == "GET":
            return 200, self._list(call), _JSON
        if match := re.fullmatch(r"/containers/([^/]+)(/[a-z]+)?", path):
            container = self.find(match[1])
            if container is None:
                return 404, {"message": f"No such container: {match[1]}"}, _JSON
            action = (match[2] or "", method)
            if action == ("/json", "GET"):
                return 200, container.inspect(), _JSON
            if action == ("/start", "POST"):
                return self._start(container)
            if action == ("/logs", "GET"):
                return 200, _multiplexed(2, container.logs), _MULTIPLEXED
            if action == ("", "DELETE"):
                return self._remove(container, call)
        return 404, {"message": f"fake engine: no route for {method} {path}"}, _JSON

    def _has_image(self, name: str) -> bool:
        return name in self.images or (":" not in name and f"{name}:latest" in self.images)

    def _create(self, call: Call) -> tuple[int, Any, str]:
        body = call.body or {}
        if not self._has_image(body.get("Image", "")):
            return 404, {"message": f"No such image: {body.get('Image')}"}, _JSON
        name = (call.query.get("name") or [secrets.token_hex(6)])[0]
        if self.find(name) is not None:
            return 409, {"message": f"Conflict. The container name /{name} is in use"}, _JSON
        container = FakeContainer(
            id=secrets.token_hex(32), name=name, image=body["Image"], body=body
        )
        with self.lock:
            self.containers[container.id] = container
        return 201, {"Id": container.id, "Warnings": []}, _JSON

    def _start(self, container: FakeContainer) -> tuple[int, Any, str]:
        container.status = "running"
        if self.on_start is not None:
            self.on_start(container)
        return 204, None, _JSON

    def _remove(self, container: FakeContainer, call: Call) -> tuple[int, Any, str]:
        force = call.query.get("force", ["False"])[0] in ("True", "true", "1")
        if container.status == "running" and not force:
            return 409, {"message": "You cannot remove a running container"}, _JSON
        with self.lock:
            self.containers.pop(container.id, None)
        self._stop(container)
        return 204, None, _JSON

    @staticmethod
    def _stop(container: FakeContainer) -> None:
        container.status = "exited"
        while container.stoppers:
            container.stoppers.pop()()

    def _list(self, call: Call) -> list[dict[str, Any]]:
        show_all = call.query.get("all", ["0"])[0] in ("1", "True", "true")
        filters = json.loads(call.query.get("filters", ["{}"])[0])
        wanted = filters.get("label", [])
        with self.lock:
            containers = list(self.containers.values())
        result = []
        for container in containers:
            if not show_all and container.status != "running":
                continue
            if all(_label_matches(container.labels, rule) for rule in wanted):
                result.append(container.summary())
        return result


_JSON = "application/json"
_MULTIPLEXED = "application/vnd.docker.multiplexed-stream"


def _label_matches(labels: dict[str, str], rule: str) -> bool:
    key, eq, value = rule.partition("=")
    return key in labels and (not eq or labels[key] == value)


# -- the inside of a container, faked --------------------------------------------------


def xwd_bytes(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """An XWD file like Xvfb's ``-fbdir`` framebuffer: 24-bit depth, 32 bpp, LSB first."""
    header_size = 25 * 4
    bytes_per_line = width * 4
    # header size, version, ZPixmap, depth, width, height, x offset, LSBFirst byte order,
    # bitmap unit, bit order, pad, bits per pixel, bytes per line, TrueColor, masks, ...
    header = struct.pack(
        ">25I",
        header_size, 7, 2, 24, width, height, 0, 0,
        32, 0, 32, 32, bytes_per_line, 4, 0xFF0000, 0xFF00,
        0xFF, 8, 256, 0, width, height, 0, 0, 0,
    )  # fmt: skip
    pixel = bytes((rgb[2], rgb[1], rgb[0], 0))  # B, G, R, X in memory
    return header + pixel * (width * height)


class FakeSupervisor:
    """Stands in for ``sandboxes/inside/supervisor.py`` in a fake container: the
    display's writes a framebuffer into the container's ``/fb`` source; either serves
    the JSON-line protocol on ``ctl.sock`` in its ``/run/arena`` source (appearing by
    rename, as the real one does), answering its role's ops. Records every request;
    shell commands are echoed, not run."""

    WIDTH, HEIGHT = 64, 48
    OPS = {"agent": {"ping", "shell"}, "display": {"ping", "input", "navigate", "state"}}

    def __init__(self, container: FakeContainer) -> None:
        self.container = container
        self.ctl_dir = container.mount_source("/run/arena")
        self.config = json.loads(container.body["Cmd"][0])
        self.role = self.config["role"]
        self.fb_dir = container.mount_source("/fb") if self.role == "display" else None
        self.requests: list[dict[str, Any]] = []
        # What the container would have found at start: the egress socket or not.
        self.saw_egress_socket = (self.ctl_dir / "egress.sock").is_socket()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._stopped = threading.Event()

    @classmethod
    def on_start(cls, registry: dict[str, "FakeSupervisor"]) -> StartHook:
        """An ``on_start`` hook that starts one per container, kept in ``registry``."""

        def hook(container: FakeContainer) -> None:
            supervisor = cls(container)
            registry[container.name] = supervisor
            supervisor.start()

        return hook

    def start(self) -> None:
        if self.fb_dir is not None:
            (self.fb_dir / "Xvfb_screen0").write_bytes(
                xwd_bytes(self.WIDTH, self.HEIGHT, (200, 30, 30))
            )
        tmp = self.ctl_dir / "ctl.sock.tmp"
        self._listener.bind(str(tmp))
        self._listener.listen()
        tmp.rename(self.ctl_dir / "ctl.sock")
        threading.Thread(target=self._accept, name="fake-supervisor", daemon=True).start()
        self.container.stoppers.append(self.stop)

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                request = json.loads(line)
                self.requests.append(request)
                stream.write(json.dumps(self.answer(request)).encode() + b"\n")
                stream.flush()

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op not in self.OPS[self.role]:
            return {"ok": False, "error": f"unknown op {op!r}"}
        if op == "ping":
            return {"ok": True, "pid": 1}
        if op == "shell":
            out = f"ran: {request['command']}\n"
            return {
                "ok": True,
                "exit_code": 0,
                "stdout": out,
                "stderr": "",
                "stdout_bytes": len(out),
                "stderr_bytes": 0,
                "timed_out": False,
            }
        if op == "input":
            return {"ok": True}
        if op == "navigate":
            return {"ok": True, "url": request["url"], "title": "Fake"}
        if op == "state":
            return {"ok": True, "url": "about:blank", "title": ""}
        return {"ok": False, "error": f"unknown op {op!r}"}

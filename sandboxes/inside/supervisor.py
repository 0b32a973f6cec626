"""The supervisor that runs INSIDE a sandbox, as that sandbox's unprivileged uid.

Standard library only (it runs on the distribution's python3, not the arena's venv).
It has three roles (``config["role"]``):

- ``display`` (the local backend's display sandbox, under the slot's display uid):
  Xvfb, the egress forwarder and Chromium; serves ``navigate`` and ``state``.
- ``agent`` (the agent's sandbox): the egress forwarder for the shell; serves
  ``shell`` and ``input`` (xdotool, on the display sandbox's X socket).
- ``all`` (the Docker backend's one container): everything.

It serves one JSON request per line on a unix socket: a listening socket the host made
in a directory no sandbox can reach and handed over as ``config["control_fd"]`` (the
local backend), or ``/run/arena/ctl.sock`` (Docker). It tells the host it is ready on
``config["ready_fd"]`` or by renaming that socket into place. It makes itself not
dumpable (another process of its uid can neither trace it nor read its memory or file
descriptors) and runs under rlimits of its own. Its limits on the shell are its own
config's: a request can shorten a timeout or an output bound, never lengthen one, and
``input`` runs only the xdotool commands the host sends, under the supervisor's own.
The host trusts none of its answers.

Requests: {"op": "ping"} | {"op": "input", "argv": [...]} (xdotool arguments) |
{"op": "shell", "command", "timeout_s", "max_bytes"} | {"op": "navigate", "url"} |
{"op": "state"}.
"""

import asyncio
import contextlib
import ctypes
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

CTL_DIR = "/run/arena"
CTL_SOCKET = f"{CTL_DIR}/ctl.sock"
EGRESS_SOCKET = f"{CTL_DIR}/egress.sock"
PROXY_PORT = 3128
CHROMIUM = "/usr/lib/chromium/chromium"
PR_SET_DUMPABLE = 4
# Which requests each role serves.
OPS = {
    "all": {"ping", "input", "shell", "navigate", "state"},
    "agent": {"ping", "input", "shell"},
    "display": {"ping", "navigate", "state"},
}
# The xdotool commands the host sends (sandboxes.local) and how many arguments each
# takes; "type" and "key" end the command line after "--". Anything else (exec,
# behave, search, a window command) is refused: input must not be a way to run
# programs outside the shell's limits.
XDOTOOL_ARGS = {"mousemove": 2, "mousedown": 1, "mouseup": 1}
XDOTOOL_OPTIONS = {"click": {"--repeat", "--delay"}, "type": {"--delay"}, "key": set()}


def log(message: str) -> None:
    print(f"supervisor: {message}", file=sys.stderr, flush=True)


class Browser:
    """Chromium driven over the DevTools protocol on a pipe (fds 3 and 4)."""

    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int) -> None:
        self.proc = proc
        self.to_browser = to_browser
        self.reader = os.fdopen(from_browser, "rb", buffering=0)
        self.next_id = 0
        self.buffer = b""
        self.session = None
        # Requests arrive on executor threads, one per host connection: a host that
        # gave up waiting (a slow page) reconnects while the old call still runs. One
        # exchange at a time on the pipe; a reply to an abandoned call is skipped.
        self.lock = threading.RLock()

    def call(
        self,
        method: str,
        params: dict | None = None,
        session: str | None = None,
        timeout: float = 10.0,
    ) -> dict:
        with self.lock:
            return self._call(method, params, session, timeout)

    def _call(self, method: str, params: dict | None, session: str | None, timeout: float) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(reply["error"].get("message", "devtools error"))
                    return reply.get("result", {})
            chunk = self.reader.read(65536)
            if not chunk:
                raise RuntimeError("the browser closed its devtools pipe")
            self.buffer += chunk
        raise TimeoutError(f"devtools call {method} timed out")

    def page_session(self) -> str:
        if self.session:
            return self.session
        targets = self.call("Target.getTargets")["targetInfos"]
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            target = pages[0]["targetId"]
        else:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.call("Page.enable", session=self.session)
        return self.session

    def navigate(self, url: str) -> dict:
        session = self.page_session()
        result = self.call("Page.navigate", {"url": url}, session=session, timeout=20)
        if result.get("errorText"):
            return {"ok": False, "error": f"navigation failed: {result['errorText']}"}
        self.settle()
        return {"ok": True, **self.state()}

    def evaluate(self, expression: str, await_promise: bool = False):
        session = self.page_session()
        params = {"expression": expression, "returnByValue": True, "awaitPromise": await_promise}
        result = self.call("Runtime.evaluate", params, session=session)
        return result.get("result", {}).get("value")

    def settle(self, timeout_s: float = 10.0) -> None:
        """Waits (bounded) until the document has loaded and two frames were painted, so
        the next screenshot shows the page rather than a blank window."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.evaluate("document.readyState") == "complete":
                    break
            except RuntimeError:
                pass  # mid-navigation: the context is being replaced
            time.sleep(0.02)
        with contextlib.suppress(RuntimeError, TimeoutError):
            self.evaluate(
                "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))",
                await_promise=True,
            )

    def state(self) -> dict:
        try:
            return {
                "url": self.evaluate("location.href") or "",
                "title": self.evaluate("document.title") or "",
            }
        except Exception as exc:  # a page mid-navigation can refuse evaluation
            return {"url": "", "title": "", "state_error": str(exc)}


def start_display(width: int, height: int) -> subprocess.Popen:
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", ":0", "-screen", "0", f"{width}x{height}x24", "-fbdir", "/fb", "-nolisten", "tcp",
         "-noreset", "-displayfd", str(write_fd)],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_fd)
    # Read until newline or EOF: closing early would kill Xvfb with SIGPIPE.
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(read_fd, 64)
        if not chunk:
            break
        data += chunk
    os.close(read_fd)
    if not data.strip():
        raise RuntimeError("Xvfb did not start")
    os.environ["DISPLAY"] = f":{data.decode().strip()}"
    return xvfb


def start_browser(width: int, height: int, start_url: str, proxy: bool) -> Browser:
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    argv = [
        CHROMIUM,
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-breakpad",
        "--disable-crash-reporter",
        "--no-service-autorun",
        "--disable-component-extensions-with-background-pages",
        "--disable-search-engine-choice-screen",
        "--disable-features=Translate,MediaRouter,OptimizationHints,NetworkTimeServiceQuerying,"
        "AutofillServerCommunication,CertificateTransparencyComponentUpdater,"
        "OptimizationHintsFetching,OptimizationGuideModelDownloading,InterestFeedContentSuggestions",
        # Chromium makes no requests of its own (docs/egress.md): the managed policies
        # bound at /etc/chromium/policies/managed switch off updates, safe browsing,
        # metrics and the rest; the on-device model manifest monitor registers its
        # component whatever they say, so it is pointed at an empty local manifest.
        "--optimization-guide-manifest-override=/dev/null",
        "--disable-client-side-phishing-detection",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-extensions",
        "--no-pings",
        "--metrics-recording-only",
        "--password-store=basic",
        "--user-data-dir=/tmp/browser-profile",
        "--window-position=0,0",
        f"--window-size={width},{height}",
        "--remote-debugging-pipe",
    ]
    if proxy:
        # Everything, loopback included, goes to the forwarder: the sandbox's own
        # loopback has nothing else on it.
        argv += [f"--proxy-server=http://127.0.0.1:{PROXY_PORT}", "--proxy-bypass-list=<-loopback>"]
    else:
        argv += ["--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]
    argv.append(start_url or "about:blank")

    def wire_pipes() -> None:
        # Chromium reads commands on fd 3 and writes replies on fd 4.
        os.dup2(to_r, 3)
        os.dup2(from_w, 4)

    proc = subprocess.Popen(
        argv,
        preexec_fn=wire_pipes,
        pass_fds=(3, 4),
        stdout=subprocess.DEVNULL,
        stderr=open("/tmp/browser.log", "wb"),  # noqa: SIM115, S108 - the sandbox's own /tmp
        start_new_session=True,
    )
    os.close(to_r)
    os.close(from_w)
    return Browser(proc, to_w, from_r)


async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def egress_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Forwards one TCP connection from inside to the host's filtering proxy."""
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(EGRESS_SOCKET)
    except OSError:
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        writer.close()
        return
    await asyncio.gather(forward(reader, up_writer), forward(up_reader, writer))


def harden(limits: dict) -> None:
    """Makes this process not dumpable (no other process of the uid may trace it or
    read its memory, environment or file descriptors through /proc) and sets its own
    rlimits, soft and hard, so nothing it starts can have more; no core files."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def limiter(limits: dict):
    """A ``preexec_fn`` that sets ``limits`` (soft and hard: the child cannot raise
    them back) in the child before it runs anything."""

    def apply_limits() -> None:
        for name, value in limits.items():
            resource.setrlimit(getattr(resource, name), (value, value))

    return apply_limits


def bounded(value: object, limit: float) -> float:
    """``value`` when it is a number in (0, limit], else ``limit``: a request may lower
    the configured bound, never raise it (nor turn it into NaN or infinity)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return limit
    return number if math.isfinite(number) and 0 < number <= limit else limit


def run_shell(command: str, timeout_s: float, max_bytes: int, limits: dict) -> dict:
    started = time.monotonic()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        cwd="/work",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: a timeout kills grandchildren too
        preexec_fn=limiter(limits),
    )
    out, err = bytearray(), bytearray()
    counts = {"out": 0, "err": 0}
    timed_out = False

    import selectors

    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, ("out", out))
    selector.register(proc.stderr, selectors.EVENT_READ, ("err", err))
    open_streams = 2
    deadline = started + timeout_s
    while open_streams:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        for key, _ in selector.select(timeout=left):
            chunk = os.read(key.fileobj.fileno(), 65536)
            name, sink = key.data
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            counts[name] += len(chunk)
            room = max_bytes - len(sink)
            if room > 0:
                sink += chunk[:room]
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        code = proc.wait(timeout=max(0.1, deadline - time.monotonic()) if not timed_out else 5)
    except subprocess.TimeoutExpired:
        # Output closed but the process lingers: the limit still applies to it.
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    # Descendants that left the group (setsid) are killed when the sandbox ends;
    # within the group, nothing survives a timeout.
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    selector.close()
    proc.stdout.close()
    proc.stderr.close()
    return {
        "ok": not timed_out and code == 0,
        "exit_code": code,
        # Bytes that are not UTF-8 travel as lone surrogates (JSON \\udcNN escapes); the
        # host stores them escaped and flagged (sandboxes.untrusted).
        "stdout": out.decode(errors="surrogateescape"),
        "stderr": err.decode(errors="surrogateescape"),
        "stdout_bytes": counts["out"],
        "stderr_bytes": counts["err"],
        "timed_out": timed_out,
    }


def input_argv_ok(argv: object) -> bool:
    """Whether ``argv`` is a chain of the xdotool commands the host sends: mousemove X Y,
    mousedown/mouseup B, click [--repeat N] [--delay MS] B, type [--delay MS] -- TEXT,
    key -- COMBO (the last two end the chain)."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return False
    i = 0
    while i < len(argv):
        command = argv[i]
        i += 1
        if command in XDOTOOL_ARGS:
            values = argv[i : i + XDOTOOL_ARGS[command]]
            if len(values) != XDOTOOL_ARGS[command] or not all(v.isdigit() for v in values):
                return False
            i += len(values)
            continue
        if command not in XDOTOOL_OPTIONS:
            return False
        while i < len(argv) and argv[i] in XDOTOOL_OPTIONS[command]:
            if i + 1 >= len(argv) or not argv[i + 1].isdigit():
                return False
            i += 2
        if command == "click":
            if i >= len(argv) or not argv[i].isdigit():
                return False
            i += 1
            continue
        return i < len(argv) and argv[i] == "--" and i + 1 < len(argv)  # type, key
    return True


def run_input(argv: list) -> dict:
    """xdotool with ``argv`` once it passed :func:`input_argv_ok` (so it runs nothing
    else), under this supervisor's own hard rlimits and a timeout. No ``preexec_fn``:
    it would force a fork of the whole supervisor on every click."""
    if not input_argv_ok(argv):
        return {"ok": False, "error": "bad input arguments"}
    proc = subprocess.run(["xdotool", *argv], capture_output=True, timeout=20, check=False)
    if proc.returncode != 0:
        return {
            "ok": False,
            "error": proc.stderr.decode(errors="replace")[:500] or "xdotool failed",
        }
    return {"ok": True}


class Supervisor:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.role = config.get("role", "all")
        self.browser = None

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op not in OPS.get(self.role, ()):
            return {"ok": False, "error": f"unknown op {op!r}"}
        limits = self.config.get("shell_limits", {})
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "input":
            return run_input(request.get("argv"))
        if op == "shell":
            timeout_s = float(self.config.get("shell_timeout_s", 20))
            max_bytes = int(self.config.get("output_max_bytes", 65536))
            return run_shell(
                str(request.get("command", "")),
                bounded(request.get("timeout_s"), timeout_s),
                int(bounded(request.get("max_bytes"), max_bytes)),
                limits,
            )
        if op == "navigate":
            if self.browser is None:
                return {"ok": False, "error": "this sandbox has no browser"}
            return self.browser.navigate(str(request.get("url", "")))
        if op == "state":
            return {"ok": True, **(self.browser.state() if self.browser else {})}
        return {"ok": False, "error": f"unknown op {op!r}"}

    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                    # Tools block (shell, devtools): run them off the event loop so the
                    # egress forwarder keeps moving bytes meanwhile.
                    reply = await loop.run_in_executor(None, self.handle, request)
                except Exception as exc:
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

    async def main(self) -> None:
        harden(self.config.get("self_limits", {}))
        width, height = self.config.get("width", 1280), self.config.get("height", 800)
        proxy = os.path.exists(EGRESS_SOCKET)
        if proxy:
            await asyncio.start_server(egress_client, "127.0.0.1", PROXY_PORT)
        if self.role == "agent" and self.config.get("desktop", True):
            # The display runs in a sandbox of its own; its X socket is bound read-only
            # at /tmp/.X11-unix (no abstract socket crosses network namespaces).
            os.environ["DISPLAY"] = ":0"
        elif self.config.get("desktop", True):
            started = time.monotonic()
            start_display(width, height)
            log(f"display up after {1000 * (time.monotonic() - started):.0f} ms")
            self.browser = start_browser(width, height, self.config.get("start_url", ""), proxy)
            await asyncio.get_running_loop().run_in_executor(None, self.browser.page_session)
            log(f"browser page after {1000 * (time.monotonic() - started):.0f} ms")
            await asyncio.get_running_loop().run_in_executor(None, self.browser.settle)
            log(f"page painted after {1000 * (time.monotonic() - started):.0f} ms")
        if "control_fd" in self.config:
            listener = socket.socket(fileno=int(self.config["control_fd"]))
            server = await asyncio.start_unix_server(self.client, sock=listener)
        else:
            server = await asyncio.start_unix_server(self.client, CTL_SOCKET + ".tmp")
            os.rename(CTL_SOCKET + ".tmp", CTL_SOCKET)  # appears only when everything is up
        if "ready_fd" in self.config:
            os.write(int(self.config["ready_fd"]), b"ready\n")
            os.close(int(self.config["ready_fd"]))
        log("ready")
        async with server:
            await server.serve_forever()


def main() -> None:
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    os.environ.setdefault("HOME", "/home/agent")
    asyncio.run(Supervisor(config).main())


if __name__ == "__main__":
    main()

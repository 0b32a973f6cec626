"""The channel between the host and a supervisor: the requests it serves and how.

One JSON request per line on a unix socket, one JSON reply per line (the host's end is
``sandboxes.control``). Which requests each role serves (:data:`OPS`):

- ``{"op": "ping"}`` (both): ``{"ok": true, "pid"}``.
- ``{"op": "shell", "command", "timeout_s", "max_bytes"}`` (agent): ``sv_shell``.
- ``{"op": "input", "argv": [...], "via"?}`` (display; xdotool arguments): ``sv_input``.
- ``{"op": "navigate", "url", "state"?}``, ``{"op": "state"}`` and ``{"op": "page_text",
  "max_text"?, "max_elements"?}`` (display; the page as text): ``sv_display.Browser``.
- ``{"op": "read_file", "path": [...], "max_bytes"}``, ``{"op": "write_file", "path",
  "data", "mode"?, "offset"?, "more"?}`` (agent; under /work, data in base64; a big file
  in several requests) and ``{"op": "framebuffer"}``
  (display; Xvfb's file deflated, in base64): ``sv_files``, ``sv_display``; for a
  worker that shares no file system with the sandbox.

A request can shorten a timeout or an output bound, never lengthen one (:func:`bounded`):
the limits are the supervisor's own config's. Every reply has ``ok``; a refused or
failed request has ``error``. The host trusts none of the answers.
"""

import asyncio
import itertools
import json
import math
import os
from typing import TYPE_CHECKING

from sv_display import framebuffer
from sv_files import MAX_FILE_BYTES, read_file, write_file
from sv_input import input_argv_ok, run_input
from sv_shell import run_shell

if TYPE_CHECKING:
    from sv_xtest import XTestInput

# The page as text (``page_text``): at most this much visible text and this many
# interactive elements (a request may ask for fewer).
PAGE_TEXT_MAX_CHARS = 8000
# The longest request line read (a file's piece in base64, ``write_file``): the channel's
# frame bound (``relay.MAX_MESSAGE_BYTES``), over asyncio's 64 KiB default.
REQUEST_MAX_BYTES = 16 * 1024**2
PAGE_TEXT_MAX_ELEMENTS = 150
# Which requests each role serves.
OPS = {
    "agent": {"ping", "shell", "read_file", "write_file"},
    "display": {"ping", "navigate", "state", "page_text", "input", "framebuffer"},
}


def bounded(value: object, limit: float) -> float:
    """``value`` when it is a number in (0, limit], else ``limit``: a request may lower
    the configured bound, never raise it (nor turn it into NaN or infinity)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return limit
    return number if math.isfinite(number) and 0 < number <= limit else limit


class Channel:
    """Serves one role's requests (``config["role"]``) on the host's connections; the
    display's ``browser`` and ``xtest`` are set once they are up (``supervisor.py``)."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.role = config.get("role", "agent")
        self.browser = None
        self.xtest: XTestInput | None = None

    def instant(self, request: dict) -> dict | None:
        """The reply to a pointer request XTEST answers at once (moves, presses,
        single clicks) on an open X connection, run on the event loop itself: no thread
        hop per step. None for anything else, or while another input command holds the
        display."""
        argv = request.get("argv")
        if (
            request.get("op") != "input"
            or request.get("via") == "xdotool"
            or self.xtest is None
            or self.xtest.display is None  # connecting may block: a worker thread does it
            or "input" not in OPS.get(self.role, ())
            or not input_argv_ok(argv)
            or {"type", "key"} & set(argv)
            or any(a == "--repeat" and b != "1" for a, b in itertools.pairwise(argv))
        ):
            return None
        return self.xtest.run(argv, wait=False)

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op not in OPS.get(self.role, ()):
            return {"ok": False, "error": f"unknown op {op!r}"}
        limits = self.config.get("shell_limits", {})
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "input":
            via = None if request.get("via") == "xdotool" else self.xtest
            return run_input(request.get("argv"), via)
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
            return self.browser.navigate(
                str(request.get("url", "")), with_state=request.get("state") is not False
            )
        if op == "state":
            return {"ok": True, **(self.browser.state() if self.browser else {})}
        if op == "page_text":
            if self.browser is None:
                return {"ok": False, "error": "this sandbox has no browser"}
            return self.browser.page_text(
                int(bounded(request.get("max_text"), PAGE_TEXT_MAX_CHARS)),
                int(bounded(request.get("max_elements"), PAGE_TEXT_MAX_ELEMENTS)),
            )
        if op == "read_file":
            max_bytes = int(bounded(request.get("max_bytes"), MAX_FILE_BYTES))
            return read_file(request.get("path"), max_bytes)
        if op == "write_file":
            return write_file(
                request.get("path"),
                request.get("data"),
                request.get("mode"),
                request.get("offset", 0),
                request.get("more", False),
            )
        if op == "framebuffer":
            width, height = self.config.get("width", 1280), self.config.get("height", 800)
            return framebuffer(int(width), int(height))
        return {"ok": False, "error": f"unknown op {op!r}"}

    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                    # Tools block (shell, devtools, typing): run them off the event loop
                    # so the egress forwarder keeps moving bytes meanwhile.
                    reply = self.instant(request) if isinstance(request, dict) else None
                    if reply is None:
                        reply = await loop.run_in_executor(None, self.handle, request)
                except Exception as exc:
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

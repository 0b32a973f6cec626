"""The supervisor that runs INSIDE a sandbox, as that sandbox's unprivileged uid.

Standard library only (it runs on the distribution's python3, not the arena's venv).
It has two roles (``config["role"]``), one per sandbox (a bubblewrap sandbox of the
local backend, a container of the Docker backend):

- ``display`` (under the slot's display uid): Xvfb, the egress forwarder and Chromium;
  serves ``navigate``, ``state``, ``page_text`` (the page as text, docs/agents.md) and
  ``input`` (XTEST through python-xlib on its own X connection, or xdotool where
  python-xlib is not bound in). Its X server and framebuffer exist in this sandbox only.
- ``agent`` (the agent's sandbox): the egress forwarder for the shell; serves
  ``shell``. Nothing of the display is in reach of it (docs/sandboxes.md).

It serves one JSON request per line on a unix socket: a listening socket the host made
in a directory no sandbox can reach and handed over as ``config["control_fd"]`` (the
local backend), or ``/run/arena/ctl.sock`` (Docker). It tells the host it is ready on
``config["ready_fd"]`` or by renaming that socket into place. It makes itself not
dumpable (another process of its uid can neither trace it nor read its memory or file
descriptors) and runs under rlimits of its own. Its limits on the shell are its own
config's: a request can shorten a timeout or an output bound, never lengthen one, and
``input`` runs only the xdotool commands the host sends, under the supervisor's own:
sent as XTEST events on one kept X connection (no process per step), or, asked with
``"via": "xdotool"`` or without python-xlib, by xdotool itself. The host trusts none of
its answers.

This file is the entry and the start; the rest is in its own modules beside it (the
whole directory is bound read-only at ``/opt/arena/inside``; docs/sandboxes.md has the
map): ``sv_protocol`` (the requests and their dispatch), ``sv_shell``, ``sv_input`` and
``sv_xtest`` (input), ``sv_display`` (Xvfb, Chromium, DevTools), ``sv_page_text``,
``sv_limits`` (rlimits) and ``sv_egress`` (the forwarder).
"""

import asyncio
import json
import os
import socket
import sys
import threading
import time

# Under ``python3 -I`` the script's own directory is not on sys.path: its modules are
# found there, and nowhere else (their ``sv_`` names are the arena's own).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sv_display import start_browser, start_display
from sv_egress import EGRESS_SOCKET, PROXY_PORT, egress_client
from sv_limits import harden
from sv_protocol import REQUEST_MAX_BYTES, Channel
from sv_xtest import XTestInput

CTL_DIR = "/run/arena"
CTL_SOCKET = f"{CTL_DIR}/ctl.sock"
# Chromium's path; the image that binds the host's /usr sets its wrapper's (entry.py).
CHROMIUM = "/usr/lib/chromium/chromium"
# python-xlib (pure Python), bound here read-only into the display's sandbox by the
# host when it has it: input becomes XTEST events instead of an xdotool process.
XLIB_DIR = "/opt/arena/pylib"


def log(message: str) -> None:
    print(f"supervisor: {message}", file=sys.stderr, flush=True)


def load_xlib():
    """python-xlib's modules, or None (not bound in: input falls back to xdotool)."""
    if not os.path.isdir(os.path.join(XLIB_DIR, "Xlib")):
        return None
    sys.path.insert(0, XLIB_DIR)
    try:
        from Xlib import XK, X, display, error  # noqa: F401
        from Xlib.ext import xtest  # noqa: F401
    except Exception as exc:  # an incompatible build: xdotool still works
        log(f"python-xlib unusable, input runs xdotool: {exc!r}")
        return None
    import Xlib

    return Xlib


class Supervisor(Channel):
    """The channel (``sv_protocol``) and what it serves, started in order."""

    async def main(self) -> None:
        harden(self.config.get("self_limits", {}))
        width, height = self.config.get("width", 1280), self.config.get("height", 800)
        proxy = os.path.exists(EGRESS_SOCKET)
        if proxy:
            await asyncio.start_server(egress_client, "127.0.0.1", PROXY_PORT)
        if self.role == "display":
            started = time.monotonic()
            start_display(width, height)
            log(f"display up after {1000 * (time.monotonic() - started):.0f} ms")
            start_url = self.config.get("start_url", "")
            self.browser = start_browser(CHROMIUM, width, height, start_url, proxy)
            # Input comes from here, the display's own sandbox: nothing of the agent's
            # can reach this X server (no shared socket, network namespace or uid).
            # Loaded once Chromium was started: its start does not wait for this.
            xlib = load_xlib()
            self.xtest = XTestInput(xlib) if xlib is not None else None
            if self.xtest is not None:
                threading.Thread(target=self.xtest.connect_early, daemon=True).start()
            await asyncio.get_running_loop().run_in_executor(None, self.browser.page_session)
            log(f"browser page after {1000 * (time.monotonic() - started):.0f} ms")
            await asyncio.get_running_loop().run_in_executor(None, self.browser.settle)
            log(f"page painted after {1000 * (time.monotonic() - started):.0f} ms")
        if "control_fd" in self.config:
            listener = socket.socket(fileno=int(self.config["control_fd"]))
            server = await asyncio.start_unix_server(
                self.client, sock=listener, limit=REQUEST_MAX_BYTES
            )
        else:
            server = await asyncio.start_unix_server(
                self.client, CTL_SOCKET + ".tmp", limit=REQUEST_MAX_BYTES
            )
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

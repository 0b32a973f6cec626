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

Requests: {"op": "ping"} | {"op": "shell", "command", "timeout_s", "max_bytes"} (agent) |
{"op": "input", "argv": [...], "via"?} (xdotool arguments) | {"op": "navigate", "url",
"state"?} | {"op": "state"} | {"op": "page_text", "max_text"?, "max_elements"?} (the page
as text) (display).
"""

import asyncio
import contextlib
import ctypes
import itertools
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
# The page as text (``page_text``): at most this much visible text and this many
# interactive elements (a request may ask for fewer).
PAGE_TEXT_MAX_CHARS = 8000
PAGE_TEXT_MAX_ELEMENTS = 150
# python-xlib (pure Python), bound here read-only into the display's sandbox by the
# host when it has it: input becomes XTEST events instead of an xdotool process.
XLIB_DIR = "/opt/arena/pylib"
# Which requests each role serves.
OPS = {
    "agent": {"ping", "shell"},
    "display": {"ping", "navigate", "state", "page_text", "input"},
}
# The xdotool commands the host sends (sandboxes.local) and how many arguments each
# takes; "type" and "key" end the command line after "--". Anything else (exec,
# behave, search, a window command) is refused: input must not be a way to run
# programs outside the shell's limits.
XDOTOOL_ARGS = {"mousemove": 2, "mousedown": 1, "mouseup": 1}
XDOTOOL_OPTIONS = {"click": {"--repeat", "--delay"}, "type": {"--delay"}, "key": set()}


def log(message: str) -> None:
    print(f"supervisor: {message}", file=sys.stderr, flush=True)


# Resolves once the document has loaded and two frames were painted after that, or
# after %d ms whatever happens (a subresource that never ends).
SETTLE_JS = (
    "new Promise(r => { setTimeout(() => r(0), %d);"
    " const painted = () => requestAnimationFrame(() => requestAnimationFrame(() => r(1)));"
    " if (document.readyState === 'complete') painted();"
    " else addEventListener('load', painted, {once: true}); })"
)

# The page as text for agents that read rather than look (``page_text``): one
# evaluation returns the URL, title, the visible text in reading order (innerText:
# what layout shows, hidden elements left out) and the interactive elements with the
# centre of their visible part in SCREEN pixels (the window's offset on the screen and
# its toolbar added, times the device pixel ratio), those in the viewport first. The
# host bounds and checks all of it again: the page is the entrant's or the web's.
PAGE_TEXT_JS = r"""
(() => {
  const MAX_TEXT = %d, MAX_ELEMENTS = %d, MAX_NAME = 200;
  const dpr = window.devicePixelRatio || 1;
  const vw = window.innerWidth, vh = window.innerHeight;
  const side = Math.max(0, (window.outerWidth - vw) / 2);
  const left = window.screenX + side;
  const top = window.screenY + Math.max(0, window.outerHeight - vh - side);
  const clip = (s, n) => {
    s = (s || '').replace(/\s+/g, ' ').trim();
    return s.length > n ? s.slice(0, n - 1) + '\u2026' : s;
  };
  const byIds = (ids) => ids.split(/\s+/).map(id => document.getElementById(id))
    .filter(Boolean).map(e => e.innerText || e.textContent).join(' ');
  const labelOf = (el) => {
    if (el.getAttribute('aria-label')) return el.getAttribute('aria-label');
    const by = el.getAttribute('aria-labelledby');
    if (by && byIds(by).trim()) return byIds(by);
    if (el.labels && el.labels.length) {
      return Array.from(el.labels).map(l => l.innerText || l.textContent).join(' ');
    }
    return '';
  };
  const BUTTONS = ['submit', 'button', 'reset', 'image'];
  const roleOf = (el) => {
    const explicit = el.getAttribute('role');
    if (explicit) return explicit;
    const tag = el.tagName.toLowerCase();
    if (tag === 'a') return 'link';
    if (tag === 'button' || tag === 'summary') return 'button';
    if (tag === 'select') return el.multiple ? 'listbox' : 'combobox';
    if (tag === 'textarea') return 'textbox';
    if (tag === 'input') {
      const t = (el.type || 'text').toLowerCase();
      if (BUTTONS.includes(t) || t === 'file') return 'button';
      if (t === 'checkbox' || t === 'radio') return t;
      if (t === 'search') return 'searchbox';
      if (t === 'range') return 'slider';
      return 'textbox';
    }
    return el.isContentEditable ? 'textbox' : 'generic';
  };
  const nameOf = (el) => {
    let n = labelOf(el);
    const tag = el.tagName.toLowerCase();
    if (!n.trim() && tag === 'input' && BUTTONS.includes((el.type || '').toLowerCase())) {
      n = el.value || el.type;
    }
    if (!n.trim() && !['input', 'select', 'textarea'].includes(tag)) {
      n = el.innerText || el.textContent || '';
    }
    if (!n.trim()) {
      const img = el.querySelector && el.querySelector('img[alt]');
      if (img) n = img.alt;
    }
    if (!n.trim()) n = el.getAttribute('placeholder') || el.getAttribute('title') || '';
    return clip(n, MAX_NAME);
  };
  const selector = 'a[href], button, input:not([type=hidden]), select, textarea, summary, '
    + '[role=button], [role=link], [role=checkbox], [role=tab], [role=menuitem], '
    + '[contenteditable=""], [contenteditable=true]';
  const all = Array.from(document.querySelectorAll(selector));
  const inView = [], offView = [];
  for (const el of all) {
    const shown = {checkOpacity: true, checkVisibilityCSS: true};
    if (el.checkVisibility && !el.checkVisibility(shown)) continue;
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) continue;
    const x0 = Math.max(0, r.left), y0 = Math.max(0, r.top);
    const x1 = Math.min(vw, r.right), y1 = Math.min(vh, r.bottom);
    const visible = x1 - x0 >= 1 && y1 - y0 >= 1;
    (visible ? inView : offView).push({el, r, visible, cx: (x0 + x1) / 2, cy: (y0 + y1) / 2});
  }
  const total = inView.length + offView.length;
  const order = new Map(all.map((el, i) => [el, i]));
  const chosen = inView.concat(offView).slice(0, MAX_ELEMENTS);
  chosen.sort((a, b) => order.get(a.el) - order.get(b.el));
  const focused = document.activeElement;
  const NO_VALUE = [...BUTTONS, 'checkbox', 'radio'];
  const elements = chosen.map((item, i) => {
    const el = item.el, role = roleOf(el), tag = el.tagName.toLowerCase();
    const out = {i, role, name: nameOf(el), tag};
    if (tag === 'input') out.type = (el.type || 'text').toLowerCase();
    if (el.getAttribute('name')) out.field = clip(el.getAttribute('name'), 100);
    const hint = el.getAttribute('placeholder');
    if (hint) out.placeholder = clip(hint, MAX_NAME);
    if (tag === 'a') out.href = el.href.slice(0, 2000);
    if ((tag === 'input' || tag === 'textarea') && !NO_VALUE.includes(out.type)) {
      const secret = out.type === 'password';
      out.value = secret ? (el.value ? '\u2022\u2022\u2022' : '') : clip(el.value, 500);
    }
    if (role === 'checkbox' || role === 'radio') out.checked = !!el.checked;
    if (tag === 'select') {
      const opt = el.selectedOptions && el.selectedOptions[0];
      out.value = opt ? clip(opt.text, MAX_NAME) : '';
      out.options = Array.from(el.options).slice(0, 30).map(o => clip(o.text, 100));
    }
    if (el.disabled) out.disabled = true;
    if (el === focused) out.focused = true;
    if (item.visible) {
      out.x = Math.round((left + item.cx) * dpr);
      out.y = Math.round((top + item.cy) * dpr);
    } else {
      out.offscreen = item.r.bottom <= 0 ? 'above' : item.r.top >= vh ? 'below' : 'beside';
    }
    return out;
  });
  const raw = document.body ? (document.body.innerText || '') : '';
  const text = raw.replace(/[ \t]*\n[ \t\n]*/g, '\n').trim();
  return {
    url: location.href, title: document.title,
    text: text.slice(0, MAX_TEXT), text_truncated: text.length > MAX_TEXT,
    elements, elements_total: total,
    viewport: {width: Math.round(vw * dpr), height: Math.round(vh * dpr),
               left: Math.round(left * dpr), top: Math.round(top * dpr),
               scroll_y: Math.round(window.scrollY),
               page_height: Math.round(document.documentElement.scrollHeight)},
  };
})()
"""


class Browser:
    """Chromium driven over the DevTools protocol on a pipe (fds 3 and 4)."""

    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int) -> None:
        self.proc = proc
        self.to_browser = to_browser
        self.reader = os.fdopen(from_browser, "rb", buffering=0)
        self.next_id = 0
        self.buffer = b""
        self.session = None
        # Frames loading now, from the page's loading events (``page_text`` waits for
        # a navigation a click just started instead of reading the old document).
        self.loading: set[str] = set()
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
                self._event(reply)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(reply["error"].get("message", "devtools error"))
                    return reply.get("result", {})
            chunk = self.reader.read(65536)
            if not chunk:
                raise RuntimeError("the browser closed its devtools pipe")
            self.buffer += chunk
        raise TimeoutError(f"devtools call {method} timed out")

    def _event(self, message: dict) -> None:
        method = message.get("method")
        if method == "Page.frameStartedLoading":
            self.loading.add(str(message.get("params", {}).get("frameId")))
        elif method == "Page.frameStoppedLoading":
            self.loading.discard(str(message.get("params", {}).get("frameId")))

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

    def navigate(self, url: str, with_state: bool = True) -> dict:
        """Loads ``url`` and waits until it is painted; the page's URL and title too
        unless ``with_state`` is false (the pool's claim needs neither)."""
        session = self.page_session()
        result = self.call("Page.navigate", {"url": url}, session=session, timeout=20)
        if result.get("errorText"):
            return {"ok": False, "error": f"navigation failed: {result['errorText']}"}
        self.settle()
        return {"ok": True, **self.state()} if with_state else {"ok": True}

    def evaluate(self, expression: str, await_promise: bool = False):
        session = self.page_session()
        params = {"expression": expression, "returnByValue": True, "awaitPromise": await_promise}
        result = self.call("Runtime.evaluate", params, session=session)
        return result.get("result", {}).get("value")

    def settle(self, timeout_s: float = 10.0) -> None:
        """Waits (bounded) until the document has loaded and two frames were painted, so
        the next screenshot shows the page rather than a blank window. One evaluation
        that resolves on the load event (or at once when loaded) and two animation
        frames, bounded by the page's own timer: no polling round trips."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.evaluate(SETTLE_JS % int(1000 * left), await_promise=True)
                return
            except TimeoutError:
                return
            except RuntimeError:
                time.sleep(0.005)  # mid-navigation: the context is being replaced

    def page_text(self, max_text: int, max_elements: int) -> dict:
        """The page as text (``PAGE_TEXT_JS``) once it is quiet: two painted frames
        (input just sent is handled by then, and a navigation it started has begun),
        then, while a frame is loading, the load event and two frames more."""
        started = time.monotonic()
        with contextlib.suppress(RuntimeError, TimeoutError):  # mid-navigation: see below
            self.evaluate(SETTLE_JS % 500, await_promise=True)
        if self.loading:
            self.settle(timeout_s=8.0)
        for _ in range(3):
            try:
                value = self.evaluate(PAGE_TEXT_JS % (max_text, max_elements))
            except RuntimeError:  # the context went away under us: a navigation
                self.settle(timeout_s=5.0)
                continue
            if isinstance(value, dict):
                return {"ok": True, **value, "ms": int(1000 * (time.monotonic() - started))}
            break
        return {"ok": False, "error": "the page did not answer"}

    def state(self) -> dict:
        """The page's URL and title, in one evaluation (one round trip per step)."""
        try:
            value = self.evaluate("[location.href, document.title]")
            url, title = value if isinstance(value, list) and len(value) == 2 else ("", "")
            return {"url": url or "", "title": title or ""}
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


# The fresh profile's preferences, written before Chromium first starts. Spell checking
# off here, not only by policy: with the SpellcheckEnabled policy alone, Chromium still
# fetched its Hunspell dictionary (redirector.gvt1.com/edgedl/chrome/dict/) the first
# time text was typed into a field (measured: tests/sandboxes/test_demoweb.py), a request
# that would be recorded with the run as the agent's.
PROFILE_PREFERENCES = {
    "browser": {"enable_spellchecking": False},
    "spellcheck": {"dictionaries": [], "dictionary": "", "use_spelling_service": False},
}


def start_browser(width: int, height: int, start_url: str, proxy: bool) -> Browser:
    os.makedirs("/tmp/browser-profile/Default", exist_ok=True)  # noqa: S108 - its own /tmp
    with open("/tmp/browser-profile/Default/Preferences", "w") as prefs:  # noqa: S108
        json.dump(PROFILE_PREFERENCES, prefs)
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


def run_input(argv: list, xtest: "XTestInput | None" = None) -> dict:
    """``argv`` once it passed :func:`input_argv_ok` (so it runs nothing else): through
    ``xtest`` when given, else xdotool under this supervisor's own hard rlimits and a
    timeout. No ``preexec_fn``: it would force a fork of the whole supervisor on every
    click."""
    if not input_argv_ok(argv):
        return {"ok": False, "error": "bad input arguments"}
    if xtest is not None:
        return xtest.run(argv)
    proc = subprocess.run(["xdotool", *argv], capture_output=True, timeout=20, check=False)
    if proc.returncode != 0:
        return {
            "ok": False,
            "error": proc.stderr.decode(errors="replace")[:500] or "xdotool failed",
        }
    return {"ok": True, "via": "xdotool"}


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


# xdotool's names for modifiers in a key chord (its symbol map), and a few spellings
# agents use for keys whose keysym is named otherwise.
KEY_ALIASES = {
    "alt": "Alt_L", "ctrl": "Control_L", "control": "Control_L", "meta": "Meta_L",
    "super": "Super_L", "shift": "Shift_L", "enter": "Return", "esc": "Escape",
    "del": "Delete", "pageup": "Prior", "pagedown": "Next", "backspace": "BackSpace",
}  # fmt: skip
TEXT_KEYSYMS = {"\n": 0xFF0D, "\r": 0xFF0D, "\t": 0xFF09}  # Return, Tab
SHIFT_L = 0xFFE1
# After binding free keycodes to characters the keyboard map lacks, the client gets
# this long to read the new map before the first key arrives (Chromium reloads its
# keymap asynchronously: a key sent at once may be read with the old one and lost).
BIND_PAUSE_S = 0.03
# Before a keycode bound earlier in the same text is bound to another character (a text
# with more distinct new characters than free keycodes), the client gets this long to
# have read the keys sent with the old binding.
REBIND_PAUSE_S = 0.25
# How long the display's supervisor keeps trying to open its X connection before the
# first input (it tries once Xvfb reported its display; the first try succeeds).
XTEST_CONNECT_EARLY_S = 30.0


def char_keysym(char: str) -> int:
    """The keysym of ``char`` (Latin-1 keysyms are the code points; others are
    0x01000000 + code point, as xdotool and Xlib have them); 0 for none."""
    if char in TEXT_KEYSYMS:
        return TEXT_KEYSYMS[char]
    code = ord(char)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    if code < 0x100 or 0xD800 <= code <= 0xDFFF:
        return 0  # control characters and lone surrogates type nothing
    return 0x01000000 | code


class XTestInput:
    """The xdotool commands the host sends (the argv ``input_argv_ok`` accepts), sent
    as XTEST events on one X connection kept for the sandbox's life, with xdotool's
    meaning: ``mousemove X Y``, ``mousedown``/``mouseup B``, ``click --repeat N
    --delay MS B`` (the delay between repeats), ``type --delay MS -- TEXT`` (any
    character: one the keyboard map lacks is bound to a free keycode first, as xdotool
    does) and ``key -- CHORD`` (``ctrl+shift+Tab``: pressed in order, released in
    reverse). A command ends with its events written to the server (a flush: xdotool
    exits after one too); a round trip only where the meaning needs one (between
    repeated clicks, after binding keycodes). One command at a time (a lock)."""

    def __init__(self, xlib) -> None:
        self.xlib = xlib
        self.lock = threading.Lock()
        self.display = None
        self.keymap: list[list[int]] = []
        self.first_keycode = 8
        self.scratch: list[int] = []  # keycodes free for binding, least recently used first
        self.used_at: dict[int, float] = {}  # when each keycode was last pressed

    def run(self, argv: list, wait: bool = True) -> dict | None:
        """Sends ``argv``'s events; None when ``wait`` is false and another command
        holds the display."""
        if not self.lock.acquire(blocking=wait):
            return None
        try:
            if self.display is None:
                self._connect()
            error = self._run(argv)
            self.display.flush()
            # Nothing is selected, but MappingNotify goes to every client: drop it.
            while self.display.pending_events():
                self.display.next_event()
        except Exception as exc:  # a display gone or refusing: reconnect next time
            self._drop()
            return {"ok": False, "error": f"the display refused input: {exc}"[:500]}
        finally:
            self.lock.release()
        return {"ok": False, "error": error} if error else {"ok": True, "via": "xtest"}

    def connect_early(self, timeout_s: float = XTEST_CONNECT_EARLY_S) -> None:
        """Opens the X connection as soon as the display is up, beside Chromium's
        start, so the run's first input does not pay for it (~30 ms). Until then, and
        after any failure, the first input connects as before."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.display is not None:
                    return
                try:
                    self._connect()
                    return
                except OSError:  # up, but without XTEST: the first input reports it
                    return
                except Exception:  # not up yet
                    self._drop()
            time.sleep(0.02)

    def _connect(self) -> None:
        display = self.xlib.display.Display(os.environ.get("DISPLAY", ":0"))
        if not display.has_extension("XTEST"):
            display.close()
            raise OSError("the X server has no XTEST extension")
        self.display = display
        self.first_keycode = display.display.info.min_keycode

    def _drop(self) -> None:
        if self.display is not None:
            with contextlib.suppress(Exception):
                self.display.close()
        self.display = None

    def _fake(self, event_type: int, detail: int = 0, x: int = 0, y: int = 0) -> None:
        self.xlib.ext.xtest.fake_input(self.display, event_type, detail, x=x, y=y)

    def _run(self, argv: list) -> str:
        X = self.xlib.X
        i = 0
        while i < len(argv):
            command = argv[i]
            i += 1
            if command == "mousemove":
                self._fake(X.MotionNotify, 0, int(argv[i]), int(argv[i + 1]))
                i += 2
                continue
            if command in ("mousedown", "mouseup"):
                kind = X.ButtonPress if command == "mousedown" else X.ButtonRelease
                self._fake(kind, int(argv[i]))
                i += 1
                continue
            options = {"--repeat": 1, "--delay": 100 if command == "click" else 12}
            while argv[i] in options:
                options[argv[i]] = int(argv[i + 1])
                i += 2
            delay = options["--delay"] / 1000
            if command == "click":
                button = int(argv[i])
                i += 1
                for n in range(options["--repeat"]):
                    if n:
                        self.display.sync()
                        time.sleep(delay)
                    self._fake(X.ButtonPress, button)
                    self._fake(X.ButtonRelease, button)
                continue
            self._load_keymap()
            if command == "type":
                for text in argv[i + 1 :]:
                    self._type([k for k in map(char_keysym, text) if k], delay)
                return ""
            for chord in argv[i + 1 :]:  # key
                keysyms = []
                for name in chord.split("+"):
                    keysym = self._name_keysym(name)
                    if not keysym:
                        return f"(symbol) No such key name {name[:50]!r}"
                    keysyms.append(keysym)
                found = [self._lookup(k) for k in keysyms]
                keep = {f[0] for f in found if f is not None and f[0] in self.scratch}
                self._bind([k for k, f in zip(keysyms, found, strict=True) if f is None], keep)
                self._stroke(keysyms[:-1], keysyms[-1], 0)
            return ""
        return ""

    def _name_keysym(self, name: str) -> int:
        XK = self.xlib.XK
        keysym = XK.string_to_keysym(KEY_ALIASES.get(name.lower(), name)) if name else 0
        if not keysym and len(name) == 1:
            keysym = char_keysym(name)
        return keysym

    def _load_keymap(self) -> None:
        """The server's keyboard map now (Chromium, or a page through it, may change it)."""
        info = self.display.display.info
        count = info.max_keycode - info.min_keycode + 1
        self.keymap = [list(k) for k in self.display.get_keyboard_mapping(info.min_keycode, count)]
        free = [self.first_keycode + n for n, syms in enumerate(self.keymap) if not any(syms)]
        # Keycodes this connection bound before stay scratch space, least recently used
        # first; any other keycode with no keysym joins them.
        bound = {self.first_keycode + n for n, syms in enumerate(self.keymap) if syms[:1]}
        self.scratch = [k for k in self.scratch if k in bound or k in free] + [
            k for k in reversed(free) if k not in self.scratch
        ]

    def _lookup(self, keysym: int) -> tuple[int, bool] | None:
        """A keycode producing ``keysym`` and whether it takes Shift; None: unmapped."""
        for index in (0, 1):
            for n, syms in enumerate(self.keymap):
                if syms[index : index + 1] == [keysym]:
                    return self.first_keycode + n, index == 1
        return None

    def _type(self, keysyms: list[int], delay: float) -> None:
        """Types ``keysyms`` in stretches: each one's unmapped keysyms are bound at
        once (one pause), to scratch keycodes that no keysym of the stretch uses."""
        pos = 0
        while pos < len(keysyms):
            missing: list[int] = []
            keep: set[int] = set()
            end = pos
            while end < len(keysyms):
                keysym = keysyms[end]
                found = self._lookup(keysym)
                if found is None and keysym not in missing:
                    if len(missing) + 1 > len(self.scratch) - len(keep):
                        break
                    missing.append(keysym)
                elif found is not None and found[0] in self.scratch and found[0] not in keep:
                    if len(missing) > len(self.scratch) - len(keep) - 1:
                        break
                    keep.add(found[0])
                end += 1
            if end == pos:
                raise OSError("no free keycode to bind a character to")
            self._bind(missing, keep)
            for keysym in keysyms[pos:end]:
                self._stroke([], keysym, delay)
            pos = end

    def _bind(self, keysyms: list[int], keep: set[int]) -> None:
        """Binds each of ``keysyms`` to a scratch keycode outside ``keep`` (least
        recently used first), then gives the client BIND_PAUSE_S to read the map."""
        if not keysyms:
            return
        codes = [k for k in self.scratch if k not in keep][: len(keysyms)]
        if len(codes) < len(keysyms):
            raise OSError("no free keycode to bind a character to")
        wait = REBIND_PAUSE_S - (time.monotonic() - max(self.used_at.get(k, 0.0) for k in codes))
        if wait > 0:  # a keycode just typed with: its keys may still be unread
            self.display.sync()
            time.sleep(wait)
        for keysym, keycode in zip(keysyms, codes, strict=True):
            row = self.keymap[keycode - self.first_keycode]
            row[:] = [keysym, keysym] + [0] * (len(row) - 2)
            self.display.change_keyboard_mapping(keycode, [row])
            self.scratch.remove(keycode)
            self.scratch.append(keycode)
        self.display.sync()
        time.sleep(BIND_PAUSE_S)

    def _stroke(self, modifiers: list[int], keysym: int, delay: float) -> None:
        """Presses the modifiers, the key (with Shift when its keysym needs it), and
        releases them in reverse; every keysym is mapped by now."""
        X = self.xlib.X
        held = [self._lookup(m)[0] for m in modifiers]  # type: ignore[index]
        keycode, shifted = self._lookup(keysym)  # type: ignore[misc]
        if shifted and SHIFT_L not in modifiers:
            held.append(self._lookup(SHIFT_L)[0])  # type: ignore[index]
        for code in held:
            self._fake(X.KeyPress, code)
        self._fake(X.KeyPress, keycode)
        self.used_at[keycode] = time.monotonic()
        if delay:
            self.display.flush()
            time.sleep(delay / 2)
        self._fake(X.KeyRelease, keycode)
        for code in reversed(held):
            self._fake(X.KeyRelease, code)
        if delay:
            self.display.flush()
            time.sleep(delay / 2)


class Supervisor:
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
            self.browser = start_browser(width, height, self.config.get("start_url", ""), proxy)
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

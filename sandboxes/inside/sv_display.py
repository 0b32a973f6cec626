"""The display sandbox's screen and browser: Xvfb (:func:`start_display`), Chromium
(:func:`start_browser`) and the DevTools pipe the supervisor drives it through
(:class:`Browser`: navigation, the page's URL and title, the page as text)."""

import base64
import contextlib
import json
import os
import subprocess
import threading
import time
import zlib

from sv_egress import PROXY_PORT
from sv_files import read_regular
from sv_page_text import PAGE_TEXT_JS

FRAMEBUFFER = "/fb/Xvfb_screen0"  # Xvfb's -fbdir file
# The framebuffer file's header, window name and colour map at most (sandboxes.screens).
FRAMEBUFFER_HEADER_BYTES = 4096 + 4096 * 12

# Resolves once the document has loaded and two frames were painted after that, or
# after %d ms whatever happens (a subresource that never ends).
SETTLE_JS = (
    "new Promise(r => { setTimeout(() => r(0), %d);"
    " const painted = () => requestAnimationFrame(() => requestAnimationFrame(() => r(1)));"
    " if (document.readyState === 'complete') painted();"
    " else addEventListener('load', painted, {once: true}); })"
)


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


def start_browser(chromium: str, width: int, height: int, start_url: str, proxy: bool) -> Browser:
    """Starts ``chromium`` (its path: the entry may wrap it) on the display, its
    DevTools on a pipe."""
    os.makedirs("/tmp/browser-profile/Default", exist_ok=True)  # noqa: S108 - its own /tmp
    with open("/tmp/browser-profile/Default/Preferences", "w") as prefs:  # noqa: S108
        json.dump(PROFILE_PREFERENCES, prefs)
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    argv = [
        chromium,
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


def framebuffer(width: int, height: int) -> dict:
    """Xvfb's framebuffer file, deflated (level 1: a screen is mostly flat) and in
    base64; at most the bytes a ``width`` × ``height`` screen's file can have."""
    bound = FRAMEBUFFER_HEADER_BYTES + width * height * 4
    try:
        fd = os.open(FRAMEBUFFER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return {"ok": False, "error": f"no framebuffer: {exc.strerror}"}
    data = read_regular(fd, bound)
    if isinstance(data, str):
        return {"ok": False, "error": f"the framebuffer: {data}"}
    return {"ok": True, "zlib": base64.b64encode(zlib.compress(data, 1)).decode()}

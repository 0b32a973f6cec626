"""Input as XTEST events from the display's supervisor (no process per step), for real:
Xvfb and Chromium in their display sandbox, the page reporting what it received in
its title. xdotool's meaning is kept (click at x, y with a button and a count, type
any text, key chords, scroll, drag), and xdotool itself is still there for the same
argv (the reference path, and the path without python-xlib)."""

import shutil
import tempfile
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings

from sandboxes import local_backend
from sandboxes.base import SandboxSpec
from sandboxes.inside import supervisor
from sandboxes.local_backend import LocalBackend

UID_BASE = settings.ARENA.sandbox_uid_base
SCRIPT = """
const q = document.getElementById('q');
const show = t => { document.title = t; };
q.addEventListener('input', () => show('text:' + q.value));
addEventListener('mousedown', e => {
  if (e.target !== q) show('down:' + e.button + ':' + e.clientX);
});
addEventListener('mouseup', e => {
  if (e.target !== q) show(document.title + ' up:' + e.clientX);
  setTimeout(() => q.focus());
});
addEventListener('dblclick', e => show('dbl:' + e.clientX));
addEventListener('contextmenu', e => e.preventDefault());
addEventListener('keydown', e => {
  if (!(e.ctrlKey && e.shiftKey) && !e.altKey) return;  // ctrl+a selects all
  e.preventDefault();
  show('chord:' + (e.ctrlKey ? 'ctrl+' : '') + (e.shiftKey ? 'shift+' : '')
       + (e.altKey ? 'alt+' : '') + e.key);
});
addEventListener('scroll', () => show('scroll:' + Math.round(scrollY)));
"""
PAGE = "data:text/html," + urllib.parse.quote(
    "<title>ready</title><body style='height:6000px;margin:0'>"
    "<input id=q autofocus style='font-size:30px;width:900px'>"
    f"<script>{SCRIPT}</script></body>"
)


def _desktop(slot: int):
    root = Path(tempfile.mkdtemp(prefix="arena-test-xtest-", dir="/var/tmp"))
    root.chmod(0o711)
    box = LocalBackend(root, uid_base=UID_BASE).provision(
        SandboxSpec(run_id=slot, shell_timeout_s=5, start_url=PAGE), slot=slot
    )
    return box, root


@pytest.fixture(scope="module")
def desktop():
    box, root = _desktop(56)
    yield box
    box.destroy()
    shutil.rmtree(root, ignore_errors=True)


def title_of(box, expected: str | None = None, timeout_s: float = 10.0) -> str:
    """The page's title once it is ``expected`` (or settled), bounded."""
    deadline = time.monotonic() + timeout_s
    title = ""
    while time.monotonic() < deadline:
        title = (box.page_state() or {}).get("title", "")
        if title == expected:
            return title
        time.sleep(0.05)
    return title


def clear(box) -> None:
    box.key("ctrl+a")
    box.key("BackSpace")
    title_of(box, "text:")


def send(box, argv: list[str], **more) -> dict:
    """Asks the display's supervisor for input directly, past the host's own checks."""
    return box._call("input", {"op": "input", "argv": argv, **more}, client=box.display_client)


def test_input_is_sent_as_xtest_events(desktop):
    assert send(desktop, ["mousemove", "5", "5"]) == {"ok": True, "via": "xtest"}


@pytest.mark.parametrize("via", [None, "xdotool"])
@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "sh", "-c", "touch /tmp/pwned"],
        ["mousemove", "1", "1", "exec", "touch", "/tmp/pwned"],
        ["type", "--file", "/etc/passwd"],
        ["click", "--repeat", "1"],
        ["key", "--window", "1", "--", "a"],
    ],
)
def test_input_runs_only_the_commands_the_host_sends(desktop, argv, via):
    more = {"via": via} if via else {}
    assert send(desktop, argv, **more) == {"ok": False, "error": "bad input arguments"}
    assert not (desktop.run_dir / "display" / "tmp" / "pwned").exists()


@pytest.mark.parametrize(
    "text",
    [
        "hello arena",
        "Hello, World! @#$%^&*()_+{}|:\"<>?~`-=[]\\;',./",
        "héllo ✓ 日本 Ω ж €",
        # more distinct characters than the keyboard map has free keycodes for
        "".join(chr(c) for c in range(0x3B1, 0x3C9)) + "".join(chr(c) for c in range(0x430, 0x44F)),
    ],
)
def test_type_enters_any_text(desktop, text):
    clear(desktop)
    assert desktop.type(text).ok
    assert title_of(desktop, f"text:{text}") == f"text:{text}"


def test_key_chords_press_modifiers_in_order(desktop):
    assert desktop.key("ctrl+shift+k").ok
    assert title_of(desktop, "chord:ctrl+shift+K") == "chord:ctrl+shift+K"
    assert desktop.key("alt+x").ok
    assert title_of(desktop, "chord:alt+x") == "chord:alt+x"
    clear(desktop)
    desktop.type("abc")
    assert desktop.key("BackSpace").ok and desktop.key("Return").ok
    assert title_of(desktop, "text:ab") == "text:ab"


def test_an_unknown_key_is_a_recorded_error(desktop):
    result = desktop.key("NoSuchKey")
    assert not result.ok and "NoSuchKey" in result.error


def test_click_with_a_button_and_a_count(desktop):
    assert desktop.click(400, 500).ok
    assert title_of(desktop, "down:0:400 up:400") == "down:0:400 up:400"
    assert desktop.click(420, 500, button="right").ok
    assert title_of(desktop, "down:2:420 up:420") == "down:2:420 up:420"
    assert desktop.click(440, 500, count=2).ok
    assert title_of(desktop, "dbl:440") == "dbl:440"


def test_drag_presses_moves_and_releases(desktop):
    assert desktop.drag(100, 600, 300, 650).ok
    assert title_of(desktop, "down:0:100 up:300") == "down:0:100 up:300"


def test_scroll_turns_the_wheel(desktop):
    assert desktop.scroll(400, 500, 0, 3).ok
    title = title_of(desktop, None, timeout_s=2)
    assert title.startswith("scroll:") and int(title.split(":")[1]) > 0
    assert desktop.scroll(400, 500, 0, -3).ok
    assert title_of(desktop, "scroll:0") == "scroll:0"


def test_the_xdotool_path_takes_the_same_commands(desktop):
    argv = ["mousemove", "460", "500", "click", "--repeat", "1", "--delay", "0", "1"]
    assert send(desktop, argv, via="xdotool") == {"ok": True, "via": "xdotool"}
    assert title_of(desktop, "down:0:460 up:460") == "down:0:460 up:460"


def test_without_python_xlib_input_falls_back_to_xdotool(monkeypatch):
    monkeypatch.setattr(local_backend, "xlib_package", lambda: None)
    box, root = _desktop(57)
    try:
        assert send(box, ["mousemove", "5", "5"]) == {"ok": True, "via": "xdotool"}
        assert box.type("plain").ok
        assert title_of(box, "text:plain") == "text:plain"
    finally:
        box.destroy()
        shutil.rmtree(root, ignore_errors=True)


class _NotUp(Exception):
    """python-xlib's DisplayConnectionError stands for itself: not an OSError."""


def _fake_xlib(up_after: int, xtest: bool = True):
    attempts: list[str] = []

    class Display:
        def __init__(self, name: str) -> None:
            attempts.append(name)
            if len(attempts) <= up_after:
                raise _NotUp("no display yet")
            self.display = SimpleNamespace(info=SimpleNamespace(min_keycode=8))
            self.closed = False

        def has_extension(self, name: str) -> bool:
            return xtest and name == "XTEST"

        def close(self) -> None:
            self.closed = True

    return SimpleNamespace(display=SimpleNamespace(Display=Display)), attempts


def test_the_x_connection_opens_before_the_first_input(monkeypatch):
    """The display's supervisor connects as soon as its X server answers, so the
    run's first input does not pay for the connection."""
    monkeypatch.setattr(supervisor.time, "sleep", lambda s: None)
    xlib, attempts = _fake_xlib(up_after=3)
    xtest = supervisor.XTestInput(xlib)
    xtest.connect_early(timeout_s=5)
    assert len(attempts) == 4 and xtest.display is not None
    xtest.connect_early(timeout_s=5)  # connected: nothing more
    assert len(attempts) == 4


def test_a_display_without_xtest_is_tried_once_early(monkeypatch):
    monkeypatch.setattr(supervisor.time, "sleep", lambda s: None)
    xlib, attempts = _fake_xlib(up_after=0, xtest=False)
    xtest = supervisor.XTestInput(xlib)
    xtest.connect_early(timeout_s=5)
    assert len(attempts) == 1 and xtest.display is None  # the first input reports it

"""Input as XTEST events on one kept X connection (:class:`XTestInput`), with xdotool's
meaning, through python-xlib when the host binds it in (``supervisor.load_xlib``)."""

import contextlib
import os
import threading
import time

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

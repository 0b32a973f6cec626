"""The screen judges see is the browser's, whatever the agent's shell does (issue 33).

A hostile agent, through the shell tool only, on both backends for real (bubblewrap,
and the private Docker engine): it looks for the display's X server (the socket file,
the abstract socket, python-xlib, xdotool) and maps a full-screen override-redirect
window painted magenta, kept after it disconnects; it looks for Xvfb's framebuffer
file (``/fb``, a search of the file system, Xvfb's ``/proc`` entries) and overwrites
its pixels in place; it injects input through XTEST (a click on the page, by the raw
protocol, python-xlib and xdotool). Then the host takes a screenshot through the tool
API: it must be the page it was before the attack, pixel for pixel (below Chromium's
toolbar, which changes by itself; no magenta anywhere), the page must have received no
event, and the attacker must have reached nothing. The tools themselves still reach
the page afterwards. On the code before issue 33 it fails on both backends.
"""

import io
import secrets
import shutil
import socket
import tempfile
import time
import urllib.parse
from pathlib import Path

import docker
import pytest
from django.conf import settings
from PIL import Image, ImageChops

from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import DEFAULT_IMAGE, DockerBackend, janitor
from sandboxes.local_backend import LocalBackend
from sandboxes.reclaim import reclaims_wait
from sandboxes.tools import tool_call
from tests.docker_engine import docker_engine  # noqa: F401 - the session fixture

UID_BASE = settings.ARENA.sandbox_uid_base
GREEN = (0, 160, 0)
MAGENTA = (255, 0, 255)
RED = (200, 0, 0)
# Any event that reaches the page turns it red and says so in its title.
PAGE = "data:text/html," + urllib.parse.quote(
    "<title>untouched</title><body style='margin:0;background:rgb(0,160,0)'>"
    "<script>for (const kind of ['mousedown', 'keydown', 'wheel']) {"
    " addEventListener(kind, () => { document.title = 'touched:' + kind;"
    " document.body.style.background = 'rgb(200,0,0)'; }); }</script></body>"
)

# The attack, as the agent's shell would run it (python3 and the standard library, which
# every sandbox has). It prints one line per thing it managed to do.
ATTACK = r'''
import glob, os, socket, struct, subprocess, sys, time

done = []
# Everything but the kernel's file systems and the read-only system files.
FIND = ["find", "/", "(", "-path", "/proc", "-o", "-path", "/sys", "-o", "-path", "/usr", ")",
        "-prune", "-o"]


def endpoints():
    """Every X server address this process might reach."""
    found = [("path", p) for p in glob.glob("/tmp/.X11-unix/*")]
    try:
        listing = subprocess.run(FIND + ["-type", "s", "-print"], capture_output=True,
                                 text=True, timeout=10).stdout.split()
    except Exception:
        listing = []
    found += [("path", p) for p in listing if "X11" in p or os.path.basename(p).startswith("X")]
    found += [("abstract", "\0/tmp/.X11-unix/X%d" % n) for n in range(10)]
    return sorted(set(found))


def connect(address):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(3)
    sock.connect(address)
    return sock


def recv(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def handshake(sock):
    """The X11 connection setup, no authorisation; returns the first screen."""
    sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, 0, 0))
    head = recv(sock, 8)
    if head[0] != 1:
        raise OSError("refused: %r" % recv(sock, struct.unpack("<H", head[6:8])[0] * 4))
    body = recv(sock, struct.unpack("<H", head[6:8])[0] * 4)
    base, = struct.unpack("<I", body[4:8])
    vendor_len, = struct.unpack("<H", body[16:18])
    formats = body[21]
    offset = 32 + (vendor_len + 3) // 4 * 4 + 8 * formats
    root, = struct.unpack("<I", body[offset:offset + 4])
    width, height = struct.unpack("<HH", body[offset + 20:offset + 24])
    return base, root, width, height


def reply(sock):
    """The next reply (events and errors skipped)."""
    while True:
        packet = recv(sock, 32)
        if packet[0] == 1:
            extra, = struct.unpack("<I", packet[4:8])
            return packet + recv(sock, extra * 4)


def xtest_click(sock, root, x, y):
    name = b"XTEST"
    sock.sendall(struct.pack("<BxHHxx", 98, 2 + (len(name) + 3) // 4, len(name)) + name + b"\0" * 3)
    answer = reply(sock)
    if not answer[8]:
        return False
    major = answer[9]
    for kind, detail in ((6, 0), (4, 1), (5, 1), (2, 36), (3, 36)):  # move, click, Return
        sock.sendall(struct.pack("<BBHBBxxIIxxxxxxxxhhxxxxxxxB", major, 2, 9, kind, detail,
                                 0, root, x, y, 0))
    sock.sendall(struct.pack("<BxH", 43, 1))  # GetInputFocus: a round trip
    reply(sock)
    return True


def paint(sock, base, root, width, height):
    window = base | 0x42
    # CreateWindow: full screen, background magenta, override-redirect (no manager asked)
    sock.sendall(struct.pack("<BBHIIhhHHHHII", 1, 0, 10, window, root, 0, 0, width, height,
                             0, 1, 0, 0x202) + struct.pack("<II", 0xFF00FF, 1))
    sock.sendall(struct.pack("<BxHI", 8, 2, window))  # MapWindow
    sock.sendall(struct.pack("<BBH", 112, 1, 1))  # SetCloseDownMode RetainPermanent
    sock.sendall(struct.pack("<BxH", 43, 1))
    reply(sock)


for kind, address in endpoints():
    try:
        sock = connect(address)
        done.append("connected %s %r" % (kind, address))
        base, root, width, height = handshake(sock)
        if xtest_click(sock, root, width // 2, height // 2):
            done.append("xtest via %r" % address)
        paint(sock, base, root, width, height)
        done.append("painted via %r" % address)
        sock.close()
    except Exception as exc:
        print("x %r: %s" % (address, exc), file=sys.stderr)

# python-xlib wherever it is (the supervisor's copy included) and xdotool.
for top in ["/opt/arena/pylib"] + glob.glob("/usr/lib/python3*/*-packages"):
    if not os.path.isdir(os.path.join(top, "Xlib")):
        continue
    sys.path.insert(0, top)
    try:
        from Xlib import X, display
        from Xlib.ext import xtest
        shown = display.Display(":0")
        xtest.fake_input(shown, X.MotionNotify, x=640, y=400)
        xtest.fake_input(shown, X.ButtonPress, 1)
        xtest.fake_input(shown, X.ButtonRelease, 1)
        shown.sync()
        done.append("xtest via python-xlib in %s" % top)
    except Exception as exc:
        print("xlib %s: %s" % (top, exc), file=sys.stderr)
    break
try:
    xdotool = subprocess.run(["xdotool", "mousemove", "600", "300", "click", "1"],
                             env={**os.environ, "DISPLAY": ":0"}, capture_output=True, timeout=5)
    if xdotool.returncode == 0:
        done.append("xtest via xdotool")
except Exception as exc:
    print("xdotool: %s" % exc, file=sys.stderr)

# The framebuffer file, wherever it can be found.
candidates = set(glob.glob("/fb/*"))
try:
    candidates |= set(subprocess.run(FIND + ["-name", "Xvfb_screen*", "-print"],
                                     capture_output=True, text=True, timeout=10).stdout.split())
except Exception:
    pass
for entry in glob.glob("/proc/[0-9]*"):
    try:
        program = open(entry + "/cmdline", "rb").read().split(b"\0")[0]
        if os.path.basename(program) != b"Xvfb":
            continue
        done.append("saw Xvfb as %s" % entry)
        candidates |= set(glob.glob(entry + "/cwd/Xvfb_screen*"))
        candidates |= set(glob.glob(entry + "/root/fb/Xvfb_screen*"))
        for fd in glob.glob(entry + "/fd/*"):
            if "Xvfb_screen" in os.readlink(fd):
                candidates.add(fd)
    except OSError:
        pass
for path in sorted(candidates):
    try:
        with open(path, "r+b") as frame:
            size = frame.seek(0, 2)
            frame.seek(0)
            header = frame.read(100)
            width, height = struct.unpack(">II", header[16:24])
            frame.seek(size - width * height * 4)
            frame.write(bytes((255, 0, 255, 0)) * (width * height))
        done.append("framebuffer written at %s" % path)
    except Exception as exc:
        print("fb %s: %s" % (path, exc), file=sys.stderr)
time.sleep(0.5)  # for the server to paint what it was sent
print("\n".join(done))
print("finished", file=sys.stderr)
'''


@pytest.fixture(params=["local", "docker"])
def desktop(request):
    """A desktop showing ``PAGE``, on the parametrised backend, destroyed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="arena-test-paint-", dir="/var/tmp"))
    root.chmod(0o711)
    spec = SandboxSpec(run_id=3300, shell_timeout_s=20, start_url=PAGE, egress=False)
    if request.param == "local":
        backend = LocalBackend(root, uid_base=UID_BASE)
        box = backend.provision(spec, slot=70)
        yield box
        box.destroy()
    else:
        engine = request.getfixturevalue("docker_engine")
        client = docker.DockerClient(base_url=engine)
        backend = DockerBackend(
            DEFAULT_IMAGE,
            root,
            UID_BASE,
            client_factory=lambda: docker.DockerClient(base_url=engine),
            host=own_host(),
        )
        try:
            box = backend.provision(spec, slot=70)
            yield box
            box.destroy()
        finally:
            assert reclaims_wait(60)  # (its reclaim removes the containers)
            janitor(client, backend.host, lambda run_id: False, root=root)
            backend.close()
            client.close()
    shutil.rmtree(root, ignore_errors=True)


def own_host() -> str:
    """A host label of the test's own: its janitor never sees another test's containers."""
    return f"{socket.gethostname()}-paint-{secrets.token_hex(4)}"


def pixels(png: bytes) -> Image.Image:
    return Image.open(io.BytesIO(png)).convert("RGB")


def painted(desktop, tmp_path, colour: tuple[int, int, int], timeout_s: float = 10.0):
    """A screenshot once the page shows ``colour`` (Chromium maps its window a moment
    after the page reports itself painted, and repaints a moment after an event), or
    the last one after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        shot = tool_call(desktop, "screenshot", {}, deliver_dir=tmp_path)
        assert shot.ok, shot.error
        if pixels(shot.image).getpixel((640, 600)) == colour or time.monotonic() > deadline:
            return shot


def settled(desktop, tmp_path, timeout_s: float = 5.0):
    """A screenshot equal to the one before it (a frame read while Chromium presents
    the next one could mix the two), or the last one after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = tool_call(desktop, "screenshot", {}, deliver_dir=tmp_path)
    while True:
        time.sleep(0.1)
        shot = tool_call(desktop, "screenshot", {}, deliver_dir=tmp_path)
        assert shot.ok, shot.error
        if pixels(shot.image).tobytes() == pixels(last.image).tobytes():
            return shot
        if time.monotonic() > deadline:
            return shot
        last = shot


def test_the_agents_shell_cannot_draw_on_the_screen_or_inject_input(desktop, tmp_path):
    painted(desktop, tmp_path, GREEN)
    before = settled(desktop, tmp_path)
    assert pixels(before.image).getpixel((640, 600)) == GREEN
    assert desktop.page_state()["title"] == "untouched"

    attack = tool_call(
        desktop, "shell", {"command": f"python3 - <<'EOF'\n{ATTACK}\nEOF"}, deliver_dir=tmp_path
    )
    after = settled(desktop, tmp_path)

    assert attack.ok and attack.stderr.endswith("finished\n"), attack.stderr  # it ran through
    shown = pixels(after.image)
    colours = {colour for _, colour in shown.getcolors(maxcolors=1 << 20)}
    assert MAGENTA not in colours, attack.stdout
    # The page, pixel for pixel (Chromium's own toolbar changes by itself: its "Not
    # secure" chip slides in after a few seconds).
    page = (0, 100, 1280, 800)
    changed = ImageChops.difference(shown.crop(page), pixels(before.image).crop(page))
    assert changed.getbbox() is None, (changed.getbbox(), attack.stdout)
    assert desktop.page_state()["title"] == "untouched", attack.stdout
    # It found nothing of the display to write to, connect to, or see.
    assert attack.stdout.strip() == "", attack.stdout

    # The tools still drive the page: the host's click is the page's first event.
    assert tool_call(desktop, "click", {"x": 640, "y": 400}, deliver_dir=tmp_path).ok
    clicked = painted(desktop, tmp_path, RED)
    assert desktop.page_state()["title"] == "touched:mousedown"
    assert pixels(clicked.image).getpixel((640, 600)) == RED

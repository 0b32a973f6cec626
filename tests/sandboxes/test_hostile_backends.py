"""The hostile entrant's attacks on the agent's sandbox, on both backends for real: two
lanes side by side (bubblewrap sandboxes, or containers on the checkout's private Docker
engine), and what one lane's shell does to its disk, its processes, its memory, its file
descriptors, the kernel and the egress proxy. Each attack must end as a bounded failure
of that lane alone: the other lane answers as before, the host's disk is untouched and
the proxy still serves it. (test_hostile.py holds the local backend's other attacks, and
test_paint.py the display's, on both backends.)"""

import os
import secrets
import socket
import time

import docker
import pytest
from django.conf import settings

from sandboxes.base import SandboxSpec
from sandboxes.docker_backend import DEFAULT_IMAGE, DockerBackend, janitor
from sandboxes.local_backend import LocalBackend
from sandboxes.reclaim import reclaims_wait
from tests.docker_engine import docker_engine  # noqa: F401 - the session fixture
from tests.sandboxes.test_hostile import PROBE, host_disk_bytes
from tests.sandboxes.test_pool import proxy  # noqa: F401 - the module fixture (no DNS, no dial)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="slot uids and quotas need root")

QUOTA = 32 * 1024**2
FILES = 2048


def spec(run_id: int) -> SandboxSpec:
    return SandboxSpec(
        run_id=run_id,
        shell_timeout_s=6,
        output_max_bytes=4096,
        desktop=False,
        memory_mb=256,
        pids=128,
        disk_bytes=QUOTA,
        disk_inodes=FILES,
    )


@pytest.fixture(params=["local", "docker"])
def lanes(request, sandbox_root, proxy):  # noqa: F811
    """Two shell lanes of a battle on one backend (slots 30 and 31)."""
    uid_base = settings.ARENA.sandbox_uid_base
    if request.param == "local":
        backend = LocalBackend(sandbox_root, uid_base=uid_base, egress=proxy)
    else:
        engine = request.getfixturevalue("docker_engine")
        backend = DockerBackend(
            DEFAULT_IMAGE,
            sandbox_root,
            uid_base,
            egress=proxy,
            client_factory=lambda: docker.DockerClient(base_url=engine),
            host=f"{socket.gethostname()}-test-{secrets.token_hex(4)}",
        )
    boxes = []
    try:
        boxes.append(backend.provision(spec(9301), slot=30))
        boxes.append(backend.provision(spec(9302), slot=31))
        yield boxes
    finally:
        for box in boxes:
            box.destroy()
        if isinstance(backend, DockerBackend):
            assert reclaims_wait(60)  # (their reclaims remove the containers)
            janitor(backend.client(), backend.host, lambda run_id: False, root=sandbox_root)
            backend.close()


def answers(box) -> bool:
    return box.shell("echo alive", timeout_s=5).stdout == "alive\n"


def test_a_full_disk_is_the_lanes_own(lanes, sandbox_root):
    a, b = lanes
    host_used = host_disk_bytes(sandbox_root)
    filled = a.shell(
        "head -c 100000000 /dev/zero > /work/big; stat -c %s /work/big; "
        "n=0; while [ $n -lt 5000 ]; do true 2>/dev/null > /work/f$n || break; "
        "n=$((n+1)); done; echo $n"
    )
    written, files = (int(v) for v in filled.stdout.split())
    assert QUOTA - 1024**2 < written <= QUOTA
    assert "No space left on device" in filled.stderr
    assert 0 < files < FILES
    mine = b.shell("head -c 10000000 /dev/zero > /work/mine && stat -c %s /work/mine")
    assert (mine.ok, mine.stdout) == (True, "10000000\n")
    assert host_disk_bytes(sandbox_root) - host_used < 8 * 1024**2
    assert answers(a)


def test_a_fork_bomb_is_the_lanes_own(lanes):
    a, b = lanes
    a.shell("bomb() { bomb | bomb & }; bomb; sleep 3", timeout_s=5)
    assert answers(b)
    # The bomb's processes die with the command's timeout: the lane answers again.
    deadline = time.monotonic() + 20
    while not answers(a):
        assert time.monotonic() < deadline, "the bombed lane never answered again"
        time.sleep(0.5)


def test_a_memory_bomb_is_killed_inside_its_lane(lanes):
    a, b = lanes
    hog = a.shell("python3 -c \"x = bytearray(1024 * 1024 * 1024); print('allocated')\"")
    assert not hog.ok and "allocated" not in hog.stdout
    assert answers(a) and answers(b)


def test_a_file_descriptor_bomb_stops_at_the_limit(lanes):
    a, b = lanes
    bomb = a.shell(
        'python3 -c "import os\nfds = []\n'
        "try:\n    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\n"
        'except OSError as exc: print(len(fds), exc.strerror)"'
    )
    count, reason = bomb.stdout.split(" ", 1)
    assert int(count) < 1024 and reason.strip() == "Too many open files"
    assert answers(a) and answers(b)


def test_no_namespace_no_tracer_no_denied_system_call(lanes):
    a, _ = lanes
    result = a.shell(
        "unshare -U true; unshare -m true; unshare -n true; unshare -r true; "
        "strace -e trace=none true; gdb -batch -p $PPID"
    )
    errors = result.stderr.splitlines()
    assert errors.count("unshare: unshare failed: Operation not permitted") == 4
    assert "PTRACE_TRACEME: Operation not permitted" in result.stderr
    assert "ptrace: Operation not permitted." in errors
    probed = a.shell(f"python3 - <<'EOF'\n{PROBE}\nEOF")
    codes = dict(line.rsplit(" ", 2)[::2] for line in probed.stdout.splitlines())
    expected = dict.fromkeys(codes, "EPERM")
    expected["clone3"] = "ENOSYS"
    assert len(codes) == 27 and codes == expected


# Lane A opens connections to its proxy as fast as it can (100 at a time, each asking
# for a private address) for four seconds, in the background of its shell.
FLOOD = """
import socket, time
end = time.monotonic() + 4
sent = 0
while time.monotonic() < end:
    socks = []
    for i in range(100):
        try:
            s = socket.create_connection(("127.0.0.1", 3128), timeout=1)
            s.sendall(b"GET http://10.0.0.%d/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" % (i + 1))
            socks.append(s)
            sent += 1
        except OSError:
            pass
    for s in socks:
        s.close()
open("/work/flooded", "w").write(str(sent))
"""


def test_an_egress_flood_is_the_lanes_own(lanes, proxy):  # noqa: F811
    a, b = lanes
    started = a.shell(
        f"cat > /work/flood.py <<'EOF'\n{FLOOD}\nEOF\n"
        "nohup python3 /work/flood.py >/dev/null 2>&1 </dev/null & echo started"
    )
    assert started.stdout == "started\n"
    time.sleep(1)  # the flood is up
    t0 = time.monotonic()
    other = b.shell("curl -s -m 10 -o /dev/null -w '%{http_code}' http://10.0.0.1/")
    assert other.stdout == "403" and time.monotonic() - t0 < 5
    deadline = time.monotonic() + 15
    while not a.shell("cat /work/flooded 2>/dev/null").stdout:
        assert time.monotonic() < deadline, "the flood never ended"
        time.sleep(0.5)
    assert int(a.shell("cat /work/flooded").stdout) > 100  # it did flood
    refused = [record[0] for record in proxy.refusals]
    assert refused.count(b.spec.run_id) >= 1 and refused.count(a.spec.run_id) > 100
    assert answers(a)

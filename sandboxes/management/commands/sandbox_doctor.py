"""Checks that this host can run isolated desktop sandboxes: provisions one, takes a
screenshot, clicks, runs a shell command, tries the host's loopback and a private
address (directly and through the egress proxy), fills the disk quota, calls denied
system calls, looks at who owns the framebuffer and whether the agent's shell can reach
the display (its X server by either socket, the framebuffer, its processes), whether
the idle desktop makes requests of its own, destroys it and looks for leftovers.
Operators run it on every worker host.

Prints the report (``--json``: one JSON document) and exits non-zero, with one plain
line per failed property on stderr, when any property does not hold."""

import contextlib
import os
import statistics
import subprocess
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from arena_site import strict_json
from sandboxes.base import SandboxSpec
from sandboxes.local import LocalSandbox
from sandboxes.rundir import DISPLAY_UID_OFFSET
from sandboxes.services import egress_proxy, lease_acquire, lease_release, sandbox_backend

# Connect from inside the sandbox; print errno per target (0 would mean reachable).
PROBE = (
    'python3 -c "import socket\n'
    "for host, port in (('127.0.0.1', {redis}), ('10.0.0.1', 80), ('169.254.169.254', 80)):\n"
    '    s = socket.socket(); s.settimeout(2); print(s.connect_ex((host, port)))"'
)
VIA_PROXY = (
    "for u in http://127.0.0.1:{redis}/ http://10.0.0.1/ http://169.254.169.254/; do "
    "curl -s -m 5 -o /dev/null -w '%{{http_code}} ' \"$u\"; done"
)
# The doctor's own small quota: the mechanism is what it checks, not the configured size.
QUOTA_BYTES = 32 * 1024**2
QUOTA_FILES = 2048
# Write past the byte quota, then past the file quota; print how far each got (head's
# complaint, ENOSPC, comes back on stderr).
FILL = (
    "head -c {over} /dev/zero > /work/fill; echo bytes=$(stat -c %s /work/fill); "
    "rm -f /work/fill; mkdir /work/many; n=0; "
    "while [ $n -lt {files} ]; do true 2>/dev/null > /work/many/$n || break; n=$((n+1)); done; "
    "echo files=$n; rm -rf /work/many"
)
# Denied system calls, called directly (x86-64 numbers: ptrace, unshare(CLONE_NEWUSER),
# mount, bpf, io_uring_setup): each must fail with EPERM.
SYSCALLS = (
    'python3 -c "import ctypes, errno\n'
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "for nr, args in ((101, (0, 0, 0, 0)), (272, (0x10000000,)), (165, (0, 0, 0, 0, 0)),"
    " (321, (0, 0, 0)), (425, (1, 0))):\n"
    "    ctypes.set_errno(0); libc.syscall(nr, *args)\n"
    '    print(errno.errorcode.get(ctypes.get_errno()))"'
)
# The display from the agent's shell: the X server's socket file and abstract socket
# (connect), the framebuffer dir, Xvfb's process; prints what it reached, nothing if none.
DISPLAY_REACH = (
    'python3 -c "import glob, os, socket\n'
    "for name in ['/tmp/.X11-unix/X0', '\\0/tmp/.X11-unix/X0']:\n"
    "    s = socket.socket(socket.AF_UNIX)\n"
    "    if s.connect_ex(name) == 0: print('x-server', repr(name))\n"
    "if os.path.exists('/fb'): print('framebuffer')\n"
    "for c in glob.glob('/proc/[0-9]*/comm'):\n"
    "    try:\n"
    "        if open(c).read().strip() in ('Xvfb', 'chromium'): print('process', c)\n"
    '    except OSError: pass"'
)

# The properties that must hold, and the plain line said when one does not.
PROPERTIES = {
    "isolated": "isolation: the sandbox ran as root, saw routes, /etc/shadow or the environment",
    "loopback_blocked": "network: the host's loopback was reachable from the sandbox",
    "private_blocked": "network: a private or metadata address was reachable",
    "disk_quota": "disk: writing past the quota did not stop with ENOSPC, or used host disk",
    "seccomp": "syscalls: a denied system call (ptrace, unshare -U, mount, bpf, io_uring) ran",
    "framebuffer_protected": "display: the agent's uid can see or write the framebuffer",
    "display_out_of_reach": "display: the agent's shell reached the X server, the framebuffer "
    "or the display's processes",
    "no_phone_home": "egress: the idle desktop made requests of its own (updates, metrics…)",
}
# How long the doctor leaves the fresh desktop idle before counting its own egress:
# Chromium's start-up calls (component updates, the optimisation-guide manifest) come
# within the first second.
IDLE_S = 3.0
# What each property checked, said beside its verdict (the human-readable report).
CHECKS = {
    "isolated": "the shell runs as its slot's uid, sees only lo, no /etc/shadow, no host env",
    "loopback_blocked": "the host's Redis port, directly (refused) and through the proxy (403)",
    "private_blocked": "10.0.0.1 and 169.254.169.254, directly (unreachable) and proxied (403)",
    "disk_quota": "32 MiB and 2,048 files written past: ENOSPC, the host's disk untouched",
    "seccomp": "ptrace, unshare(CLONE_NEWUSER), mount, bpf, io_uring_setup from the shell: EPERM",
    "framebuffer_protected": "the framebuffer's owner is not the agent's uid, nor writable by it",
    "display_out_of_reach": "from the shell: both X sockets, /fb, Xvfb and Chromium processes",
    "no_phone_home": f"the idle desktop's requests through the proxy in its first {IDLE_S:g} s",
}


def failures(report: dict) -> list[str]:
    """One plain line per property of ``report`` that does not hold (none: all good)."""
    lines = [message for key, message in PROPERTIES.items() if report.get(key) is not True]
    if report.get("leaked_processes"):
        lines.append(f"teardown: {report['leaked_processes']} processes outlived the sandbox")
    return lines


def host_bytes(path: Path) -> int:
    """What the files under ``path`` take of the host's disk: those on ``path``'s own file
    system (a quota's tmpfs, mounted below it, is not the host's disk)."""
    device = path.stat().st_dev
    total = 0
    for top, dirs, files in os.walk(path):
        with contextlib.suppress(OSError):
            dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_dev == device]
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total


class Command(BaseCommand):
    help = (
        "Provision a desktop sandbox on this host, exercise it, and report isolation, "
        "disk quota, system-call filter, display ownership and timings."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print one JSON document"
        )
        parser.add_argument("--steps", type=int, default=10, help="click + screenshot rounds")

    def handle(self, *args, as_json: bool = False, steps: int = 10, **options) -> None:
        report = self.diagnose(steps)
        if as_json:
            self.stdout.write(strict_json.dumps(report))
        else:
            for key, value in report.items():
                if key in CHECKS:
                    verdict = "ok" if value is True else "FAILED"
                    self.stdout.write(f"{key:>24}: {verdict:<6} {CHECKS[key]}")
                else:
                    self.stdout.write(f"{key:>24}: {value}")
        failed = failures(report)
        for line in failed:
            self.stderr.write(f"sandbox doctor: {line}")
        if failed:
            raise SystemExit(1)

    def diagnose(self, steps: int) -> dict:
        backend = sandbox_backend()
        lease = lease_acquire(backend=backend.name, run_id=None)
        uid = settings.ARENA.sandbox_uid_base + lease.slot
        redis_port = settings.REDIS_URL.rsplit(":", 1)[-1].split("/")[0]
        report: dict = {"backend": backend.name, **backend.health()}
        spec = SandboxSpec(
            run_id=0, shell_timeout_s=10, disk_bytes=QUOTA_BYTES, disk_inodes=QUOTA_FILES
        )
        try:
            t0 = time.monotonic()
            box = backend.provision(spec, slot=lease.slot)
            first = box.screenshot()
            report["ready_ms"] = round((time.monotonic() - t0) * 1000, 1)
            # Before anything of the doctor's own goes out: the idle desktop's egress.
            time.sleep(IDLE_S)
            idle = egress_proxy().counters(spec.run_id) if spec.egress else {}
            report["idle_egress"] = idle
            report["no_phone_home"] = not idle.get("connections") and not idle.get("requests")
            step_ms = []
            for i in range(steps):
                t = time.monotonic()
                box.click(100 + i, 300)
                box.screenshot()
                step_ms.append((time.monotonic() - t) * 1000)
            report["step_ms_p50"] = round(statistics.median(step_ms), 1)
            who = box.shell("id -u; cat /proc/net/route | wc -l; cat /etc/shadow 2>&1; env")
            lines = who.stdout.split("\n")
            direct = box.shell(PROBE.format(redis=redis_port)).stdout.split()
            proxied = box.shell(VIA_PROXY.format(redis=redis_port)).stdout.split()
            report["isolated"] = bool(
                first.ok
                and who.ok
                and lines[0] != "0"
                and lines[1].strip() == "1"  # no routes: nothing but lo
                and "root:" not in who.stdout
                and "DATABASE_URL" not in who.stdout
                and "SECRET" not in who.stdout
            )
            report["loopback_blocked"] = direct[:1] == ["111"] and proxied[:1] == ["403"]
            report["private_blocked"] = direct[1:] == ["101", "101"] and proxied[1:] == [
                "403",
                "403",
            ]
            report["disk_quota"] = self._disk_quota(box)
            report["seccomp"] = box.shell(SYSCALLS).stdout.split() == ["EPERM"] * 5
            report.update(self._display(box, uid))
            t = time.monotonic()
            box.destroy()
            report["destroy_ms"] = round((time.monotonic() - t) * 1000, 1)
        finally:
            lease_release(lease=lease)
        uids = [str(uid), str(uid + DISPLAY_UID_OFFSET)]
        leftovers = subprocess.run(
            ["pgrep", "-U", ",".join(uids)], capture_output=True, text=True, check=False
        )
        report["leaked_processes"] = len(leftovers.stdout.split()) if os.geteuid() == 0 else None
        return report

    @staticmethod
    def _disk_quota(box) -> bool:
        """Writes past the byte and the file quota inside: both must stop at the quota
        with ENOSPC, and the host's disk must not hold the bytes (the run dir's files on
        the host's own file system, not the free space, which other processes change)."""
        before = host_bytes(box.run_dir)
        over = QUOTA_BYTES + 8 * 1024**2
        result = box.shell(FILL.format(over=over, files=QUOTA_FILES + 100), timeout_s=10)
        after = host_bytes(box.run_dir)
        out = dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)
        written, files = int(out.get("bytes") or 0), int(out.get("files") or 0)
        stopped = "No space left on device" in result.stderr and written <= QUOTA_BYTES
        host_untouched = after - before < QUOTA_BYTES // 2
        return bool(stopped and 0 < files < QUOTA_FILES and host_untouched)

    @staticmethod
    def _display(box, uid: int) -> dict:
        """Who owns the framebuffer, and what of the display the agent's shell reaches."""
        if not isinstance(box, LocalSandbox) or box.paths.display_control is None:
            return {"framebuffer_protected": False, "display_out_of_reach": False}
        reached = box.shell(DISPLAY_REACH)
        info = os.stat(box.paths.framebuffer, follow_symlinks=False)
        owner_ok = os.geteuid() != 0 or (info.st_uid != uid and not info.st_mode & 0o022)
        return {
            "framebuffer_owner": info.st_uid,
            "framebuffer_protected": owner_ok and "framebuffer" not in reached.stdout,
            "display_reached": reached.stdout.split("\n")[:-1],
            "display_out_of_reach": reached.ok and reached.stdout == "",
        }

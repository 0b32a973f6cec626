"""Checks that this host can run isolated desktop sandboxes: provisions one, takes a
screenshot, clicks, runs a shell command, tries the host's loopback and a private
address (directly and through the egress proxy), destroys it and looks for leftovers.
Operators run it on every worker host."""

import json
import os
import statistics
import subprocess
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from sandboxes.base import SandboxSpec
from sandboxes.services import lease_acquire, lease_release, sandbox_backend

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


class Command(BaseCommand):
    help = (
        "Provision a desktop sandbox on this host, exercise it, and report isolation and timings."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print one JSON document"
        )
        parser.add_argument("--steps", type=int, default=10, help="click + screenshot rounds")

    def handle(self, *args, as_json: bool = False, steps: int = 10, **options) -> None:
        report = self.diagnose(steps)
        if as_json:
            self.stdout.write(json.dumps(report))
            return
        for key, value in report.items():
            self.stdout.write(f"{key:>18}: {value}")

    def diagnose(self, steps: int) -> dict:
        backend = sandbox_backend()
        lease = lease_acquire(backend=backend.name, run_id=None)
        uid = settings.ARENA.sandbox_uid_base + lease.slot
        redis_port = settings.REDIS_URL.rsplit(":", 1)[-1].split("/")[0]
        report: dict = {"backend": backend.name, **backend.health()}
        try:
            t0 = time.monotonic()
            box = backend.provision(SandboxSpec(run_id=0, shell_timeout_s=10), slot=lease.slot)
            first = box.screenshot()
            report["ready_ms"] = round((time.monotonic() - t0) * 1000, 1)
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
            t = time.monotonic()
            box.destroy()
            report["destroy_ms"] = round((time.monotonic() - t) * 1000, 1)
        finally:
            lease_release(lease=lease)
        leftovers = subprocess.run(["pgrep", "-U", str(uid)], capture_output=True, text=True)
        report["leaked_processes"] = len(leftovers.stdout.split()) if os.geteuid() == 0 else None
        return report

"""Benchmark: the page as text (``Sandbox.page_text``), the per-step cost an agent that
asks for it pays. Prints one JSON document: for each demo web page (served to a real
bubblewrap desktop sandbox through the egress proxy as http://demo.arena.test/), the
median and max milliseconds of a ``page_text`` call, the supervisor's own share, the
text's length and the number of elements; and the same for ``page_state`` (URL and
title only, what every desktop step already pays) as the reference.

Run as root (sandboxes): .venv/bin/python tests/bench/bench_page_text.py
"""

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena_site.settings")
os.environ.setdefault("ARENA_EGRESS_RESOLVE", "false")

import django

django.setup()

from django.conf import settings  # noqa: E402

from sandboxes import netpolicy  # noqa: E402
from sandboxes.base import SandboxSpec  # noqa: E402
from sandboxes.demoweb import ORIGIN  # noqa: E402
from sandboxes.demoweb.server import DemoWebServer  # noqa: E402
from sandboxes.egress import EgressProxy  # noqa: E402
from sandboxes.local_backend import LocalBackend  # noqa: E402

PAGES = ("/", "/news/", "/news/millbrook-footbridge-opens/", "/directory/", "/contact/")
ROUNDS = 20


def timed(call) -> tuple[float, object]:
    t0 = time.perf_counter()
    value = call()
    return 1000 * (time.perf_counter() - t0), value


def main() -> None:
    web = DemoWebServer().start()
    proxy = EgressProxy(
        resolver=lambda host, port: [], simulated=netpolicy.simulated_hosts(web.simulated_host())
    ).run_in_thread()
    root = Path(tempfile.mkdtemp(prefix="arena-bench-pagetext-", dir="/var/tmp"))
    root.chmod(0o711)
    backend = LocalBackend(root, uid_base=settings.ARENA.sandbox_uid_base, egress=proxy)
    box = backend.provision(SandboxSpec(run_id=901), slot=9)
    report: dict[str, dict] = {}
    try:
        for path in PAGES:
            assert box.navigate(ORIGIN + path).ok, path
            text_ms, states_ms = [], []
            page = None
            for _ in range(ROUNDS):
                ms, page = timed(box.page_text)
                text_ms.append(ms)
                states_ms.append(timed(box.page_state)[0])
            assert isinstance(page, dict)
            report[path] = {
                "page_text_ms_median": round(statistics.median(text_ms), 1),
                "page_text_ms_max": round(max(text_ms), 1),
                "page_state_ms_median": round(statistics.median(states_ms), 1),
                "text_chars": len(page["text"]),
                "elements": len(page["elements"]),
            }
    finally:
        box.destroy()
        proxy.close()
        web.close()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"rounds": ROUNDS, "pages": report}, indent=2))


if __name__ == "__main__":
    main()

"""``manage.py decide``: the decider (judging/decider.py), until SIGTERM or SIGINT."""

import signal
import threading
import time

from django.core.management.base import BaseCommand

from arena_site import strict_json
from arena_site.heap import freeze_loaded
from judging.decider import decider_run


class Command(BaseCommand):
    help = (
        "Decide battles whose votes' undo windows have passed, in batches, until stopped "
        "(SIGTERM/SIGINT end it after the batch in hand). Run one or more per arena."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch", type=int, default=100,
                            help="Battles per transaction (default 100).")  # fmt: skip
        parser.add_argument("--idle", type=float, default=0.2,
                            help="Seconds to sleep when nothing is due (default 0.2).")  # fmt: skip
        parser.add_argument("--until-idle", action="store_true",
                            help="Stop once nothing is due (benchmarks, a catch-up).")  # fmt: skip

    def handle(self, *args, batch: int, idle: float, until_idle: bool, **options) -> None:
        if batch < 1 or idle <= 0:
            self.stderr.write("--batch must be ≥ 1 and --idle > 0")
            raise SystemExit(2)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: stop.set())
        # what is loaded now stays out of the collector's scans (arena_site/heap.py)
        frozen = freeze_loaded()
        cpu, wall = time.process_time(), time.monotonic()
        stats = decider_run(batch=batch, idle_s=idle, stop=stop, until_idle=until_idle)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        done = {**vars(stats), "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                "frozen_objects": frozen}  # fmt: skip
        self.stdout.write(strict_json.dumps({"decider": done}))

"""Benchmark: egress fairness between two sandboxes on one proxy. Prints one JSON
document.

Lane B makes steady requests (10 a second, within its own rate) through its unix socket
to a fake public upstream on loopback; lane A, from a process of its own, holds heads
that never finish, cycles a hundred connections with requests it is refused, and asks
for names whose lookup hangs. Figures: lane B's latency before and during the attack
(p50, p95, max), its failures (target: none), lane A's refusals by reason and what the
proxy accepted from it. The reference is lane B alone, in the same run ("before").
Target (issue #12): p50 during ≤ max(3 × before, before + 50 ms), no lane-B failure.

The same harness runs, shorter, in tests/sandboxes/test_egress_fairness.py. Nothing
leaves 127.0.0.1; no DNS query is made.

Run: .venv/bin/python tests/bench/bench_egress_fairness.py [--before S] [--during S]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.sandboxes.test_egress_fairness import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=float, default=5.0, help="seconds of lane B alone")
    parser.add_argument("--during", type=float, default=10.0, help="seconds under attack")
    args = parser.parse_args()
    figures = measure(before_s=args.before, during_s=args.during, interval_s=0.1)
    before = figures["lane_b"]["before"]["p50_ms"]
    during = figures["lane_b"]["during"]["p50_ms"]
    bound = max(3 * before, before + 50)
    figures["target"] = {
        "p50_during_bound_ms": round(bound, 2),
        "met": during <= bound and not figures["lane_b"]["failures"],
        "slowdown_p50": round(during / before, 2) if before else None,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""The locust side of tests/bench/bench_votes.py (run only as a subprocess: locust
monkey-patches the standard library with gevent).

Environment:
  VOTES_ITEMS   a JSON file: [[token, battle id], ...], each voted on once, in order
  VOTES_OUT     where to write every answer (JSON lines: t, ms, status, vote, code)
  VOTES_HOSTS   comma-separated base URLs the users are spread over
  VOTES_STEPS   offered rates in votes/s, e.g. "10,25,50"; VOTES_STEP_S seconds each
  VOTES_FLOOR   "1": each user sends ``GET /api/nope/`` (a 404 through the whole stack, no
                query) instead of its vote: the same ramp's floor, answered 404 when served
  VOTES_PER_USER  votes/s one user offers (a fixed schedule each); the step's users are
                rate / VOTES_PER_USER, so a slow answer does not lower the offered rate
                until a user waits longer than 1 / VOTES_PER_USER

The shape stops after the last step, when the battles run out, or one step after a step
that was answered less than half (the server saturated: the next step only confirms it).
"""

import json
import math
import os
import time
from collections import deque

import gevent
from locust import LoadTestShape, events, task
from locust.contrib.fasthttp import FastHttpUser

ITEMS = deque(json.load(open(os.environ["VOTES_ITEMS"])))  # noqa: SIM115
HOSTS = os.environ["VOTES_HOSTS"].split(",")
STEPS = [int(x) for x in os.environ["VOTES_STEPS"].split(",")]
STEP_S = float(os.environ.get("VOTES_STEP_S", "10"))
PER_USER = float(os.environ.get("VOTES_PER_USER", "2"))
OUT = open(os.environ["VOTES_OUT"], "w")  # noqa: SIM115
STARTED = [time.time()]  # reset when the test starts (the shape counts from then)
ANSWERS: list[tuple[float, int]] = []  # (t, status) for the shape's saturation check
_next_host = [0]
FLOOR = os.environ.get("VOTES_FLOOR") == "1"
SERVED = 404 if FLOOR else 201  # the status of a request that was served


class Judge(FastHttpUser):
    host = HOSTS[0]
    connection_timeout = 10.0
    network_timeout = 30.0

    def on_start(self) -> None:
        index = _next_host[0]
        self.base = HOSTS[index % len(HOSTS)]
        _next_host[0] += 1
        # Each user votes on a fixed schedule of its own: every 1 / PER_USER s from its own
        # phase, spread evenly whatever their number (the golden ratio's multiples modulo
        # 1). Locust's constant_throughput keeps the phase users were spawned at, and
        # users spawned together then vote in bursts of all of them at the same instant:
        # an offered rate would be a train of bursts, not evenly spaced votes.
        gevent.sleep((index * 0.6180339887 % 1.0) / PER_USER)
        self.due = time.monotonic()

    def wait_time(self) -> float:
        """Until this user's next vote is due (0 when it is late: it catches up)."""
        self.due += 1.0 / PER_USER
        return max(0.0, self.due - time.monotonic())

    @task
    def vote(self) -> None:
        if not ITEMS:
            gevent.sleep(0.5)
            return
        token, battle = ITEMS.popleft()
        sent = time.time()
        if FLOOR:
            self._floor(sent)
            return
        with self.client.post(
            f"{self.base}/api/battles/{battle}/votes/",
            data=json.dumps({"choice": "A"}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            catch_response=True,
        ) as response:
            ms = (time.time() - sent) * 1000
            status = response.status_code or 0  # 0: no answer (connection error, timeout)
            vote = code = None
            try:
                body = response.json()
                vote = body.get("vote") if status == 201 else None
                code = (body.get("error") or {}).get("code")
            except Exception:
                code = "no-json"
            retry_after = response.headers.get("Retry-After") if response.headers else None
            OUT.write(
                json.dumps(
                    {
                        "t": sent - STARTED[0],
                        "ms": round(ms, 3),
                        "status": status,
                        "vote": vote,
                        "battle": battle,
                        "code": code,
                        "retry_after": retry_after,
                    }
                )
                + "\n"
            )
            ANSWERS.append((sent - STARTED[0], status))
            response.success()

    def _floor(self, sent: float) -> None:
        with self.client.get(f"{self.base}/api/nope/", catch_response=True) as response:
            ms = (time.time() - sent) * 1000
            status = response.status_code or 0
            retry_after = response.headers.get("Retry-After") if response.headers else None
            code = None
            try:
                code = (response.json().get("error") or {}).get("code")
            except Exception:
                code = "no-json"
            row = {"t": sent - STARTED[0], "ms": round(ms, 3), "status": status, "vote": None,
                   "battle": None, "code": code, "retry_after": retry_after}  # fmt: skip
            OUT.write(json.dumps(row) + "\n")
            ANSWERS.append((sent - STARTED[0], status))
            response.success()


class Ramp(LoadTestShape):
    def tick(self):
        now = self.get_run_time()
        step = int(now // STEP_S)
        if step >= len(STEPS) or not ITEMS:
            return None
        if step >= 2 and _answered_share(step - 2) < 0.5:
            return None
        users = max(1, math.ceil(STEPS[step] / PER_USER))
        return users, max(users, 50)


def _answered_share(step: int) -> float:
    """The share of the step's offered votes answered 201."""
    lo, hi = step * STEP_S, (step + 1) * STEP_S
    created = sum(1 for t, status in ANSWERS if lo <= t < hi and status == SERVED)
    return created / (STEPS[step] * STEP_S)


@events.test_start.add_listener
def _started(environment, **kwargs) -> None:
    STARTED[0] = time.time()


@events.quitting.add_listener
def _flush(environment, **kwargs) -> None:
    OUT.flush()

"""`make deploy-check`: deploy/compose.yaml brought up on a real Docker engine from the
offline-built images, used through its reverse proxy as people would, and taken down.

1. The private engine (scripts/docker.sh start).
2. `make deploy`'s script on it (scripts/deploy_up.sh): the app image and the sandboxes'
   desktop image, each built only when its inputs changed, a fresh secrets file (the
   image's ``arena secrets``), ``docker-compose up -d`` with two web replicas; then
   every container up and the web replicas healthy (``/readyz``).
3. Through the proxy's published port only: ``/healthz`` answers, ``/readyz`` and the
   Prometheus metrics are not routed; the demo people and roster are seeded (a one-off
   container), a task is submitted with the demo team's token, its battle is watched
   over server-sent events (each status as it happens, so the proxy does not buffer),
   its screenshots are read from the S3 store, the demo judges are served it blind and
   vote, and the board moves: the public leaderboard websocket pushes new rows and the
   leaderboard API counts the battle.
4. ``docker-compose down -v``, then nothing of the project is left on the engine: no
   container, volume or network of the stack, and no sandbox container or volume of
   its battle host.

Timings go to stdout and var/deploy-check/report.json (on a failure, every container's
log to var/deploy-check/logs.txt). ``--keep`` leaves the stack up
for a look (then ``docker-compose -p arenacheck -f deploy/compose.yaml down -v``)."""

import argparse
import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests
import websocket

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "deploy-check"
PROJECT = "arenacheck"
IMAGE = "agent-arena:latest"
COMPOSE = ROOT / "deploy" / "compose.yaml"
BATTLE_TIMEOUT_S = 600
JUDGES = ("judge1", "judge2", "judge3")
HOST_ID = f"{PROJECT}-battle-1"  # compose.yaml's battle host


class CheckFailed(Exception):
    pass


def say(message: str) -> None:
    print(f"deploy-check: {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(argv: list[str], env: dict[str, str], *, capture: bool = False) -> str:
    result = subprocess.run(
        argv, cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE if capture else None, stderr=None,
    )  # fmt: skip
    if result.returncode != 0:
        raise CheckFailed(f"{' '.join(argv[:6])} … exited with {result.returncode}")
    return result.stdout or ""


class Timer:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.figures: dict[str, float] = {}

    def mark(self, name: str, since: float) -> float:
        self.figures[name] = round(time.monotonic() - since, 1)
        say(f"{name}: {self.figures[name]} s")
        return time.monotonic()


class Stack:
    def __init__(self, env: dict[str, str], port: int) -> None:
        self.env = env
        self.base = f"http://127.0.0.1:{port}"
        self.ws_base = f"ws://127.0.0.1:{port}"

    def compose(self, *args: str, capture: bool = False) -> str:
        argv = ["docker-compose", "-p", PROJECT, "-f", str(COMPOSE), *args]
        return run(argv, self.env, capture=capture)

    def docker(self, *args: str) -> str:
        return run(["docker", *args], self.env, capture=True)

    def manage(self, *args: str, extra: dict[str, str] | None = None) -> str:
        flags = [x for k, v in (extra or {}).items() for x in ("-e", f"{k}={v}")]
        return self.compose("run", "--rm", "--no-deps", "-T", *flags, "migrate", "manage", *args,
                            capture=True)  # fmt: skip

    def containers(self) -> list[dict]:
        ids = self.docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}")
        if not ids.split():
            return []
        return json.loads(self.docker("inspect", *ids.split()))


def wait_healthy(stack: Stack, timeout_s: float = 300) -> None:
    """Until both web replicas pass their health check and the proxy answers /healthz;
    a container that exited (but the migration) or restarted fails the check at once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states: dict[str, list[str]] = {}
        for c in stack.containers():
            service = c["Config"]["Labels"]["com.docker.compose.service"]
            health = c["State"].get("Health", {}).get("Status", c["State"]["Status"])
            if c["RestartCount"] or (health in ("unhealthy", "exited") and service != "migrate"):
                raise CheckFailed(f"{service} {health}, restarted {c['RestartCount']} times")
            states.setdefault(service, []).append(health)
        if states.get("web") and all(s == "healthy" for s in states["web"]):
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{stack.base}/healthz", timeout=5).status_code == 200:
                    say(f"up: {json.dumps(states, sort_keys=True)}")
                    if len(states["web"]) != 2:
                        raise CheckFailed(f"2 web replicas expected, {len(states['web'])} found")
                    return
        time.sleep(1)
    raise CheckFailed("the stack did not become healthy in time")


def check_routes(stack: Stack) -> None:
    health = requests.get(f"{stack.base}/healthz", timeout=10)
    if health.status_code != 200:
        raise CheckFailed(f"/healthz through the proxy: {health.status_code}")
    for path in ("/readyz", "/metrics/prometheus"):
        status = requests.get(f"{stack.base}{path}", timeout=10).status_code
        if status != 404:
            raise CheckFailed(f"{path} is routed to the outside ({status}); the proxy must hide it")
    say("through the proxy: /healthz 200; /readyz and /metrics/prometheus hidden (404)")


class EventLog(threading.Thread):
    """The battle's server-sent events through the proxy, each with its arrival time."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.url, self.token = url, token
        self.statuses: list[tuple[float, str]] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"}
            with requests.get(self.url, headers=headers, stream=True, timeout=60) as response:
                if response.status_code != 200:
                    self.error = f"events: {response.status_code}"
                    return
                event = None
                for line in response.iter_lines(decode_unicode=True):
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:") and event == "status":
                        status = json.loads(line[5:]).get("status")
                        self.statuses.append((time.monotonic(), status))
                    elif line.startswith("data:") and event == "end":
                        return
        except Exception as exc:  # reported by the check
            self.error = f"events: {exc!r}"


class BoardSocket(threading.Thread):
    """The public leaderboard's websocket through the proxy: every message it pushes."""

    def __init__(self, url: str, origin: str) -> None:
        super().__init__(daemon=True)
        self.messages: list[float] = []
        self.sock = websocket.create_connection(url, timeout=30, origin=origin)

    def run(self) -> None:
        self.sock.settimeout(None)
        try:
            while True:
                self.sock.recv()
                self.messages.append(time.monotonic())
        except Exception:  # closed at the end of the check
            return


def api(stack: Stack, token: str, method: str, path: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.request(method, f"{stack.base}{path}", headers=headers, timeout=30, **kwargs)


def board_battles(stack: Stack) -> int:
    """The board's counted outcomes: wins, losses and draws over its rows."""
    rows = requests.get(f"{stack.base}/api/leaderboard/", timeout=30).json()["rows"]
    return sum(row["wins"] + row["losses"] + row["draws"] for row in rows)


def battle_round(stack: Stack, timer: Timer) -> dict:
    """A task submitted, run, judged and rated, all through the proxy."""
    password = "Deploy-check-" + secrets.token_urlsafe(12)
    since = time.monotonic()
    stack.manage("seed_demo", "--no-battles", extra={"ARENA_DEMO_PASSWORD": password})
    tokens = {
        user: stack.manage("arena_token", "--user", user, "--name", "deploy-check").strip()
        for user in ("demo", *JUDGES)
    }
    since = timer.mark("seed_demo_and_tokens_s", since)
    board_before = board_battles(stack)
    board = BoardSocket(f"{stack.ws_base}/ws/leaderboard/", origin=stack.base)
    board.start()
    from sandboxes.demoweb import DEMO_TASKS

    task = next(t for t in DEMO_TASKS if "contact" in t["instruction"])
    payload = {"instruction": task["instruction"], "start_url": task["start_url"]}
    submitted = api(stack, tokens["demo"], "POST", "/api/tasks/", json=payload)
    if submitted.status_code != 201:
        raise CheckFailed(f"submit: {submitted.status_code} {submitted.text[:300]}")
    battle = submitted.json()["battle"]
    say(f"submitted task {submitted.json()['task']}: battle {battle}")
    events = EventLog(f"{stack.base}/battles/{battle}/events/", tokens["demo"])
    events.start()
    deadline = time.monotonic() + BATTLE_TIMEOUT_S
    status = "queued"
    sandboxes: set[str] = set()  # the battle host's containers seen on the engine
    while time.monotonic() < deadline:
        found = stack.docker("ps", "-q", "--filter", f"label=arena.host={HOST_ID}")
        sandboxes |= set(found.split())
        status = api(stack, tokens["demo"], "GET", f"/api/battles/{battle}/").json()["status"]
        if status not in ("queued", "running", "screening"):
            break
        time.sleep(0.5)
    since = timer.mark("battle_run_s", since)
    if len(sandboxes) < 2:
        raise CheckFailed(f"the battle host ran {len(sandboxes)} sandbox containers, not 2 or more")
    say(f"the battle host ran {len(sandboxes)} sandbox containers on the engine")
    if status != "judging":
        raise CheckFailed(f"battle {battle} ended {status}, not judging")
    events.join(timeout=30)
    seen = [s for _, s in events.statuses]
    # (the stream ends once the battle is past running: screening or judging comes last)
    if events.error or "running" not in seen or seen[-1] not in ("screening", "judging"):
        raise CheckFailed(f"server-sent events through the proxy: {seen} {events.error or ''}")
    spread = events.statuses[-1][0] - events.statuses[0][0]
    if spread < 1.0:
        raise CheckFailed(f"the statuses {seen} arrived together: the proxy buffers the stream")
    say(f"server-sent events, each as it happened: {seen} over {spread:.1f} s")
    shots = 0
    for judge in JUDGES:
        served = api(stack, tokens[judge], "GET", "/api/judge/next/")
        if served.status_code == 204:
            break  # decided with fewer votes
        if served.status_code != 200 or served.json()["id"] != battle:
            raise CheckFailed(f"{judge} was served {served.status_code} {served.text[:200]}")
        text = served.text
        for link in sorted(set(re.findall(r'"(/[^"]*/screenshot)"', text)))[:2]:
            shot = api(stack, tokens[judge], "GET", link)
            if shot.status_code != 200 or not shot.content.startswith(b"\x89PNG"):
                raise CheckFailed(f"screenshot {link}: {shot.status_code}")
            shots += 1
        # the battle's reading time (its final messages' length; at least 5 s): a vote
        # before it is inadmissible, and the battle would wait for others
        time.sleep(served.json()["min_read_s"] + 1)
        votes = f"/api/battles/{battle}/votes/"
        vote = api(stack, tokens[judge], "POST", votes, json={"choice": "A"})
        body = vote.json() if vote.status_code == 201 else {}
        if body.get("inadmissible_reason") == "identities_public" and judge != JUDGES[0]:
            # (decided meanwhile by the votes before, on a battle whose target is 1)
            say(f"{judge}'s vote came after the decision: not counted, as it should")
            break
        if not body.get("admissible"):
            raise CheckFailed(f"{judge}'s vote: {vote.status_code} {vote.text[:200]}")
        say(f"{judge} voted A on battle {battle} (served blind, {shots} screenshots read)")
    if not shots:
        raise CheckFailed("no screenshot was served from the media store")
    deadline = time.monotonic() + 300  # (the undo window, then the decision's job)
    while time.monotonic() < deadline:
        status = api(stack, tokens["demo"], "GET", f"/api/battles/{battle}/").json()["status"]
        if status == "decided" and board_battles(stack) > board_before and board.messages[1:]:
            break
        time.sleep(2)
    since = timer.mark("judged_and_rated_s", since)
    board.sock.close()
    if status != "decided":
        raise CheckFailed(f"battle {battle} is {status} after the votes, not decided")
    after = board_battles(stack)
    if after <= board_before:
        raise CheckFailed(f"the leaderboard did not move ({board_before} → {after} battles)")
    if len(board.messages) < 2:
        raise CheckFailed("the leaderboard websocket pushed no update through the proxy")
    say(f"decided; the board counts {board_before} → {after} side-battles, "
        f"{len(board.messages) - 1} websocket updates")  # fmt: skip
    return {
        "battle": battle, "statuses": seen, "board": [board_before, after],
        "screenshots": shots, "sandbox_containers": len(sandboxes),
    }  # fmt: skip


def leftovers(stack: Stack) -> list[str]:
    left = []
    for kind in ("ps -aq", "volume ls -q", "network ls -q"):
        label = f"label=com.docker.compose.project={PROJECT}"
        found = stack.docker(*kind.split(), "--filter", label)
        left += [f"{kind.split()[0]} {x}" for x in found.split()]
    for kind in ("ps -aq", "volume ls -q"):
        found = stack.docker(*kind.split(), "--filter", f"label=arena.host={HOST_ID}")
        left += [f"sandbox {kind.split()[0]} {x}" for x in found.split()]
    return left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack up")
    args = parser.parse_args()
    timer = Timer()
    env = dict(os.environ)
    since = time.monotonic()
    run(["bash", "scripts/docker.sh", "install"], env)
    host = run(["bash", "scripts/docker.sh", "start"], env, capture=True).strip()
    env["DOCKER_HOST"] = host.split("=", 1)[1]
    WORK.mkdir(parents=True, exist_ok=True)
    secrets_file = WORK / "arena.env"
    secrets_file.unlink(missing_ok=True)  # `make deploy` makes a fresh one
    port = free_port()
    env.update(
        COMPOSE_PROJECT_NAME=PROJECT,
        ARENA_IMAGE=IMAGE,
        ARENA_ENV_FILE=str(secrets_file),
        ARENA_HTTP_PORT=str(port),
        ARENA_WEB_REPLICAS="2",
    )
    stack = Stack(env, port)
    report: dict = {"port": port}
    ok = False
    try:
        if leftovers(stack):
            stack.compose("down", "-v", "--remove-orphans")
        # the documented command itself: images, secrets, up -d
        run(["bash", "scripts/deploy_up.sh"], env)
        since = timer.mark("make_deploy_s", since)
        wait_healthy(stack)
        since = timer.mark("up_to_healthy_s", since)
        check_routes(stack)
        report.update(battle_round(stack, timer))
        ok = True
    except (CheckFailed, requests.RequestException, websocket.WebSocketException) as exc:
        say(f"FAILED: {exc}")
        compose = ["docker-compose", "-p", PROJECT, "-f", str(COMPOSE)]
        subprocess.run([*compose, "ps"], cwd=ROOT, env=env)
        # every container's whole log, for the post-mortem (the stack goes down next)
        with (WORK / "logs.txt").open("w") as logs:
            subprocess.run([*compose, "logs", "--no-color", "--timestamps"], cwd=ROOT, env=env,
                           stdout=logs, stderr=subprocess.STDOUT)  # fmt: skip
        say("every container's log: var/deploy-check/logs.txt")
    finally:
        if args.keep:
            down = f"docker-compose -p {PROJECT} -f deploy/compose.yaml down -v"
            say(f"left up at {stack.base} (take it down: {down})")
        else:
            since = time.monotonic()
            stack.compose("down", "-v", "--remove-orphans", "--timeout", "60")
            timer.mark("down_s", since)
            left = leftovers(stack)
            report["left_behind"] = left
            if left:
                say(f"FAILED: left behind on the engine: {left}")
                ok = False
            else:
                say("down: no container, volume or network of the stack or its sandboxes is left")
    report.update(ok=ok, timings=timer.figures, total_s=round(time.monotonic() - timer.started, 1))
    (WORK / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    say(("passed" if ok else "FAILED") + f" in {report['total_s']} s; var/deploy-check/report.json")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

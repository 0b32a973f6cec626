"""Benchmark: of the environments derived from the demo's failed runs, the share that
validates without an operator (docs/environments.md, "Measured"). Prints one JSON
document.

The demo (``manage.py seed_demo``) runs its tasks between built-in agents drawn at
random; its failed runs are the idle agent giving up and the losers the judges vote
against. A random draw gives too few for a share, so this bench builds the fixed set of
those failures on every task the demo submits (``judging/management/commands/
seed_demo.py``: the judged and open workspace tasks, the naming one, and the seven demo
web tasks of ``sandboxes.demoweb.DEMO_TASKS``, with their start URLs):

- ``gave_up``: rulebook (side A) against idle, which gives up;
- ``judged_worse``: rulebook (side A) against surveyor, one outsider judge voting for A
  (as the demo's judges mostly do: surveyor never finishes a form or fetches a file).

Each battle runs for real (bubblewrap sandboxes, a desktop with Chromium where the task
has a start URL, the demo web), then the pipeline's own steps run in this process:
``candidates_collect``, ``environment_build`` (consent, Presidio's redaction, the
derived grader) and ``environment_validate`` (the replays in fresh sandboxes). The
figures: n, validated, share, the statuses and reasons, and for every environment the
grader's check types and whether each mutated reference was refused.

It uses only what the code at 901cc77 had too, so the same file measures the code
before (copy it into a worktree of 901cc77 and run it there; that code has no mutated
replays: ``mutations`` is empty) and after. Run as root, on a slot's database and Redis
(a test database is created and dropped), e.g.:

  DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena_h5 REDIS_URL=redis://127.0.0.1:6379/5 \\
  ARENA_SANDBOX_UID_BASE=2000000 ARENA_HOST_ID=helper-5 \\
  .venv/bin/python tests/bench/bench_derived_graders.py [--only web|workspace] [--modes ...]
"""

import argparse
import json
import os
import random
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("ARENA_HOST_ID", "bench-graders")
# The environments bench's set-up, shared: its environment (a throwaway sandbox root and
# private media, removed at exit; one vote decides, at once), django.setup(), its log
# and its judge's vote.
from tests.bench.bench_environments import SANDBOX_ROOT, TMP, log, vote_for_a  # noqa: E402

# isort: split
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

import battles.services.admission as admission  # noqa: E402
from accounts.services import consent_terms_publish  # noqa: E402
from agents.models import Arena  # noqa: E402
from agents.services import roster_install_builtins  # noqa: E402
from battles.services import battle_run, task_submit  # noqa: E402
from environments.building import candidates_collect, environment_build  # noqa: E402
from environments.models import Environment  # noqa: E402
from environments.validation import ReplayUnavailable, environment_validate  # noqa: E402
from judging.management.commands.seed_demo import (  # noqa: E402
    ABSTAINED_TASK,
    DEMO_TASKS,
    NAMING_TASK,
    OPEN_TASKS,
)
from judging.services import battle_screen  # noqa: E402
from sandboxes.demoweb import DEMO_TASKS as WEB_TASKS  # noqa: E402
from tests.battles.pairing import pair  # noqa: E402
from tests.conftest import make_person  # noqa: E402

# judged_worse first: each judge must be served its own battle, and judge_next serves
# older battles open for judging (gave_up ones) before it.
OPPONENTS = {"judged_worse": "surveyor", "gave_up": "idle"}
T_START = time.monotonic()


def demo_tasks(only: str) -> list[tuple[str, str]]:
    """(instruction, start URL) of every task the demo submits but the one the submitter
    ends early (not a failure of the task), workspace tasks first."""
    web = {t["instruction"]: t["start_url"] for t in WEB_TASKS}
    workspace = [t for t, _ in DEMO_TASKS] + [ABSTAINED_TASK, NAMING_TASK]
    workspace += [t for t in OPEN_TASKS if t not in web]
    tasks = [(t, "") for t in workspace] if only in ("", "workspace") else []
    return tasks + ([(t, url) for t, url in web.items()] if only in ("", "web") else [])


def fight(index: int, instruction: str, start_url: str, mode: str, terms) -> dict:
    """One battle: rulebook (A) against the mode's opponent (B); screened; voted on."""
    user = make_person(f"sub-{index}-{mode}", "Acme", terms)
    battle = task_submit(
        user=user, instruction=instruction, start_url=start_url, rng=random.Random(0)
    )
    pair(battle, "rulebook", OPPONENTS[mode])
    started = time.perf_counter()
    battle_run(battle_id=battle.pk)
    battle.refresh_from_db()
    record = {"battle": battle.pk, "mode": mode, "instruction": instruction[:80],
              "battle_wall_s": round(time.perf_counter() - started, 1),
              "ends": dict(battle.runs.values_list("side", "end_reason")), "error": ""}  # fmt: skip
    if battle.status != "screening":
        record["error"] = f"battle {battle.status}: {battle.failure_reason}"
        return record
    battle_screen(battle_id=battle.pk)
    battle.refresh_from_db()
    if mode == "judged_worse" and battle.status == "judging":
        record["error"] = vote_for_a(make_person(f"judge-{index}", None, terms), battle)
    return record


def convert(battle_id: int) -> list[int]:
    """The pipeline's steps for the battle's picked runs; the environments' ids."""
    candidates_collect()
    ids = list(Environment.objects.filter(battle_id=battle_id).values_list("pk", flat=True))
    for pk in ids:
        environment_build(environment_id=pk)
        for _ in range(3):  # the job's own retries
            try:
                environment_validate(environment_id=pk)
                break
            except ReplayUnavailable as exc:
                log(f"  replay unavailable, retried: {exc}")
    return ids


def environment_record(env: Environment, record: dict) -> dict:
    mutated = [r for r in env.replays if r.get("role") == "mutated"]
    return {
        "id": env.pk,
        "mode": env.failure_mode,
        "instruction": record["instruction"],
        "status": env.status,
        "reason": env.status_detail[:300],
        "checks": [c["type"] for c in (env.grader or {}).get("checks", [])],
        "mutations": {
            m["mutation"]: ("refused" if not m["passed"] else "accepted") for m in mutated
        },
        # Each replay: role, mutation, passed, error, and the checks it failed.
        "replays": [
            (
                r.get("role"),
                r.get("mutation"),
                r.get("passed"),
                (r.get("error") or "")[:120],
                [
                    c.get("type")
                    for c in (r.get("grader") or {}).get("checks", [])
                    if not c.get("passed")
                ],
            )
            for r in env.replays
        ],
    }


def reason_of(detail: str) -> str:
    """A reason without the numbers and names that make each one differ."""
    return detail.split(":")[0][:120] if detail else ""


def figures(envs: list[dict]) -> dict:
    validated = [e for e in envs if e["status"] == "validated"]
    reasons: dict[str, int] = {}
    for env in envs:
        if env["status"] != "validated":
            key = f"{env['status']}: {reason_of(env['reason'])}"
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "n": len(envs),
        "validated": len(validated),
        "share": round(len(validated) / len(envs), 3) if envs else None,
        "reasons": reasons,
        "validated_refused_every_mutation": sum(
            1 for e in validated if e["mutations"] and set(e["mutations"].values()) == {"refused"}
        ),
        "validated_without_mutation": sum(1 for e in validated if not e["mutations"]),
    }


def run(args) -> dict:
    terms = consent_terms_publish(text="You agree.")
    roster_install_builtins(arena=Arena.objects.public())
    tasks = demo_tasks(args.only)
    records, envs = [], []
    for mode in [m for m in OPPONENTS if m in args.modes]:
        for index, (instruction, start_url) in enumerate(tasks):
            log(f"{mode} #{index}: {instruction[:60]}")
            try:
                record = fight(index, instruction, start_url, mode, terms)
                ids = convert(record["battle"])
            except Exception as exc:
                traceback.print_exc()
                records.append({"mode": mode, "instruction": instruction[:80], "error": repr(exc)})
                continue
            records.append(record)
            for env in Environment.objects.filter(pk__in=ids):
                envs.append(environment_record(env, record))
                log(f"  -> {envs[-1]['status']} {envs[-1]['reason'][:100]} {envs[-1]['mutations']}")
    return {
        "bench": "derived_graders",
        "argv": sys.argv[1:],
        "tasks": len(tasks),
        "overall": figures(envs),
        "by_mode": {m: figures([e for e in envs if e["mode"] == m]) for m in OPPONENTS},
        "environments": envs,
        "battles": records,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - T_START, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("", "web", "workspace"), default="")
    parser.add_argument("--modes", default=",".join(OPPONENTS))
    args = parser.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    if set(args.modes) - set(OPPONENTS):
        parser.error(f"modes are {', '.join(OPPONENTS)}")
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    admission.battle_enqueue = lambda battle_id: None  # this process runs each battle
    # A stop (SIGTERM) unwinds like an error: the test database is dropped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    config = None
    try:
        config = setup_databases(verbosity=0, interactive=False)
        log(f"test database {connection.settings_dict['NAME']}")
        result = run(args)
    finally:
        connection.close()
        if config is not None:
            teardown_databases(config, verbosity=0)
        shutil.rmtree(TMP, ignore_errors=True)
        shutil.rmtree(SANDBOX_ROOT, ignore_errors=True)
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()

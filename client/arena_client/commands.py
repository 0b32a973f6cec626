"""What each command does, over ``Api``. Results go to stdout (a reply, an id, a file's
content), progress and notes to stderr, so ``ID=$(arena eval start …)`` works."""

import argparse
import base64
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from arena_client.api import Api, ApiError

EVALUATION_FINISHED = ("done", "cancelled")
BATTLE_OVER = ("decided", "excluded", "failed")
BATTLE_JUDGED_FROM = ("judging", *BATTLE_OVER)
ARGS_SHOWN = 100  # characters of a step's arguments printed


class UsageError(Exception):
    """The arguments do not make sense together (exit code 2, as argparse's own)."""


def _note(text: str) -> None:
    print(text, file=sys.stderr)


def _text_or_stdin(value: str) -> str:
    return sys.stdin.read() if value == "-" else value


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the {what} {path!r}: {exc.strerror}") from None


def _write(output: str | None, text: str) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {output!r}: {exc.strerror}") from None
    _note(f"wrote {output}")


def _poll(fetch: Callable[[], Any], over: Callable[[Any], bool], args, what: str) -> Any:
    """``fetch()`` every ``args.interval`` seconds until ``over(body)``; an ApiError
    once ``args.timeout`` has passed (the work goes on on the server)."""
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    while True:
        body = fetch()
        if over(body):
            return body
        if deadline is not None and time.monotonic() >= deadline:
            raise ApiError(
                0, "timeout", f"gave up after {args.timeout:g} s; {what} goes on on the server"
            )
        time.sleep(args.interval)


# -- run ---------------------------------------------------------------------------------


def run(api: Api, args: argparse.Namespace) -> int:
    prompt = _text_or_stdin(args.prompt)
    body: dict[str, Any] = {"agent": args.agent, "prompt": prompt}
    if args.max_tokens is not None:
        body["max_tokens"] = args.max_tokens
    _, created = api.post("/api/runs/", json=body)
    run_id = created["id"]
    done = _poll(
        lambda: api.get(f"/api/runs/{run_id}/"),
        lambda r: r["status"] in EVALUATION_FINISHED,
        args,
        f"run {run_id}",
    )
    if args.json:
        print(json.dumps(done, indent=2))
    elif done["reply"] is not None:
        print(done["reply"])
    if done["reply"] is None:
        why = done["error"] or f"the run was {done['status']} before the agent answered"
        _note(f"arena: run {run_id} ({args.agent}) has no reply: {why}")
        return 1
    return 0


# -- evaluations -------------------------------------------------------------------------


def _field_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def evaluation_body(args: argparse.Namespace) -> dict[str, Any]:
    """POST /api/evaluations/'s body from the arguments: the files' text, the
    attachments base64, each option under the API's name."""
    suite = Path(args.suite)
    try:
        suite_text = _read(args.suite, "suite").decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"the suite {args.suite!r} is not UTF-8 text") from None
    body: dict[str, Any] = {
        "suite": {"name": suite.name, "content": suite_text},
        "agents": args.agents,
    }
    if args.rubric:
        try:
            rubric_text = _read(args.rubric, "rubric").decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"the rubric {args.rubric!r} is not UTF-8 text") from None
        body["rubric"] = {"name": Path(args.rubric).name, "content": rubric_text}
    if args.attach:
        body["attachments"] = [
            {
                "path": path,
                "content_base64": base64.b64encode(
                    _read(str(suite.parent / path), "attachment")
                ).decode(),
            }
            for path in args.attach
        ]
    options = {
        "judge": args.judge,
        "baseline": args.baseline,
        "epochs": args.epochs,
        "reducer": args.reducer,
        "tournament": args.tournament,
        "best_of": args.best_of,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
        "step_budget": args.step_budget,
        "wall_budget_s": args.wall_budget,
        "success_timeout_s": args.success_timeout,
        "desktop_lanes": args.desktop_lanes,
    }
    body.update({k: v for k, v in options.items() if v is not None})
    if args.pairwise:
        body["pairwise"] = True
    if args.opening:
        pairs = [pair.split(":") for pair in args.opening]
        if any(len(pair) != 2 or not all(pair) for pair in pairs):
            raise UsageError("--opening takes two slugs as A:B")
        body["opening"] = pairs
    for item in args.set:
        field, sep, value = item.partition("=")
        if not sep or not field:
            raise UsageError(f"--set takes FIELD=VALUE, got {item!r}")
        if field in body:
            raise UsageError(f"--set {field}: the field is given twice")
        body[field] = _field_value(value)
    return body


def eval_start(api: Api, args: argparse.Namespace) -> int:
    _, created = api.post("/api/evaluations/", json=evaluation_body(args))
    _note(
        f"evaluation {created['id']} started ({created['status']}): "
        f"{', '.join(created['agents'])} on {created['suite']}"
    )
    print(created["id"])
    if args.watch:
        args.id = created["id"]
        return eval_watch(api, args)
    return 0


def _parts(progress: dict[str, Any]) -> str:
    return ", ".join(f"{p['label']} {p['done']}/{p['expected']}" for p in progress["parts"])


def eval_watch(api: Api, args: argparse.Namespace) -> int:
    path = f"/api/evaluations/{args.id}/progress/"
    with tqdm(total=0, desc=f"evaluation {args.id}", file=sys.stderr, unit="call") as bar:

        def fetch() -> dict[str, Any]:
            progress = api.get(path)
            bar.total = progress["expected"]
            bar.n = progress["done"]
            bar.set_postfix_str(f"{progress['status']}: {_parts(progress)}", refresh=False)
            bar.refresh()
            return progress

        last = _poll(fetch, lambda p: p["finished"], args, f"evaluation {args.id}")
    print(f"evaluation {args.id} {last['status']}: {_parts(last)}")
    return 0 if last["status"] == "done" else 1


def eval_record(api: Api, args: argparse.Namespace) -> int:
    record = api.get(f"/api/evaluations/{args.id}/")
    _write(args.output, json.dumps(record, indent=2))
    return 0


def eval_report(api: Api, args: argparse.Namespace) -> int:
    _write(args.output, api.request("GET", f"/api/evaluations/{args.id}/report.html").text)
    return 0


def eval_cancel(api: Api, args: argparse.Namespace) -> int:
    _, evaluation = api.post(f"/api/evaluations/{args.id}/cancel/")
    print(f"evaluation {evaluation['id']}: {evaluation['status']}")
    return 0


# -- tasks and battles -------------------------------------------------------------------

REPO_FIELDS = {
    "repo_url": "--repo-url",
    "repo_ref": "--repo-ref",
    "repo_judge_ref": "--repo-judge-ref",
    "success_cmd": "--success-cmd",
    "test_cmd": "--test-cmd",
}


def task_fields(args: argparse.Namespace) -> dict[str, str]:
    fields = {"instruction": _text_or_stdin(args.prompt)}
    repo = {k: getattr(args, k) for k in REPO_FIELDS if getattr(args, k) is not None}
    if args.kind == "repo":
        if not args.repo_url:
            raise UsageError("--kind repo needs --repo-url")
        if args.start_url:
            raise UsageError("--start-url is a desktop task's; a repo task starts in its clone")
    elif repo:
        named = ", ".join(REPO_FIELDS[k] for k in repo)
        raise UsageError(f"{named}: a repo task's options; add --kind repo")
    if args.start_url:
        fields["start_url"] = args.start_url
    fields.update(repo)
    return fields


def task_submit(api: Api, args: argparse.Namespace) -> int:
    fields = task_fields(args)
    if args.attach:
        files = [("attachments", (Path(p).name, _read(p, "attachment"))) for p in args.attach]
        _, answer = api.post("/api/tasks/", data=fields, files=files)
    else:
        _, answer = api.post("/api/tasks/", json=fields)
    if answer.get("status") == "conversation":
        print(answer.get("reply", ""))
        _note("arena: nothing started: the arena read this as conversation, not a task")
        return 1
    _note(f"task {answer['task']}: battle {answer['battle']} ({answer['status']})")
    print(answer["battle"])
    if args.follow:
        args.id, args.until = answer["battle"], "decided"
        return battle_follow(api, args)
    return 0


def _step_line(side: str, step: dict[str, Any]) -> str:
    shown = json.dumps(step.get("args"), ensure_ascii=False, separators=(",", ":"))
    if len(shown) > ARGS_SHOWN:
        shown = shown[: ARGS_SHOWN - 1] + "…"
    result = step.get("result") or {}
    outcome = ""
    if result.get("error"):
        outcome = f" -> error: {result['error']}"
    elif result.get("exit_code") is not None:
        outcome = f" -> exit {result['exit_code']}"
    return f"{side} step {step['index']}: {step['tool']} {shown}{outcome}"


def battle_follow(api: Api, args: argparse.Namespace) -> int:
    stop = BATTLE_OVER if args.until == "decided" else BATTLE_JUDGED_FROM
    seen: dict[str, Any] = {"status": None}

    def fetch() -> dict[str, Any]:
        battle = api.get(f"/api/battles/{args.id}/")
        if battle["status"] != seen["status"]:
            seen["status"] = battle["status"]
            print(f"battle {args.id}: {battle['status']}", flush=True)
        for side, lane in (battle.get("sides") or {}).items():
            if lane is None:
                continue
            for step in lane["steps"][seen.get(f"{side}-steps", 0) :]:
                print(_step_line(side, step), flush=True)
            seen[f"{side}-steps"] = len(lane["steps"])
            state = (lane["status"], lane["end_reason"])
            if state != seen.get(side):
                seen[side] = state
                ended = f" ({lane['end_reason']})" if lane["end_reason"] else ""
                print(f"{side}: {lane['status']}{ended}", flush=True)
        return battle

    battle = _poll(fetch, lambda b: b["status"] in stop, args, f"battle {args.id}")
    happened = battle.get("what_happened") or {}
    if battle["status"] == "decided":
        print(f"battle {args.id} decided: {battle['outcome'] or 'outcome not shown to you'}")
    elif happened.get("headline"):
        print(f"battle {args.id}: {happened['headline']}")
    return 1 if battle["status"] in ("excluded", "failed") else 0

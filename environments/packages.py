"""An environment as one archive (docs/environments.md): a deterministic
tar.gz that a training harness or the arena's own evaluations can run.

Members (sorted, mtime 0, owner 0:0, mode 0644; the gzip header carries no time or
name, so the same environment always gives the same bytes):

- ``task.json``: an OSWorld-like task: id, snapshot digest, redacted instruction,
  source, setup steps (``config``), the evaluator (the grader's checks and the one
  shell command that runs the in-sandbox ones), budgets, screen, tools;
- ``snapshot.json``: the redacted initial state (``battles.snapshots`` manifest);
- ``grader.json``; ``trajectories/failing.json`` and ``trajectories/reference.json``;
- ``files/<sha256>``: every blob the state and the trajectories name (attachments, the
  repository bundle and the judge's, a repo run's patch);
- ``suite.json``: the same environment as an evaluation suite (``evals.suites``) of
  one desktop or repo task, its paths relative to the archive's root;
- ``attachments/<name>``: hard links to the attachments' blobs, under the names the
  suite task hands the agent (no bytes twice).

``package_read`` checks an archive (from anyone: bounded, every name and hash
verified) and returns its parts."""

import gzip
import hashlib
import io
import json
import re
import tarfile
import zlib
from datetime import datetime

from arena_site.media import MediaUnreadable, media_read
from battles.snapshots import manifest_digest
from coding.scripts import BRANCH
from environments.graders import HOST_CHECKS, GraderInvalid, grader_command, grader_validate
from environments.models import BLOB_PREFIX, Environment
from environments.selectors import environment_battle_published

PACKAGE_VERSION = 1
ATTACHMENTS_IN_SANDBOX = "/work/attachments/"
REPO_IN_SANDBOX = "/work/repo"
# What package_read accepts at most (a package is a download: anyone may hand one in).
READ_MAX_MEMBERS = 1000
READ_MAX_BYTES = 512 * 1024 * 1024
_JSON_MEMBERS = (
    "task.json",
    "snapshot.json",
    "grader.json",
    "suite.json",
    "trajectories/failing.json",
    "trajectories/reference.json",
)
_BLOB = re.compile(r"files/([0-9a-f]{64})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The suite's bounds on a repo task's time limit (evals.suites.REPO_TIME_LIMIT).
_REPO_TIME_LIMIT = (10, 3600)


class PackageError(Exception):
    """The environment cannot be packaged (no state or grader yet, a blob missing or
    changed in storage); the message says which."""


class PackageInvalid(PackageError, ValueError):
    """An archive that is not a sound environment package; the message says why."""


def _json_bytes(value) -> bytes:
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def _attachment_name(name) -> str:
    """An attachment's name as a single safe path component, or PackageError."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or _CONTROL.search(name)
        or len(name.encode()) > 255
    ):
        raise PackageError(f"the attachment name {str(name)[:80]!r} is not a plain file name")
    return name


def _patch_blobs(actions: list) -> list[dict]:
    """The blobs a trajectory names (a repo run's ``apply_patch``: its patch)."""
    return [
        a["args"]
        for a in actions
        if isinstance(a, dict)
        and a.get("tool") == "apply_patch"
        and isinstance(a.get("args"), dict)
    ]


def _named_blobs(state: dict, failing: list, reference: list) -> dict[str, int]:
    """Every blob the state and the trajectories name: SHA-256 → size."""
    named = {a["sha256"]: a["size"] for a in state.get("attachments") or ()}
    repo = state.get("repo")
    if repo:
        named[repo["sha256"]] = repo["size"]
        if repo.get("judge"):
            named[repo["judge"]["sha256"]] = repo["judge"]["size"]
    for blob in _patch_blobs(failing) + _patch_blobs(reference):
        named[blob["sha256"]] = blob["size"]
    return named


def _blob(sha256: str, size: int) -> bytes:
    try:
        data = media_read(BLOB_PREFIX + sha256, size)
    except MediaUnreadable as exc:
        raise PackageError(f"the file {sha256} cannot be read from storage: {exc}") from None
    if data is None:
        raise PackageError(f"the file {sha256} is missing from storage")
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise PackageError(f"the file {sha256} in storage no longer has the bytes it names")
    return data


def _config(state: dict) -> list[dict]:
    """The setup steps that rebuild the initial state, in order."""
    steps: list[dict] = []
    if state.get("attachments"):
        files = [
            {
                "local_path": f"files/{a['sha256']}",
                "path": ATTACHMENTS_IN_SANDBOX + _attachment_name(a["name"]),
            }
            for a in state["attachments"]
        ]
        steps.append({"type": "upload_file", "parameters": {"files": files}})
    repo = state.get("repo")
    if repo:
        parameters = {
            "bundle": f"files/{repo['sha256']}",
            "branch": BRANCH,
            "commit": repo["commit"],
            "tree": repo["tree"],
            "path": REPO_IN_SANDBOX,
        }
        steps.append({"type": "git_checkout", "parameters": parameters})
    if state.get("start_url"):
        steps.append(
            {"type": "chrome_open_tabs", "parameters": {"urls_to_open": [state["start_url"]]}}
        )
    return steps


def _task(env: Environment, state: dict, grader: dict, command: str, battle) -> dict:
    repo = state.get("repo")
    evaluator = {
        "func": "arena_checks",
        "checks": grader["checks"],
        "command": command,
        "host_checks": [c for c in grader["checks"] if c["type"] in HOST_CHECKS],
    }
    if repo and repo.get("judge"):
        # The judge's copy (hidden tests): the evaluator checks out this commit in a
        # sandbox of its own; the agent's sandbox never receives it.
        evaluator["judge_checkout"] = {
            "bundle": f"files/{repo['judge']['sha256']}",
            "branch": BRANCH,
            "commit": repo["judge"]["head"],
        }
    budgets = {"step_budget": state.get("step_budget"), "wall_budget_s": state.get("wall_budget_s")}
    if repo:
        budgets["time_limit_s"] = repo.get("time_limit_s")
    return {
        "id": f"arena-env-{env.pk}",
        "package_version": PACKAGE_VERSION,
        "kind": state.get("kind", "desktop"),
        "snapshot": env.state_digest,
        "instruction": state["instruction"],
        "source": {
            "arena": env.battle.arena.slug,
            "failure_mode": env.failure_mode,
            "battle": battle,
        },
        "config": _config(state),
        "simulated_web": state.get("simulated_web"),
        "evaluator": evaluator,
        "budgets": budgets,
        "screen": state.get("screen"),
        "tools": list(state.get("tools") or ()),
    }


def _success_cmd(state: dict, grader: dict, command: str) -> str:
    """The suite task's success command: the packed grader, except for a repo task
    whose grader is its one success command (run in the repository, bounded like the
    battles' at 2000 characters, which the packed checker is not)."""
    checks = grader.get("checks") or []
    single = [c.get("type") for c in checks] == ["command"]
    if state.get("repo") and single and checks[0].get("cwd") == "repo":
        return checks[0]["run"]
    return command


def _suite(env: Environment, state: dict, grader: dict, command: str) -> dict:
    """One task as ``evals.suites.parse_suite`` reads it, paths relative to the root."""
    task: dict = {
        "id": f"arena-env-{env.pk}",
        "prompt": state["instruction"],
        "success_cmd": _success_cmd(state, grader, command),
        "meta": {
            "arena_environment": env.pk,
            "snapshot": env.state_digest,
            "failure_mode": env.failure_mode,
            # Checked on the host, on the final message: not part of success_cmd.
            "host_checks": [c for c in grader["checks"] if c["type"] in HOST_CHECKS],
        },
    }
    repo = state.get("repo")
    if repo:
        low, high = _REPO_TIME_LIMIT
        limit = repo.get("time_limit_s") or 600
        task.update(
            kind="repo",
            repo=f"files/{repo['sha256']}",
            ref=BRANCH,
            time_limit_s=min(max(int(limit), low), high),
        )
    else:
        task["kind"] = "desktop"
        if state.get("start_url"):
            task["start_url"] = state["start_url"]
        if state.get("attachments"):
            task["attachments"] = [f"attachments/{a['name']}" for a in state["attachments"]]
    return {
        "name": f"arena-env-{env.pk}",
        "description": "A training environment of Agent Arena, made from a failed run.",
        "tasks": [task],
    }


def _member(name: str, size: int = 0, *, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if link:
        info.type, info.linkname, info.size = tarfile.LNKTYPE, link, 0
    return info


def environment_package(env: Environment, *, now: datetime | None = None) -> bytes:
    """The environment's package (bytes of a tar.gz). Raises ``PackageError`` when it
    has no state or grader yet, its grader is refused, or a blob it names is missing
    or changed in storage. The source battle is named only once published (``now``:
    the publication's reference time)."""
    state, grader = env.state, env.grader
    if not state or not grader:
        raise PackageError(f"environment {env.pk} has no {'state' if not state else 'grader'} yet")
    if manifest_digest(state) != env.state_digest:
        raise PackageError(f"environment {env.pk}'s state does not match its digest")
    try:
        grader = grader_validate(grader)
        command = grader_command(grader)
    except GraderInvalid as exc:
        raise PackageError(f"environment {env.pk}'s grader is refused: {exc}") from None
    published = environment_battle_published(env, now=now)
    failing, reference = list(env.failing_actions or []), list(env.reference_actions or [])
    files = {
        "task.json": _json_bytes(
            _task(env, state, grader, command, env.battle_id if published else None)
        ),
        "snapshot.json": _json_bytes(state),
        "grader.json": _json_bytes(grader),
        "suite.json": _json_bytes(_suite(env, state, grader, command)),
        "trajectories/failing.json": _json_bytes(failing),
        "trajectories/reference.json": _json_bytes(reference),
    }
    for sha256, size in _named_blobs(state, failing, reference).items():
        files[f"files/{sha256}"] = _blob(sha256, size)
    links = {
        f"attachments/{_attachment_name(a['name'])}": f"files/{a['sha256']}"
        for a in state.get("attachments") or ()
    }
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name in sorted(files):
            tar.addfile(_member(name, len(files[name])), io.BytesIO(files[name]))
        # After every file: a link's target must precede it.
        for name in sorted(links):
            tar.addfile(_member(name, link=links[name]))
    return buffer.getvalue()


def _safe_name(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and "" not in parts and ".." not in parts


def _members(data: bytes, max_bytes: int) -> tuple[dict[str, bytes], dict[str, str]]:
    """The archive's regular files (name → bytes) and hard links (name → target),
    bounded; anything else is refused."""
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for count, info in enumerate(tar, start=1):
                if count > READ_MAX_MEMBERS:
                    raise PackageInvalid(f"more than {READ_MAX_MEMBERS} members")
                name = info.name
                if not _safe_name(name) or _CONTROL.search(name):
                    raise PackageInvalid(f"member {name[:80]!r} is not a plain relative path")
                if name in files or name in links:
                    raise PackageInvalid(f"member {name!r} appears twice")
                if info.islnk():
                    links[name] = info.linkname
                    continue
                if not info.isreg():
                    raise PackageInvalid(f"member {name!r} is not a regular file or a hard link")
                total += info.size
                if total > max_bytes:
                    raise PackageInvalid(f"more than {max_bytes} bytes unpacked")
                handle = tar.extractfile(info)
                files[name] = handle.read() if handle is not None else b""
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise PackageInvalid(f"not a tar.gz archive ({type(exc).__name__})") from None
    return files, links


def _parse_json(files: dict[str, bytes], name: str):
    if name not in files:
        raise PackageInvalid(f"{name} is missing")
    try:
        return json.loads(files[name])
    except (ValueError, RecursionError):
        raise PackageInvalid(f"{name} is not JSON") from None


def package_read(data: bytes, *, max_bytes: int = READ_MAX_BYTES) -> dict:
    """The parts of a package: ``task``, ``snapshot``, ``grader``, ``suite``,
    ``trajectories`` (``failing``, ``reference``), ``files`` (SHA-256 → bytes) and
    ``attachments`` (name → the SHA-256 its link points at); verified: every
    ``files/<sha256>`` holds the bytes its name says, every blob the snapshot and the
    trajectories name is there and nothing else is, ``task.json`` agrees with
    ``snapshot.json`` (digest, instruction, setup) and with ``grader.json``, and the
    attachments' links point at their blobs. Raises ``PackageInvalid`` saying what is
    wrong."""
    files, links = _members(data, max_bytes)
    parsed = {name: _parse_json(files, name) for name in _JSON_MEMBERS}
    blobs: dict[str, bytes] = {}
    for name, content in files.items():
        if name in parsed:
            continue
        found = _BLOB.fullmatch(name)
        if found is None:
            raise PackageInvalid(f"unexpected member {name!r}")
        if hashlib.sha256(content).hexdigest() != found[1]:
            raise PackageInvalid(f"{name} does not hold the bytes its name says (tampered?)")
        blobs[found[1]] = content
    task, snapshot, grader = parsed["task.json"], parsed["snapshot.json"], parsed["grader.json"]
    failing, reference = parsed["trajectories/failing.json"], parsed["trajectories/reference.json"]
    if not all(isinstance(v, dict) for v in (task, snapshot, grader, parsed["suite.json"])):
        raise PackageInvalid("task.json, snapshot.json, grader.json and suite.json are objects")
    if not isinstance(failing, list) or not isinstance(reference, list):
        raise PackageInvalid("the trajectories are lists of actions")
    if task.get("snapshot") != manifest_digest(snapshot):
        raise PackageInvalid("task.json's snapshot digest is not snapshot.json's digest")
    if task.get("instruction") != snapshot.get("instruction"):
        raise PackageInvalid("task.json's instruction is not snapshot.json's")
    try:
        if task.get("config") != _config(snapshot):
            raise PackageInvalid("task.json's setup does not rebuild snapshot.json's state")
        named = _named_blobs(snapshot, failing, reference)
    except (KeyError, TypeError, AttributeError, PackageError) as exc:
        raise PackageInvalid(f"snapshot.json is not a snapshot manifest ({exc})") from None
    evaluator = task.get("evaluator") or {}
    if evaluator.get("checks") != grader.get("checks"):
        raise PackageInvalid("task.json's checks are not grader.json's")
    suite_tasks = parsed["suite.json"].get("tasks")
    if (
        not isinstance(suite_tasks, list)
        or len(suite_tasks) != 1
        or not isinstance(suite_tasks[0], dict)
        or suite_tasks[0].get("id") != task.get("id")
        or suite_tasks[0].get("success_cmd")
        != _success_cmd(snapshot, grader, evaluator.get("command"))
    ):
        raise PackageInvalid("suite.json's task is not task.json's (id and command)")
    missing = sorted(set(named) - set(blobs))
    if missing:
        raise PackageInvalid(f"files/{missing[0]} is missing ({len(missing)} missing)")
    extra = sorted(set(blobs) - set(named))
    if extra:
        raise PackageInvalid(f"files/{extra[0]} is named by neither the snapshot nor a trajectory")
    for sha256, size in named.items():
        if len(blobs[sha256]) != size:
            raise PackageInvalid(f"files/{sha256} is not the size the snapshot says")
    expected_links = {
        f"attachments/{a['name']}": f"files/{a['sha256']}"
        for a in snapshot.get("attachments") or ()
    }
    if links != expected_links:
        raise PackageInvalid("the attachments/ links are not the snapshot's attachments")
    return {
        "task": task,
        "snapshot": snapshot,
        "grader": grader,
        "suite": parsed["suite.json"],
        "trajectories": {"failing": failing, "reference": reference},
        "files": blobs,
        "attachments": {
            name.removeprefix("attachments/"): target.removeprefix("files/")
            for name, target in links.items()
        },
    }

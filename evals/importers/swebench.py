"""SWE-bench instances → repo tasks (docs/evaluations.md, "Importing task sets").

Each instance becomes one ``repo`` task: the prompt is its ``problem_statement``; its
repository is a git bundle written beside the suite with two branches, ``task`` (one
commit holding the tree of ``base_commit``, no history, so no later fix is in reach)
and ``judge`` (``task`` plus the ``test_patch``). The task's ``judge_ref`` is
``judge``: only the judge sandbox ever checks out the hidden tests. ``success_cmd``
runs exactly the FAIL_TO_PASS tests (the functional score) and ``test_cmd`` exactly the
PASS_TO_PASS ones (the regression score), each id quoted for the shell.

There is no network: the repository of ``owner/name`` is read from ``repos`` as
``owner__name`` — a git repository (bare or not), ``owner__name.bundle``, or a tarball
(``.tar``, ``.tar.gz``, ``.tgz``) holding one. The host's git builds the bundles from
those local files in a scratch directory (hooks off, no user or system config); the
gold ``patch`` is only checked to apply, and is never written out."""

import json
import os
import re
import shlex
import subprocess
import tarfile
import tempfile
from functools import partial
from pathlib import Path

from evals.importers import Imported, ImportFailed, json_records, string
from evals.suites import REPO_COMMAND_MAX_CHARS, REPO_TIME_LIMIT, REPO_TIME_LIMIT_DEFAULT

DEFAULT_TEST_CMD = "python3 -m pytest -q -p no:cacheprovider"
TASK_REF, JUDGE_REF = "task", "judge"
BUNDLES_DIR = "swebench"
REQUIRED = (
    "instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
    "FAIL_TO_PASS", "PASS_TO_PASS",
)  # fmt: skip
KEPT_AS_META = ("version", "created_at", "environment_setup_commit")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_REPO = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)$")
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SOURCES = ("", ".bundle", ".tar", ".tar.gz", ".tgz")
_GIT_TIMEOUT_S = 600
# Commits made here are the same for the same inputs.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "arena import", "GIT_AUTHOR_EMAIL": "import@arena.invalid",
    "GIT_COMMITTER_NAME": "arena import", "GIT_COMMITTER_EMAIL": "import@arena.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}  # fmt: skip


class _GitFailed(Exception):
    pass


def _git(scratch: Path, *args: str, cwd: Path, stdin: str | None = None, **env) -> str:
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(scratch), "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
        **_IDENTITY, **env,
    }  # fmt: skip
    command = ["git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.file.allow=always"]
    try:
        done = subprocess.run(
            [*command, *args], cwd=cwd, input=stdin, capture_output=True, text=True,
            env=environment, timeout=_GIT_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise _GitFailed(f"git {args[0]} took more than {_GIT_TIMEOUT_S} s") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise _GitFailed("; ".join(said[-3:]) or f"git {args[0]} exited {done.returncode}")
    return done.stdout.strip()


def _test_ids(raw: dict, key: str, fail, *, required: bool) -> list[str]:
    """A test list: a list of strings, or (as the published files have it) a JSON
    string of one."""
    value = raw[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            fail("must be a list of test ids or a JSON string of one", key)
    if not isinstance(value, list):
        fail(f"must be a list of test ids, got {type(value).__name__}", key)
    if required and not value:
        fail("must name at least one test", key)
    for i, test in enumerate(value):
        if not isinstance(test, str) or not test.strip():
            fail("must be a non-blank string", f"{key}[{i}]")
        if _CONTROL.search(test):
            fail("must not contain control characters", f"{key}[{i}]")
        if test.startswith("-"):
            fail(f"must not start with '-' (it would be an option), got {test!r}", f"{key}[{i}]")
    return value


def _command(prefix: str, tests: list[str]) -> str:
    return " ".join([prefix, *(shlex.quote(test) for test in tests)])


class _Repositories:
    """The local repositories, each cloned (bare) once into the scratch directory."""

    def __init__(self, root: Path, scratch: Path):
        self.root, self.scratch, self.clones = root.resolve(), scratch, {}

    def clone(self, name: str) -> Path:
        if name not in self.clones:
            self.clones[name] = self._clone(name)
        return self.clones[name]

    def _clone(self, name: str) -> Path:
        stem = name.replace("/", "__")
        found = [self.root / f"{stem}{suffix}" for suffix in _SOURCES]
        found = [path for path in found if path.exists()]
        if not found:
            raise _GitFailed(
                f"no repository for {name!r} in {self.root}: give {stem} (a git repository), "
                f"{stem}.bundle or {stem}.tar.gz there"
            )
        source = found[0]
        if source.is_file() and source.suffix != ".bundle":
            source = self._untar(source)
        target = self.scratch / "clones" / stem
        _git(self.scratch, "clone", "-q", "--bare", "--no-hardlinks", str(source), str(target),
             cwd=self.scratch)  # fmt: skip
        return target

    def _untar(self, tarball: Path) -> Path:
        into = Path(tempfile.mkdtemp(dir=self.scratch, prefix="tar-"))
        try:
            with tarfile.open(tarball) as archive:
                archive.extractall(into, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise _GitFailed(f"cannot unpack {tarball}: {exc}") from None
        children = [into, *(p for p in into.iterdir() if p.is_dir())]
        for candidate in children:
            if (candidate / ".git").exists() or (candidate / "HEAD").is_file():
                return candidate
        raise _GitFailed(f"{tarball} holds no git repository (no .git at its top)")


def _bundle(clone: Path, scratch: Path, instance: dict, name: str) -> bytes:
    """The instance's bundle: ``task`` at the base tree, ``judge`` with the test patch.
    Raises ``_GitFailed`` with the field at fault as its second argument."""

    def git(*args, **kw):
        return _git(scratch, *args, cwd=clone, **kw)

    base = instance["base_commit"]
    try:
        tree = git("rev-parse", "--verify", "--quiet", f"{base}^{{tree}}")
    except _GitFailed:
        raise _GitFailed(f"{base} is not a commit of the repository", "base_commit") from None
    index = {"GIT_INDEX_FILE": str(scratch / f"index-{name}")}
    for field in ("patch", "test_patch"):
        git("read-tree", tree, **index)
        try:
            git("apply", "--cached", "--whitespace=nowarn", "-", stdin=instance[field], **index)
        except _GitFailed as exc:
            raise _GitFailed(f"does not apply at base_commit: {exc}", field) from None
    # The index now holds the base tree with the test patch (applied last).
    judge_tree = git("write-tree", **index)
    task = git("commit-tree", tree, "-m", f"{name} at {base}")
    judge = git("commit-tree", judge_tree, "-p", task, "-m", f"{name}: the tests")
    git("update-ref", f"refs/heads/{TASK_REF}", task)
    git("update-ref", f"refs/heads/{JUDGE_REF}", judge)
    out = scratch / f"{name}.bundle"
    git("bundle", "create", "-q", str(out), TASK_REF, JUDGE_REF)
    return out.read_bytes()


def import_swebench(
    path: Path,
    *,
    repos: Path,
    test_cmd: str = DEFAULT_TEST_CMD,
    time_limit_s: int = REPO_TIME_LIMIT_DEFAULT,
    only: tuple[str, ...] = (),
    strict: bool = False,
) -> Imported:
    """The repo tasks of the instances in ``path`` (a JSON list or JSON Lines); with
    ``only``, just those instance ids (each must be in the file)."""
    low, high = REPO_TIME_LIMIT
    if not low <= time_limit_s <= high:
        raise ImportFailed(path, f"the time limit must be from {low} to {high} s")
    if not test_cmd.strip() or _CONTROL.search(test_cmd):
        raise ImportFailed(path, "the test command must be one non-blank line")
    if not repos.is_dir():
        raise ImportFailed(path, f"the repositories directory {repos} does not exist")
    imported, seen = Imported(), {}
    with tempfile.TemporaryDirectory(prefix="swebench-") as scratch_dir:
        scratch = Path(scratch_dir)
        clones = _Repositories(repos, scratch)
        for where, raw in json_records(path):
            task = _instance(path, where, raw, seen, only)
            if task is None:
                continue
            instance, name, f2p, p2p, record = task
            fail = partial(_raise, path, record)
            commands = {"success_cmd": _command(test_cmd, f2p)}
            if p2p:
                commands["test_cmd"] = _command(test_cmd, p2p)
            too_long = [k for k, v in commands.items() if len(v) > REPO_COMMAND_MAX_CHARS]
            if too_long:
                lists = {"success_cmd": "FAIL_TO_PASS", "test_cmd": "PASS_TO_PASS"}
                reason = (f"its {lists[too_long[0]]} tests make a command of "
                          f"{len(commands[too_long[0]])} characters, over the limit of "
                          f"{REPO_COMMAND_MAX_CHARS}")  # fmt: skip
                imported.skip(record, reason, strict=strict, file=path)
                continue
            try:
                bundle = _bundle(clones.clone(instance["repo"]), scratch, instance, name)
            except _GitFailed as exc:
                fail(exc.args[0], exc.args[1] if len(exc.args) > 1 else "repo")
            relative = f"{BUNDLES_DIR}/{name}.bundle"
            imported.files[relative] = bundle
            meta = {key: instance[key] for key in KEPT_AS_META if instance.get(key)}
            imported.tasks.append({
                "id": name, "kind": "repo", "prompt": instance["problem_statement"],
                "repo": relative, "ref": TASK_REF, "judge_ref": JUDGE_REF, **commands,
                "time_limit_s": time_limit_s,
                "meta": {"source": "swebench", "repo": instance["repo"],
                         "base_commit": instance["base_commit"], **meta,
                         "fail_to_pass": f2p, "pass_to_pass": p2p},
            })  # fmt: skip
    missing = [name for name in only if name not in seen]
    if missing:
        raise ImportFailed(path, f"no instance {missing[0]!r} in the file")
    return imported


def _raise(file, record, problem, field=None):
    raise ImportFailed(file, problem, record, field)


def _instance(path: Path, where: str, raw, seen: dict, only: tuple[str, ...]):
    fail = partial(_raise, path, where)
    if not isinstance(raw, dict):
        fail(f"must be an object, got {type(raw).__name__}")
    name = string(raw, "instance_id", fail)
    if not _ID.fullmatch(name):
        fail("must be letters, digits, '.', '_' or '-' (at most 200)", "instance_id")
    if name in seen:
        fail(f"duplicate instance_id (first at {seen[name]})", "instance_id")
    seen[name] = where
    record = f"{where} (instance '{name}')"
    fail = partial(_raise, path, record)
    for key in REQUIRED:
        if raw.get(key) is None:
            fail("missing", key)
    repo = string(raw, "repo", fail)
    if not _REPO.fullmatch(repo) or ".." in repo:
        fail(f"must be 'owner/name', got {repo!r}", "repo")
    if not _COMMIT.fullmatch(string(raw, "base_commit", fail)):
        fail("must be a commit id (7 to 64 lower-case hex digits)", "base_commit")
    for key in ("patch", "test_patch", "problem_statement"):
        string(raw, key, fail)
    for key in KEPT_AS_META:
        string(raw, key, fail, required=False, blank_ok=True)
    f2p = _test_ids(raw, "FAIL_TO_PASS", fail, required=True)
    p2p = _test_ids(raw, "PASS_TO_PASS", fail, required=False)
    if only and name not in only:
        return None
    return raw, name, f2p, p2p, record

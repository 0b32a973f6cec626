"""The shell scripts a coding battle runs inside its sandboxes (pure: strings in,
strings out). Everything git does to untrusted content happens in a sandbox: the host
only stores bytes (bundles, the patch) and reads bounded, escaped output.

Every value from a task or an agent is quoted with ``shlex.quote``; the scripts end by
printing ``key=value`` lines that :func:`report` reads back (the sandbox is untrusted,
so a missing or malformed line is simply absent)."""

import re
import shlex

# The canonical commits of a repo task's bundles: fixed author and dates, so the same
# tree always gives the same commit id.
_CANON_ENV = (
    "GIT_AUTHOR_NAME=arena GIT_AUTHOR_EMAIL=arena@arena.invalid "
    "GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_NAME=arena "
    "GIT_COMMITTER_EMAIL=arena@arena.invalid GIT_COMMITTER_DATE=2000-01-01T00:00:00Z"
)
# Git settings that stop a repository's own config from running anything or asking.
SAFE_GIT = "git -c core.fsmonitor=false -c core.hooksPath=/dev/null -c advice.detachedHead=false"
# Git with no configuration but the arena's: no system or global file, no attributes
# file, so no filter, diff driver or hook any repository or agent defined can run.
BARE_GIT = (
    "env GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=/nonexistent "
    "XDG_CONFIG_HOME=/nonexistent GIT_TERMINAL_PROMPT=0 git -c core.fsmonitor=false "
    "-c core.hooksPath=/dev/null -c core.attributesFile=/dev/null -c core.autocrlf=false "
    "-c core.safecrlf=false -c core.symlinks=true -c core.quotePath=true "
    "-c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.relative=false"
)
BRANCH = "arena"
CHECKPOINT_TAG = "arena-checkpoint"
REPO_DIR = "/work/repo"
OUT_DIR = "/work/.arena-out"
PATCH_NAME = "agent.patch"
# Left out of every diff (seed 002): interpreter caches are not a change.
DIFF_EXCLUDES = ("':(exclude,glob)**/__pycache__/**'", "':(exclude,glob)**/*.pyc'")
APPLY_CHAIN = (
    ("apply", "git apply --whitespace=nowarn"),
    ("3way", "git apply --3way --whitespace=nowarn"),
    ("reject", "git apply --reject --whitespace=nowarn"),
    ("fuzz", "patch -p1 --fuzz=3 --batch --forward --no-backup-if-mismatch --reject-file=-"),
)
_HEX = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
_LINE = re.compile(r"^([a-z0-9_]{1,40})=(.{0,2000})$")


def report(stdout: str) -> dict[str, str]:
    """The ``key=value`` lines a script printed (the last of each key wins)."""
    found: dict[str, str] = {}
    for line in stdout.splitlines()[-400:]:
        match = _LINE.match(line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    return found


def git_id(value: str | None) -> str:
    """A full commit or tree id as the sandbox printed it, or "" for anything else."""
    value = (value or "").strip()
    return value if _HEX.fullmatch(value) else ""


def _fetch_tree(origin: str, url: str, ref: str, into: str) -> str:
    """Commands that leave the ref's files (no .git) in ``into``."""
    q_into = shlex.quote(into)
    if origin == "tarball":
        return (
            f"mkdir -p /work/t && tar -xf /work/attachments/upload.tar -C /work/t "
            f"--no-same-owner --no-same-permissions --exclude=.git\n"
            # One top-level directory (GitHub's archives): its contents are the tree.
            f"top=$(ls -A /work/t)\n"
            f'if [ "$(ls -A /work/t | wc -l)" = 1 ] && [ -d "/work/t/$top" ]; then '
            f'src="/work/t/$top"; else src=/work/t; fi\n'
            f'mkdir -p {q_into} && cp -a "$src/." {q_into}/\n'
        )
    q_ref = shlex.quote(ref or "HEAD")
    if origin == "url":
        branch = "" if ref in ("", "HEAD") else f"--branch {q_ref} "
        fetch = f"git clone -q --depth 1 {branch}-- {shlex.quote(url)} /work/src\n"
        rev = "HEAD"
    else:  # an uploaded bundle: fetch the named ref from it
        fetch = (
            "git init -q /work/src && "
            f"{SAFE_GIT} -C /work/src fetch -q /work/attachments/upload.bundle {q_ref}\n"
        )
        rev = "FETCH_HEAD"
    return (
        f"[ -d /work/src/.git ] || {{ {fetch.strip()}; }}\n"
        f"mkdir -p {q_into} && {SAFE_GIT} -C /work/src archive --format=tar {rev} "
        f"| tar -x -C {q_into}\n"
    )


def prepare_source(*, origin: str, url: str, ref: str, judge_ref: str) -> str:
    """Turns the task's source into ``out/source.bundle`` (one commit: the ref's tree)
    and, with a judge ref, ``out/judge.bundle`` (a second commit on top: its tree)."""
    lines = [
        "set -eu",
        "umask 022",
        "cd /work && mkdir -p out canon",
        _fetch_tree(origin, url, ref, "/work/tree"),
        f"cd /work/canon && git init -q -b {BRANCH} . && cp -a /work/tree/. .",
        f"{SAFE_GIT} add -A -f . && env {_CANON_ENV} {SAFE_GIT} commit -q --no-verify "
        "--allow-empty -m 'arena source'",
        f"{SAFE_GIT} bundle create -q /work/out/source.bundle {BRANCH}",
        "echo commit=$(git rev-parse HEAD)",
        "echo tree=$(git rev-parse 'HEAD^{tree}')",
        "echo files=$(git ls-files | wc -l)",
    ]
    if judge_ref:
        if origin == "url":
            fetch_judge = (
                f"{SAFE_GIT} -C /work/src fetch -q --depth 1 origin {shlex.quote(judge_ref)}"
            )
        else:
            fetch_judge = (
                f"{SAFE_GIT} -C /work/src fetch -q /work/attachments/upload.bundle "
                f"{shlex.quote(judge_ref)}"
            )
        lines += [
            fetch_judge,
            "mkdir -p /work/jtree && "
            f"{SAFE_GIT} -C /work/src archive --format=tar FETCH_HEAD | tar -x -C /work/jtree",
            f"{SAFE_GIT} rm -q -r -f --cached . >/dev/null && find . -mindepth 1 -maxdepth 1 "
            "! -name .git -exec rm -rf {} +",
            "cp -a /work/jtree/. . && "
            f"{SAFE_GIT} add -A -f . && env {_CANON_ENV} {SAFE_GIT} commit -q --no-verify "
            "--allow-empty -m 'arena judge'",
            f"{SAFE_GIT} bundle create -q /work/out/judge.bundle {BRANCH}",
            "echo judge_commit=$(git rev-parse HEAD)",
        ]
    return "\n".join(lines) + "\n"


def checkout(bundle: str) -> str:
    """A sandbox's fresh copy: the bundle's branch checked out at /work/repo, tagged
    as the checkpoint, the bundle removed; prints the commit and tree."""
    return (
        "set -eu\n"
        f"git init -q -b {BRANCH} {REPO_DIR} && cd {REPO_DIR}\n"
        f"{SAFE_GIT} fetch -q {shlex.quote(bundle)} {BRANCH}\n"
        f"{SAFE_GIT} reset -q --hard FETCH_HEAD\n"
        f"git tag {CHECKPOINT_TAG} HEAD~0\n"
        "git config user.name agent && git config user.email agent@arena.invalid\n"
        "rm -rf /work/attachments\n"
        f"mkdir -p {OUT_DIR}\n"
        "echo commit=$(git rev-parse HEAD)\n"
        "echo tree=$(git rev-parse 'HEAD^{tree}')\n"
    )


def collect_diff(commit: str, bundle: str) -> str:
    """The agent's change as a binary-safe patch against the checkpoint's commit: new
    files included, caches excluded, written to ``OUT_DIR`` with its SHA-256 printed.

    Runs in the agent's sandbox after ``quiesce`` (nothing of the agent runs any more)
    with a git directory of its own, fetched from the task's bundle (placed fresh by the
    host): nothing of the agent's ``.git`` (config, hooks, filters, attributes file,
    objects, tags) takes part, and ``BARE_GIT`` reads no other configuration. The work
    tree's ``.gitattributes`` can still name a filter or a diff driver, but no
    configuration defines one, so none runs."""
    excludes = " ".join(DIFF_EXCLUDES)
    git = f'{BARE_GIT} --git-dir="$g" --work-tree={REPO_DIR}'
    return (
        "set -u\n"
        f"mkdir -p {OUT_DIR} && [ -d {REPO_DIR} ] && [ ! -L {REPO_DIR} ] "
        "|| { echo diff_error=no repository; exit 0; }\n"
        'g=$(mktemp -d /tmp/arena-git.XXXXXX) && export GIT_INDEX_FILE="$g/index"\n'
        f'{BARE_GIT} init -q --bare --template= "$g" >/dev/null\n'
        f'{BARE_GIT} --git-dir="$g" fetch -q {shlex.quote(bundle)} {BRANCH} '
        "|| { echo diff_error=the task's bundle did not fetch; exit 0; }\n"
        f'[ "$({BARE_GIT} --git-dir="$g" rev-parse FETCH_HEAD)" = {shlex.quote(commit)} ] '
        "|| { echo diff_error=the checkpoint is not the task's commit; exit 0; }\n"
        f"cd {REPO_DIR} && {git} read-tree {shlex.quote(commit)}\n"
        f"{git} add -A -- . {excludes} >/dev/null 2>{OUT_DIR}/diff.err\n"
        f"{git} diff --cached --binary --full-index --no-color --no-ext-diff "
        f"--no-textconv --no-renames {shlex.quote(commit)} -- . {excludes} "
        f"> {OUT_DIR}/{PATCH_NAME} 2>>{OUT_DIR}/diff.err\n"
        "echo diff_exit=$?\n"
        f"echo diff_sha256=$(sha256sum < {OUT_DIR}/{PATCH_NAME} | cut -c1-64)\n"
        'rm -rf "$g"\n'
    )


CHANGES_NAME = "changes.raw"


def change_set() -> str:
    """In the judge sandbox after the patch was applied and before anything of it ran:
    every path that now differs from the judge's commit, ignored files included, with
    its modes, as ``git diff --raw -z`` writes them to ``OUT_DIR/CHANGES_NAME``. This,
    not what the patch says of itself, is what protection is decided on."""
    git = f"{BARE_GIT} -C {REPO_DIR}"
    return (
        "set -u\n"
        f"cd {REPO_DIR} || exit 3\n"
        'd=$(mktemp -d /tmp/arena-index.XXXXXX) && export GIT_INDEX_FILE="$d/index"\n'
        f"{git} read-tree HEAD && {git} add -A -f -- . >/dev/null 2>&1\n"
        f"{git} diff --cached --raw -z --no-renames --no-abbrev HEAD > {OUT_DIR}/{CHANGES_NAME}\n"
        "echo changes_exit=$?\n"
        'rm -rf "$d"\n'
    )


RAW_MODES = re.compile(r"^:(\d{6}) (\d{6}) [0-9a-f]{40} [0-9a-f]{40} ([AMDT])$")


def parse_changes(data: bytes) -> list[tuple[str, str, str, str]] | None:
    """(old mode, new mode, status, path) of each entry ``change_set`` wrote, or None
    when the output does not read as ``git diff --raw -z``."""
    fields = data.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    if len(fields) % 2:
        return None
    found = []
    for head, path in zip(fields[::2], fields[1::2], strict=True):
        match = RAW_MODES.match(head.decode("ascii", "replace"))
        if match is None:
            return None
        found.append(
            (
                match.group(1),
                match.group(2),
                match.group(3),
                path.decode("utf-8", "surrogateescape"),
            )
        )
    return found


def apply_patch(patch: str) -> str:
    """The fallback chain: each step on a clean checkout, the first that exits 0 wins;
    prints one ``attempt_<step>=<exit>`` line per step tried and ``applied=<step>``
    (``none`` when every step failed, leaving the checkout clean)."""
    q = shlex.quote(patch)
    lines = ["set -u", f"cd {REPO_DIR} || exit 3", "applied=none"]
    for step, command in APPLY_CHAIN:
        source = f"< {q}" if step == "fuzz" else q
        lines += [
            'if [ "$applied" = none ]; then',
            f"  {SAFE_GIT} reset -q --hard {CHECKPOINT_TAG} && {SAFE_GIT} clean -q -f -d -x",
            f"  {command} {source} >/dev/null 2>&1; rc=$?",
            f"  echo attempt_{step}=$rc",
            f'  [ "$rc" = 0 ] && applied={step}',
            "fi",
        ]
    lines += [
        f'[ "$applied" = none ] && {{ {SAFE_GIT} reset -q --hard {CHECKPOINT_TAG}; '
        "git clean -q -f -d -x; }",
        # (the .rej files git apply --reject leaves, never a tracked file)
        f"{SAFE_GIT} ls-files -z --others -- '*.rej' | head -c 1000000 | xargs -r -0 rm -f --",
        "echo applied=$applied",
    ]
    return "\n".join(lines) + "\n"


def apply_reset() -> str:
    """The judge's checkout back as it was before the patch (a refused change set)."""
    return (
        f"cd {REPO_DIR} || exit 3\n"
        f"{SAFE_GIT} reset -q --hard {CHECKPOINT_TAG} && {SAFE_GIT} clean -q -f -d -x\n"
    )


def restore(paths: list[str]) -> str:
    """Puts each path back as the judge's checkout has it, or removes it when the
    checkout has no such file; prints ``restored=<n>``."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (
        "set -u\n"
        f"cd {REPO_DIR} || exit 3\n"
        "n=0\n"
        f"for f in {quoted}; do\n"
        '  if git cat-file -e "HEAD:$f" 2>/dev/null; then '
        f'{SAFE_GIT} checkout -q HEAD -- "$f"; else rm -rf -- "$f"; fi && n=$((n + 1))\n'
        "done\n"
        "echo restored=$n\n"
    )


OUTPUT_MARK = "----- arena: check output -----"


# Kills every process of the sandbox but this script and its ancestors (the supervisor,
# the sandbox's init): in the sandbox's own PID namespace /proc lists only its processes.
# Passes repeat until one finds nothing left to kill (a process may fork while it dies;
# the pids limit bounds how long that goes on), at most 50; zombies are skipped (their
# parent or the init reaps them, and a signal cannot touch them). Sets ``quiet``: 1 when
# the last pass found nothing, else 0.
KILL_LEFTOVERS = (
    # Never on a host: only where PID 1 is a sandbox's init and the uid is not root.
    'case "$(cat /proc/1/comm 2>/dev/null)" in bwrap|docker-init|tini) ;; *) '
    'echo "not in a sandbox" >&2; exit 97 ;; esac\n'
    '[ "$(id -u)" != 0 ] || { echo "root in a sandbox" >&2; exit 97; }\n'
    'keep=" 1 $$ "; p=$$\n'
    'while [ "$p" -gt 1 ] 2>/dev/null; do\n'
    "  p=$(sed 's/.*) [A-Za-z] //; s/ .*//' /proc/$p/stat 2>/dev/null) || break\n"
    '  keep="$keep$p "\n'
    "done\n"
    "quiet=0\n"
    "for pass in $(seq 1 50); do n=0\n"
    "  for d in /proc/[0-9]*; do q=${d#/proc/}\n"
    '    case "$keep" in *" $q "*) continue ;; esac\n'
    "    s=$(sed 's/.*) \\([A-Za-z]\\) .*/\\1/' $d/stat 2>/dev/null) || continue\n"
    '    [ "$s" = Z ] && continue\n'
    # (a parent outside the sandbox's pid namespace: the worker's own exec, a channel)
    "    pp=$(sed 's/.*) [A-Za-z] //; s/ .*//' $d/stat 2>/dev/null) || continue\n"
    '    [ "$pp" = 0 ] && continue\n'
    '    kill -KILL "$q" 2>/dev/null && n=$((n + 1))\n'
    "  done\n"
    '  [ "$n" = 0 ] && { quiet=1; break; }\n'
    "done\n"
)


def quiesce(clear: tuple[str, ...] = ()) -> str:
    """Kills everything the agent left running in its sandbox (background jobs,
    detached daemons, a rewriter of the files the host reads next), then removes the
    ``clear`` paths (where the host writes next: whatever the agent left there goes),
    and prints ``quiet=1`` when nothing is left running. The host reads nothing out of
    the sandbox before."""
    removal = f"rm -rf -- {' '.join(shlex.quote(p) for p in clear)}\n" if clear else ""
    return "set -u\n" + KILL_LEFTOVERS + removal + "echo quiet=$quiet\n"


def run_check(command: str, log: str, *, junit: str = "", tail_bytes: int = 8192) -> str:
    """A task command in the repo, its output to a log, its exit status printed, then
    everything the command started and left running killed (a process it detached could
    otherwise rewrite the log, or its own stdout, before the log is read), then the
    log's tail. ``ARENA_JUNIT_XML`` tells a test command where JUnit XML may go."""
    env = f"ARENA_JUNIT_XML={shlex.quote(junit)} " if junit else ""
    return (
        f"cd {REPO_DIR} || exit 3\n"
        f"{env}bash -c {shlex.quote(command)} > {shlex.quote(log)} 2>&1 < /dev/null\n"
        "code=$?\n"
        f"{KILL_LEFTOVERS}"
        "echo check_exit=$code\n"
        f"echo {shlex.quote(OUTPUT_MARK)}\n"
        f"tail -c {int(tail_bytes)} {shlex.quote(log)} 2>/dev/null\n"
    )


def check_output(stdout: str) -> str:
    """What :func:`run_check` printed of the command's log (after the mark)."""
    _, found, rest = stdout.partition(OUTPUT_MARK + "\n")
    return rest if found else ""


def lint_count(paths: list[str]) -> str:
    """Ruff's warnings on the given Python files, with ruff's defaults and nothing of
    the repository's configuration (``--isolated``: an agent cannot silence the measure
    by editing pyproject.toml). Missing files count nothing."""
    files = " ".join(shlex.quote(p) for p in paths)
    return (
        f"cd {REPO_DIR} || exit 3\n"
        "n=0\n"
        f'for f in {files}; do [ -f "$f" ] || continue; '
        'c=$(ruff check --isolated --no-cache --quiet --exit-zero --output-format concise "$f" '
        "2>/dev/null | grep -c ':[0-9]*:[0-9]*: '); n=$((n + c)); done\n"
        "echo lint=$n\n"
    )


def complexity_csv(paths: list[str]) -> str:
    """lizard's per-function CSV for the given files (those that exist)."""
    files = " ".join(shlex.quote(p) for p in paths)
    return (
        f"cd {REPO_DIR} || exit 3\n"
        f'set -- ; for f in {files}; do [ -f "$f" ] && set -- "$@" "$f"; done\n'
        '[ "$#" -gt 0 ] && lizard --csv "$@" 2>/dev/null | head -n 5000\n'
        "exit 0\n"
    )


JUDGE_DIR = "/work/.arena-judge"
HARNESS = f"{JUDGE_DIR}/_arena_judge_harness.py"


def harness(config_json: str, sums: dict[str, str]) -> str:
    """Runs the judge harness on the repository as this shell's last command (``exec``:
    the harness alone then holds the pipe its result goes to), after checking that its
    files are the host's (``sums``: name → SHA-256)."""
    listing = "".join(f"{digest}  {JUDGE_DIR}/{name}\n" for name, digest in sorted(sums.items()))
    return (
        f"cd {REPO_DIR} || exit 3\n"
        f"printf %s {shlex.quote(listing)} | sha256sum --check --quiet --strict - >/dev/null "
        "|| { echo harness_error=the harness files changed; exit 98; }\n"
        f"exec python3 -I -S {HARNESS} {shlex.quote(config_json)}\n"
    )

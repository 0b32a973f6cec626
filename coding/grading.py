"""Grades from outside the code under test (docs/coding.md). Pure: the host's side of
the judge harness (``coding/inside/_arena_judge_harness.py``): which task commands it
can run (pytest invocations), the check tests it hides among the real ones, its
configuration, reading its one result line, and what that result means.

What the harness reports comes from a process that never imports the repository, over a
pipe only it holds; what it *observed* comes from inside the test process, where the
agent's code runs too, so it is believed only when the run looks as an honest one
must: pytest finished, every check test (a test that must fail, hidden among the real
ones under a name the agent could not know) failed, the process did not exit 0 (an
honest run always fails its check tests), and the tests and their configuration did
not change. A result that contradicts that is *forged*; one that merely ends short of
it (a crash, a timeout) is *unverified*. Neither is ever a pass."""

import json
import random
import re
import shlex
from dataclasses import dataclass, field

MARK = "ARENA-HARNESS-RESULT "
MAX_IDS = 20_000
SHOWN_IDS = 20
CHECK_TESTS = ("assert", "unittest", "raise")
_PYTHON = re.compile(r"^python(3(\.\d{1,2})?)?$")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
# Options that make a pytest run report no test results (or wait for a person).
_NOT_A_RUN = frozenset(
    {"--co", "--collect-only", "--collectonly", "-h", "--help", "--version", "-V",
     "--fixtures", "--funcargs", "--fixtures-per-test", "--markers", "--setup-plan",
     "--setup-only", "--pdb", "--trace", "--lf", "--last-failed", "--ff",
     "--failed-first", "--sw", "--stepwise", "--nf", "--new-first", "--cache-show"}
)  # fmt: skip
# Outside quotes these make the shell do more than run one program with its words.
_SHELL_SYNTAX = frozenset("|&;<>()$`\\\n*?[]{}~#!")


def _plain(command: str) -> bool:
    """Whether the shell would run ``command`` as one program with literal words: no
    operator, redirection, expansion, glob or comment outside quotes, and no expansion
    inside double quotes."""
    quote = ""
    for char in command:
        if quote == "'":
            quote = "" if char == "'" else quote
        elif quote == '"':
            if char in "$`\\":
                return False
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char in _SHELL_SYNTAX:
            return False
    return not quote


@dataclass(frozen=True)
class PytestRun:
    """A task command the harness runs itself: pytest's arguments, whether it was
    ``python -m pytest`` (the working directory first on sys.path), and variables set
    before it (``PYTHONPATH=src pytest``)."""

    args: tuple[str, ...]
    module: bool
    env: tuple[tuple[str, str], ...] = ()


def pytest_run(command: str) -> PytestRun | None:
    """The command as a pytest run, or None when it is anything else (another runner,
    a pipeline, shell syntax, an option under which pytest runs no test)."""
    if not command or not _plain(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    env = []
    while words and (assignment := _ASSIGNMENT.match(words[0])):
        env.append((assignment.group(1), assignment.group(2)))
        words = words[1:]
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    if program in ("pytest", "py.test") and "/" not in words[0]:
        module, args = False, words[1:]
    elif _PYTHON.match(program) and words[0] in (program, f"/usr/bin/{program}"):
        if words[1:3] != ["-m", "pytest"]:
            return None
        module, args = True, words[3:]
    else:
        return None
    if any(arg.split("=", 1)[0] in _NOT_A_RUN for arg in args):
        return None
    if "no:cacheprovider" not in args:
        args = ["-p", "no:cacheprovider", *args]  # the tree is read-only
    return PytestRun(args=tuple(args), module=module, env=tuple(env))


def check_tests(rng: random.Random, names: list[str]) -> list[dict]:
    """Three tests that must fail, one of each kind (a bare assert, unittest's
    assertEqual, a raised AssertionError), each named like a test of the suite (its
    words, recombined) and placed at a random module and position."""
    words = [w for name in names for w in name.rsplit("::", 1)[-1].split("_")[1:] if w.isalnum()]
    words = words or ["case", "value", "result", "check", "input", "edge"]
    found, taken = [], {name.rsplit("::", 1)[-1] for name in names}
    for kind in CHECK_TESTS:
        while True:
            parts = [*rng.sample(words, k=min(2, len(words))), str(rng.randrange(2, 99))]
            name = "test_" + "_".join(parts)
            if name not in taken:
                break
        taken.add(name)
        a = rng.randrange(1, 10**6)
        found.append({"name": name, "kind": kind, "a": a, "b": a + rng.randrange(1, 1000),
                      "slot": rng.random(), "parent": rng.random()})  # fmt: skip
    return found


def harness_config(
    run: PytestRun,
    *,
    mode: str,
    timeout_s: int,
    canaries: list[dict] = (),  # type: ignore[assignment]
    watch: list[str] = (),  # type: ignore[assignment]
    tail_bytes: int = 8192,
) -> dict:
    return {
        "mode": mode,
        "args": list(run.args),
        "module": run.module,
        "env": dict(run.env),
        "timeout_s": timeout_s,
        "canaries": list(canaries),
        "watch": list(watch),
        "tail_bytes": tail_bytes,
    }


def parse_result(stdout: str) -> dict | None:
    """The harness's result (its last ``MARK`` line), or None when it gave none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                found = json.loads(line[len(MARK) :])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


@dataclass(frozen=True)
class Expected:
    """What the pristine tree collects: test ids, and the collectors that failed
    there (their tests cannot be known before the patch)."""

    ids: frozenset[str]
    errors: frozenset[str] = frozenset()


def expected_from(result: dict | None) -> Expected | None:
    if not result or not isinstance(result.get("collected"), list):
        return None
    ids = [i for i in result["collected"] if isinstance(i, str)][:MAX_IDS]
    errors = [i for i in result.get("collect_errors") or () if isinstance(i, str)]
    return Expected(frozenset(ids), frozenset(errors))


@dataclass
class Graded:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    missing: list[str] = field(default_factory=list)
    failing: list[str] = field(default_factory=list)
    forged: str = ""
    unverified: str = ""

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + len(self.missing)

    @property
    def passes(self) -> bool:
        """The gate: a sound run in which at least one test passed and none failed,
        erred or went missing."""
        return (
            not self.forged
            and not self.unverified
            and self.passed > 0
            and not (self.failed or self.errors or self.missing)
        )

    def regression(self) -> float | None:
        """passed / total (a missing test counts as failed); None when the run is not
        sound or counted nothing."""
        if self.forged or self.unverified or self.total <= 0:
            return None
        return self.passed / self.total

    def counts(self) -> dict:
        return {"passed": self.passed, "failed": self.failed + len(self.missing),
                "errors": self.errors, "total": self.total, "source": "harness"}  # fmt: skip


def _forged(result: dict) -> str:
    canaries = result.get("canaries") if isinstance(result.get("canaries"), dict) else {}
    passed = sorted(name for name, outcome in canaries.items() if outcome == "passed")
    if passed:
        return f"a check test that must fail was reported passed ({passed[0]})"
    if result.get("exit_code") == 0:
        return (
            "the test process exited 0, which no honest run here does (the judge's check "
            "tests always fail)"
        )
    if result.get("malformed"):
        return f"the test process wrote {result['malformed']} record(s) the observer never writes"
    changed = result.get("watch_changed") or []
    if changed:
        return f"the tests or their configuration changed during the run ({changed[0]})"
    return ""


def _unverified(result: dict) -> str:
    if result.get("timed_out"):
        return "the test run timed out"
    if result.get("signal"):
        return f"the test process was killed by signal {result['signal']}"
    if result.get("overflow"):
        return "the test run reported more than the judge reads"
    if not result.get("finished"):
        return "the test run ended before pytest finished"
    if not result.get("quiet", True):
        return "processes the tests started could not be stopped"
    canaries = result.get("canaries") if isinstance(result.get("canaries"), dict) else {}
    if not canaries or (not result.get("outcomes") and not any(canaries.values())):
        return "no test ran"
    off = sorted(name for name, outcome in canaries.items() if outcome != "failed")
    if off:
        return f"the judge's check tests did not run as in an honest run ({off[0]})"
    return ""


def grade(result: dict | None, expected: Expected | None) -> Graded:
    """What a harness run shows, measured against what the pristine tree collects."""
    if result is None:
        return Graded(unverified="the harness gave no result")
    graded = Graded(forged=_forged(result))
    graded.unverified = "" if graded.forged else _unverified(result)
    outcomes = result.get("outcomes") if isinstance(result.get("outcomes"), dict) else {}
    for node, outcome in list(outcomes.items())[:MAX_IDS]:
        if outcome == "passed":
            graded.passed += 1
        elif outcome == "skipped":
            graded.skipped += 1
        else:
            graded.errors += outcome != "failed"
            graded.failed += outcome == "failed"
            if len(graded.failing) < SHOWN_IDS:
                graded.failing.append(str(node)[:300])
    if expected is not None:
        graded.missing = sorted(node for node in expected.ids if node not in outcomes)
    return graded

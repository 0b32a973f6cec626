"""The three CLI coding agents, for real, inside a real sandbox: Claude Code, the Codex CLI
and Aider, installed by scripts/toolchain.sh and bound read-only at /opt/arena/toolchain,
each fix a bug in a small git repository, talking to a model only through the egress
proxy (the fake provider is the simulated host ``models.arena.internal``, where the arena
puts its model gateway) and holding a placeholder key only.

Each fake provider's policy answers from the conversation so far, as a model would: read
the file, edit it (Claude Code's Edit tool; Codex's apply_patch through its shell tool;
Aider's SEARCH/REPLACE block in the reply's text), run the tests, say it is done. The
test checks the file, the CLI's exit, what the CLI itself reports as usage, that nothing
else left the sandbox, and that the provider key the fake guards is nowhere inside.

What the arena reads of each run (``agents.cli.transcripts``) is checked on the real
output too: the steps in the neutral shape judges see, and the final message in the
agent's own words, never the CLI's banner or usage lines.

``ARENA_SAVE_CLI_SAMPLES=1`` writes each CLI's output to tests/coding/samples/<cli>.txt,
and Aider's LLM history to tests/coding/samples/aider.llm-history.txt (the samples
tests/coding/test_cli_commands.py and the usage parsers read)."""

import ipaddress
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from agents.cli.commands import (
    AIDER,
    AIDER_LLM_HISTORY,
    CLAUDE_CODE,
    CODEX,
    GATEWAY_KEY,
    cli_command,
)
from agents.cli.transcripts import CliStep, final_message, transcript_steps
from sandboxes.base import SandboxSpec, ToolResult
from sandboxes.egress import EgressProxy, EgressProxyThread
from sandboxes.local import LocalSandbox
from sandboxes.local_backend import TOOLCHAIN_DIR, LocalBackend
from sandboxes.netpolicy import SimulatedHost, simulated_hosts
from tests.coding import fake_streaming as fs

HOST = "models.arena.internal"
GATEWAY = f"http://{HOST}"
# The key the arena's gateway would hold: it must never reach a sandbox (the fakes
# answer 403 to any request carrying it, or anything shaped like a real key).
PROVIDER_KEY = "sk-ant-api03-arena-test-provider-key-never-inside"
REPO = "/work/repo"
SAMPLES = Path(__file__).resolve().parent / "samples"
SAMPLE_MAX_BYTES = 12_000
RUN_TIMEOUT_S = 180
TOOLS = ("claude", "codex", "aider", "ruff", "lizard")
USAGE = fs.Usage(
    input_tokens=1500, output_tokens=60, cache_read_tokens=400, cache_creation_tokens=100
)

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
PATCH = (
    "*** Begin Patch\n*** Update File: calc.py\n@@\n def add(a, b):\n"
    "-    return a - b\n+    return a + b\n*** End Patch\n"
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids need a root worker")


@dataclass
class Arena:
    """A real egress proxy serving one run, with the fake provider as ``HOST``."""

    proxy: EgressProxyThread
    refusals: list[tuple] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


@dataclass
class Ran:
    result: ToolResult
    calc: str
    leaks: str  # what a search for the provider key found inside (empty: nothing)
    refusals: list[tuple]
    names: list[str]
    history: str  # Aider's LLM history ("" for the others)


@pytest.fixture(scope="module", autouse=True)
def _toolchain_installed() -> None:
    if not (TOOLCHAIN_DIR / "bin" / "claude").exists():
        pytest.fail(f"no toolchain at {TOOLCHAIN_DIR}: run scripts/toolchain.sh (make test does)")


def seed_repo(sandbox: LocalSandbox) -> None:
    """A git repository with a bug and its failing test, owned by the sandbox's uid."""
    repo = sandbox.work_dir / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text(BUGGY)
    (repo / "test_calc.py").write_text(TEST)
    who = {"GIT_AUTHOR_NAME": "arena", "GIT_AUTHOR_EMAIL": "arena@example.invalid"}
    env = {**os.environ, **who, "GIT_COMMITTER_NAME": "arena", "GIT_COMMITTER_EMAIL": "-"}
    script = "git init -q -b main && git add -A && git commit -q -m checkpoint"
    subprocess.run(["sh", "-c", script], cwd=repo, env=env, check=True)
    subprocess.run(["chown", "-R", f"{sandbox.uid}:{sandbox.uid}", str(repo)], check=True)


def run_cli(cli: str, fake: fs.FakeStreamingServer, sandbox_root: Path, slot: int) -> Ran:
    """Provisions a shell-only sandbox with the toolchain and egress, runs ``cli`` in the
    repository as the arena would (stdin closed), and looks around afterwards."""
    refusals: list[tuple] = []
    names: list[str] = []
    served = SimulatedHost(HOST, ipaddress.ip_address("127.0.0.1"), fake.port)
    proxy = EgressProxy(
        resolver=lambda host, port: names.append(host) or [],  # no DNS from tests
        simulated=simulated_hosts(served),
        on_refusal=lambda *refusal: refusals.append(refusal),
    ).run_in_thread()
    spec = SandboxSpec(
        run_id=1800 + slot,
        desktop=False,
        toolchain=True,
        egress=True,
        shell_timeout_s=RUN_TIMEOUT_S,
        output_max_bytes=1024 * 1024,
    )
    backend = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base, egress=proxy)
    sandbox = backend.provision(spec, slot=slot)
    try:
        seed_repo(sandbox)
        argv, env = cli_command(
            cli, instruction="Fix add() in calc.py so that the tests pass.", model=fake.model,
            gateway_url=GATEWAY, time_limit_s=120, prices=(3.0, 15.0),
        )  # fmt: skip
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        command = f"cd {REPO} && env {assignments} {shlex.join(argv)} < /dev/null"
        result = sandbox.shell(command, timeout_s=RUN_TIMEOUT_S)
        calc = (sandbox.work_dir / "repo" / "calc.py").read_text()
        history = (
            sandbox.shell(f"cat {AIDER_LLM_HISTORY}", timeout_s=30).stdout if cli == AIDER else ""
        )
        # The provider key is nowhere: not in the environment, not in any file the
        # CLI or anything else could write (work dir, /tmp, home), not in /opt.
        probe = sandbox.shell(
            f"env | grep -F -- {PROVIDER_KEY[:24]}; "
            f"grep -rlsF -- {PROVIDER_KEY[:24]} /work /tmp /home /opt/arena/toolchain/bin",
            timeout_s=60,
        )
    finally:
        sandbox.destroy()
        proxy.close()
    return Ran(result, calc, probe.stdout + probe.stderr, refusals, names, history)


def save_sample(name: str, text: str) -> None:
    if os.environ.get("ARENA_SAVE_CLI_SAMPLES") != "1":
        return
    SAMPLES.mkdir(exist_ok=True)
    (SAMPLES / f"{name}.txt").write_text(bounded_sample(text))


def bounded_sample(text: str) -> str:
    """The output, with over-long events (Claude Code's init event lists every tool and
    skill) cut to their short fields: still one JSON object a line. The final result
    event, which the usage parsers read, stays as the CLI printed it."""
    lines = []
    for line in text.splitlines():
        if len(line) > 1500 and line.startswith("{") and '"type":"result"' not in line:
            event = json.loads(line)
            kept = {k: v for k, v in event.items() if len(json.dumps(v)) < 600}
            line = json.dumps({**kept, "_sample_cut": sorted(set(event) - set(kept))})
        lines.append(line)
    sample = "\n".join(lines) + "\n"
    assert len(sample.encode()) <= SAMPLE_MAX_BYTES, len(sample.encode())
    return sample


def assert_clean(ran: Ran, fake: fs.FakeStreamingServer) -> None:
    assert ran.result.exit_code == 0, (ran.result.stdout[-3000:], ran.result.stderr[-3000:])
    assert not ran.result.timed_out
    assert ran.calc == FIXED
    # Nothing but the model's API left the sandbox: no refusal, no name looked up.
    assert ran.refusals == [] and ran.names == []
    # Every call reached the fake with the placeholder key, none with a provider key.
    assert fake.leaks == [] and fake.requests
    assert {r.answered for r in fake.requests} <= {"stream", "json"}
    assert ran.leaks == ""


def json_lines(text: str) -> Iterator[dict]:
    for line in text.splitlines():
        if line.startswith("{"):
            yield json.loads(line)


# -- Claude Code -----------------------------------------------------------------------


def claude_results(request: dict) -> list[dict]:
    return [
        block
        for message in request["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def claude_policy(request: dict) -> list[fs.Block]:
    """Read, Edit, run the tests with Bash, then the final answer."""
    if not request.get("tools"):
        return [fs.Text("ok")]  # a call of its own without tools (none seen in 2.1)
    done = len(claude_results(request))
    if done == 0:
        return [fs.Text("Let me look."), fs.ToolUse("Read", {"file_path": f"{REPO}/calc.py"})]
    if done == 1:
        edit = {"file_path": f"{REPO}/calc.py", "old_string": "a - b", "new_string": "a + b"}
        return [fs.ToolUse("Edit", edit)]
    if done == 2:
        return [fs.ToolUse("Bash", {"command": "python3 -m pytest -q", "description": "tests"})]
    assert "1 passed" in str(claude_results(request)[-1]["content"])
    return [fs.Text("Fixed: add() now adds.")]


def test_claude_code_fixes_the_bug_in_a_sandbox(sandbox_root):
    with fs.FakeAnthropicStream(
        claude_policy, usage=USAGE, api_key=GATEWAY_KEY, secret_keys=(PROVIDER_KEY,),
        model="claude-sonnet-4-5",
    ) as fake:  # fmt: skip
        ran = run_cli(CLAUDE_CODE, fake, sandbox_root, slot=20)

    assert_clean(ran, fake)
    calls = fake.calls("/v1/messages")
    assert len(calls) == 4 and all(c.json["stream"] is True for c in calls)
    assert {c.json["model"] for c in calls} == {"claude-sonnet-4-5"}
    assert all(c.headers["x-api-key"] == GATEWAY_KEY for c in calls)
    events = list(json_lines(ran.result.stdout))
    tools = [
        block["name"]
        for event in events
        if event["type"] == "assistant"
        for block in event["message"]["content"]
        if block["type"] == "tool_use"
    ]
    assert tools == ["Read", "Edit", "Bash"]
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success"
    assert result["result"] == "Fixed: add() now adds."
    # Claude Code's own report: the four calls' usage summed, cache tokens included, and
    # a cost from its own price table for the model.
    assert result["usage"]["input_tokens"] == 4 * USAGE.input_tokens
    assert result["usage"]["output_tokens"] == 4 * USAGE.output_tokens
    assert result["usage"]["cache_read_input_tokens"] == 4 * USAGE.cache_read_tokens
    assert result["usage"]["cache_creation_input_tokens"] == 4 * USAGE.cache_creation_tokens
    assert result["total_cost_usd"] > 0
    # What the arena reads of it: neutral steps, and the agent's last words.
    output = ran.result.stdout + ran.result.stderr
    assert transcript_steps(CLAUDE_CODE, output, repo_dir=REPO) == [
        CliStep("read file", path="calc.py", cli_tool="Read"),
        CliStep("edit file", path="calc.py", cli_tool="Edit"),
        CliStep("run command", command="python3 -m pytest -q", cli_tool="Bash"),
    ]
    assert final_message(CLAUDE_CODE, output) == "Fixed: add() now adds."
    save_sample(CLAUDE_CODE, ran.result.stdout)


# -- Codex -----------------------------------------------------------------------------


def codex_outputs(request: dict) -> list[dict]:
    return [i for i in request["input"] if i.get("type", "").endswith("call_output")]


def codex_policy(request: dict) -> list[fs.Block]:
    """cat, apply_patch through the shell tool (Codex applies it itself), pytest, done."""
    tools = {t.get("name") for t in request["tools"]}
    assert "exec_command" in tools, tools
    done = len(codex_outputs(request))
    if done == 0:
        return [fs.ToolUse("exec_command", {"cmd": "cat calc.py"})]
    if done == 1:
        return [fs.ToolUse("exec_command", {"cmd": f"apply_patch <<'EOF'\n{PATCH}EOF\n"})]
    if done == 2:
        return [fs.ToolUse("exec_command", {"cmd": "python3 -m pytest -q"})]
    assert "1 passed" in str(codex_outputs(request)[-1]["output"])
    return [fs.Text("Fixed: add() now adds.")]


def test_codex_fixes_the_bug_in_a_sandbox(sandbox_root):
    with fs.FakeResponses(
        codex_policy, usage=USAGE, api_key=GATEWAY_KEY, secret_keys=(PROVIDER_KEY,),
        model="gpt-5-codex",
    ) as fake:  # fmt: skip
        ran = run_cli(CODEX, fake, sandbox_root, slot=21)

    assert_clean(ran, fake)
    calls = fake.calls("/v1/responses")
    assert len(calls) == 4 and all(c.json["stream"] is True for c in calls)
    assert {c.json["model"] for c in calls} == {"gpt-5-codex"}
    assert all(c.headers["authorization"] == f"Bearer {GATEWAY_KEY}" for c in calls)
    events = list(json_lines(ran.result.stdout))
    kinds = [e["item"]["type"] for e in events if e["type"] == "item.completed"]
    assert [k for k in kinds if k != "error"] == [
        "command_execution", "file_change", "command_execution", "agent_message",
    ]  # fmt: skip
    # Codex's own report of the turn: the calls' usage summed (cached input included).
    (turn,) = [e for e in events if e["type"] == "turn.completed"]
    assert turn["usage"]["input_tokens"] == 4 * USAGE.input_tokens
    assert turn["usage"]["cached_input_tokens"] == 4 * USAGE.cache_read_tokens
    assert turn["usage"]["output_tokens"] == 4 * USAGE.output_tokens
    # What the arena reads of it: the commands without Codex's shell wrapper, the patch as
    # an edit of the file, and its last agent message (not its stderr's last line).
    output = ran.result.stdout + ran.result.stderr
    assert transcript_steps(CODEX, output, repo_dir=REPO) == [
        CliStep("run command", command="cat calc.py", cli_tool="shell"),
        CliStep("edit file", path="calc.py", cli_tool="apply_patch"),
        CliStep("run command", command="python3 -m pytest -q", cli_tool="shell"),
    ]
    assert final_message(CODEX, output) == "Fixed: add() now adds."
    save_sample(CODEX, ran.result.stdout + ran.result.stderr)


# -- Aider -----------------------------------------------------------------------------


def aider_policy(request: dict) -> list[fs.Block]:
    """Aider edits from the reply's text: one SEARCH/REPLACE block, then nothing more."""
    assert any("calc.py" in str(m.get("content")) for m in request["messages"])
    block = "calc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n"
    return [fs.Text(f"The sign is wrong.\n\n{block}>>>>>>> REPLACE\n```\n")]


def test_aider_fixes_the_bug_in_a_sandbox(sandbox_root):
    with fs.FakeChatCompletions(
        aider_policy, usage=USAGE, api_key=GATEWAY_KEY, secret_keys=(PROVIDER_KEY,),
        model="arena-coder",
    ) as fake:  # fmt: skip
        ran = run_cli(AIDER, fake, sandbox_root, slot=22)

    assert_clean(ran, fake)
    calls = fake.calls("/v1/chat/completions")
    assert len(calls) == 1 and not calls[0].json.get("stream")
    assert calls[0].json["model"] == "arena-coder"
    assert calls[0].headers["authorization"] == f"Bearer {GATEWAY_KEY}"
    output = ran.result.stdout
    assert "Applied edit to calc.py" in output
    # Aider's own report: the tokens of the call as the fake reported them, and a cost
    # from the prices the arena gave it ($3 / $15 per million).
    tokens = re.search(r"^Tokens: (\S+) sent, (\S+) received\. Cost: \$(\S+) message", output, re.M)
    assert tokens is not None, output
    assert tokens.groups()[:2] == ("1.5k", "60")
    assert tokens.group(3) == "0.0054"  # 1500 × $3e-6 + 60 × $15e-6
    # What the arena reads of it: the applied edit as a step, and the reply's prose from
    # its LLM history, without the edit block, the banner ("Aider v0.86.2", the model)
    # or the usage line that Aider printed around it.
    assert "Aider v0.86.2" in output and "Model: openai/arena-coder" in output
    assert transcript_steps(AIDER, output + ran.result.stderr) == [
        CliStep("edit file", path="calc.py", cli_tool="edit")
    ]
    assert "LLM RESPONSE" in ran.history and "TO LLM" in ran.history
    assert final_message(AIDER, output, llm_history=ran.history) == "The sign is wrong."
    save_sample(AIDER, output + ran.result.stderr)
    save_sample("aider.llm-history", ran.history)


# -- reading the output out -----------------------------------------------------------


def test_only_a_regular_file_is_read_out_of_the_sandbox(sandbox_root):
    """The agent's commands run as the same uid as its CLI: it may put a link to another
    file, or a pipe nobody writes to, where the lane reads the CLI's output. The lane
    reads nothing of either, and does not wait on the pipe."""
    from battles.services.cli_lane import _read_out
    from coding.scripts import OUT_DIR

    Path(settings.PRIVATE_MEDIA_ROOT).mkdir(parents=True, exist_ok=True)
    backend = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base)
    sandbox = backend.provision(SandboxSpec(run_id=1834, desktop=False), slot=24)
    try:
        sandbox.shell(
            f"mkdir -p {OUT_DIR} && echo said > {OUT_DIR}/cli.out && mkfifo {OUT_DIR}/cli.err"
            f" && ln -s /etc/passwd {AIDER_LLM_HISTORY}",
            timeout_s=30,
        )
        started = time.monotonic()
        read = [
            _read_out(sandbox, "cli.out"),
            _read_out(sandbox, "cli.err"),
            _read_out(sandbox, "llm.history", AIDER_LLM_HISTORY),
        ]
        took = time.monotonic() - started
    finally:
        sandbox.destroy()

    assert read == ["said\n", "", ""]
    assert took < 30  # a read of the pipe would have waited for its 60 s bound


# -- the toolchain's binding -----------------------------------------------------------


def test_the_toolchain_is_bound_read_only_and_only_when_asked(sandbox_root):
    backend = LocalBackend(sandbox_root, uid_base=settings.ARENA.sandbox_uid_base)
    probe = (
        'echo "$PATH"; for tool in claude codex aider ruff lizard; do command -v $tool; done; '
        "touch /opt/arena/toolchain/bin/x 2>&1 | grep -c 'Read-only'; "
        "lizard --version; ruff --version; aider --version 2>&1 | tail -1"
    )
    with_it = backend.provision(SandboxSpec(run_id=1830, desktop=False, toolchain=True), slot=23)
    try:
        inside = with_it.shell(probe, timeout_s=60)
    finally:
        with_it.destroy()
    without = backend.provision(SandboxSpec(run_id=1831, desktop=False), slot=23)
    try:
        plain = without.shell("echo $PATH; ls /opt/arena; command -v claude || echo none")
    finally:
        without.destroy()

    lines = inside.stdout.splitlines()
    assert lines[0] == "/opt/arena/toolchain/bin:/usr/bin:/bin"
    assert lines[1:6] == [f"/opt/arena/toolchain/bin/{name}" for name in TOOLS]
    assert lines[6] == "1"  # the bind is read-only for the sandbox's uid
    assert lines[7].startswith("1.24") and lines[8].startswith("ruff ")
    assert lines[9] == "aider 0.86.2"
    assert plain.stdout.split() == ["/usr/bin:/bin", "inside", "none"]


def test_the_docker_backend_asks_for_the_toolchain_it_does_not_have(sandbox_root):
    """An engine without the coding image: the toolchain would be bound from the
    worker, which has none; refused before any container."""
    from sandboxes.docker_backend import DockerBackend
    from tests.sandboxes.fake_engine import FakeEngine

    with FakeEngine(sandbox_root / "engine.sock", images={"img"}) as engine:
        backend = DockerBackend(
            "img", sandbox_root, 64000, client_factory=engine.client,
            toolchain=sandbox_root / "none", coding_image="no-coding-image",
        )  # fmt: skip
        spec = SandboxSpec(run_id=1832, desktop=False, toolchain=True)
        with pytest.raises(RuntimeError, match=r"not installed at .*run scripts/toolchain"):
            backend.provision(spec)
        backend.close()
        assert not [call for call in engine.calls if call.path == "/containers/create"]

"""A CLI coding agent's lane (Claude Code, Codex CLI, Aider; docs/coding.md): one bounded
command inside the run's sandbox, its model reached only through this worker's model
gateway (``agents.gateway``), which holds the key, pins the model, keeps the budget
and records every call as a span. The CLI's own transcript becomes the run's steps, in
the neutral shape judges read (``agents.cli.transcripts``), and its own usage report
the run's tokens and cost. What the CLI printed is never a judge's to read: the final
message is the agent's own last words, and the run's error names only the exit status
and the gateway's refusals; the output's end is kept on the run's CLI span, which only
those who may see the agent's name see (its run page)."""

import logging
import shlex
import tempfile
from dataclasses import asdict, dataclass, replace
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.cli.commands import AIDER, AIDER_LLM_HISTORY, CLI_PROVIDERS, CLIS, cli_command
from agents.cli.transcripts import final_message, transcript_steps
from agents.gateway import HOST, ModelGateway, grant_for
from agents.gateway_usage import GatewayCall
from agents.providers.base import ProviderError
from agents.services import outbound_policy
from arena_site.perprocess import PerProcess
from battles.coding_models import CodingOutcome
from battles.models import Run, Span, Step
from battles.parity import LaneInputs
from battles.services.coding_sandbox import sandbox_quiesce, sh
from battles.services.lane_fence import fenced
from coding import metrics, scripts
from sandboxes.base import Sandbox, ToolError, ToolResult
from sandboxes.services import egress_proxy, simulated_host_add
from sandboxes.untrusted import storable, storable_text

logger = logging.getLogger(__name__)

# What one CLI run may spend through the gateway (a run's own budget, not the arena's).
MAX_TOKENS = 4_000_000
MAX_COST_USD = 5.0
TRANSCRIPT_MAX_BYTES = 2 * 1024**2
STEPS_MAX = 500
OUTPUT_TAIL_CHARS = 1500
USAGE_OF = {
    "claude-code": metrics.usage_from_claude_json,
    "codex": metrics.usage_from_codex_jsonl,
    "aider": metrics.usage_from_aider,
}


def _store_span(run_id: int, call: GatewayCall) -> None:
    """The gateway's record of one call as the run's model span (on the gateway's
    request thread, which then gives its connection back)."""
    try:
        _span_create(run_id, call)
    finally:
        connection.close()


def _span_create(run_id: int, call: GatewayCall) -> None:
    Span.objects.create(
        run_id=run_id,
        kind=Span.Kind.MODEL,
        name=call.name[:200],
        input={"api": call.api, "model": call.model, "stream": call.stream},
        output={
            "status": call.status,
            "cache_read_tokens": call.cache_read_tokens,
            "cache_write_tokens": call.cache_write_tokens,
        },
        error=storable_text(call.error[:2000])[0],
        started_at=call.started_at,
        latency_ms=call.latency_ms,
        input_tokens=call.input_tokens,
        output_tokens=call.output_tokens,
        cost_usd=Decimal(str(round(call.cost_usd or 0.0, 6))),
    )


def _gateway_start() -> ModelGateway:
    proxy = egress_proxy()
    gateway = ModelGateway(on_span=_store_span, stamp_key=proxy.proxy.stamp_key).start()
    simulated_host_add(gateway.simulated_host())
    return gateway


# This process's (a forked child's own: the parent's serves on the parent's threads)
_gateway: PerProcess[ModelGateway] = PerProcess(_gateway_start)


def worker_gateway() -> ModelGateway:
    """This worker process's gateway (started on first use), served to its sandboxes as
    ``models.arena.internal`` by its egress proxy, whose stamp it verifies."""
    return _gateway.get()


@dataclass(frozen=True)
class CliEnd:
    reason: str
    final_message: str = ""
    error: str = ""
    agent_fault: bool = False


def _read_out(sandbox: Sandbox, name: str, source: str = "") -> str:
    """The tail of one of the CLI's output files (bounded, never through a link):
    ``name`` in the output directory, or ``source`` (a shell word) copied there as
    ``name``. "" when there is none, or when it is not a regular file (a link, a pipe
    or a device the agent put in its place)."""
    source = source or f"{scripts.OUT_DIR}/{name}"
    capped = f"{scripts.OUT_DIR}/{name}.tail"
    sh(
        sandbox,
        f'if [ -f "{source}" ] && [ ! -L "{source}" ]; then '
        f'tail -c {TRANSCRIPT_MAX_BYTES} "{source}" > {capped}; else : > {capped}; fi',
        60,
    )
    with tempfile.TemporaryDirectory(dir=settings.PRIVATE_MEDIA_ROOT) as tmp:
        try:
            files = sandbox.collect_files([capped], Path(tmp) / "out")
        except ToolError:
            return ""
        return files[0].path.read_bytes().decode("utf-8", "replace")


def cli_drive(run: Run, inputs: LaneInputs, sandbox: Sandbox) -> CliEnd:
    agent = run.agent
    cli = str((agent.params or {}).get("cli", ""))
    if cli not in CLIS:
        return CliEnd(Run.EndReason.ERROR, error=f"unknown CLI {cli!r}; one of {', '.join(CLIS)}")
    outbound = outbound_policy()
    try:
        grant = grant_for(
            CLI_PROVIDERS[cli],
            agent.model_id,
            max_calls=run.step_budget,
            max_tokens=MAX_TOKENS,
            max_cost_usd=MAX_COST_USD,
            prices=settings.ARENA.model_prices,
            outbound=outbound,
        )
    except ProviderError as exc:  # the arena's configuration, not the entrant's fault
        return CliEnd(Run.EndReason.ERROR, error=f"the model gateway has no access: {exc}")
    gateway = worker_gateway()
    gateway.grant(run.pk, grant, outbound=outbound)
    try:
        argv, env = cli_command(
            cli,
            instruction=inputs.instruction,
            model=agent.model_id,
            gateway_url=f"http://{HOST}",
            time_limit_s=inputs.repo.time_limit_s,
        )
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        command = (
            f"cd {scripts.REPO_DIR} && env {assignments} {shlex.join(argv)} "
            f"> {scripts.OUT_DIR}/cli.out 2> {scripts.OUT_DIR}/cli.err < /dev/null"
        )
        started = timezone.now()
        result = sandbox.shell(command, timeout_s=inputs.repo.time_limit_s)
        sandbox_quiesce(sandbox)  # nothing the CLI left running changes what is read next
        output, errors = _read_out(sandbox, "cli.out"), _read_out(sandbox, "cli.err")
        history = _read_out(sandbox, "llm.history", AIDER_LLM_HISTORY) if cli == AIDER else ""
    finally:
        spent = gateway.revoke(run.pk)
    with fenced(run):  # (nothing of a lane that lost its run to a re-queue is kept)
        _store_cli_span(
            run, cli, result, started, errors[-OUTPUT_TAIL_CHARS:] or output[-OUTPUT_TAIL_CHARS:]
        )
        _store_steps(run, cli, output + "\n" + errors, started)
    usage = USAGE_OF[cli](output + "\n" + errors)
    if usage is not None:
        if usage.cost_usd is None and spent is not None and grant.price is not None:
            # The CLI counted tokens but no cost: what the gateway charged at the
            # arena's price for the model (every call passed through it).
            usage = replace(
                usage, cost_usd=round(spent.cost_usd, 6), source=f"{usage.source}+gateway"
            )
        else:  # its own cost, else the dated price table
            usage = metrics.usage_resolved(usage, agent.model_id)
        reported = asdict(usage)
        cost = scored_cost(usage.cost_usd, gateway_cost(spent, grant, agent.model_id))
        reported.update(cost_usd=cost, reported_cost_usd=usage.cost_usd)
        CodingOutcome.objects.update_or_create(run=run, defaults={"usage": reported})
    refused = dict(spent.refused) if spent is not None else {}
    return cli_end(cli, result, output, history, refused)


def cli_end(cli: str, result: ToolResult, output: str, history: str, refused: dict) -> CliEnd:
    """How the run ended, from the CLI's exit: its final message is the agent's own last
    words (``agents.cli.transcripts.final_message``), and its error names only the exit
    status and the gateway's refusals, never what the CLI printed (its end is on the CLI
    span, shown only with the agent's name)."""
    said = final_message(cli, output, llm_history=history)
    if result.timed_out:
        return CliEnd(Run.EndReason.TIME_BUDGET, final_message=said)
    if result.exit_code == 0:
        return CliEnd(Run.EndReason.DELIVERED, final_message=said)
    return CliEnd(
        Run.EndReason.GAVE_UP,
        final_message=said,
        error=f"the CLI exited with status {result.exit_code}"
        + (f" (gateway refusals: {refused})" if refused else ""),
    )


def gateway_cost(spent, grant, model: str) -> float | None:
    """What the run's calls cost by the arena's own count: the gateway's charge at the
    arena's price for the model, else its token counts at the dated price table; None
    when neither prices the model."""
    if spent is None:
        return None
    if grant.price is not None:
        return round(spent.cost_usd, 6)
    uncached = max(0, spent.input_tokens - spent.cache_read_tokens - spent.cache_write_tokens)
    cost, known = metrics.cost_from_tokens(
        model, uncached, spent.output_tokens, spent.cache_write_tokens, spent.cache_read_tokens
    )
    return round(cost, 6) if known else None


def scored_cost(reported: float | None, arena: float | None) -> float | None:
    """The cost the scores use. A CLI's own report is text the sandbox wrote, and the
    agent's commands can append to it, so it may raise the arena's count, never lower
    it: the larger of the two known figures."""
    known = [c for c in (reported, arena) if c is not None]
    return max(known) if known else None


def _store_cli_span(run: Run, cli: str, result: ToolResult, started, tail: str) -> None:
    """The CLI's command as one tool span of the run: how long it ran (until its output
    was read), how it ended and, when it failed, the end of what it printed (for the
    agent's team and the arena's operators: spans are shown only to those who may see
    the agent's name)."""
    failed = result.timed_out or result.exit_code != 0
    Span.objects.create(
        run=run,
        kind=Span.Kind.TOOL,
        name=f"cli {cli}",
        input={"cli": cli},
        output={"exit_code": result.exit_code, "timed_out": bool(result.timed_out)},
        error=storable_text(tail)[0] if failed else "",
        started_at=started,
        latency_ms=max(0, int((timezone.now() - started).total_seconds() * 1000)),
    )


def _store_steps(run: Run, cli: str, transcript: str, started) -> None:
    """The CLI's own steps (its tool uses, in order) as the run's steps in the neutral
    shape: judges read them, and directness is measured from them. The CLI's own name
    for each is kept in the result, which no blind payload carries."""
    rows = []
    for index, step in enumerate(transcript_steps(cli, transcript, repo_dir=scripts.REPO_DIR)):
        if index >= STEPS_MAX:
            break
        # NUL or bytes that are not UTF-8 are stored escaped, and the step says so (the
        # leak scan then reads it with the escapes skipped too)
        args, escaped = storable(step.args())
        result = {"ok": True, "cli_tool": storable_text(step.cli_tool)[0]}
        rows.append(
            Step(
                run=run,
                index=index,
                tool=step.action,
                args=args,
                result={**result, "escaped": True} if escaped else result,
                started_at=started,
                duration_ms=0,
            )
        )
    Step.objects.bulk_create(rows)

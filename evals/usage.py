"""What a run of an evaluation used, in one shape whatever its kind (``EvalRun.usage``,
and each result's ``usage`` in the records): tokens in, out, read from and written to
the provider's prompt cache, the cost, and the run's directness. Pure: no Django; the
callers hand over what they stored (docs/evaluations.md, "What a record holds about
cost").

- ``input_tokens`` counts every prompt token, cached or not (the providers' and the
  gateway's meaning, ``agents.gateway_usage``); ``cache_read_tokens`` and
  ``cache_write_tokens`` are the part of them read from or written to the cache. A CLI's
  own report counts its input uncached (``coding.metrics``): its cache figures are added
  back, so every run's ``input_tokens`` means the same.
- A figure is ``None`` when what was stored does not tell it: cache tokens of calls
  whose records never carried them, the cost of a model without a price.
- ``directness`` (seed 002's, ``coding.metrics``) is measured over a coding run's reads
  and edits; a chat run has no steps and a desktop lane's steps are screen actions,
  which it does not define: there it is ``None`` and ``directness_reason`` says why.
"""

from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
FIGURES = (*TOKENS, "cost_usd")
DIRECTNESS = (
    "score",
    "trajectory_efficiency",
    "early_edit",
    "repeat_penalty",
    "loop_penalty",
    "stall_rate",
)
# Where a run's figures come from.
CALLS = "calls"  # a chat run's model calls, as the provider reported them
LANE_SPANS = "lane_spans"  # a lane's model spans (the scaffold's calls or the gateway's)
CLI_REPORT = "cli_report"  # a coding CLI's own report, priced by the arena
NONE = "none"  # nothing stored tells them: every figure None

CHAT_NO_DIRECTNESS = (
    "a chat run is one reply to one prompt: it has no steps whose order directness measures"
)
DESKTOP_NO_DIRECTNESS = (
    "directness is measured over a coding run's reads and edits; a desktop lane's steps "
    "are screen actions, which it does not define"
)
NOT_MEASURED = "not measured: the coding lane ended before its steps were read"
NO_LANE = "no lane was stored for this run"


def _cost(value: Any) -> float | None:
    if value is None:
        return None
    return round(float(Decimal(str(value))), 6)


def _cache(calls: Sequence[Any], key: str) -> int | None:
    """The calls' ``key`` cache tokens: an attribute of the call, else its output's
    entry; a failed call used none. None when an answered call does not carry it."""
    total = 0
    for call in calls:
        value = getattr(call, key, None)
        if value is None:
            value = (call.output or {}).get(key) if isinstance(call.output, dict) else None
        if value is None:
            if call.error:
                continue
            return None
        total += int(value)
    return total


def usage(
    *,
    source: str,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
    cost_usd: float | None = None,
    directness: dict[str, Any] | None = None,
    directness_reason: str = "",
) -> dict[str, Any]:
    """One run's usage; ``directness_reason`` is required when ``directness`` is None."""
    if directness is None and not directness_reason:
        raise ValueError("a run without directness needs the reason")
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read_tokens,
        "cache_write_tokens": cache_write_tokens,
        "cost_usd": _cost(cost_usd),
        "directness": (
            {k: float(directness[k]) for k in DIRECTNESS} if directness is not None else None
        ),
        "directness_reason": "" if directness is not None else directness_reason,
        "source": source,
    }


def of_calls(calls: Iterable[Any], *, source: str, **directness: Any) -> dict[str, Any]:
    """The usage of model calls (``agents.scaffold.SpanRecord``, ``battles.Span`` or
    ``evals.EvalSpan``: ``input_tokens``, ``output_tokens``, ``cost_usd``, ``output``,
    ``error``), summed; no call at all used nothing."""
    calls = list(calls)
    return usage(
        source=source,
        input_tokens=sum(c.input_tokens for c in calls),
        output_tokens=sum(c.output_tokens for c in calls),
        cache_read_tokens=_cache(calls, "cache_read_tokens"),
        cache_write_tokens=_cache(calls, "cache_write_tokens"),
        cost_usd=sum((Decimal(str(c.cost_usd or 0)) for c in calls), Decimal(0)),
        **directness,
    )


def chat_usage(calls: Iterable[Any]) -> dict[str, Any]:
    """A chat run's usage from its calls (every attempt: a retried call was paid too)."""
    return of_calls(calls, source=CALLS, directness_reason=CHAT_NO_DIRECTNESS)


def cli_usage(reported: dict[str, Any], directness: dict[str, Any] | None) -> dict[str, Any]:
    """A coding run's usage from its CLI's own report (``CodingOutcome.usage``: uncached
    input, cache writes as ``cache_creation_tokens``) and its measured directness."""
    read = int(reported.get("cache_read_tokens") or 0)
    written = int(reported.get("cache_creation_tokens") or 0)
    return usage(
        source=CLI_REPORT,
        input_tokens=int(reported.get("input_tokens") or 0) + read + written,
        output_tokens=int(reported.get("output_tokens") or 0),
        cache_read_tokens=read,
        cache_write_tokens=written,
        cost_usd=reported.get("cost_usd"),
        directness=directness or None,
        directness_reason="" if directness else NOT_MEASURED,
    )


def unknown(reason: str) -> dict[str, Any]:
    """A run whose stored rows tell nothing of what it used."""
    return usage(source=NONE, directness_reason=reason)


def totals(usages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Runs' usages added up: each figure over the runs that know it (None when none
    does); ``unknown_runs`` counts the runs missing a figure (the sums leave them out,
    so they are lower bounds then); the mean directness over the runs that have one."""
    out: dict[str, Any] = {"runs": len(usages)}
    for figure in FIGURES:
        known = [u[figure] for u in usages if u.get(figure) is not None]
        out[figure] = (
            (_cost(sum(Decimal(str(v)) for v in known)) if figure == "cost_usd" else sum(known))
            if known
            else None
        )
    out["unknown_runs"] = sum(1 for u in usages if any(u.get(f) is None for f in FIGURES))
    scores = [u["directness"]["score"] for u in usages if u.get("directness")]
    out["directness_runs"] = len(scores)
    out["directness_mean"] = round(sum(scores) / len(scores), 4) if scores else None
    return out


def copied(row: dict[str, Any]) -> dict[str, Any]:
    """A usage as a record carries it: its fields by name, nothing else."""
    directness = row.get("directness")
    return {
        **{f: row.get(f) for f in FIGURES},
        "directness": {k: directness[k] for k in DIRECTNESS} if directness else None,
        "directness_reason": row.get("directness_reason", ""),
        "source": row.get("source", NONE),
        "derived": bool(row.get("derived")),
    }


def calls_totals(calls: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """The judge's calls (``(role, call)`` pairs) added up, and by role: how many calls,
    the tokens and the cost (no directness: a judge's call has no steps)."""
    by_role: dict[str, list[Any]] = {}
    for role, call in calls:
        by_role.setdefault(role, []).append(call)

    def added(group: list[Any]) -> dict[str, Any]:
        measured = of_calls(group, source=CALLS, directness_reason="a model call")
        return {"calls": len(group), **{f: measured[f] for f in FIGURES}}

    every = [call for group in by_role.values() for call in group]
    return {**added(every), "by_role": {r: added(by_role[r]) for r in sorted(by_role)}}

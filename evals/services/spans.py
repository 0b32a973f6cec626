"""An evaluation's model calls stored as spans (``EvalSpan``), for the waterfall."""

from datetime import UTC, datetime

from evals.models import EvalSpan


def spans_store(records, *, evaluation_id: int, role: str, run=None, pair=None) -> None:
    """One span per call record (``agents.scaffold.SpanRecord``) of a run's, a pair
    game's or a scorer's calls, with the role that made them."""
    EvalSpan.objects.bulk_create(
        EvalSpan(
            evaluation_id=evaluation_id,
            run=run,
            pair=pair,
            role=role,
            name=r.name[:200],
            input=r.input,
            output=r.output,
            error=r.error,
            started_at=datetime.fromtimestamp(r.started, UTC),
            latency_ms=r.latency_ms,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            cost_usd=r.cost_usd,
        )
        for r in records
    )

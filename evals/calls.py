"""Model calls of an evaluation: a candidate's answer to a chat task, and the two judges
(rubric, pairwise), each call a span for the run's waterfall.

One retry policy for all of them (the references' "up to three attempts, 1 s then 2 s"):
``ATTEMPTS`` tries, waits of ``BACKOFF`` in between. The clients are built with
no retries of their own (``agents.services.model_client_for(agent, retries=0)``) so
that this is the only retry layer: a provider
error that may pass (429, 5xx, a connection failure, a malformed body) and a judge
reply that does not parse share one budget. A 4xx other than 429 is final at once —
a bad request or key does not get better by asking again.

The rubric judge is the one exception to "a bad reply is retried as it was asked": it
gets one *correction* call that quotes the bad reply (000 §3), and a second bad reply
marks that criterion's judgement ``error``. The pairwise judge repeats the same request
(003: "a retry repeats the same judge request rather than repairing invalid output").
"""

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.providers.base import ModelClient, ModelReply, ProviderError, Text, Turn
from agents.providers.retry import Backoff, RetryableFailure, call_with_retries, is_retryable_status
from agents.scaffold import SpanRecord
from evals import scorers, scoring

ATTEMPTS = 3
BACKOFF = Backoff(base_s=1.0, factor=2.0, jitter=0.0)  # 1 s, then 2 s
MAX_TOKENS = 4096
JUDGE_DECODING = {"temperature": 0}
_sleep = time.sleep
# The client was built with no retries of its own: its "gave up after 1 attempts" is not
# the final word, ours is.
_CLIENT_GAVE_UP = re.compile(r" \(gave up after \d+ attempts?\)$")


@dataclass
class Outcome:
    """What a call sequence produced: its text (None when it failed for good), the
    error that ended it, every attempt as a span, and the raw replies in order."""

    text: str | None = None
    error: str = ""
    spans: list[SpanRecord] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        return len(self.spans)


def _one_call(
    client: ModelClient,
    *,
    turns: list[Turn],
    system: str,
    max_tokens: int,
    params: dict[str, Any],
    span_name: str,
    outcome: Outcome,
) -> ModelReply:
    """One request, recorded as a span whether it succeeds or fails (the span keeps
    the first 2,000 characters of the last user message)."""
    started, t0 = time.time(), time.monotonic()
    last = turns[-1].blocks[0]
    prompt = last.text if isinstance(last, Text) else ""
    try:
        reply = client.complete(
            system=system, turns=turns, tools=[], max_tokens=max_tokens, params=params
        )
    except ProviderError as error:
        outcome.spans.append(
            SpanRecord(
                kind="model",
                name=span_name,
                input={"prompt": prompt[:2000], "turns": len(turns)},
                output={},
                started=started,
                latency_ms=int((time.monotonic() - t0) * 1000),
                error=str(error),
            )
        )
        if error.status is None or is_retryable_status(error.status):
            message = _CLIENT_GAVE_UP.sub("", str(error))
            raise RetryableFailure(message, status=error.status) from None
        raise
    outcome.raw.append(reply.text)
    outcome.spans.append(
        SpanRecord(
            kind="model",
            name=span_name,
            input={"prompt": prompt[:2000], "turns": len(turns)},
            output={
                "text": reply.text[:2000],
                "stop_reason": reply.stop_reason,
                "cache_read_tokens": reply.cache_read_tokens,
                "cache_write_tokens": reply.cache_write_tokens,
            },
            started=started,
            latency_ms=int((time.monotonic() - t0) * 1000),
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            cost_usd=reply.cost_usd,
        )
    )
    return reply


def _with_retries[T](
    attempt: Callable[[], T], *, what: str, sleep: Callable[[float], None] | None
) -> tuple[T | None, str]:
    """(value, "") or (None, the final error) after at most ``ATTEMPTS`` tries; the
    waits go to ``sleep`` (default ``_sleep``: ``time.sleep``, which tests replace)."""
    try:
        value, _ = call_with_retries(
            attempt, what=what, max_retries=ATTEMPTS - 1, backoff=BACKOFF, sleep=sleep or _sleep
        )
    except ProviderError as error:
        return None, str(error)
    return value, ""


def candidate_answer(
    client: ModelClient,
    *,
    prompt: str,
    system: str = "",
    params: dict[str, Any] | None = None,
    max_tokens: int = MAX_TOKENS,
    sleep: Callable[[float], None] | None = None,
) -> Outcome:
    """A candidate's answer to a chat task: its reply's text, as it is. No temperature
    is forced: the agent's own sampling params (if any) apply."""
    outcome = Outcome()
    turns = [Turn("user", [Text(prompt)])]

    def attempt() -> str:
        reply = _one_call(
            client,
            turns=turns,
            system=system,
            max_tokens=max_tokens,
            params=params or {},
            span_name=client.model,
            outcome=outcome,
        )
        return reply.text

    outcome.text, outcome.error = _with_retries(
        attempt, what=f"candidate {client.model}", sleep=sleep
    )
    return outcome


@dataclass
class CriterionJudgement:
    criterion: str
    score: int | None  # None when status is "error"
    justification: str
    status: str  # "ok" or "error"
    error: str
    corrected: bool  # the score came from the correction call
    outcome: Outcome


def rubric_criterion(
    client: ModelClient,
    *,
    criterion: str,
    description: str,
    scale: int,
    task_input: str,
    reference: str | None,
    output: str,
    sleep: Callable[[float], None] | None = None,
) -> CriterionJudgement:
    """One criterion judged (000 §3): the prompt; if its reply does not parse, one
    correction call quoting it; a second bad reply is this judgement's error."""
    outcome = Outcome()
    prompt = scoring.rubric_prompt(
        criterion_name=criterion,
        criterion_description=description,
        scale=scale,
        task_input=task_input,
        reference=reference,
        output=output,
    )
    turns = [Turn("user", [Text(prompt)])]

    def ask() -> str:
        return _one_call(
            client,
            turns=turns,
            system="",
            max_tokens=MAX_TOKENS,
            params=dict(JUDGE_DECODING),
            span_name=f"judge {client.model} · {criterion}",
            outcome=outcome,
        ).text

    def judgement(**kw) -> CriterionJudgement:
        return CriterionJudgement(criterion=criterion, outcome=outcome, **kw)

    first, error = _with_retries(ask, what=f"rubric judge {client.model}", sleep=sleep)
    if first is None:
        return judgement(score=None, justification="", status="error", error=error, corrected=False)
    try:
        parsed = scoring.parse_rubric_reply(first, scale=scale)
        return judgement(
            score=parsed.score,
            justification=parsed.justification,
            status="ok",
            error="",
            corrected=False,
        )
    except scoring.JudgeReplyError as bad:
        problem = str(bad)
    turns += [
        Turn("assistant", [Text(first)]),
        Turn("user", [Text(scoring.rubric_correction(bad_reply=first, scale=scale))]),
    ]
    second, error = _with_retries(ask, what=f"rubric judge {client.model}", sleep=sleep)
    if second is None:
        return judgement(score=None, justification="", status="error", error=error, corrected=True)
    try:
        parsed = scoring.parse_rubric_reply(second, scale=scale)
    except scoring.JudgeReplyError as again:
        return judgement(
            score=None,
            justification="",
            status="error",
            error=f"unparseable twice: {problem}; then {again}",
            corrected=True,
        )
    return judgement(
        score=parsed.score,
        justification=parsed.justification,
        status="ok",
        error="",
        corrected=True,
    )


def parsed_call[T](
    client: ModelClient,
    *,
    prompt: str,
    span_name: str,
    what: str,
    parse: Callable[[str], T],
    rejected: str,
    sleep: Callable[[float], None] | None,
) -> tuple[T | None, Outcome]:
    """One judge-decoded prompt under the retry policy, its reply read by ``parse``; a
    reply it refuses (``ValueError``, which ``JudgeReplyError`` is) is asked again as a
    provider failure would be. (None, the outcome with its error) when it fails for good."""
    outcome = Outcome()
    turns = [Turn("user", [Text(prompt)])]

    def attempt() -> T:
        text = _one_call(
            client,
            turns=turns,
            system="",
            max_tokens=MAX_TOKENS,
            params=dict(JUDGE_DECODING),
            span_name=span_name,
            outcome=outcome,
        ).text
        try:
            return parse(text)
        except ValueError as bad:
            raise RetryableFailure(f"{rejected}: {bad}") from None

    value, outcome.error = _with_retries(attempt, what=what, sleep=sleep)
    return value, outcome


@dataclass
class Orientation:
    verdict: scoring.PairwiseVerdict | None  # in the ORIGINAL order (mapped back if needed)
    outcome: Outcome


def _orientation(
    client: ModelClient,
    *,
    task_prompt: str,
    first: str,
    second: str,
    swapped: bool,
    sleep: Callable[[float], None],
) -> Orientation:
    prompt = scoring.pairwise_prompt(task_prompt=task_prompt, response_a=first, response_b=second)
    verdict, outcome = parsed_call(
        client,
        prompt=prompt,
        span_name=f"judge {client.model} · {'BA' if swapped else 'AB'}",
        what=f"pairwise judge {client.model}",
        parse=scoring.parse_pairwise_reply,
        rejected="judge reply rejected",
        sleep=sleep,
    )
    if verdict is not None and swapped:
        verdict = scoring.map_back(verdict)
    return Orientation(verdict=verdict, outcome=outcome)


@dataclass
class Game:
    """One judged game (003): both orientations, resolved, or failed for good."""

    resolved: scoring.Resolved | None
    ab: Orientation
    ba: Orientation  # its verdict already mapped back to the original order
    duration_ms: int

    @property
    def failure(self) -> str:
        return "" if self.resolved else (self.ab.outcome.error or self.ba.outcome.error)


def pairwise_game(
    client: ModelClient,
    *,
    task_prompt: str,
    response_a: str,
    response_b: str,
    sleep: Callable[[float], None] | None = None,
) -> Game:
    """Both orientations, each with its own attempts; agreement keeps the verdict,
    disagreement is a draw (``agreement: False``), a failed orientation fails the game
    (never a draw)."""
    t0 = time.monotonic()
    ab = _orientation(
        client,
        task_prompt=task_prompt,
        first=response_a,
        second=response_b,
        swapped=False,
        sleep=sleep,
    )
    ba = _orientation(
        client,
        task_prompt=task_prompt,
        first=response_b,
        second=response_a,
        swapped=True,
        sleep=sleep,
    )
    resolved = None
    if ab.verdict is not None and ba.verdict is not None:
        resolved = scoring.resolve(ab.verdict, ba.verdict)
    return Game(resolved=resolved, ab=ab, ba=ba, duration_ms=int((time.monotonic() - t0) * 1000))


@dataclass
class Graded:
    """The model-graded fact scorer's call: the grade ("C" or "I"; None when the grader
    failed for good, ``outcome.error`` saying why) and its attempts."""

    grade: str | None
    outcome: Outcome


def fact_grade(
    client: ModelClient,
    *,
    question: str,
    target: str,
    reply: str,
    sleep: Callable[[float], None] | None = None,
) -> Graded:
    """One grader call (``scorers.fact_prompt``) under the retry policy; a reply with
    no ``GRADE: C`` / ``GRADE: I`` line is asked again, as a pairwise judge's is."""
    prompt = scorers.fact_prompt(question=question, target=target, reply=reply)
    grade, outcome = parsed_call(
        client,
        prompt=prompt,
        span_name=f"grader {client.model} · fact",
        what=f"fact grader {client.model}",
        parse=scorers.parse_grade,
        rejected="grader reply rejected",
        sleep=sleep,
    )
    return Graded(grade=grade, outcome=outcome)

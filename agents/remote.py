"""The arena's side of the remote-agent protocol (``agents.protocol``): a policy that
asks an entrant's HTTP endpoint for each step's action.

The arena reaches the endpoint from the worker host, never from inside the sandbox,
so the endpoint goes through the address policy (``sandboxes.netpolicy.OutboundPolicy``)
when it is registered and at every connection (``agents.providers.transport``): an
entrant cannot make the worker post observations to an internal service unless an
operator allow-lists it. Retries follow the published rules: the same body and request
id every attempt, so an entrant can answer a repeat without acting twice.
"""

import base64
import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx  # HTTPX, as packaged for the provider SDKs

from agents.policies import Action, GiveUp, Observation
from agents.protocol import (
    ATTEMPT_TIMEOUT_S,
    BACKOFF_S,
    HEALTH_MAX_REPLY_BYTES,
    HEALTH_REQUEST_ID_PREFIX,
    HEALTH_TIMEOUT_S,
    MAX_REPLY_BYTES,
    MAX_RETRIES,
    PROTOCOL_VERSION,
    REQUEST_ID_HEADER,
    RETRY_AFTER_CAP_S,
    RETRY_STATUSES,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    ProtocolError,
    health_request_body,
    sign,
    validate_health_reply,
    validate_reply,
)
from agents.providers.transport import OutboundRefused, checked_http_client, describe_refusal
from sandboxes.base import TOOL_NAMES
from sandboxes.netpolicy import EgressRefused, OutboundPolicy

logger = logging.getLogger(__name__)

USER_AGENT = f"agent-arena ({PROTOCOL_VERSION})"


class RemoteAgentError(Exception):
    """The entrant could not be asked: refused, failed or silent after the retries."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


@dataclass(frozen=True)
class Exchange:
    """What one ``next_action`` call cost, for the run's spans. ``status`` is the last
    HTTP status (None when no answer came); ``error`` is empty on success."""

    request_id: str
    latency_ms: int
    attempts: int
    status: int | None
    request_bytes: int
    response_bytes: int
    thought: str = ""
    error: str = ""


def session_token() -> str:
    """A fresh opaque session token for one run (it must not be derived from the run id
    or name anything the entrant should not know)."""
    return secrets.token_urlsafe(18)


def check_endpoint(
    endpoint: str, outbound: OutboundPolicy | None = None, *, resolve: bool = False
) -> str:
    """The endpoint if the arena may call it: an http(s) URL with a host and no
    credentials in it (the secret is the credential, and URLs end up in logs), whose
    host the address policy ``outbound`` passes (default: the strict one). Address
    literals, odd spellings and ``localhost`` are checked here; a name only with
    ``resolve`` (registration, when DNS is on), and always when dialled. Raises
    ValueError with a message naming the address class."""
    try:
        parts = urlsplit(endpoint.strip()) if isinstance(endpoint, str) else None
        hostname = parts.hostname if parts is not None else None
    except ValueError:  # an unclosed IPv6 bracket, a port that is not a number
        parts = hostname = None
    if parts is None or parts.scheme not in ("http", "https") or not hostname:
        raise ValueError("a remote agent's endpoint must be an http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("a remote agent's endpoint must not carry credentials")
    policy = OutboundPolicy() if outbound is None else outbound
    try:
        policy.check_registration(endpoint.strip(), resolve=resolve)
    except EgressRefused as refused:
        raise ValueError(
            f"a remote agent's endpoint must be reachable: {describe_refusal(hostname, refused)}"
        ) from None
    return endpoint.strip()


def health_check(
    endpoint: str,
    secret: str,
    *,
    outbound: OutboundPolicy | None = None,
    timeout_s: float = HEALTH_TIMEOUT_S,
    clock: Callable[[], float] = time.time,
) -> str:
    """Asks the entrant's endpoint the protocol's health call (``agents.protocol.
    health_document``): one signed POST, one attempt of at most ``timeout_s`` seconds,
    no redirect followed, every connection through the address policy ``outbound``.
    Returns the protocol version the entrant named. Raises ``RemoteAgentError`` when
    no usable answer came and ``ProtocolError`` when the answer breaks the protocol,
    each with a message the person registering the agent can act on."""
    if not secret:
        raise RemoteAgentError("a remote agent needs a secret to sign requests with")
    outbound = OutboundPolicy() if outbound is None else outbound
    endpoint = check_endpoint(endpoint, outbound)
    body = health_request_body()
    timestamp = int(clock())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        REQUEST_ID_HEADER: HEALTH_REQUEST_ID_PREFIX + secrets.token_urlsafe(9),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret.encode(), timestamp, body),
    }
    give_up_at = time.monotonic() + timeout_s
    with checked_http_client(httpx.Client, outbound) as client:
        try:
            with client.stream(
                "POST", endpoint, content=body, headers=headers, timeout=timeout_s,
                follow_redirects=False,
            ) as response:  # fmt: skip
                status = response.status_code
                if status == 401:
                    raise RemoteAgentError(
                        "the endpoint refused the arena's signature (HTTP 401): it must "
                        "hold the same secret as the agent's registration",
                        status=status,
                    )
                if status != 200:
                    raise RemoteAgentError(
                        f"the endpoint answered the health call with HTTP {status}, not 200",
                        status=status,
                    )
                content = bytearray()
                for chunk in response.iter_bytes():
                    content += chunk
                    if len(content) > HEALTH_MAX_REPLY_BYTES:
                        raise ProtocolError(
                            f"the health reply is larger than {HEALTH_MAX_REPLY_BYTES} bytes"
                        )
                    if time.monotonic() > give_up_at:
                        raise RemoteAgentError(f"no whole answer within {timeout_s:g} s")
        except OutboundRefused as refused:
            raise RemoteAgentError(f"the endpoint is refused: {refused}") from None
        except httpx.TimeoutException:
            raise RemoteAgentError(f"no answer within {timeout_s:g} s") from None
        except httpx.TransportError as exc:
            raise RemoteAgentError(f"connection failed ({type(exc).__name__})") from None
    return validate_health_reply(_parse(bytes(content)))


class RemotePolicy:
    """Drives a lane by asking ``endpoint``. One instance serves one run (``session``).

    ``timeout_s`` bounds each attempt; ``max_retries`` more attempts follow a
    connection error, a timeout or a 429/502/503/504, after ``backoff_s`` doubling each
    time (or the server's Retry-After, capped). Never waits past the observation's
    ``seconds_left``. Raises ``RemoteAgentError`` when no usable answer came and
    ``ProtocolError`` when the answer breaks the protocol (neither is retried further).
    ``outbound`` is the address policy every connection is checked against (default:
    public addresses only, the host's DNS); a refused endpoint fails at once, unretried.
    """

    def __init__(
        self,
        endpoint: str,
        secret: str,
        *,
        session: str,
        timeout_s: float = ATTEMPT_TIMEOUT_S,
        max_retries: int = MAX_RETRIES,
        backoff_s: float = BACKOFF_S,
        sleep: Callable[[float], None] = time.sleep,
        outbound: OutboundPolicy | None = None,
        attachments: Sequence[dict[str, Any]] = (),
        tools: Sequence[str] = TOOL_NAMES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secret:
            raise ValueError("a remote agent needs a secret to sign requests with")
        if not session:
            raise ValueError("a remote agent needs a session token")
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be positive, max_retries and backoff_s not negative")
        outbound = OutboundPolicy() if outbound is None else outbound
        self.endpoint = check_endpoint(endpoint, outbound)
        self._secret = secret.encode()
        self.session = session
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._sleep = sleep
        self._clock = clock
        # Redirects are not followed (a redirect could lead anywhere; it is an error)
        # and every connection dials only what the policy checked.
        self._client = checked_http_client(httpx.Client, outbound)
        self.attachments = [dict(a) for a in attachments]
        self.tools = list(tools)
        self.last_exchange: Exchange | None = None

    def __repr__(self) -> str:  # the secret stays out of logs and tracebacks
        return f"RemotePolicy(endpoint={self.endpoint!r}, session=...)"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "RemotePolicy":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def request_body(self, observation: Observation) -> bytes:
        """The observation on the wire (``agents.protocol.observation_schema``)."""
        screenshot = None
        if observation.screenshot_png:
            screenshot = {
                "media_type": "image/png",
                "data": base64.b64encode(observation.screenshot_png).decode("ascii"),
            }
        document = {
            "protocol": PROTOCOL_VERSION,
            "session": self.session,
            "step": observation.step,
            "instruction": observation.instruction,
            "start_url": observation.start_url,
            "attachments": self.attachments,
            "last_result": observation.last_result,
            "screenshot": screenshot,
            "budgets": {
                "steps_left": max(0, observation.steps_left),
                "seconds_left": round(max(0.0, observation.seconds_left), 3),
            },
            "tools": self.tools,
        }
        if observation.page is not None:  # only agents that asked for the page as text
            document["page"] = observation.page
        if observation.messages:  # the submitter's follow-ups (revision 2)
            document["messages"] = [{"seq": m.seq, "text": m.text} for m in observation.messages]
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()

    def next_action(self, observation: Observation) -> Action | GiveUp:
        body = self.request_body(observation)
        request_id = f"{self.session}:{observation.step}"
        started = time.monotonic()
        deadline = started + max(0.0, observation.seconds_left)
        attempts, outcome, thought, error = 0, _Outcome(), "", ""
        try:
            while True:
                budget = min(self.timeout_s, deadline - time.monotonic())
                if budget <= 0:
                    raise RemoteAgentError(
                        "the run's time budget ran out before the agent answered",
                        status=outcome.status,
                        attempts=attempts,
                    )
                attempts += 1
                outcome = self._attempt(body, request_id, budget)
                if outcome.refused:
                    raise RemoteAgentError(
                        f"the endpoint is refused: {outcome.refused}", attempts=attempts
                    )
                if outcome.content is not None:
                    reply = _parse(outcome.content)
                    decision = validate_reply(reply)
                    thought = reply.get("thought", "")
                    return decision
                if not outcome.retry:
                    raise RemoteAgentError(
                        f"the agent answered {outcome.describe()}; not retried",
                        status=outcome.status,
                        attempts=attempts,
                    )
                if attempts > self.max_retries:
                    raise RemoteAgentError(
                        f"the agent gave no answer in {attempts} attempts "
                        f"(last: {outcome.describe()})",
                        status=outcome.status,
                        attempts=attempts,
                    )
                pause = outcome.retry_after
                if pause is None:
                    pause = self.backoff_s * 2 ** (attempts - 1)
                if time.monotonic() + pause >= deadline:
                    raise RemoteAgentError(
                        "the run's time budget ran out while retrying the agent "
                        f"(last: {outcome.describe()})",
                        status=outcome.status,
                        attempts=attempts,
                    )
                logger.info(
                    "remote agent %s: %s; retry %d in %.2f s",
                    self.endpoint,
                    outcome.describe(),
                    attempts,
                    pause,
                )
                self._sleep(pause)
        except (RemoteAgentError, ProtocolError) as exc:
            error = str(exc)
            raise
        finally:
            self.last_exchange = Exchange(
                request_id=request_id,
                latency_ms=int((time.monotonic() - started) * 1000),
                attempts=attempts,
                status=outcome.status,
                request_bytes=len(body),
                response_bytes=outcome.response_bytes,
                thought=thought,
                error=error,
            )

    def _attempt(self, body: bytes, request_id: str, budget: float) -> "_Outcome":
        """One signed POST, bounded by ``budget`` seconds in all."""
        timestamp = int(self._clock())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            REQUEST_ID_HEADER: request_id,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(self._secret, timestamp, body),
        }
        give_up_at = time.monotonic() + budget
        try:
            with self._client.stream(
                "POST",
                self.endpoint,
                content=body,
                headers=headers,
                timeout=budget,
                follow_redirects=False,  # a redirect could lead anywhere; it is an error
            ) as response:
                status = response.status_code
                if status in RETRY_STATUSES:
                    retry_after = _retry_after(response.headers.get("Retry-After"))
                    return _Outcome(status=status, retry=True, retry_after=retry_after)
                if not 200 <= status < 300:
                    return _Outcome(status=status)
                content = bytearray()
                for chunk in response.iter_bytes():
                    content += chunk
                    if len(content) > MAX_REPLY_BYTES:
                        raise ProtocolError(f"the reply is larger than {MAX_REPLY_BYTES} bytes")
                    if time.monotonic() > give_up_at:  # a reply trickling in
                        return _Outcome(retry=True, reason="timed out")
                return _Outcome(status=status, content=bytes(content))
        except OutboundRefused as refused:
            return _Outcome(refused=str(refused), reason=refused.reason)
        except httpx.TimeoutException:
            return _Outcome(retry=True, reason="timed out")
        except httpx.TransportError as exc:
            return _Outcome(retry=True, reason=f"connection failed ({type(exc).__name__})")


@dataclass(frozen=True)
class _Outcome:
    """One attempt: a reply (``content``), or whether and when to try again."""

    status: int | None = None
    content: bytes | None = None
    retry: bool = False
    retry_after: float | None = None
    reason: str = ""
    refused: str = ""  # the address policy's refusal, for the operator: never retried

    @property
    def response_bytes(self) -> int:
        return len(self.content) if self.content is not None else 0

    def describe(self) -> str:
        return f"HTTP {self.status}" if self.status is not None else self.reason


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is ignored), capped."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if seconds != seconds or seconds < 0:  # NaN or negative
        return None
    return min(seconds, RETRY_AFTER_CAP_S)


def _parse(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"the reply is not JSON: {exc}") from None

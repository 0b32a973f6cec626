"""A run's fixed tool set as an MCP server, so an agent built on any MCP client can
enter without writing the arena's own protocol.

Design
------
An MCP entrant is a remote agent (``kind = "remote"``) whose params say
``{"endpoint": URL, "protocol": "mcp"}``. For each of its lanes:

1. At the lane's first step the worker starts an MCP server (the official ``mcp`` SDK,
   streamable HTTP at ``/mcp``) for this run only, on an ephemeral port, and announces
   it: one POST to the entrant's endpoint, signed exactly as the remote protocol signs
   (``X-Arena-Timestamp``, ``X-Arena-Signature`` with the agent's secret), whose JSON
   body is ``{"type": "mcp_session", "protocol": "arena-mcp/1", "session", "mcp_url",
   "token", "expires_at", "instruction", "start_url", "tools", "steps_left",
   "seconds_left", "attachments"}``. The entrant answers 2xx at once and connects its
   MCP client to ``mcp_url`` with ``Authorization: Bearer <token>``.
2. ``tools/list`` lists the tools offered in this battle (the fixed set's schemas,
   unchanged) plus ``give_up {message}``. Each ``tools/call`` becomes the lane's next
   action through the same loop every entrant runs under: the lane checks the step
   and wall budgets, the tool dispatcher validates the arguments and runs the tool,
   the step is stored with its screenshot. The call's result is that step's result
   (JSON text, ``isError`` when it failed) with the screen after it as an image, and the
   budgets left, and ``messages`` (the submitter's follow-ups received at that step,
   when any; the announcement carries those of the first step). On a battle's desktop
   lane the list also has ``ask_user {question}``, answered by the submitter
   (docs/conversations.md). Calls are taken one at a time, in order.
3. The run ends as any run ends (``deliver``, ``give_up``, a budget, the submitter). Any
   call still waiting is answered "the run has ended", the server stops, and its token
   is refused from then on. An entrant that makes no call before the wall budget runs
   out ends the run on the time budget.

The token is ``django.core.signing`` over ``{run, session, exp}`` (salted for this use,
signed with the arena's secret key): no table, no migration. A server accepts only
tokens for its own run and session, before their expiry (the wall budget plus a
margin), and only while the run is live: a token for run A is refused by run B's
server, a token outlives nothing. The bearer check is the SDK's
(``RequireAuthMiddleware``, 401 with ``WWW-Authenticate``).

Where the server listens: ``ARENA.mcp_bind_host`` (default ``127.0.0.1``) and the URL
entrants are given, ``ARENA.mcp_public_base_url`` (default ``http://<bind>:<port>``;
an operator behind a proxy or NAT sets it, ``{port}`` is replaced by the port). Both
are read with ``getattr`` so an arena without the knobs runs on the defaults.
"""

import asyncio
import base64
import json
import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2 as httpx
import mcp_types as types
import uvicorn
from django.conf import settings
from django.core import signing
from mcp.server import Server
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings

from agents.policies import Action, GiveUp, Observation
from agents.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from agents.providers.transport import OutboundRefused, checked_http_client
from agents.remote import check_endpoint
from agents.services import AgentFailure
from sandboxes.netpolicy import OutboundPolicy
from sandboxes.tools import TOOL_SCHEMAS

logger = logging.getLogger(__name__)

PROTOCOL = "arena-mcp/1"
TOKEN_SALT = "agents.mcp_server.run-token"  # noqa: S105 - a namespace, not a secret
TOKEN_MARGIN_S = 120  # the token outlives the wall budget by this much, at most
ANNOUNCE_TIMEOUT_S = 10.0
GIVE_UP_TOOL = "give_up"
MESSAGE_MAX_CHARS = 20_000
_SERVER_START_S = 10.0
CLOSE_GRACE_S = 1.0
IDLE_TIMEOUT_S = 120.0  # longest wait for the entrant's next call (params idle_timeout_s)


class McpOutOfTime(AgentFailure):
    """The entrant made no tool call before the wall budget ran out."""


# -- tokens --------------------------------------------------------------------------


def run_token(*, run_id: int, session: str, expires_at: float) -> str:
    """The bearer token of one run's MCP server."""
    return signing.dumps(
        {"run": run_id, "session": session, "exp": int(expires_at)}, salt=TOKEN_SALT
    )


def token_valid(token: str, *, run_id: int, session: str, now: float) -> bool:
    """Whether ``token`` was issued for this run and session and has not expired."""
    try:
        claims = signing.loads(token, salt=TOKEN_SALT)
    except signing.BadSignature:
        return False
    return (
        isinstance(claims, dict)
        and claims.get("run") == run_id
        and claims.get("session") == session
        and isinstance(claims.get("exp"), int)
        and now < claims["exp"]
    )


# -- the hand-off between the server and the lane ------------------------------------


@dataclass
class _Call:
    tool: str
    arguments: Any
    done: threading.Event = field(default_factory=threading.Event)
    reply: dict[str, Any] | None = None


class Bridge:
    """Tool calls from the MCP server's threads to the lane's thread, one at a time."""

    def __init__(self) -> None:
        self._calls: queue.Queue[_Call] = queue.Queue()
        self._serial = threading.Lock()
        self._closed = threading.Event()
        self.ended = ""

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def call(self, tool: str, arguments: Any, *, timeout_s: float) -> dict[str, Any]:
        """Server side: hand the call to the lane, wait for its step's result."""
        with self._serial:
            if self.closed:
                return _ended(self.ended)
            pending = _Call(tool, arguments)
            self._calls.put(pending)
            deadline = time.monotonic() + timeout_s
            while not pending.done.wait(0.1):
                if self.closed or time.monotonic() > deadline:
                    return pending.reply or _ended(self.ended or "time_budget")
            assert pending.reply is not None
            return pending.reply

    def next_call(self, timeout_s: float) -> _Call | None:
        """Lane side: the next call, None when none came within ``timeout_s``."""
        try:
            return self._calls.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None

    def close(self, reason: str) -> None:
        self.ended = reason
        self._closed.set()
        while True:
            try:
                self._calls.get_nowait().done.set()
            except queue.Empty:
                return


def _ended(reason: str) -> dict[str, Any]:
    return {
        "result": {"ok": False, "error": f"this run has ended ({reason or 'ended'})"},
        "ended": True,
    }


# -- the server ------------------------------------------------------------------------


class RunTokenVerifier:
    """The SDK's ``TokenVerifier`` for one run."""

    def __init__(self, *, run_id: int, session: str, bridge: Bridge) -> None:
        self.run_id, self.session, self.bridge = run_id, session, bridge

    async def verify_token(self, token: str) -> AccessToken | None:
        if self.bridge.closed or not token_valid(
            token, run_id=self.run_id, session=self.session, now=time.time()
        ):
            return None
        claims = signing.loads(token, salt=TOKEN_SALT)
        return AccessToken(
            token=token, client_id=f"run-{self.run_id}", scopes=[], expires_at=claims["exp"]
        )


def tool_list(tools: tuple[str, ...]) -> list[types.Tool]:
    listed = [
        types.Tool(
            name=name,
            description=TOOL_SCHEMAS[name]["description"],
            input_schema=TOOL_SCHEMAS[name]["parameters"],
        )
        for name in tools
        if name in TOOL_SCHEMAS
    ]
    listed.append(
        types.Tool(
            name=GIVE_UP_TOOL,
            description="Stop without delivering; the message becomes your final message.",
            input_schema={
                "type": "object",
                "properties": {"message": {"type": "string", "maxLength": MESSAGE_MAX_CHARS}},
                "required": ["message"],
                "additionalProperties": False,
            },
        )
    )
    return listed


def call_result(reply: dict[str, Any]) -> types.CallToolResult:
    """A step's result as MCP content: JSON text, then the screen as a PNG image."""
    result = reply.get("result") or {}
    body = {
        "result": result,
        **{k: reply[k] for k in ("steps_left", "seconds_left", "ended") if k in reply},
        # the submitter's follow-ups received at this step, when there are any
        **({"messages": reply["messages"]} if reply.get("messages") else {}),
    }
    content: list[Any] = [types.TextContent(type="text", text=json.dumps(body, sort_keys=True))]
    if reply.get("screenshot"):
        content.append(
            types.ImageContent(
                type="image",
                data=base64.b64encode(reply["screenshot"]).decode("ascii"),
                mime_type="image/png",
            )
        )
    return types.CallToolResult(content=content, is_error=not result.get("ok", False))


class RunServer:
    """One run's MCP server on an ephemeral port, serving from its own thread."""

    def __init__(
        self,
        *,
        run_id: int,
        session: str,
        tools: tuple[str, ...],
        bridge: Bridge,
        call_timeout_s: float,
        bind_host: str = "127.0.0.1",
        public_base_url: str = "",
    ) -> None:
        self.run_id, self.session, self.bridge = run_id, session, bridge
        self.tools = tools
        self.call_timeout_s = call_timeout_s
        self.bind_host = bind_host
        self.public_base_url = public_base_url
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        base = self.public_base_url or f"http://{self.bind_host}:{{port}}"
        return base.replace("{port}", str(self.port)).rstrip("/") + "/mcp"

    def _app(self) -> Any:
        tools = tool_list(self.tools)

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=tools)

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            reply = await anyio.to_thread.run_sync(
                lambda: self.bridge.call(
                    params.name, params.arguments or {}, timeout_s=self.call_timeout_s
                ),
                abandon_on_cancel=True,
            )
            return call_result(reply)

        server = Server(
            "agent-arena-run",
            version="1",
            instructions=(
                "The tools act on this run's sandbox (a Linux desktop with a browser and "
                "a shell). One call is one step; call deliver to finish."
            ),
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )
        public = urlsplit(self.url)
        hosts = [f"{self.bind_host}:{self.port}", public.netloc]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted(set(hosts)),
            allowed_origins=sorted({f"{public.scheme}://{public.netloc}"}),
        )
        return server.streamable_http_app(
            streamable_http_path="/mcp",
            json_response=True,
            transport_security=security,
            host=self.bind_host,
            auth=AuthSettings(
                issuer_url=f"{public.scheme}://{public.netloc}",
                resource_server_url=None,
                required_scopes=[],
            ),
            token_verifier=RunTokenVerifier(
                run_id=self.run_id, session=self.session, bridge=self.bridge
            ),
        )

    def start(self) -> "RunServer":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.bind_host, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        server = self._server

        def serve() -> None:
            asyncio.run(server.serve(sockets=[sock]))

        self._thread = threading.Thread(target=serve, name=f"mcp-run-{self.run_id}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + _SERVER_START_S
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise AgentFailure("the run's MCP server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server, self._thread = None, None


# -- the policy --------------------------------------------------------------------------


def _messages(observation: Observation) -> list[dict[str, Any]]:
    """The follow-ups an observation carries, as the remote protocol's ``messages``."""
    return [{"seq": m.seq, "text": m.text} for m in observation.messages]


class McpPolicy:
    """Drives a lane from an MCP entrant's tool calls (see the module docstring)."""

    def __init__(
        self,
        *,
        endpoint: str,
        secret: str,
        run_id: int,
        session: str,
        tools: tuple[str, ...],
        attachments: list[dict] | tuple = (),
        outbound: OutboundPolicy | None = None,
        bind_host: str | None = None,
        public_base_url: str | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        arena = settings.ARENA
        # The lane beats only between steps: a wait past the janitor's bound would
        # look like a dead worker.
        self.idle_timeout_s = min(idle_timeout_s, arena.stuck_after_s / 2)
        self.outbound = outbound or OutboundPolicy()
        self.endpoint = check_endpoint(endpoint, self.outbound)  # ValueError when refused
        self._secret = secret.encode()
        self.run_id, self.session, self.tools = run_id, session, tools
        self.attachments = list(attachments)
        self.bind_host = bind_host or arena.mcp_bind_host
        self.public_base_url = public_base_url or arena.mcp_public_base_url
        self.bridge = Bridge()
        self.server: RunServer | None = None
        self.token = ""
        self.spans: list = []
        self._current: _Call | None = None

    def _start(self, observation: Observation) -> None:
        expires_at = time.time() + observation.seconds_left + TOKEN_MARGIN_S
        self.server = RunServer(
            run_id=self.run_id,
            session=self.session,
            tools=self.tools,
            bridge=self.bridge,
            call_timeout_s=observation.seconds_left + TOKEN_MARGIN_S,
            bind_host=self.bind_host,
            public_base_url=self.public_base_url,
        ).start()
        self.token = run_token(run_id=self.run_id, session=self.session, expires_at=expires_at)
        body = json.dumps(
            {
                "type": "mcp_session",
                "protocol": PROTOCOL,
                "session": self.session,
                "mcp_url": self.server.url,
                "token": self.token,
                "expires_at": int(expires_at),
                "instruction": observation.instruction,
                "start_url": observation.start_url,
                "tools": [*self.tools, GIVE_UP_TOOL],
                "steps_left": observation.steps_left,
                "seconds_left": int(observation.seconds_left),
                "attachments": self.attachments,
                "messages": _messages(observation),
            }
        ).encode()
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(self._secret, timestamp, body),
        }
        try:
            with checked_http_client(httpx.Client, self.outbound) as client:
                response = client.post(
                    self.endpoint, content=body, headers=headers, timeout=ANNOUNCE_TIMEOUT_S
                )
        except OutboundRefused as refused:
            raise AgentFailure(f"the MCP entrant's endpoint is refused: {refused}") from None
        except httpx.HTTPError as error:
            raise AgentFailure(
                f"the MCP entrant's endpoint could not be reached ({type(error).__name__})"
            ) from None
        if not 200 <= response.status_code < 300:
            raise AgentFailure(
                f"the MCP entrant's endpoint answered HTTP {response.status_code} to the "
                "session announcement (it must answer 2xx, then connect)"
            )

    def next_action(self, observation: Observation) -> Action | GiveUp:
        if self.server is None:
            self._start(observation)
        if self._current is not None:
            self._answer(self._current, observation)
            self._current = None
        wait_s = min(observation.seconds_left, self.idle_timeout_s)
        deadline = time.monotonic() + wait_s
        while True:
            call = self.bridge.next_call(deadline - time.monotonic())
            if call is None:
                raise McpOutOfTime(
                    f"the MCP entrant made no tool call for {int(wait_s)} s"
                    + (" (the time budget ran out)" if wait_s >= observation.seconds_left else "")
                )
            if call.tool != GIVE_UP_TOOL:
                self._current = call
                return Action(call.tool, call.arguments)
            message = call.arguments.get("message") if isinstance(call.arguments, dict) else None
            if isinstance(message, str) and len(message) <= MESSAGE_MAX_CHARS:
                call.reply = {"result": {"ok": True, "tool": GIVE_UP_TOOL}, "ended": True}
                call.done.set()
                return GiveUp(message)
            call.reply = {
                "result": {
                    "ok": False,
                    "tool": GIVE_UP_TOOL,
                    "error": f"give_up needs a message of at most {MESSAGE_MAX_CHARS} characters",
                }
            }
            call.done.set()

    @staticmethod
    def _answer(call: _Call, observation: Observation) -> None:
        call.reply = {
            "result": observation.last_result or {},
            "steps_left": observation.steps_left,
            "seconds_left": int(observation.seconds_left),
            "screenshot": observation.screenshot_png,
            "messages": _messages(observation),
        }
        call.done.set()

    def close(self, reason: str = "ended") -> None:
        """The run has ended: answer what waits, stop the server (its token dies)."""
        if self._current is not None:
            self._current.reply = {
                "result": {
                    "ok": True,
                    "note": f"the action ran; the run has ended ({reason})",
                },
                "ended": True,
            }
            self._current.done.set()
            self._current = None
        self.bridge.close(reason)
        if self.server is not None:
            # A moment for the answers above to reach the entrant; calls arriving later
            # are refused (the token is dead), then the port closes.
            timer = threading.Timer(CLOSE_GRACE_S, self.server.stop)
            timer.daemon = True
            timer.start()

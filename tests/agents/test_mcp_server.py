"""The MCP server that exposes a run's fixed tool set (agents/mcp_server.py), driven by
the official ``mcp`` SDK's own client over real HTTP on 127.0.0.1.

The bearer token is per run and session, expires, and dies with the run; every tool
call goes through the lane's own loop (budgets, the dispatcher's argument checks, the
stored steps), in real desktop sandboxes."""

import asyncio
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agents.mcp_server import (
    Bridge,
    RunServer,
    run_token,
    token_valid,
)
from agents.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _with_session(url: str, token: str, work):
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await work(session)


def mcp_session(url: str, token: str, work):
    """Runs ``work(session)`` with the SDK's client connected to ``url``."""
    return asyncio.run(_with_session(url, token, work))


@pytest.fixture
def run_server():
    bridge = Bridge()
    server = RunServer(
        run_id=41, session="session-a", tools=("shell", "deliver"), bridge=bridge, call_timeout_s=5
    ).start()
    yield server
    bridge.close("test over")
    server.stop()


def test_tokens_are_bound_to_their_run_and_session_and_expire():
    now = time.time()
    token = run_token(run_id=41, session="session-a", expires_at=now + 60)
    assert token_valid(token, run_id=41, session="session-a", now=now)
    assert not token_valid(token, run_id=42, session="session-a", now=now)
    assert not token_valid(token, run_id=41, session="session-b", now=now)
    assert not token_valid(token, run_id=41, session="session-a", now=now + 61)
    assert not token_valid(token + "x", run_id=41, session="session-a", now=now)
    assert not token_valid("not-a-token", run_id=41, session="session-a", now=now)


def test_the_sdk_client_lists_the_runs_tools_with_a_good_token(run_server):
    token = run_token(run_id=41, session="session-a", expires_at=time.time() + 60)

    async def work(session):
        return await session.list_tools()

    tools = mcp_session(run_server.url, token, work).tools
    assert [t.name for t in tools] == ["shell", "deliver", "give_up"]
    assert tools[0].input_schema["required"] == ["command"]


@pytest.mark.parametrize(
    "token",
    [
        None,
        "garbage",
        run_token(run_id=41, session="session-a", expires_at=time.time() - 1),  # expired
        run_token(run_id=42, session="session-a", expires_at=time.time() + 60),  # run B
        run_token(run_id=41, session="session-b", expires_at=time.time() + 60),  # a rerun
    ],
    ids=["none", "garbage", "expired", "other-run", "other-session"],
)
def test_a_wrong_expired_or_other_runs_token_is_refused(run_server, token):
    headers = {**HEADERS, **({"Authorization": f"Bearer {token}"} if token else {})}
    response = httpx2.post(run_server.url, json=INITIALIZE, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")

    async def work(session):
        return await session.list_tools()

    with pytest.raises(Exception):  # noqa: B017 - the SDK client fails to connect at all
        mcp_session(run_server.url, token or "", work)


def test_the_token_dies_with_the_run(run_server):
    token = run_token(run_id=41, session="session-a", expires_at=time.time() + 60)
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    assert httpx2.post(run_server.url, json=INITIALIZE, headers=headers).status_code == 200
    run_server.bridge.close("delivered")
    assert httpx2.post(run_server.url, json=INITIALIZE, headers=headers).status_code == 401


# -- whole lanes -------------------------------------------------------------------------

SECRET = "mcp-entrant-secret-for-tests"


class McpEntrant:
    """An entrant's endpoint: checks the signed announcement, then runs ``script`` with
    the SDK's MCP client against the URL it was given, recording what it saw."""

    def __init__(self, script):
        self.script = script
        self.announcements: list[dict] = []
        self.results: list = []
        self.errors: list[Exception] = []
        self.done = threading.Event()
        entrant = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                signed = verify(
                    SECRET.encode(),
                    self.headers.get(TIMESTAMP_HEADER),
                    body,
                    self.headers.get(SIGNATURE_HEADER),
                    time.time(),
                )
                if not signed:
                    self.send_response(401)
                    self.end_headers()
                    return
                announcement = json.loads(body)
                entrant.announcements.append(announcement)
                self.send_response(202)
                self.send_header("content-length", "0")
                self.end_headers()
                threading.Thread(target=entrant.connect, args=(announcement,), daemon=True).start()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def connect(self, announcement: dict) -> None:
        async def work(session):
            for name, arguments in self.script:
                try:
                    self.results.append((name, await session.call_tool(name, arguments)))
                except Exception as error:  # a call after the run ended: refused
                    self.results.append((name, error))
                    return

        try:
            mcp_session(announcement["mcp_url"], announcement["token"], work)
        except Exception as error:
            self.errors.append(error)
        finally:
            self.done.set()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def payload(result) -> dict:
    return json.loads(result.content[0].text)


@pytest.mark.django_db(transaction=True)
def test_mcp_entrants_play_a_battle_under_the_same_bounds(alice):
    from agents.models import Agent, Arena
    from battles.models import Battle, Run
    from battles.services import battle_run, task_submit

    budgeted = McpEntrant(
        [
            ("shell", {"command": "printf 'hello mcp' > a.txt; cat a.txt"}),
            ("click", {"x": -5, "y": 10}),  # the dispatcher refuses it: an error step
            ("screenshot", {}),
            ("deliver", {"message": "too late"}),  # past the step budget of 3
        ]
    )
    delivering = McpEntrant(
        [
            ("shell", {"command": "echo hi"}),
            ("give_up", {"message": 5}),  # malformed: answered, not a step
            ("deliver", {"message": "Said hi."}),
        ]
    )
    try:
        arena = Arena.objects.public()
        a, b = (
            Agent.objects.create(
                arena=arena,
                slug=slug,
                display_name=slug,
                kind="remote",
                params={"endpoint": entrant.url, "protocol": "mcp"},
                remote_secret=SECRET,
            )
            for slug, entrant in (("mcp-a", budgeted), ("mcp-b", delivering))
        )
        battle = task_submit(user=alice, instruction="Say hello", rng=random.Random(0))
        Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
        Run.objects.filter(battle=battle, side="A").update(agent=a, step_budget=3)
        Run.objects.filter(battle=battle, side="B").update(agent=b, step_budget=3)
        battle_run(battle_id=battle.pk)
        assert budgeted.done.wait(10) and delivering.done.wait(10)
    finally:
        budgeted.close()
        delivering.close()
    assert budgeted.errors == [] and delivering.errors == []

    run_a, run_b = battle.runs.order_by("side")
    # A: three steps stored, the refused click among them, then the step budget.
    assert run_a.end_reason == "step_budget"
    steps = list(run_a.steps.order_by("index"))
    assert [s.tool for s in steps] == ["shell", "click", "screenshot"]
    assert steps[1].result["ok"] is False and "x must be at least 0" in steps[1].result["error"]
    (_, shell), (_, click), (_, shot), (_, late) = budgeted.results
    assert "hello mcp" in payload(shell)["result"]["stdout"] and not shell.is_error
    assert payload(shell)["steps_left"] == 2
    assert shell.content[1].type == "image" and shell.content[1].mime_type == "image/png"
    assert click.is_error and "x must be at least 0" in payload(click)["result"]["error"]
    assert payload(shot)["ended"] is True  # the budget ran out with this step
    # A call after the run ended: the server refuses the token (401), then stops.
    assert isinstance(late, Exception)
    # The announcement carried what an entrant needs, and no other run's token works.
    announcement = budgeted.announcements[0]
    assert announcement["instruction"] == "Say hello" and announcement["steps_left"] == 3
    assert announcement["tools"][-1] == "give_up"
    assert token_valid(
        announcement["token"], run_id=run_a.pk, session=announcement["session"], now=time.time()
    )
    assert not token_valid(
        announcement["token"], run_id=run_b.pk, session=announcement["session"], now=time.time()
    )

    # B: delivered; the malformed give_up was answered with an error and cost no step.
    assert (run_b.end_reason, run_b.final_message) == ("delivered", "Said hi.")
    assert list(run_b.steps.order_by("index").values_list("tool", flat=True)) == [
        "shell",
        "deliver",
    ]
    (_, _hi), (_, bad_give_up), (_, deliver) = delivering.results
    assert (
        bad_give_up.is_error
        and "give_up needs a message" in payload(bad_give_up)["result"]["error"]
    )
    assert (
        not deliver.is_error
        and "the run has ended (delivered)" in payload(deliver)["result"]["note"]
    )


def _observation(seconds_left: float = 30.0):
    from agents.policies import Observation

    return Observation(
        step=0,
        instruction="Say hello",
        start_url="",
        last_result=None,
        steps_left=3,
        seconds_left=seconds_left,
    )


def _policy(endpoint: str, **kwargs):
    from agents.mcp_server import McpPolicy
    from tests.agents.conftest import loopback_outbound

    return McpPolicy(
        endpoint=endpoint,
        secret=SECRET,
        run_id=7,
        session="session-x",
        tools=("shell", "deliver"),
        outbound=loopback_outbound(),
        **kwargs,
    )


def test_an_entrant_that_never_calls_ends_the_run_with_a_clear_error():
    from agents.mcp_server import McpOutOfTime
    from agents.services import AgentFailure

    silent = McpEntrant([])
    silent.connect = lambda announcement: None  # answers 202, never connects
    policy = _policy(silent.url, idle_timeout_s=0.3)
    try:
        with pytest.raises(McpOutOfTime, match="made no tool call for 0 s") as raised:
            policy.next_action(_observation())
        assert isinstance(raised.value, AgentFailure)  # the lane records it as the error
    finally:
        policy.close("error")
        silent.close()


def test_an_endpoint_that_refuses_the_announcement_is_an_agent_failure():
    from agents.services import AgentFailure

    entrant = McpEntrant([])
    policy = _policy(entrant.url)
    policy._secret = b"not the entrant's secret"  # the entrant answers 401
    try:
        with pytest.raises(AgentFailure, match="answered HTTP 401 to the session announcement"):
            policy.next_action(_observation())
    finally:
        policy.close("error")
        entrant.close()


def test_an_endpoint_the_address_policy_refuses_is_refused_before_any_call():
    from agents.mcp_server import McpPolicy

    with pytest.raises(ValueError, match="refused by the address policy"):
        McpPolicy(endpoint="http://10.1.2.3/agent", secret=SECRET, run_id=7, session="s", tools=())

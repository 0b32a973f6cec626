"""A reference entrant for the arena-agent/1 protocol: a small HTTP server that
checks the arena's signature and plays a simple policy (list the workspace, then
report what is in it). Standard library only, plus the arena's pure protocol module
for the signature check.

Run from the repository root (see README.md):

    ARENA_AGENT_SECRET=... python -m examples.remote_entrant.server --port 8765
"""

import argparse
import contextlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents.protocol import (
    PROTOCOL_VERSION,
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify,
)

ACT_PATH = "/act"
MAX_BODY_BYTES = 32 * 1024 * 1024  # screenshots arrive inline, base64
REMEMBERED_REPLIES = 1024

logger = logging.getLogger("remote_entrant")


def decide(observation: dict[str, Any]) -> dict[str, Any]:
    """The policy, one reply per observation: ``ls -la`` on step 0, then deliver a
    summary of what it showed. Gives up on an empty instruction."""
    instruction = str(observation.get("instruction", "")).strip()
    if not instruction:
        return {
            "give_up": {"message": "The instruction is empty, so there is nothing to do."},
            "thought": "No task was given.",
        }
    if "shell" not in observation.get("tools", []):
        return {"give_up": {"message": "I need a shell, and this run offers none."}}
    if observation.get("step") == 0:
        return {
            "action": {"tool": "shell", "args": {"command": "ls -la", "timeout_s": 10}},
            "thought": "Look at the workspace before anything else.",
        }
    return {
        "action": {
            "tool": "deliver",
            "args": {"message": summarise(observation.get("last_result"))},
        },
        "thought": "Report what the listing showed.",
    }


def summarise(result: dict[str, Any] | None) -> str:
    if not result:
        return "I saw nothing: the listing produced no result."
    if not result.get("ok"):
        return f"Listing the workspace failed: {result.get('error') or result.get('stderr')}"
    lines = [line for line in str(result.get("stdout", "")).splitlines() if line.strip()]
    names = [
        line.split(maxsplit=8)[-1]
        for line in lines
        if not line.startswith("total ") and len(line.split(maxsplit=8)) == 9
    ]
    names = [name for name in names if name not in (".", "..")]
    if not names:
        return "The workspace is empty."
    return f"The workspace holds {len(names)} entries: {', '.join(names)}."


class ReplyCache:
    """The replies given per request id, so a retried request (same id) gets the same
    answer and the policy does not act twice."""

    def __init__(self, size: int = REMEMBERED_REPLIES) -> None:
        self.size = size
        self._replies: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_decide(self, request_id: str, compute: Callable[[], dict[str, Any]]) -> dict:
        with self._lock:
            if request_id and request_id in self._replies:
                return self._replies[request_id]
            reply = compute()
            if request_id:
                self._replies[request_id] = reply
                while len(self._replies) > self.size:
                    self._replies.popitem(last=False)
            return reply


class EntrantHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the arena reuses its connection
    server: "EntrantServer"

    def do_POST(self) -> None:
        if self.path != ACT_PATH:
            return self._answer(404, {"error": f"POST observations to {ACT_PATH}"}, drain=True)
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            return self._answer(411, {"error": "Content-Length required"}, drain=True)
        if int(length) > MAX_BODY_BYTES:
            return self._answer(413, {"error": "observation too large"}, drain=True)
        body = self.rfile.read(int(length))
        # Verify the raw bytes before parsing anything.
        if not verify(
            self.server.secret,
            self.headers.get(TIMESTAMP_HEADER),
            body,
            self.headers.get(SIGNATURE_HEADER),
            now=self.server.clock(),
        ):
            logger.warning("refused a request with a bad or expired signature")
            return self._answer(401, {"error": "bad or expired signature"})
        try:
            observation = json.loads(body)
        except ValueError:
            return self._answer(400, {"error": "the body is not JSON"})
        if not isinstance(observation, dict) or observation.get("protocol") != PROTOCOL_VERSION:
            return self._answer(400, {"error": f"this entrant speaks {PROTOCOL_VERSION}"})
        if observation.get("health") is True:  # the health call: answer, do nothing
            return self._answer(200, {"protocol": PROTOCOL_VERSION, "ok": True})
        request_id = self.headers.get(REQUEST_ID_HEADER, "")
        reply = self.server.replies.get_or_decide(request_id, lambda: decide(observation))
        logger.info("step %s: %s", observation.get("step"), _what(reply))
        self._answer(200, reply)

    def do_GET(self) -> None:
        self._answer(405, {"error": f"POST observations to {ACT_PATH}"})

    def _answer(self, status: int, payload: dict[str, Any], *, drain: bool = False) -> None:
        data = json.dumps(payload).encode()
        if drain:  # the body was not read: the connection cannot be reused
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if drain:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def handle(self) -> None:
        # The arena hung up (it stopped waiting, or dropped an idle connection).
        with contextlib.suppress(ConnectionError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)


def _what(reply: dict[str, Any]) -> str:
    if "give_up" in reply:
        return "give up"
    return reply["action"]["tool"]


class EntrantServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        secret: bytes,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secret:
            raise ValueError("the entrant needs the secret the arena signs with")
        super().__init__(address, EntrantHandler)
        self.secret = secret
        self.clock = clock
        self.replies = ReplyCache()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}{ACT_PATH}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8765, help="port to listen on")
    parser.add_argument(
        "--secret",
        default=os.environ.get("ARENA_AGENT_SECRET", ""),
        help="the agent's secret (default: $ARENA_AGENT_SECRET, which keeps it out of ps)",
    )
    args = parser.parse_args(argv)
    if not args.secret:
        parser.error("give the agent's secret with --secret or ARENA_AGENT_SECRET")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server = EntrantServer((args.host, args.port), args.secret.encode())
    logger.info("entrant listening on %s", server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

"""A fake streaming provider on 127.0.0.1: answers ``POST /v1/messages``,
``POST /v1/chat/completions`` and ``POST /v1/responses`` (any path, in fact) with a
scripted server-sent event stream, chunked, each event written and flushed on its own.

A script entry is a :class:`Stream`: its events, and optionally ``hold_after`` events
after which the server waits for ``release`` (a ``threading.Event`` the test sets)
before sending the rest, so a test can prove that the first events reached the client
while the upstream had not finished. Requests are recorded (path, lower-cased headers,
JSON body). The event helpers build well-formed streams of each API with given usage.
"""

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from tests.agents.fake_providers import Recorded


@dataclass
class Stream:
    events: list[bytes]
    hold_after: int | None = None
    release: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)  # set when all sent


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def typed(data: dict[str, Any]) -> bytes:
    """An event named by its data's ``type``, as Anthropic and the Responses API send."""
    return sse(data, data["type"])


def anthropic_stream(
    model: str, text: str, start_usage: dict[str, int], delta_usage: dict[str, int]
) -> list[bytes]:
    half = len(text) // 2
    block = {"type": "text", "text": ""}

    def delta(part: str) -> dict[str, str]:
        return {"type": "text_delta", "text": part}

    message = {
        "id": "msg_fake_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    return [
        typed({"type": "message_start", "message": message}),
        typed({"type": "content_block_start", "index": 0, "content_block": block}),
        *(
            typed({"type": "content_block_delta", "index": 0, "delta": delta(part)})
            for part in (text[:half], text[half:])
        ),
        typed({"type": "content_block_stop", "index": 0}),
        typed(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": delta_usage,
            }
        ),
        typed({"type": "message_stop"}),
    ]


def chat_stream(model: str, text: str, usage: dict[str, Any]) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None, usage: Any = None, choices=True) -> bytes:
        body = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
            "usage": usage,
        }
        return sse(body)

    return [
        chunk({"role": "assistant", "content": ""}, None),
        *(chunk({"content": word}, None) for word in text.split(" ")),
        chunk({}, "stop"),
        chunk({}, None, usage, choices=False),
        sse("[DONE]"),
    ]


def responses_stream(model: str, text: str, usage: dict[str, Any]) -> list[bytes]:
    response = {
        "id": "resp_fake",
        "object": "response",
        "created_at": 0,
        "model": model,
        "status": "in_progress",
        "output": [],
        "usage": None,
    }
    done = {
        **response,
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_fake",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": usage,
    }
    delta = {
        "type": "response.output_text.delta",
        "item_id": "msg_fake",
        "output_index": 0,
        "content_index": 0,
        "delta": text,
        "sequence_number": 1,
    }
    return [
        typed({"type": "response.created", "response": response, "sequence_number": 0}),
        typed(delta),
        typed({"type": "response.completed", "response": done, "sequence_number": 2}),
    ]


class FakeSSE:
    """The server; a context manager serving from a thread. ``push`` script entries."""

    def __init__(self) -> None:
        self._script: deque[Stream] = deque()
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    def push(self, *streams: Stream) -> None:
        with self._lock:
            self._script.extend(streams)

    def start(self) -> Self:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                fake._answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            for stream in self._script:
                stream.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"  # type: ignore[union-attr]

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length)
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            stream = self._script.popleft() if self._script else None
            self.requests.append(
                Recorded("POST", handler.path, headers, json.loads(body), body, "stream")
            )
        handler.close_connection = True
        if stream is None:
            handler.send_response(400)
            handler.send_header("content-length", "0")
            handler.end_headers()
            return
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("transfer-encoding", "chunked")
        handler.send_header("request-id", "req_fake_sse")
        handler.end_headers()
        try:
            for i, event in enumerate(stream.events):
                if i == stream.hold_after:
                    stream.release.wait(10)
                handler.wfile.write(b"%x\r\n%b\r\n" % (len(event), event))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
            stream.finished.set()
        except (BrokenPipeError, ConnectionResetError):
            pass

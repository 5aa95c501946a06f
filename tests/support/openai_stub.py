"""A real HTTP server that speaks the OpenAI chat API with scripted answers, for tests.

It listens on 127.0.0.1 in a background thread and answers ``POST /v1/chat/completions`` (and
``POST /chat/completions``) from a queue of ``Reply`` objects, recording every request it gets. A reply
can be a well-formed completion, any raw body, any HTTP status, a hang longer than the client's timeout,
or a dropped connection — the ways real endpoints fail. ``stop()`` releases hanging handlers at once, so
a timeout test does not wait for the hang to end.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass(frozen=True)
class Reply:
    """One scripted answer: wait ``delay`` s, then send ``status`` and ``body`` (or drop the connection)."""

    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    drop: bool = False
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)


def completion(content: str | None, model: str = "stub-model") -> Reply:
    """A well-formed chat completion whose first choice says ``content``."""
    payload = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return Reply(body=json.dumps(payload).encode())


def json_answer(value: Any) -> Reply:
    """A completion whose content is ``value`` written as JSON."""
    return completion(json.dumps(value))


def error(status: int, message: str = "stub error") -> Reply:
    return Reply(status=status, body=json.dumps({"error": {"message": message}}).encode())


def raw(body: str, status: int = 200) -> Reply:
    """Any body at all, e.g. an HTML error page from a proxy."""
    return Reply(status=status, body=body.encode(), headers=(("Content-Type", "text/html"),))


def hang(seconds: float) -> Reply:
    """Answer nothing for ``seconds`` (then a valid completion, if the client is still listening)."""
    return Reply(delay=seconds, body=completion("late").body)


def dropped() -> Reply:
    """Close the connection without answering."""
    return Reply(drop=True)


HANG_TIMEOUT = 0.3  # well below every scripted hang
ANSWER_TIMEOUT = 30.0


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the JSON request body, or the raw text when it is not JSON


@dataclass
class OpenAIStub:
    """``with OpenAIStub() as stub: stub.script(...); ChatClient(stub.url, ...)``.

    Replies are consumed in order; when the script is empty ``default`` answers (an HTTP 599 by
    default, so a test that sends more requests than it scripted fails loudly).
    """

    default: Reply = field(default_factory=lambda: error(599, "no scripted reply left"))
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="openai-stub", daemon=True)

    @property
    def root_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        """The base URL a user would configure (with ``/v1``)."""
        return self.root_url + "/v1"

    def script(self, *replies: Reply) -> OpenAIStub:
        with self._lock:
            self._replies.extend(replies)
        return self

    def client_timeout(self) -> float:
        """The client timeout a test should use: short when a hang is scripted (so the timeout fires fast),
        generous otherwise (so a loaded CI machine never turns a prompt answer into a timeout)."""
        with self._lock:
            return HANG_TIMEOUT if any(reply.delay for reply in self._replies) else ANSWER_TIMEOUT

    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def start(self) -> OpenAIStub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, recorded: Recorded) -> None:
        with self._lock:
            self.requests.append(recorded)

    def _next(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            return self._replies.popleft() if self._replies else self.default


def _handler_for(stub: OpenAIStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            text = self.rfile.read(length).decode("utf-8", errors="replace")
            try:
                body: Any = json.loads(text)
            except ValueError:
                body = text
            recorded = Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            if self.path not in CHAT_PATHS:
                stub._record(recorded)  # kept, so a test can see the wrong path
                self._send(error(404, f"no route {self.path}"))
                return
            reply = stub._next(recorded)
            if reply.delay and stub._released.wait(reply.delay):
                return  # the stub is stopping: abandon the hanging request
            if reply.drop:
                self.close_connection = True
                return
            self._send(reply)

        def _send(self, reply: Reply) -> None:
            try:
                self.send_response(reply.status)
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler

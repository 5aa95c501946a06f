"""``RemoteEnv``: a device of an env server, seen as a local ``GuiEnv``.

A rollout cannot tell it from a local env: ``reset`` leases a device (one session per episode),
``step`` acts on it, a device that died on the server surfaces as ``EnvCrashed`` (the trajectory
becomes ``env_error`` and is re-run) and an action the screen cannot take as ``InvalidAction``.
Connection errors and ``no_capacity`` answers are retried with backoff; a retried step carries the
same ``seq``, so the server never acts twice.

Requests go over one keep-alive HTTP/1.1 connection on a bare socket (``KeepAlive``): a step is one
small JSON request, and a general-purpose HTTP client cost as much CPU per step as the server did.
``transport=`` swaps it for any ``Transport`` (tests break chosen requests with one).

The ``remote`` backend (declared in ``admire.envs.base.ENVS``): ``make_env("remote:http://127.0.0.1:8765",
max_steps=8)``, or ``env.src=[remote:http://127.0.0.1:8765]`` in a training config. It lives with the
other backends, not in ``admire.server``: it is what a trainer uses, and needs only the standard library
and the server's request/response schemas (``admire.wire``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import ssl
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, BinaryIO, Protocol
from urllib.parse import urlsplit

from admire.actions import ActionError, validate_action
from admire.envs.base import EnvCrashed, InvalidAction, StepResult
from admire.retrying import backoff_seconds, retry_after_seconds
from admire.types import Action, Observation, Task
from admire.wire import CLIENT_HEADER, SessionCreated, StepReply

log = logging.getLogger("admire.server")

TOKEN_ENV = "ADMIRE_SERVER_TOKEN"


# ------------------------------------------------------------------------------------------ transport


class TransportError(Exception):
    """The request or its reply was lost on the way (refused, reset, timed out): the server may or may
    not have acted on it, so only requests that are safe to repeat are retried."""


@dataclass(frozen=True)
class Reply:
    """An HTTP reply, read in full. ``headers`` has lower-case names."""

    status: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body as JSON (``ValueError`` when it is not)."""
        return json.loads(self.content)


class Transport(Protocol):
    """How ``RemoteEnv`` reaches the server: one request in, one whole reply out, or ``TransportError``."""

    def send(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str],
             timeout_s: float | None = None) -> Reply: ...

    def close(self) -> None: ...


class KeepAlive:
    """``Transport`` over one persistent HTTP/1.1 connection to ``url`` (http or https), on bare sockets.

    Why not ``http.client``: it sends the headers and the body of a request in two segments (the
    server wakes up twice) and parses reply headers with the ``email`` package; on a step that was a
    third of the client's CPU. What a step needs of HTTP/1.1 is small: one request written at once,
    and a reply with ``Content-Length`` or chunked.

    ``connect_timeout_s`` bounds opening the connection, ``timeout_s`` (or a request's own) each wait
    for the server. A reused connection the server has closed meanwhile (uvicorn drops idle ones after
    a few seconds) is noticed before sending, and a request that still finds it closed is sent once
    more on a fresh connection: the server had not read it (and every request ``RemoteEnv`` sends is
    safe to repeat anyway: ``seq``, ``request_id``). Not thread-safe: one env steps one episode at a time.
    """

    def __init__(self, url: str, *, timeout_s: float, connect_timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"need an http(s) URL with a host, got {url!r}")
        self.secure = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.secure else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        default_port = self.port == (443 if self.secure else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._host_header = host if default_port else f"{host}:{self.port}"
        self._sock: socket.socket | None = None
        self._reader: BinaryIO | None = None
        self._used = False

    def send(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str],
             timeout_s: float | None = None) -> Reply:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        request = self._encode(method, path, body, headers)
        reused = self._sock is not None and self._used and not self._closed_by_server()
        if not reused:
            self.close()
        try:
            return self._exchange(method, request, timeout)
        except (_Stale, BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as exc:
            self.close()
            if not reused:
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        except (OSError, ValueError) as exc:  # refused, timed out, a reply that is not HTTP
            self.close()
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        try:  # the stale keep-alive connection's request, once more on a new one
            return self._exchange(method, request, timeout)
        except (OSError, ValueError) as exc:
            self.close()
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = self._reader = None
        self._used = False

    def _encode(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]) -> bytes:
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self._host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        if any("\r" in line or "\n" in line for line in lines):
            raise ValueError("a request line or header contains a line break")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")

    def _exchange(self, method: str, request: bytes, timeout_s: float) -> Reply:
        if self._sock is None:
            self._connect()
        sock, reader = self._sock, self._reader
        assert sock is not None and reader is not None
        sock.settimeout(timeout_s)
        sock.sendall(request)
        status_line = reader.readline(_MAX_LINE + 1)
        if not status_line:
            raise _Stale("the server closed the connection without a reply")
        self._used = True
        status, headers, keep_alive = _read_head(status_line, reader)
        content, to_the_end = _read_body(method, status, headers, reader)
        if to_the_end or not keep_alive:
            self.close()
        return Reply(status=status, headers=headers, content=content)

    def _connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.secure:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self._sock, self._reader, self._used = sock, sock.makefile("rb"), False

    def _closed_by_server(self) -> bool:
        """An idle keep-alive socket that is readable has been closed (or broken) by the server."""
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)


class _Stale(ConnectionError):
    """The connection ended before the reply began."""


_MAX_LINE = 65536
_MAX_HEADERS = 100


def _read_head(status_line: bytes, reader: BinaryIO) -> tuple[int, dict[str, str], bool]:
    """The status, the headers (lower-case names) and whether the connection stays open, of a reply
    whose status line was read."""
    parts = status_line.split(None, 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[1].isdigit() \
            or len(status_line) > _MAX_LINE:
        raise ValueError(f"not an HTTP/1.x reply: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADERS + 1):
        line = reader.readline(_MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            connection = headers.get("connection", "").lower()
            keep_alive = "keep-alive" in connection if parts[0] == b"HTTP/1.0" else "close" not in connection
            return int(parts[1]), headers, keep_alive
        if not line or len(line) > _MAX_LINE:
            raise ValueError("the reply's headers are cut off or too long")
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise ValueError(f"a malformed reply header: {line[:100]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    raise ValueError(f"the reply has more than {_MAX_HEADERS} headers")


def _has_body(method: str, status: int) -> bool:
    return method != "HEAD" and status >= 200 and status not in (204, 304)


def _read_body(method: str, status: int, headers: Mapping[str, str], reader: BinaryIO) -> tuple[bytes, bool]:
    """The body, and whether it ran to the end of the connection (no length given)."""
    if not _has_body(method, status):
        return b"", False
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size_line = reader.readline(_MAX_LINE + 1)
            size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)  # ValueError when cut off
            if size == 0:
                while reader.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks), False
            chunks.append(_read_exactly(reader, size))
            _read_exactly(reader, 2)
    length = headers.get("content-length")
    if length is None:
        return reader.read(), True
    if not length.isdigit():
        raise ValueError(f"a malformed Content-Length: {length!r}")
    return _read_exactly(reader, int(length)), False


def _read_exactly(reader: BinaryIO, size: int) -> bytes:
    data = reader.read(size)
    if len(data) != size:
        raise ConnectionResetError(f"the reply was cut off after {len(data)} of {size} bytes")
    return data


# ------------------------------------------------------------------------------------------- the env


class RemoteEnv:
    """A ``GuiEnv`` whose device lives on an ``admire serve`` server at ``url``.

    ``max_steps`` is sent as the task's step budget when the task sets none (as a local env uses
    its own); ``screenshots`` asks for PNGs in observations (the server must take them:
    ``admire serve --screenshots``). ``token`` defaults to ``$ADMIRE_SERVER_TOKEN``. ``timeout_s``
    bounds one request; it should exceed the server's ``call_timeout_s`` so that a hung device is
    reported by the server rather than guessed at here. ``retries`` bounds the retries of one
    request on connection errors and ``no_capacity``. ``transport`` replaces the HTTP connection
    (default: ``KeepAlive``).

    Each env has its own random ``client_id``, sent on every request (``X-Admire-Client``): the
    server lets only this client step or close the sessions it creates.
    """

    def __init__(self, url: str, *, max_steps: int | None = None, screenshots: bool = False,
                 token: str | None = None, timeout_s: float = 180.0, connect_timeout_s: float = 5.0,
                 retries: int = 5, backoff_s: float = 0.25, max_backoff_s: float = 8.0,
                 transport: Transport | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"a remote env needs the server's http(s) URL, e.g. 'remote:http://127.0.0.1:8765'; "
                             f"got {url!r}")
        if max_steps is not None and int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.url = url.rstrip("/")
        self.max_steps = None if max_steps is None else int(max_steps)
        self.screenshots = bool(screenshots)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.client_id = uuid.uuid4().hex
        self._headers = {"Accept": "application/json", CLIENT_HEADER: self.client_id,
                         **({"Authorization": f"Bearer {token}"} if token else {})}
        self._json_headers = {**self._headers, "Content-Type": "application/json"}
        self._http: Transport = transport if transport is not None else KeepAlive(
            self.url, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s)
        self._session: str | None = None
        self._seq = 0
        self._closed = False
        self.device_id: int | None = None

    # ---------------------------------------------------------------------------------- GuiEnv

    def reset(self, task: Task) -> Observation:
        self._check_open()
        self._end_session()
        max_steps = task.max_steps if task.max_steps is not None else self.max_steps
        body = {"task": task.name, "seed": task.seed, "max_steps": max_steps, "params": dict(task.params),
                "screenshots": self.screenshots, "request_id": uuid.uuid4().hex}
        reply = self._request("POST", "/sessions", body)
        created = SessionCreated.model_validate_json(reply.content)
        self._session, self._seq, self.device_id = created.session_id, 0, created.device_id
        return created.observation

    def step(self, action: Action | Mapping[str, Any]) -> StepResult:
        self._check_open()
        if self._session is None:
            raise RuntimeError("no episode is running: call reset(task) first")
        try:
            action = validate_action(action)
        except ActionError as exc:
            raise InvalidAction(str(exc)) from exc
        body = {"action": action.as_dict(), "seq": self._seq}
        try:
            reply = self._request("POST", f"/sessions/{self._session}/step", body)
        except EnvCrashed:
            self._end_session()
            raise
        step = StepReply.model_validate_json(reply.content)
        self._seq += 1
        return StepResult(observation=step.observation, done=step.done, success=step.success, info=step.info)

    def close(self) -> None:
        """End the session (its episode, if running, is recorded ``abandoned``). Idempotent."""
        if self._closed:
            return
        self._end_session()
        self._closed = True
        self._http.close()

    def healthy(self) -> bool:
        """The server answers and has a usable device (``/health`` is not ``down``)."""
        if self._closed:
            return False
        try:
            reply = self._http.send("GET", "/health", None, self._headers, timeout_s=5.0)
            return reply.status == 200 and reply.json().get("status") != "down"
        except (TransportError, ValueError, AttributeError):
            return False

    # ------------------------------------------------------------------------------- beyond GuiEnv

    def restart(self) -> None:
        """After a crash: drop the session. The server restarts its device; the next ``reset`` leases
        a healthy one."""
        self._end_session()

    @property
    def session_id(self) -> str | None:
        return self._session

    def __enter__(self) -> RemoteEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this remote env is closed; make a new one")

    def _end_session(self) -> None:
        session, self._session, self.device_id = self._session, None, None
        if session is None:
            return
        try:
            self._http.send("DELETE", f"/sessions/{session}", None, self._headers)
        except TransportError as exc:  # the server reclaims it after its lease_ttl
            log.warning("could not close session %s on %s: %s", session, self.url, exc)

    def _request(self, method: str, path: str, body: dict[str, Any]) -> Reply:
        """Send with retries on connection errors and ``no_capacity``; map error replies to exceptions."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        for attempt in range(self.retries + 1):
            last_try = attempt == self.retries
            try:
                reply = self._http.send(method, path, payload, self._json_headers)
            except TransportError as exc:
                if last_try:
                    raise EnvCrashed(f"the env server at {self.url} did not answer {method} {path} after "
                                     f"{attempt + 1} tries: {exc}") from exc
                log.warning("%s %s failed (%s); retrying", method, path, exc)
                time.sleep(self._backoff(attempt))
                continue
            if reply.status == 503 and _error_of(reply)[0] == "no_capacity" and not last_try:
                time.sleep(max(self._backoff(attempt), min(_retry_after(reply), self.max_backoff_s)))
                continue
            if reply.ok:
                return reply
            raise self._error(reply, method, path)
        raise AssertionError("unreachable: the last try returns or raises")

    def _backoff(self, attempt: int) -> float:
        return backoff_seconds(attempt, base=self.backoff_s, cap=self.max_backoff_s, jitter=(0.5, 1.0))

    def _error(self, reply: Reply, method: str, path: str) -> Exception:
        code, detail = _error_of(reply)
        status = reply.status
        where = f"env server {self.url} ({method} {path}: {status} {code})"
        if status == 401:
            return PermissionError(f"{where}: {detail}; pass token= or set {TOKEN_ENV}")
        if code == "invalid_action":
            return InvalidAction(detail)
        if status in (400, 413, 422):
            return ValueError(f"{where}: {detail}")
        if code in ("episode_over", "request_id_reused"):
            return RuntimeError(f"{where}: {detail}")
        if status in (404, 409, 410) or status >= 500:
            return EnvCrashed(f"{where}: {detail}")
        return RuntimeError(f"{where}: {detail}")


def _error_of(reply: Reply) -> tuple[str, str]:
    """(code, detail) of an error reply; tolerant of bodies that are not ours (a proxy's page)."""
    try:
        body = reply.json()
    except ValueError:
        text = reply.content.decode("utf-8", errors="replace")
        return "http_error", text[:300] or _reason(reply.status)
    if isinstance(body, dict):
        return str(body.get("error", "http_error")), str(body.get("detail", body))[:2000]
    return "http_error", str(body)[:300]


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def _retry_after(reply: Reply) -> float:
    """The wait a ``no_capacity`` answer asks for (1 s when it names none or cannot be read)."""
    seconds = retry_after_seconds(reply.headers.get("retry-after"))
    return 1.0 if seconds is None else seconds

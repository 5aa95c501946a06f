"""The env server's HTTP API: a ``DevicePool`` behind FastAPI.

Every failure a client can cause is a 4xx whose body names what was wrong (``ErrorBody``); the only
5xx is a deliberate 503 — ``no_capacity`` (no device or step slot now: retry after ``Retry-After``),
``env_crashed`` (the device died during this request: the episode is lost, start a new session) or
``shutting_down``. The routes are plain ``def`` functions: FastAPI runs them on its thread pool, so
slow devices never block the event loop, and the pool itself is thread-safe.

The step route is the hot path (a trainer steps thousands of times per minute), so ``StepFastPath``
serves well-formed step requests without FastAPI's routing, dependency and validation machinery,
with the same pool call and the same replies; anything else (a bad body, a missing token, an odd
content type) falls through to the FastAPI route, which stays the one that documents and refuses.

Hostile input is stopped before it costs anything: ``HostCheck`` refuses a Host header that is not
loopback when the server has no token (a web page's DNS rebinding), ``BodyLimits`` refuses bodies over
``max_request_bytes`` or nested deeper than ``MAX_JSON_DEPTH`` before any parser recurses, and a session
answers only the client that created it (``X-Admire-Client``), so a token holder cannot step another's.
Every code an error body can carry is in ``errors.ERROR_CODES``.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from admire.actions import ActionError, validate_action
from admire.envs.base import InvalidAction
from admire.server import metrics
from admire.server.errors import ERROR_CODES, NoCapacity, PoolError
from admire.server.pool import DevicePool
from admire.wire import (
    CLIENT_HEADER,
    CLIENT_ID_PATTERN,
    MAX_JSON_DEPTH,
    SESSION_ID_PATTERN,
    CreateSession,
    DeviceInfo,
    EpisodeInfo,
    ErrorBody,
    Health,
    SessionClosed,
    SessionCreated,
    StepReply,
    StepRequest,
    json_safe,
)

log = logging.getLogger("admire.server")

DEFAULT_MAX_REQUEST_BYTES = 1 << 20
"""1 MiB: an action or a task is a few hundred bytes; anything near this is a mistake or an attack."""

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
"""The Host names a loopback server without a token answers to (any port): a page of another site that
rebinds its name to 127.0.0.1 still sends its own name, and is refused."""


def _codes_by_status() -> dict[int | str, dict[str, Any]]:
    codes: dict[int, list[str]] = defaultdict(list)
    for code, entry in ERROR_CODES.items():
        codes[entry.status].append(code)
    return {status: {"model": ErrorBody, "description": ", ".join(names)} for status, names in sorted(codes.items())}


_ERRORS = _codes_by_status()
"""The OpenAPI error responses of every route: each status with the ``error`` codes it can carry."""


class Unauthorized(Exception):
    """A missing or wrong token (only when the server has one)."""


ClientId = Annotated[str, Header(alias=CLIENT_HEADER, pattern=CLIENT_ID_PATTERN,
                                 description="this client's id (8-64 letters, digits, - or _), generated once and "
                                             "sent on every request: a session answers only the client that "
                                             "created it. Keep it private, like the token.")]
MaybeClientId = Annotated[str | None, Header(alias=CLIENT_HEADER, pattern=CLIENT_ID_PATTERN,
                                             description="this client's id: its own sessions' ids are shown")]


def create_app(pool: DevicePool, *, token: str | None = None,
               max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
               allowed_hosts: Collection[str] | None = None) -> FastAPI:
    """The API over ``pool``. With ``token``, every route but ``/health`` (``/docs`` and
    ``/openapi.json`` included) needs ``Authorization: Bearer <token>``. ``allowed_hosts`` (e.g.
    ``LOOPBACK_HOSTS``, what ``admire serve`` passes on loopback without a token) are the only Host
    names answered; None answers any. ``app.state.pool`` is the pool, for a dashboard mounted at ``/ui``."""
    if max_request_bytes < 1024:
        raise ValueError(f"max_request_bytes must be at least 1024, got {max_request_bytes}")
    app = FastAPI(
        title="ADMIRE env server",
        version="1",
        description="GUI environments (MiniWoB++ browsers, Android emulators) pooled behind HTTP: create a "
                    "session for a task, step it with JSON actions, close it. See docs/server.md.",
        **({"openapi_url": None, "docs_url": None, "redoc_url": None} if token else {}),
    )
    app.state.pool = pool
    registry = metrics.registry_for(pool.stats)  # this app's own registry, never the process-global one
    app.add_middleware(StepFastPath, pool=pool, token=token)
    app.add_middleware(BodyLimits, max_bytes=max_request_bytes, max_depth=MAX_JSON_DEPTH)  # bounds the fast path
    if allowed_hosts is not None:
        app.add_middleware(HostCheck, allowed=allowed_hosts)  # outermost: a rebound page gets nothing
    _add_error_handlers(app)
    auth = [Depends(_token_check(token))] if token else []
    if token:
        _add_protected_docs(app, auth)

    @app.post("/sessions", status_code=201, response_model=SessionCreated, dependencies=auth, responses=_ERRORS,
              summary="Lease a device and start an episode of a task")
    def create_session(body: CreateSession, client: ClientId) -> SessionCreated:
        start = pool.create_session(body.to_task(), screenshots=body.screenshots, request_id=body.request_id,
                                    owner=client)
        return SessionCreated(session_id=start.session_id, device_id=start.device_id, task=start.task,
                              observation=start.observation)

    @app.post("/sessions/{session_id}/step", response_model=StepReply, dependencies=auth, responses=_ERRORS,
              summary="Execute one action (idempotent under retry with seq)")
    def step(session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)], body: StepRequest,
             client: ClientId) -> Response:
        return Response(content=_step_reply(pool, session_id, body, client), media_type="application/json")

    @app.delete("/sessions/{session_id}", response_model=SessionClosed, dependencies=auth, responses=_ERRORS,
                summary="End a session (a running episode is recorded as abandoned)")
    def close_session(session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)],
                      client: ClientId) -> SessionClosed:
        return SessionClosed(session_id=session_id, outcome=pool.close_session(session_id, owner=client))

    @app.get("/devices", response_model=list[DeviceInfo], dependencies=auth, responses=_ERRORS,
             summary="Every device and its state")
    def devices(client: MaybeClientId = None) -> list[DeviceInfo]:
        return [DeviceInfo(id=d.id, state=d.state, task=d.task, session_id=_own(d.session_id, d.owner, client),
                           restarts=d.restarts, failures=d.failures, last_change=d.last_change,
                           screenshot_url=(f"/devices/{d.id}/screenshot" if d.last_screenshot
                                           and _own(d.session_id, d.owner, client) else None))
                for d in pool.devices()]

    @app.get("/devices/{device_id}/screenshot", dependencies=auth, summary="The device's last screenshot (PNG)",
             response_class=Response,
             responses={**_ERRORS, 200: {"content": {"image/png": {}}, "description": "PNG image"}})
    def device_screenshot(device_id: Annotated[int, Path(ge=0, le=1_000_000)],
                          client: MaybeClientId = None) -> Response:
        png = pool.device_screenshot(device_id, owner=client)
        if png is None:  # another client's screen is as absent as a device that does not exist
            return _error(404, "no_screenshot", f"device {device_id} does not exist, has taken no screenshot yet, or "
                                                "is not leased by this client")
        return Response(content=png, media_type="image/png")

    @app.get("/episodes", response_model=list[EpisodeInfo], dependencies=auth, responses=_ERRORS,
             summary="Recent episodes, newest first")
    def episodes(limit: Annotated[int, Query(ge=1, le=1000)] = 50, client: MaybeClientId = None) -> list[EpisodeInfo]:
        return [EpisodeInfo(session_id=_own(e.session_id, e.owner, client), device_id=e.device_id, task=e.task,
                            seed=e.seed, steps=e.steps, outcome=e.outcome, started_at=e.started_at,
                            finished_at=e.finished_at) for e in pool.recent_episodes(limit)]

    @app.get("/health", response_model=Health, summary="Liveness and capacity (no token needed)")
    def health() -> Health:
        stats = pool.stats()
        usable = sum(n for state, n in stats.devices.items() if state not in ("quarantined", "stopped"))
        can_grow = sum(stats.devices.values()) < stats.max_devices
        status = "ok" if stats.devices["idle"] or can_grow else "degraded" if usable else "down"
        return Health(status=status, backend=pool.backend, devices=stats.devices,
                      sessions_active=stats.sessions_active)

    @app.get("/metrics", dependencies=auth, response_class=Response, summary="Prometheus metrics",
             responses={**_ERRORS, 200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
    def prometheus() -> Response:
        return Response(content=metrics.scrape(registry), media_type=metrics.CONTENT_TYPE)

    return app


_BEARER = HTTPBearer(auto_error=False, description="the server's token (admire serve --token)")
"""Module level: FastAPI resolves the (string) annotations below in this module's namespace."""


def _own(session_id: str | None, owner: str | None, client: str | None) -> str | None:
    """A session id as a listing shows it: to the client that owns the session only."""
    return session_id if session_id is not None and client is not None and owner == client else None


def _add_protected_docs(app: FastAPI, auth: list[Any]) -> None:
    """``/openapi.json``, ``/docs`` and ``/redoc`` behind the token, like every route but ``/health``."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=auth)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - Swagger UI")

    @app.get("/redoc", include_in_schema=False, dependencies=auth)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")


def _token_check(token: str) -> Callable[..., None]:
    expected = token.encode()

    def check(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]) -> None:
        given = credentials.credentials.encode() if credentials is not None else b""
        if not hmac.compare_digest(given, expected):
            raise Unauthorized

    return check


def _error(status: int, code: str, detail: str, headers: dict[str, str] | None = None,
           **extra: Any) -> JSONResponse:
    assert ERROR_CODES[code].status == status, (code, status)  # every code is listed, with its status
    body = ErrorBody(error=code, detail=detail, **extra).model_dump(exclude_none=True)
    return JSONResponse(status_code=status, content=body, headers=headers)


def _step_reply(pool: DevicePool, session_id: str, body: StepRequest, client: str) -> bytes:
    """The step, as the JSON reply body; raises the errors ``_known_error`` maps."""
    action = validate_action(body.action)
    result = pool.step(session_id, action, body.seq, owner=client)
    reply = StepReply(seq=body.seq, observation=result.observation, done=result.done, success=result.success,
                      info=json_safe(dict(result.info)))
    return reply.model_dump_json().encode()


def _known_error(exc: Exception) -> JSONResponse | None:
    """The reply to an error the API expects (a pool error, a bad action); None for anything else."""
    if isinstance(exc, PoolError):
        headers, extra = None, {}
        if exc.status == 503:
            retry = exc.retry_after_s if isinstance(exc, NoCapacity) else 1.0
            headers, extra = {"Retry-After": str(max(1, math.ceil(retry)))}, {"retry_after_s": retry}
        expected = getattr(exc, "expected", None)
        if expected is not None:
            extra["expected_seq"] = expected
        return _error(exc.status, exc.code, exc.message, headers, **extra)
    if isinstance(exc, ActionError):
        return _error(422, "invalid_action", f"invalid action: {exc}")
    if isinstance(exc, InvalidAction):
        return _error(422, "invalid_action", f"the device cannot do this action on this screen: {exc}")
    return None


_KNOWN_ERRORS = (PoolError, ActionError, InvalidAction)


def _add_error_handlers(app: FastAPI) -> None:
    def known_error(_request: Request, exc: Exception) -> JSONResponse:
        response = _known_error(exc)
        assert response is not None, exc  # registered for _KNOWN_ERRORS only
        return response

    for kind in _KNOWN_ERRORS:
        app.add_exception_handler(kind, known_error)

    @app.exception_handler(Unauthorized)
    def unauthorized(_request: Request, _exc: Unauthorized) -> JSONResponse:
        return _error(401, "unauthorized", "missing or wrong token: send 'Authorization: Bearer <token>'",
                      headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(RequestValidationError)
    def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, "invalid_request", _describe_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status, code = _FRAMEWORK_ERRORS.get(exc.status_code, (400, "bad_request"))
        detail = str(exc.detail)
        if code == "bad_request":  # FastAPI's "There was an error parsing the body": say which
            detail = (f"{detail}: the body could not be read as JSON (e.g. a number longer than 4300 digits); "
                      "send a JSON object that fits the schema")
        return _error(status, code, detail, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    def internal_error(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error serving a request: %s", exc)  # a bug: every expected error is mapped
        return _error(500, "internal_error", f"the server failed unexpectedly ({type(exc).__name__}); "
                                             "this is a bug, please report it")


_FRAMEWORK_ERRORS = {404: (404, "not_found"), 405: (405, "method_not_allowed")}
"""Starlette's own HTTP errors as our codes; any other (FastAPI's 400 for an unreadable body) is
``bad_request``, so no reply carries a code the docs do not list."""


def _describe_validation(exc: RequestValidationError) -> str:
    """One line per problem: where (``body.seed``) and what pydantic said."""
    parts = []
    for error in exc.errors()[:10]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


class BodyLimits:
    """Refuse request bodies over ``max_bytes`` (413) or nested deeper than ``max_depth`` (422
    ``json_too_deep``) before any route reads them.

    Declared lengths are checked up front; chunked bodies are counted as they arrive, and the
    (bounded) body is then handed to the app as one message. Depth is read off the raw bytes: JSON
    parsers recurse, so a body of a few thousand ``[`` must never reach one.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, max_depth: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await _refuse(scope, send, 400, "bad_request", "the Content-Length header is not a number")
                return
            if size > self.max_bytes:
                await self._too_large(scope, send)
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._too_large(scope, send)
                return
            if not message.get("more_body", False):
                break
        if body.count(b"[") + body.count(b"{") > self.max_depth and \
                await anyio.to_thread.run_sync(json_deeper_than, bytes(body), self.max_depth):
            await _refuse(scope, send, 422, "json_too_deep",
                          f"the body nests arrays or objects deeper than {self.max_depth} levels; an action is 2 "
                          "levels deep: send a flat JSON object")
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        await _refuse(scope, send, 413, "request_too_large", f"the request body is larger than {self.max_bytes} bytes")


_JSON_TOKENS = re.compile(rb'\\.|["\[\]{}]')
"""What nesting depth depends on: escapes (to skip escaped quotes), quotes, brackets."""


def json_deeper_than(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` nests arrays/objects deeper than ``limit`` (brackets inside strings
    do not count). One linear pass, no recursion, whatever the bytes are."""
    depth, in_string = 0, False
    for match in _JSON_TOKENS.finditer(body):
        token = match[0]
        if token == b'"':
            in_string = not in_string
        elif in_string or len(token) == 2:
            continue
        elif token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(0, depth - 1)
    return False


class HostCheck:
    """Answer only requests whose Host header names one of ``allowed`` (any port), else 400 ``bad_host``.

    Why: a server on 127.0.0.1 without a token trusts whoever can reach it, and a web page can reach
    it by rebinding its own domain to 127.0.0.1 (DNS rebinding): the browser then sends that domain as
    the Host, which this check refuses before anything else runs.
    """

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = frozenset(name.strip("[]").lower() for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = dict(scope.get("headers") or []).get(b"host")
            name = host_name(host) if host is not None else None
            if name not in self.allowed:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                shown = host.decode("latin-1")[:100] if host is not None else "none"
                await _refuse(scope, send, 400, "bad_host",
                              f"this server answers only to {', '.join(sorted(self.allowed))} (any port), not the "
                              f"Host {shown!r}; connect to http://127.0.0.1:<port>")
                return
        await self.app(scope, receive, send)


def host_name(header: bytes) -> str:
    """The host of a Host header, lower-case, without the port or an IPv6 literal's brackets."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        end = text.find("]")
        return text[1:end] if end > 0 and text[end + 1:end + 2] in ("", ":") else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


async def _refuse(scope: Scope, send: Send, status: int, code: str, detail: str) -> None:
    """An error reply from a middleware, before the app (and its exception handlers) ran."""

    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    await _error(status, code, detail)(scope, nothing, send)


_STEP_PATH = re.compile(r"/sessions/([0-9a-f]{32})/step")
"""The step route's path with a valid session id (``SESSION_ID_PATTERN``)."""
_JSON_HEADERS = [(b"content-type", b"application/json")]


class StepFastPath:
    """Serve ``POST /sessions/{id}/step`` straight from ASGI when the request is well formed.

    Why: FastAPI's routing, dependency solving and body validation cost about as much CPU per step as
    the pool does. Well formed means: a valid session id, a JSON content type, the right token (when
    the server has one) and a body that ``StepRequest`` accepts, parsed as FastAPI parses it. Such a
    request gets exactly what the FastAPI route would answer (same pool call, same error mapping);
    anything else is handed on, body and all, to the FastAPI route, which produces the 401/422.
    """

    def __init__(self, app: ASGIApp, pool: DevicePool, token: str | None) -> None:
        self.app = app
        self.pool = pool
        self.authorization = f"bearer {token}".encode() if token else None
        self.client_id = re.compile(CLIENT_ID_PATTERN.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _STEP_PATH.fullmatch(_route_path(scope)) if scope["type"] == "http" and \
            scope["method"] == "POST" else None
        client = self._acceptable(scope["headers"]) if match is not None else None
        if match is None or client is None:
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        request = _parsed_step(body)
        if request is None:
            await self.app(scope, _replaying(body, receive), send)
            return
        try:
            content = await anyio.to_thread.run_sync(_step_reply, self.pool, match.group(1), request, client)
        except _KNOWN_ERRORS as exc:
            response = _known_error(exc)
            assert response is not None
            await response(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*_JSON_HEADERS, (b"content-length", str(len(content)).encode())]})
        await send({"type": "http.response.body", "body": content})

    def _acceptable(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """The client id when the headers are all the route wants (JSON, token, client id), else None."""
        json_body = authorized = False
        client = None
        for name, value in headers:
            if name == b"content-type":
                json_body = value.split(b";", 1)[0].strip().lower() == b"application/json"
            elif name == b"authorization" and self.authorization is not None:
                authorized = hmac.compare_digest(value[:7].lower() + value[7:], self.authorization)
            elif name == b"x-admire-client" and self.client_id.fullmatch(value):
                client = value.decode("ascii")
        return client if json_body and (authorized or self.authorization is None) else None


def _route_path(scope: Scope) -> str:
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def _parsed_step(body: bytes) -> StepRequest | None:
    """The body as FastAPI would read it (``json.loads``, then the model), or None to let FastAPI refuse it."""
    try:
        return StepRequest.model_validate(json.loads(body))
    except (ValueError, RecursionError):  # bad JSON and pydantic's ValidationError alike
        return None


def _replaying(body: bytes, receive: Receive) -> Receive:
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay

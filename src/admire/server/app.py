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
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
from collections.abc import Callable
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from admire.actions import ActionError, validate_action
from admire.envs.base import InvalidAction
from admire.server import metrics
from admire.server.errors import NoCapacity, PoolError
from admire.server.pool import DevicePool
from admire.server.schemas import (
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

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "bad task: wrong backend or unknown task"},
    401: {"model": ErrorBody, "description": "missing or wrong token"},
    404: {"model": ErrorBody, "description": "unknown session"},
    409: {"model": ErrorBody, "description": "the episode is over, or the step seq is out of order"},
    410: {"model": ErrorBody, "description": "the session expired (lease_ttl) and its device was reclaimed"},
    413: {"model": ErrorBody, "description": "request body too large"},
    422: {"model": ErrorBody, "description": "invalid request body or invalid action"},
    503: {"model": ErrorBody, "description": "no_capacity (retry after Retry-After), env_crashed (the device "
                                             "died: start a new session) or shutting_down"},
}


class Unauthorized(Exception):
    """A missing or wrong token (only when the server has one)."""


def create_app(pool: DevicePool, *, token: str | None = None,
               max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> FastAPI:
    """The API over ``pool``. With ``token``, every route but ``/health`` needs ``Authorization:
    Bearer <token>``. ``app.state.pool`` is the pool, for a dashboard mounted at ``/ui``."""
    if max_request_bytes < 1024:
        raise ValueError(f"max_request_bytes must be at least 1024, got {max_request_bytes}")
    app = FastAPI(
        title="ADMIRE env server",
        version="1",
        description="GUI environments (MiniWoB++ browsers, Android emulators) pooled behind HTTP: create a "
                    "session for a task, step it with JSON actions, close it. See docs/server.md.",
    )
    app.state.pool = pool
    app.add_middleware(StepFastPath, pool=pool, token=token)
    app.add_middleware(BodySizeLimit, max_bytes=max_request_bytes)  # outside the fast path: it bounds it too
    _add_error_handlers(app)
    auth = [Depends(_token_check(token))] if token else []

    @app.post("/sessions", status_code=201, response_model=SessionCreated, dependencies=auth, responses=_ERRORS,
              summary="Lease a device and start an episode of a task")
    def create_session(body: CreateSession) -> SessionCreated:
        start = pool.create_session(body.to_task(), screenshots=body.screenshots, request_id=body.request_id)
        return SessionCreated(session_id=start.session_id, device_id=start.device_id, task=start.task,
                              observation=start.observation)

    @app.post("/sessions/{session_id}/step", response_model=StepReply, dependencies=auth, responses=_ERRORS,
              summary="Execute one action (idempotent under retry with seq)")
    def step(session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)], body: StepRequest) -> Response:
        return Response(content=_step_reply(pool, session_id, body), media_type="application/json")

    @app.delete("/sessions/{session_id}", response_model=SessionClosed, dependencies=auth, responses=_ERRORS,
                summary="End a session (a running episode is recorded as abandoned)")
    def close_session(session_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)]) -> SessionClosed:
        return SessionClosed(session_id=session_id, outcome=pool.close_session(session_id))

    @app.get("/devices", response_model=list[DeviceInfo], dependencies=auth, responses=_ERRORS,
             summary="Every device and its state")
    def devices() -> list[DeviceInfo]:
        return [DeviceInfo(id=d.id, state=d.state, task=d.task, session_id=d.session_id, restarts=d.restarts,
                           failures=d.failures, last_change=d.last_change,
                           screenshot_url=f"/devices/{d.id}/screenshot" if d.last_screenshot else None)
                for d in pool.devices()]

    @app.get("/devices/{device_id}/screenshot", dependencies=auth, summary="The device's last screenshot (PNG)",
             response_class=Response,
             responses={**_ERRORS, 200: {"content": {"image/png": {}}, "description": "PNG image"}})
    def device_screenshot(device_id: Annotated[int, Path(ge=0, le=1_000_000)]) -> Response:
        png = pool.device_screenshot(device_id)
        if png is None:
            return _error(404, "no_screenshot", f"device {device_id} does not exist or has taken no screenshot yet")
        return Response(content=png, media_type="image/png")

    @app.get("/episodes", response_model=list[EpisodeInfo], dependencies=auth, responses=_ERRORS,
             summary="Recent episodes, newest first")
    def episodes(limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> list[EpisodeInfo]:
        return [EpisodeInfo(**vars(e)) for e in pool.recent_episodes(limit)]

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
        return Response(content=metrics.render(pool.stats()), media_type=metrics.CONTENT_TYPE)

    return app


_BEARER = HTTPBearer(auto_error=False, description="the server's token (admire serve --token)")
"""Module level: FastAPI resolves the (string) annotations below in this module's namespace."""


def _token_check(token: str) -> Callable[..., None]:
    expected = token.encode()

    def check(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]) -> None:
        given = credentials.credentials.encode() if credentials is not None else b""
        if not hmac.compare_digest(given, expected):
            raise Unauthorized

    return check


def _error(status: int, code: str, detail: str, headers: dict[str, str] | None = None,
           **extra: Any) -> JSONResponse:
    body = ErrorBody(error=code, detail=detail, **extra).model_dump(exclude_none=True)
    return JSONResponse(status_code=status, content=body, headers=headers)


def _step_reply(pool: DevicePool, session_id: str, body: StepRequest) -> bytes:
    """The step, as the JSON reply body; raises the errors ``_known_error`` maps."""
    action = validate_action(body.action)
    result = pool.step(session_id, action, body.seq)
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
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    def internal_error(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error serving a request: %s", exc)  # a bug: every expected error is mapped
        return _error(500, "internal_error", f"the server failed unexpectedly ({type(exc).__name__}); "
                                             "this is a bug, please report it")


def _describe_validation(exc: RequestValidationError) -> str:
    """One line per problem: where (``body.seed``) and what pydantic said."""
    parts = []
    for error in exc.errors()[:10]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


class BodySizeLimit:
    """Refuse request bodies over ``max_bytes`` with 413 before any route reads them.

    Declared lengths are checked up front; chunked bodies are counted as they arrive, and the
    (bounded) body is then handed to the app as one message.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await self._refuse(send, 400, "bad_request", "the Content-Length header is not a number")
                return
            if size > self.max_bytes:
                await self._too_large(send)
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._too_large(send)
                return
            if not message.get("more_body", False):
                break
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await self._refuse(send, 413, "request_too_large",
                           f"the request body is larger than {self.max_bytes} bytes")

    @staticmethod
    async def _refuse(send: Send, status: int, code: str, detail: str) -> None:
        payload = json.dumps({"error": code, "detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _STEP_PATH.fullmatch(_route_path(scope)) if scope["type"] == "http" and \
            scope["method"] == "POST" else None
        if match is None or not self._acceptable(scope["headers"]):
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
            content = await anyio.to_thread.run_sync(_step_reply, self.pool, match.group(1), request)
        except _KNOWN_ERRORS as exc:
            response = _known_error(exc)
            assert response is not None
            await response(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*_JSON_HEADERS, (b"content-length", str(len(content)).encode())]})
        await send({"type": "http.response.body", "body": content})

    def _acceptable(self, headers: list[tuple[bytes, bytes]]) -> bool:
        json_body = authorized = False
        for name, value in headers:
            if name == b"content-type":
                json_body = value.split(b";", 1)[0].strip().lower() == b"application/json"
            elif name == b"authorization" and self.authorization is not None:
                authorized = hmac.compare_digest(value[:7].lower() + value[7:], self.authorization)
        return json_body and (authorized or self.authorization is None)


def _route_path(scope: Scope) -> str:
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def _parsed_step(body: bytes) -> StepRequest | None:
    """The body as FastAPI would read it (``json.loads``, then the model), or None to let FastAPI refuse it."""
    try:
        return StepRequest.model_validate(json.loads(body))
    except ValueError:  # bad JSON and pydantic's ValidationError alike
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

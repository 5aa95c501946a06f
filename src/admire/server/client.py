"""``RemoteEnv``: a device of an env server, seen as a local ``GuiEnv``.

A rollout cannot tell it from a local env: ``reset`` leases a device (one session per episode),
``step`` acts on it, a device that died on the server surfaces as ``EnvCrashed`` (the trajectory
becomes ``env_error`` and is re-run) and an action the screen cannot take as ``InvalidAction``.
Connection errors and ``no_capacity`` answers are retried with backoff; a retried step carries the
same ``seq``, so the server never acts twice.

Registered as the ``remote`` backend: ``make_env("remote:http://127.0.0.1:8765", max_steps=8)``, or
``env.src=[remote:http://127.0.0.1:8765]`` in a training config.
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from admire.actions import ActionError, validate_action
from admire.envs.base import EnvCrashed, InvalidAction, StepResult, register_env
from admire.server.schemas import SessionCreated, StepReply
from admire.types import Action, Observation, Task

if TYPE_CHECKING:  # httpx is an optional dependency (the ``server`` extra): imported when a client is built
    import httpx

log = logging.getLogger("admire.server")

TOKEN_ENV = "ADMIRE_SERVER_TOKEN"


@register_env("remote")
class RemoteEnv:
    """A ``GuiEnv`` whose device lives on an ``admire serve`` server at ``url``.

    ``max_steps`` is sent as the task's step budget when the task sets none (as a local env uses
    its own); ``screenshots`` asks for PNGs in observations (the server must take them:
    ``admire serve --screenshots``). ``token`` defaults to ``$ADMIRE_SERVER_TOKEN``. ``timeout_s``
    bounds one request; it should exceed the server's ``call_timeout_s`` so that a hung device is
    reported by the server rather than guessed at here. ``retries`` bounds the retries of one
    request on connection errors and ``no_capacity``.
    """

    def __init__(self, url: str, *, max_steps: int | None = None, screenshots: bool = False,
                 token: str | None = None, timeout_s: float = 180.0, connect_timeout_s: float = 5.0,
                 retries: int = 5, backoff_s: float = 0.25, max_backoff_s: float = 8.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        import httpx

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
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, transport=transport,
                                  timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s))
        self._transport_errors: tuple[type[Exception], ...] = (httpx.TransportError,)
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
        response = self._request("POST", "/sessions", body)
        created = SessionCreated.model_validate_json(response.content)
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
            response = self._request("POST", f"/sessions/{self._session}/step", body)
        except EnvCrashed:
            self._end_session()
            raise
        reply = StepReply.model_validate_json(response.content)
        self._seq += 1
        return StepResult(observation=reply.observation, done=reply.done, success=reply.success, info=reply.info)

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
            response = self._http.get("/health", timeout=5.0)
            return response.status_code == 200 and response.json().get("status") != "down"
        except (*self._transport_errors, ValueError):
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
            self._http.delete(f"/sessions/{session}")
        except self._transport_errors as exc:  # the server reclaims it after its lease_ttl
            log.warning("could not close session %s on %s: %s", session, self.url, exc)

    def _request(self, method: str, path: str, body: dict[str, Any]) -> httpx.Response:
        """Send with retries on connection errors and ``no_capacity``; map error replies to exceptions."""
        for attempt in range(self.retries + 1):
            last_try = attempt == self.retries
            try:
                response = self._http.request(method, path, json=body)
            except self._transport_errors as exc:
                if last_try:
                    raise EnvCrashed(f"the env server at {self.url} did not answer {method} {path} after "
                                     f"{attempt + 1} tries: {type(exc).__name__}: {exc}") from exc
                log.warning("%s %s failed (%s); retrying", method, path, type(exc).__name__)
                time.sleep(self._backoff(attempt))
                continue
            if response.status_code == 503 and _error_of(response)[0] == "no_capacity" and not last_try:
                time.sleep(max(self._backoff(attempt), min(_retry_after(response), self.max_backoff_s)))
                continue
            if response.is_success:
                return response
            raise self._error(response, method, path)
        raise AssertionError("unreachable: the last try returns or raises")

    def _backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2**attempt) * random.uniform(0.5, 1.0)

    def _error(self, response: httpx.Response, method: str, path: str) -> Exception:
        code, detail = _error_of(response)
        status = response.status_code
        where = f"env server {self.url} ({method} {path}: {status} {code})"
        if status == 401:
            return PermissionError(f"{where}: {detail}; pass token= or set {TOKEN_ENV}")
        if code == "invalid_action":
            return InvalidAction(detail)
        if status in (400, 413, 422):
            return ValueError(f"{where}: {detail}")
        if code == "episode_over":
            return RuntimeError(f"{where}: {detail}")
        if status in (404, 409, 410) or status >= 500:
            return EnvCrashed(f"{where}: {detail}")
        return RuntimeError(f"{where}: {detail}")


def _error_of(response: httpx.Response) -> tuple[str, str]:
    """(code, detail) of an error reply; tolerant of bodies that are not ours (a proxy's page)."""
    try:
        body = response.json()
    except ValueError:
        return "http_error", response.text[:300] or response.reason_phrase
    if isinstance(body, dict):
        return str(body.get("error", "http_error")), str(body.get("detail", body))[:2000]
    return "http_error", str(body)[:300]


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0

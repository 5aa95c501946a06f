"""What can go wrong between a client and a device, as exceptions the pool raises and the API maps
one-to-one onto HTTP statuses (``app.py``) and the client maps back (``client.py``).

Each carries a stable ``code`` (the ``error`` field of every error body), so a client decides what to
do from the code, never by reading the message. ``ERROR_CODES`` is the one list of every code the
server can answer, with its status: the API refuses to answer a code missing from it, and a test
checks that docs/server.md lists exactly these.
"""

from __future__ import annotations

from typing import NamedTuple


class ErrorCode(NamedTuple):
    status: int
    when: str


ERROR_CODES: dict[str, ErrorCode] = {
    "bad_request": ErrorCode(400, "a body the server cannot read (a number too long to parse, a malformed "
                                  "Content-Length)"),
    "bad_host": ErrorCode(400, "a Host header that is not this machine's loopback name (DNS rebinding)"),
    "bad_task": ErrorCode(400, "another backend's task, or a task the device does not know"),
    "unauthorized": ErrorCode(401, "missing or wrong token"),
    "unknown_session": ErrorCode(404, "a session never created, already closed, or another client's"),
    "not_found": ErrorCode(404, "no such route"),
    "no_screenshot": ErrorCode(404, "the device does not exist or has taken no screenshot"),
    "method_not_allowed": ErrorCode(405, "a route that exists, with another method"),
    "episode_over": ErrorCode(409, "a step after the episode ended"),
    "step_out_of_order": ErrorCode(409, "a seq that is neither the next step nor the last one"),
    "request_id_reused": ErrorCode(409, "a request_id this client used before for another task"),
    "session_expired": ErrorCode(410, "no request for lease_ttl seconds: the device was reclaimed"),
    "request_too_large": ErrorCode(413, "a body over max_request_bytes"),
    "invalid_request": ErrorCode(422, "a body or header that does not fit the schema"),
    "json_too_deep": ErrorCode(422, "a body nested deeper than MAX_JSON_DEPTH levels"),
    "invalid_action": ErrorCode(422, "an action validate_action refused, or the screen cannot take"),
    "internal_error": ErrorCode(500, "a bug: every expected error has another code"),
    "no_capacity": ErrorCode(503, "no device or step slot free now: retry after Retry-After"),
    "env_crashed": ErrorCode(503, "the device crashed or hung during this request"),
    "shutting_down": ErrorCode(503, "the server is stopping"),
}
"""Every ``error`` code the server answers, with its HTTP status (docs/server.md, "Errors")."""


class PoolError(Exception):
    """Base of everything the pool refuses; ``code`` is the machine-readable reason."""

    code = "internal_error"
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TaskRejected(PoolError):
    """The task cannot run on this server (other backend, unknown task): the client's mistake."""

    code = "bad_task"
    status = 400


class UnknownSession(PoolError):
    """No such session: never created, closed, or reclaimed after ``lease_ttl`` of inactivity."""

    code = "unknown_session"
    status = 404


class SessionExpired(UnknownSession):
    """The session existed but was reclaimed for inactivity; its episode was recorded ``abandoned``."""

    code = "session_expired"
    status = 410


class RequestIdReused(PoolError):
    """A ``request_id`` this client already used, now for another task: a retry must repeat its request
    exactly, and a new request needs a new id (answering the old session would hide the mistake)."""

    code = "request_id_reused"
    status = 409


class EpisodeOver(PoolError):
    """A step on a session whose episode already ended (done, or an env error)."""

    code = "episode_over"
    status = 409


class StepOutOfOrder(PoolError):
    """A step whose ``seq`` is neither the next step nor a retry of the last one."""

    code = "step_out_of_order"
    status = 409

    def __init__(self, message: str, expected: int) -> None:
        super().__init__(message)
        self.expected = expected


class NoCapacity(PoolError):
    """Every device is busy, restarting or quarantined (or the step queue is full): retry later."""

    code = "no_capacity"
    status = 503

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DeviceFailed(PoolError):
    """The device crashed or hung while serving this request; the episode is ``env_error`` and the
    device is being restarted. A client starts a new session; it never retries the step."""

    code = "env_crashed"
    status = 503


class PoolClosed(PoolError):
    """The server is shutting down."""

    code = "shutting_down"
    status = 503

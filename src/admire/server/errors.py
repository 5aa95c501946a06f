"""What can go wrong between a client and a device, as exceptions the pool raises and the API maps
one-to-one onto HTTP statuses (``app.py``) and the client maps back (``client.py``).

Each carries a stable ``code`` (the ``error`` field of every error body), so a client decides what to
do from the code, never by reading the message.
"""

from __future__ import annotations


class PoolError(Exception):
    """Base of everything the pool refuses; ``code`` is the machine-readable reason."""

    code = "pool_error"
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

"""A deadline for reading each HTTP request, so a slow client cannot hold a connection forever.

uvicorn closes a keep-alive connection that is idle between requests, but once a client has sent one
byte of a request it waits for the rest without limit: forty clients dribbling a header or a body at a
byte every two seconds hold forty connections (and, for a body, forty app tasks parked in
``receive()``) for as long as they like (the "slowloris" attack). Here every request must arrive whole
(request line, headers and body) within ``request_timeout_s`` of the connection opening, or of the
previous response on a kept-alive connection; otherwise the connection is closed and the app, if it was
reading a body, hears ``http.disconnect``. Time spent *answering* (a device step of a minute) is not
counted: the deadline stops when the last byte of the request arrives.

Built on uvicorn's h11 protocol (the pure-Python parser shipped with uvicorn), whose per-request state
(``cycle``: a new one for each request, ``more_body`` False once the body is complete) says when a
request is whole; the server runs it through uvicorn's ``http=`` option.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

DEFAULT_REQUEST_TIMEOUT_S = 30.0
"""Enough for a request of the largest allowed body on a slow link; far below a held connection's cost."""

MIN_REQUEST_TIMEOUT_S = 1.0


def request_deadline_protocol(request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> type[asyncio.Protocol]:
    """The protocol class to hand to ``uvicorn.Config(http=…)`` / ``uvicorn.run(http=…)``: uvicorn's h11
    protocol with a deadline on reading each request. uvicorn is imported here, not with this module,
    so a command can check its flags against the bounds above on an install without the server extra."""
    if not request_timeout_s >= MIN_REQUEST_TIMEOUT_S:
        raise ValueError(f"the request timeout must be at least {MIN_REQUEST_TIMEOUT_S} s, got {request_timeout_s}")
    return _protocol_class(float(request_timeout_s))


@functools.cache
def _protocol_class(request_timeout_s: float) -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    timeout_s = request_timeout_s

    class RequestDeadlineProtocol(H11Protocol):
        """uvicorn's h11 protocol, closing a connection whose request is not whole in time."""

        request_timeout_s = timeout_s

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._read_deadline: asyncio.TimerHandle | None = None
            self._answered_cycle: Any = None
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._disarm_when_whole()

        def on_response_complete(self) -> None:
            self._answered_cycle = self.cycle
            super().on_response_complete()  # may start a pipelined request already in the buffer
            if not self.transport.is_closing():
                self._arm()
                self._disarm_when_whole()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._cancel()
            self._read_deadline = self.loop.call_later(self.request_timeout_s, self._too_slow)

        def _cancel(self) -> None:
            deadline = getattr(self, "_read_deadline", None)
            if deadline is not None:
                deadline.cancel()
                self._read_deadline = None

        def _disarm_when_whole(self) -> None:
            """Stop the clock once the request being read (a cycle not yet answered) has its whole body."""
            cycle = self.cycle
            if cycle is not None and cycle is not self._answered_cycle and not cycle.more_body:
                self._cancel()

        def _too_slow(self) -> None:
            self._read_deadline = None
            self.logger.info("closing a connection that did not send its request within %.0f s",
                             self.request_timeout_s)
            if not self.transport.is_closing():
                self.transport.close()

    return RequestDeadlineProtocol

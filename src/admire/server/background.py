"""Serving an ASGI app from inside this process, on a thread, for as long as a ``with`` block runs.

Benchmarks and tests need the real HTTP path (sockets, uvicorn, serialisation) while keeping hold of
the objects behind it — the soak benchmark kills browsers of the pool it serves — so the server runs
on a thread here instead of in an ``admire serve`` subprocess.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from admire.server.slow_clients import DEFAULT_REQUEST_TIMEOUT_S, request_deadline_protocol


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (another process may still take it before we bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_in_thread(app: Any, *, host: str = "127.0.0.1", port: int | None = None,
                    start_timeout_s: float = 30.0, log_level: str = "warning",
                    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> Iterator[str]:
    """Run ``app`` with uvicorn (lifespan events included) until the block ends; yields its base URL.
    Requests are read under ``admire serve``'s deadline (:mod:`admire.server.slow_clients`).

    The socket is bound here and handed to uvicorn, so no other process can take the port between
    choosing it and listening on it (``port=None``: any free one)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port or 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="on", ws="none",
                                           http=request_deadline_protocol(request_timeout_s)))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # signals belong to the main thread
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    try:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                raise RuntimeError(f"uvicorn did not start on {host}:{port}")
            time.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()

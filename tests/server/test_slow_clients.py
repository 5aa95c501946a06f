"""Slow clients are disconnected once their request is late; slow answers are not.

A real uvicorn on a thread (``serve_in_thread``) with a one-second request deadline. The clients are
raw sockets, so each test controls exactly which bytes arrive when.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI, Request

from admire.server.background import serve_in_thread
from admire.server.slow_clients import request_deadline_protocol

DEADLINE_S = 1.0
CLOSED_WITHIN_S = 15.0  # how long a test waits before calling a connection "held": far above the deadline


def make_app() -> FastAPI:
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"ok": "yes"}

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"bytes": len(await request.body())}

    @app.get("/slow-answer")
    async def slow_answer() -> dict[str, str]:
        await asyncio.sleep(2 * DEADLINE_S)  # answering takes longer than the request deadline
        return {"ok": "late"}

    return app


@pytest.fixture(scope="module")
def address() -> Iterator[tuple[str, int]]:
    with serve_in_thread(make_app(), request_timeout_s=DEADLINE_S) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=CLOSED_WITHIN_S)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or the test's patience ends)."""
    chunks = []
    deadline = time.monotonic() + CLOSED_WITHIN_S
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
    raise AssertionError(f"the connection was still open after {CLOSED_WITHIN_S} s: {b''.join(chunks)[:200]!r}")


def test_forty_clients_dribbling_headers_are_all_disconnected_while_others_are_served(
        address: tuple[str, int]) -> None:
    dribblers = [connect(address) for _ in range(40)]
    for sock in dribblers:
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # never finishes its headers
    with connect(address) as client:  # an honest client meanwhile
        client.sendall(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert b'{"ok":"yes"}' in read_all(client)
    for sock in dribblers:
        sock.sendall(b"a")  # a byte now and then does not reset the clock
    for sock in dribblers:
        assert read_all(sock) == b""  # closed, nothing answered
        sock.close()


def test_a_client_dribbling_its_body_is_disconnected() -> None:
    with serve_in_thread(make_app(), request_timeout_s=DEADLINE_S) as url:
        host, port = url.removeprefix("http://").split(":")
        with connect((host, int(port))) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
            started = time.monotonic()
            while time.monotonic() - started < 3 * DEADLINE_S:
                try:
                    sock.sendall(b"x")
                except OSError:
                    break
                time.sleep(0.2)
            assert b"200 OK" not in read_all(sock)


def test_a_slow_answer_is_not_cut_off_and_a_kept_alive_connection_is_timed_per_request(
        address: tuple[str, int]) -> None:
    with connect(address) as sock:
        sock.sendall(b"GET /slow-answer HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while b'{"ok":"late"}' not in answer:
            chunk = sock.recv(65536)
            assert chunk, "the connection was closed while the app was still answering"
            answer += chunk
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # the next request, never finished
        assert b'{"ok":"yes"}' not in read_all(sock)


def test_a_whole_request_in_many_small_pieces_within_the_deadline_is_answered(address: tuple[str, int]) -> None:
    body = b"y" * 64
    request = b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 64\r\n\r\n" + body
    with connect(address) as sock:
        for i in range(0, len(request), 16):
            sock.sendall(request[i:i + 16])
        assert b'{"bytes":64}' in read_all(sock)


def test_a_deadline_below_one_second_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        request_deadline_protocol(0.01)

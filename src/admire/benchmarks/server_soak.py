"""Env server soak: many real MiniWoB++ episodes through HTTP from concurrent clients while browsers
are killed at random, then a full account of every episode.

Set-up: one ``DevicePool`` of real MiniWoB++ devices behind the real API (uvicorn on 127.0.0.1, on a
thread of this process so the injector can reach the browsers), ``--clients`` threads each driving a
``RemoteEnv`` with a random clicking policy, and an injector thread that SIGKILLs the browser of a
random device every ``--crash-every`` seconds on average (exponential gaps). Before a step, a client
sends, with probability ``--hostile-rate``, a hostile step for its live session instead of (then as
well as) its action: an oversized text (over ``MAX_TEXT_CHARS``, sometimes over the body limit), a
body nested thousands of levels deep or a text holding a lone UTF-16 surrogate, over a connection of its
own with its own client id. Before an episode, at the same rate, it asks for a session with parameters no
device may take (a format-string goal template, a lone surrogate), and at a third of that rate it sends
one session request twice at the same instant (one ``request_id``) instead of its episode. Meanwhile
``--slow-clients`` connections at a time dribble requests they never finish.

What it checks, and reports:

* **no hangs**: every client call returns within ``--hang-after`` seconds and every client finishes;
* **nothing lost or double-counted**: each episode a client finished (success, failure, or a crash
  surfaced as ``EnvCrashed``) is recorded by the server exactly once with the same outcome, and the
  server records nothing more (a crash during ``reset`` is an ``env_error`` the client never got a
  session for: those are counted on both sides);
* **hostile steps are refused and harmless**: each is answered with its 4xx (``invalid_action``,
  ``request_too_large``, ``json_too_deep``) quickly (it never reaches a device, which would take
  minutes to type a long text, or crash on a surrogate), hostile session requests are a 422
  ``invalid_request``, a request sent twice at once gives one session (recorded once), and the
  accounting above still holds;
* **slow clients are cut off**: every dribbling connection is closed within the request deadline;
* restarts performed, quarantines, client-side p50/p99 step and reset latency.

Bounded in time: it stops starting episodes after ``--episodes`` or ``--max-seconds``. Exit status 1
when an invariant fails. ``admire bench server_soak [--episodes 500] [--clients 4]``;
about 3–5 minutes on 2 cores. ``main(argv)`` is what ``admire bench`` calls.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

TASKS = ("click-button", "click-checkboxes", "click-link", "click-tab", "focus-text", "click-dialog")
MAX_STEPS = 5


def _defaults() -> None:
    os.environ.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


@dataclass
class Ledger:
    """What the clients saw, shared by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: dict[str, str] = field(default_factory=dict)  # session id -> success | failure | env_error
    reset_crashes: int = 0
    step_s: list[float] = field(default_factory=list)
    reset_s: list[float] = field(default_factory=list)
    slowest_call_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    hostile: Counter[str] = field(default_factory=Counter)  # "<kind> <status> <code>" -> count
    hostile_s: list[float] = field(default_factory=list)
    in_flight: dict[int, float] = field(default_factory=dict)  # client -> start of its current call

    def timed(self, client: int, kind: list[float], call: Any) -> Any:
        start = time.monotonic()
        with self.lock:
            self.in_flight[client] = start
        try:
            return call()
        finally:
            elapsed = time.monotonic() - start
            with self.lock:
                self.in_flight.pop(client, None)
                kind.append(elapsed)
                self.slowest_call_s = max(self.slowest_call_s, elapsed)


def random_action(observation: Any, rng: random.Random) -> Any:
    from admire.types import Action

    clickable = [i for i, e in enumerate(observation.ui_elements)
                 if (e.is_clickable or e.is_checkable) and e.is_visible]
    return Action(action_type="click", index=rng.choice(clickable or range(len(observation.ui_elements))))


HOSTILE_ANSWERS = {"long_text": {(422, "invalid_action")}, "huge_text": {(413, "request_too_large")},
                   "deep_json": {(422, "json_too_deep")}, "surrogate_text": {(422, "invalid_action")}}
"""What each hostile step must be answered: a 4xx, never a device's work (a session's state is unchanged).
A lone surrogate typed into a browser crashed it, and three such steps quarantined the device."""

HOSTILE_PARAMS = (b'{"goal_template": "{utterance:>100000000}"}', b'{"goal_template": "{utterance.__class__}"}',
                  b'{"goal_template": "{nope}"}', b'{"x": "a\\ud800b"}', b'{"\\udc00": 1}')
"""Task parameters no device may take (a format-string template, a lone surrogate): each ``POST /sessions``
carrying one must be a 422 ``invalid_request`` before a device is leased."""


def hostile_body(kind: str, seq: int, rng: random.Random) -> bytes:
    """A step body no device may see: a text over the limit, a body over 1 MiB, nesting thousands deep, or a
    lone UTF-16 surrogate (valid JSON, not text)."""
    from admire.actions import MAX_TEXT_CHARS

    if kind == "deep_json":
        depth = rng.randint(33, 100_000)
        return b'{"action": {"action_type": "click", "index": ' + b"[" * depth + b"]" * depth + b'}, "seq": %d}' % seq
    if kind == "surrogate_text":
        return b'{"action": {"action_type": "input_text", "index": 0, "text": "a\\ud800b"}, "seq": %d}' % seq
    size = rng.randint(MAX_TEXT_CHARS + 1, 200_000) if kind == "long_text" else rng.randint(1 << 20, 3 << 20)
    return b'{"action": {"action_type": "input_text", "index": 0, "text": "' + b"x" * size + b'"}, "seq": %d}' % seq


def send_hostile(http: Any, env: Any, session: str, seq: int, rng: random.Random, ledger: Ledger) -> None:
    kind = rng.choice(sorted(HOSTILE_ANSWERS))
    send_refused(http, f"/sessions/{session}/step", hostile_body(kind, seq, rng), env.client_id, kind,
                 HOSTILE_ANSWERS[kind], f"hostile {kind} on session {session}", ledger)


def send_hostile_create(http: Any, client_id: str, task: Any, rng: random.Random, ledger: Ledger) -> None:
    """``POST /sessions`` with parameters no device may take: a 422 ``invalid_request``, no device leased."""
    params = rng.choice(HOSTILE_PARAMS)
    body = b'{"task": "%s", "seed": %d, "params": %s}' % (task.name.encode(), task.seed, params)
    send_refused(http, "/sessions", body, client_id, "params", {(422, "invalid_request")},
                 f"hostile params {params!r}", ledger)


def send_refused(http: Any, path: str, body: bytes, client_id: str, kind: str, expected: set[tuple[int, str]],
                 what: str, ledger: Ledger) -> None:
    """POST one request that must be refused and record its answer (``<kind> <status> <code>``) and how long it
    took; an answer outside ``expected``, or none, is a finding."""
    from admire.envs.remote import TransportError

    headers = {"Content-Type": "application/json", "X-Admire-Client": client_id}
    start = time.monotonic()
    try:
        reply = http.send("POST", path, body, headers)
    except TransportError as exc:  # a refused body may close the connection early: the next one opens anew
        with ledger.lock:
            ledger.hostile[f"{kind} transport-error"] += 1
            ledger.errors.append(f"hostile {kind}: no answer ({exc})")
        return
    elapsed = time.monotonic() - start
    code = _error_code(reply)
    with ledger.lock:
        ledger.hostile[f"{kind} {reply.status} {code}"] += 1
        ledger.hostile_s.append(elapsed)
        if (reply.status, code) not in expected:
            ledger.errors.append(f"{what} answered {reply.status} {code}")


def create_twice_at_once(url: str, client_id: str, task: Any, ledger: Ledger) -> None:
    """One ``POST /sessions`` sent twice at the same instant (a retry racing its original): one session, one
    device. The session is closed at once, so the server records it as ``abandoned``, once."""
    import json
    import uuid

    from admire.envs.remote import KeepAlive

    body = json.dumps({"task": task.name, "seed": task.seed, "max_steps": MAX_STEPS,
                       "request_id": uuid.uuid4().hex}).encode()
    headers = {"Content-Type": "application/json", "X-Admire-Client": client_id}
    connections = [KeepAlive(url, timeout_s=120, connect_timeout_s=5) for _ in range(2)]
    barrier = threading.Barrier(2)
    replies: list[Any] = [None, None]

    def send(i: int) -> None:
        barrier.wait()
        try:
            replies[i] = connections[i].send("POST", "/sessions", body, headers)
        except Exception as exc:  # noqa: BLE001 - reported as a finding below
            replies[i] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sessions = {r.json()["session_id"] for r in replies if not isinstance(r, Exception) and r.status == 201}
    codes = {_error_code(r) for r in replies}
    crashed, busy = codes == {"env_crashed"}, codes == {"no_capacity"}
    try:
        for session in sessions:
            connections[0].send("DELETE", f"/sessions/{session}", None, headers)
    finally:
        for connection in connections:
            connection.close()
    with ledger.lock:
        ledger.hostile[f"duplicate request_id: {len(sessions)} session(s)"] += 1
        for session in sessions:
            ledger.outcomes[session] = "abandoned"
        if crashed:  # the device crashed during its reset: an env_error the client got no session for
            ledger.reset_crashes += 1
        elif busy:  # every device leased for the whole wait: nothing was created, nothing to account for
            ledger.hostile["duplicate request_id: no capacity"] += 1
        elif len(sessions) != 1:
            ledger.errors.append(f"one request_id sent twice at once gave {len(sessions)} sessions: "
                                 f"{[getattr(r, 'status', r) for r in replies]}")


def _error_code(reply: Any) -> str | None:
    if isinstance(reply, Exception) or reply.ok:
        return None
    try:
        return str(reply.json().get("error"))
    except ValueError:
        return None


def client_loop(client: int, url: str, tickets: itertools.count, episodes: int, deadline: float,
                ledger: Ledger, hostile_rate: float = 0.0) -> None:
    from admire.envs import make_task
    from admire.envs.base import EnvCrashed, InvalidAction
    from admire.envs.remote import KeepAlive, RemoteEnv

    rng = random.Random(client)
    env = RemoteEnv(url, max_steps=MAX_STEPS, retries=20, backoff_s=0.1, max_backoff_s=1.0, timeout_s=120)
    raw = KeepAlive(url, timeout_s=60, connect_timeout_s=5)
    try:
        while time.monotonic() < deadline:
            ticket = next(tickets)
            if ticket >= episodes:
                return
            task = make_task(f"miniwob/{TASKS[ticket % len(TASKS)]}", seed=ticket)
            if rng.random() < hostile_rate:
                send_hostile_create(raw, f"{env.client_id}-hostile", task, rng, ledger)
            if rng.random() < hostile_rate / 3:
                create_twice_at_once(url, f"{env.client_id}-twice", task, ledger)
                continue
            try:
                observation = ledger.timed(client, ledger.reset_s, lambda t=task: env.reset(t))
            except EnvCrashed:
                with ledger.lock:
                    ledger.reset_crashes += 1
                continue
            session = env.session_id
            outcome = "failure"
            taken = 0
            try:
                for _ in range(MAX_STEPS):
                    if session is not None and rng.random() < hostile_rate:
                        send_hostile(raw, env, session, taken, rng, ledger)
                    action = random_action(observation, rng)
                    try:
                        result = ledger.timed(client, ledger.step_s, lambda a=action: env.step(a))
                    except InvalidAction:  # e.g. an element scrolled out of view: the agent's mistake
                        continue
                    observation = result.observation
                    taken += 1
                    if result.done:
                        outcome = "success" if result.success else "failure"
                        break
            except EnvCrashed:
                outcome = "env_error"
            with ledger.lock:
                if session in ledger.outcomes:
                    ledger.errors.append(f"session {session} was handed out twice")
                ledger.outcomes[session] = outcome
    except Exception as exc:  # noqa: BLE001 - any other error is a finding of the soak, reported below
        with ledger.lock:
            ledger.errors.append(f"client {client}: {type(exc).__name__}: {exc}")
    finally:
        env.close()
        raw.close()


def inject_crashes(envs: list[Any], mean_gap_s: float, stop: threading.Event, kills: Counter[str]) -> None:
    """SIGKILL the browser of a random device now and then; leased or idle, whichever it hits."""
    rng = random.Random(1234)
    while not stop.wait(rng.expovariate(1 / mean_gap_s)):
        env = rng.choice(envs)
        pid = env.browser_pid()
        if pid is None:
            kills["missed"] += 1
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            kills["killed"] += 1


def slow_clients(url: str, count: int, request_timeout_s: float, stop: threading.Event, ledger: Ledger) -> None:
    """Rounds of ``count`` connections that send the start of a request and then a byte every 2 s, never
    finishing it (slowloris). The server must close each within its request deadline (a margin allowed)
    while the soak's clients go on; one still open after that is a held connection, a finding."""
    import socket

    if count <= 0:
        return
    host, port = url.removeprefix("http://").rsplit(":", 1)
    patience = request_timeout_s + 15.0
    while not stop.is_set():
        opened = time.monotonic()
        sockets = []
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\nX-Slow: ")
            sock.setblocking(False)
            sockets.append(sock)
        while sockets and time.monotonic() - opened < patience and not stop.wait(2.0):
            for sock in list(sockets):
                try:
                    if sock.recv(4096) == b"":
                        raise ConnectionResetError
                    sock.send(b"a")
                except BlockingIOError:
                    sock.send(b"a")  # nothing to read: still open, one more byte
                except OSError:  # closed by the server (EOF, reset or broken pipe)
                    sockets.remove(sock)
                    sock.close()
                    with ledger.lock:
                        ledger.hostile["slow client closed"] += 1
        with ledger.lock:
            if sockets and not stop.is_set():
                ledger.errors.append(f"{len(sockets)} slow client(s) still connected after {patience:.0f} s")
        for sock in sockets:
            sock.close()


def watch_for_hangs(ledger: Ledger, hang_after_s: float, stop: threading.Event, hangs: list[str]) -> None:
    while not stop.wait(1.0):
        now = time.monotonic()
        with ledger.lock:
            for client, began in ledger.in_flight.items():
                if now - began > hang_after_s and not any(h.startswith(f"client {client}:") for h in hangs):
                    hangs.append(f"client {client}: a call has run for {now - began:.0f} s")


def account(ledger: Ledger, server_episodes: list[Any]) -> list[str]:
    """Every client episode recorded once by the server with the same outcome, and nothing more."""
    problems = []
    by_session = Counter(e.session_id for e in server_episodes)
    problems += [f"session {s} recorded {n} times" for s, n in by_session.items() if n > 1]
    recorded = {e.session_id: e for e in server_episodes}
    for session, outcome in ledger.outcomes.items():
        if session not in recorded:
            problems.append(f"session {session} ({outcome}) is missing from the server's record")
        elif recorded[session].outcome != outcome:
            problems.append(f"session {session}: client saw {outcome}, server recorded {recorded[session].outcome}")
    unknown = [e for e in server_episodes if e.session_id not in ledger.outcomes]
    reset_errors = [e for e in unknown if e.outcome == "env_error" and e.steps == 0]
    if len(reset_errors) != ledger.reset_crashes:
        problems.append(f"clients saw {ledger.reset_crashes} crashed resets, the server recorded {len(reset_errors)}")
    problems += [f"server recorded an episode no client ran: {e.session_id} ({e.outcome})"
                 for e in unknown if e not in reset_errors]
    return problems


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--crash-every", type=float, default=3.0, help="mean seconds between injected crashes")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="stop starting episodes after this")
    parser.add_argument("--hang-after", type=float, default=90.0, help="a call longer than this is a hang")
    parser.add_argument("--hostile-rate", type=float, default=0.15,
                        help="chance, before each step, of a hostile step (oversized or deeply nested) first")
    parser.add_argument("--slow-clients", type=int, default=20,
                        help="connections that dribble a request and never finish it, in rounds until the end")
    parser.add_argument("--request-timeout", type=float, default=5.0,
                        help="the server's deadline for reading a whole request (admire serve --request-timeout)")
    parser.add_argument("--verbose", action="store_true", help="show the pool's log (every crash and restart)")
    args = parser.parse_args(argv)
    _defaults()
    logging.getLogger("admire.server").setLevel(logging.INFO if args.verbose else logging.ERROR)

    from admire.envs.miniwob import MiniWoBEnv
    from admire.server.app import create_app
    from admire.server.background import serve_in_thread
    from admire.server.pool import DevicePool, PoolConfig

    envs: list[Any] = []  # every env the pool ever built (restart() keeps the object, a replacement adds one)

    def device() -> MiniWoBEnv:
        env = MiniWoBEnv(max_steps=MAX_STEPS)
        envs.append(env)
        return env

    config = PoolConfig(num_devices=args.devices, max_devices=args.devices, call_timeout_s=30.0,
                        lease_wait_s=30.0, lease_ttl_s=120.0, max_consecutive_failures=1000,
                        episode_history=args.episodes + 100)
    print(f"Env server soak: {args.episodes} episodes of {', '.join(TASKS)} (random clicks, ≤{MAX_STEPS} steps), "
          f"{args.clients} clients, {args.devices} devices, a browser killed every {args.crash_every:g} s on "
          f"average, hostile steps and session requests at rate {args.hostile_rate:g}, {args.slow_clients} slow "
          f"clients at a time, {os.cpu_count()} CPUs")
    began = time.monotonic()
    ledger, hangs, kills, stop = Ledger(), [], Counter(), threading.Event()
    pool = DevicePool(device, config, backend="miniwob")
    try:
        with serve_in_thread(create_app(pool), request_timeout_s=args.request_timeout) as url:
            tickets = itertools.count()
            deadline = time.monotonic() + args.max_seconds
            clients = [threading.Thread(target=client_loop, name=f"soak-client-{c}",
                                        args=(c, url, tickets, args.episodes, deadline, ledger, args.hostile_rate))
                       for c in range(args.clients)]
            helpers = [threading.Thread(target=inject_crashes, args=(envs, args.crash_every, stop, kills)),
                       threading.Thread(target=watch_for_hangs, args=(ledger, args.hang_after, stop, hangs)),
                       threading.Thread(target=slow_clients,
                                        args=(url, args.slow_clients, args.request_timeout, stop, ledger))]
            for thread in clients + helpers:
                thread.start()
            for thread in clients:
                thread.join(timeout=max(1.0, deadline - time.monotonic()) + 2 * args.hang_after)
                if thread.is_alive():
                    hangs.append(f"{thread.name} did not finish")
            stop.set()
            for thread in helpers:
                thread.join()
            pool.settle(timeout_s=120)
            server_episodes = pool.recent_episodes(limit=config.episode_history)
            stats = pool.stats()
    finally:
        pool.close()
    elapsed = time.monotonic() - began

    mismatches = account(ledger, server_episodes)
    problems = mismatches + ledger.errors + hangs
    seen = Counter(ledger.outcomes.values())
    print(f"\nepisodes finished by clients: {len(ledger.outcomes)} ({dict(seen)}), crashed resets "
          f"{ledger.reset_crashes}; the server recorded {len(server_episodes)} "
          f"({dict(Counter(e.outcome for e in server_episodes))})")
    print(f"browsers killed: {kills['killed']} (tries that found no browser: {kills['missed']}); "
          f"device restarts: {stats.counters.get('restarts', 0)}, "
          f"quarantines: {stats.counters.get('quarantines', 0)}, devices now {dict(stats.devices)}")
    print(f"step latency (client) p50 {1000 * quantile(ledger.step_s, 0.5):.0f} ms, "
          f"p99 {1000 * quantile(ledger.step_s, 0.99):.0f} ms over {len(ledger.step_s)} steps; "
          f"reset p50 {1000 * quantile(ledger.reset_s, 0.5):.0f} ms, "
          f"p99 {1000 * quantile(ledger.reset_s, 0.99):.0f} ms; slowest call {ledger.slowest_call_s:.1f} s")
    print(f"hostile requests: {sum(ledger.hostile.values())} ({dict(sorted(ledger.hostile.items()))}), answered in "
          f"p50 {1000 * quantile(ledger.hostile_s, 0.5):.0f} ms, max {1000 * max(ledger.hostile_s, default=0):.0f} ms")
    print(f"hangs: {len(hangs)}; lost, double-counted or mismatched episodes: {len(mismatches)}; "
          f"client errors: {len(ledger.errors)}")
    for problem in problems[:20]:
        print(f"  PROBLEM {problem}")
    print(f"\n(total {elapsed:.0f} s, {len(ledger.outcomes) / elapsed:.1f} episodes/s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

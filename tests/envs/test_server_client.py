"""``RemoteEnv`` against a real server on a loopback socket: the ``GuiEnv`` contract over HTTP, the
mapping of server errors to ``EnvCrashed``/``InvalidAction``, retries, and the trainer's path."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from admire.envs.base import EnvCrashed, GuiEnv, InvalidAction, make_env, make_task
from admire.envs.remote import TOKEN_ENV, KeepAlive, RemoteEnv, Reply, TransportError
from admire.rl.rollout import RolloutStats, collect, group_requests
from admire.server.app import create_app
from admire.server.background import free_port
from admire.server.pool import DevicePool
from admire.types import Action, Termination
from tests.support.fakes import FormEnv, ScriptedPolicy
from tests.support.server_helpers import (
    SOLVE_ANN,
    RecordingFactory,
    TaskCheckingEnv,
    form_task,
    make_pool,
    running_server,
)


@dataclass
class Served:
    pool: DevicePool
    devices: RecordingFactory
    url: str


@pytest.fixture
def served() -> Iterator[Served]:
    devices = RecordingFactory(TaskCheckingEnv)
    with make_pool(devices, num_devices=1, max_devices=2, lease_wait_s=5.0) as pool, \
            running_server(create_app(pool)) as url:
        yield Served(pool, devices, url)


def remote(url: str, **options) -> RemoteEnv:
    return RemoteEnv(url, backoff_s=0.01, max_backoff_s=0.05, **options)


@dataclass(frozen=True)
class Request:
    method: str
    path: str


class Interceptor:
    """Forwards to the real socket, letting a test break chosen requests (connection lost before
    sending, or the reply lost after the server acted)."""

    def __init__(self, url: str, before=None, after=None) -> None:
        self.inner = KeepAlive(url, timeout_s=30.0, connect_timeout_s=5.0)
        self.before, self.after = before, after
        self.sent: list[str] = []
        self.statuses: list[int] = []

    def send(self, method: str, path: str, body: bytes | None, headers, timeout_s: float | None = None) -> Reply:
        request = Request(method, path)
        self.sent.append(f"{method} {path}")
        if self.before is not None:
            self.before(request)
        reply = self.inner.send(method, path, body, headers, timeout_s)
        self.statuses.append(reply.status)
        if self.after is not None:
            self.after(request, reply)
        return reply

    def close(self) -> None:
        self.inner.close()


def test_make_env_with_a_remote_spec_builds_a_remote_env_that_plays_an_episode(served: Served) -> None:
    env = make_env(f"remote:{served.url}", max_steps=6, screenshots=False)
    try:
        assert isinstance(env, RemoteEnv) and isinstance(env, GuiEnv)
        observation = env.reset(form_task(seed=4))
        assert observation.goal == 'Enter "ann" and press Submit.'
        assert served.devices.envs[0].tasks[-1].max_steps == 6  # the trainer's max_steps reaches the device
        results = [env.step(action) for action in SOLVE_ANN]
        assert [r.done for r in results] == [False, True] and results[-1].success
        env.reset(form_task(seed=5).model_copy(update={"max_steps": 3}))
        assert served.devices.envs[0].tasks[-1].max_steps == 3  # a task's own budget wins
    finally:
        env.close()
    assert [e.outcome for e in served.pool.recent_episodes()] == ["abandoned", "success"]


def test_a_device_crash_on_the_server_is_env_crashed_and_the_next_reset_works() -> None:
    with make_pool(lambda: FormEnv(crash_on_step=1), lease_wait_s=30.0) as pool, \
            running_server(create_app(pool)) as url, remote(url) as env:
        env.reset(form_task())
        env.step(SOLVE_ANN[0])
        with pytest.raises(EnvCrashed, match="device 0 crashed"):
            env.step(SOLVE_ANN[1])
        assert env.session_id is None
        env.reset(form_task(seed=1))
        assert [env.step(a).success for a in SOLVE_ANN] == [False, True]
        assert [e.outcome for e in pool.recent_episodes()] == ["success", "env_error"]


def test_invalid_actions_are_invalid_action_whether_caught_here_or_on_the_device(served: Served) -> None:
    transport = Interceptor(served.url)
    with remote(served.url, transport=transport) as env:
        env.reset(form_task())
        with pytest.raises(InvalidAction, match="out of range"):
            env.step(Action(action_type="click", index=7))
        with pytest.raises(InvalidAction, match="unknown action_type 'fly'"):
            env.step({"action_type": "fly"})
        assert transport.sent.count(f"POST /sessions/{env.session_id}/step") == 1  # 'fly' never left
        assert [env.step(a).success for a in SOLVE_ANN] == [False, True]  # the episode went on


def test_a_bad_task_is_a_value_error_naming_the_problem(served: Served) -> None:
    with remote(served.url) as env:
        with pytest.raises(ValueError, match="runs 'fake' tasks"):
            env.reset(make_task("miniwob/login-user"))
        with pytest.raises(ValueError, match="unknown task 'unknown'"):
            env.reset(make_task("fake/unknown"))


def test_step_before_reset_and_use_after_close_are_errors(served: Served) -> None:
    env = remote(served.url)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(SOLVE_ANN[0])
    env.reset(form_task())
    assert env.healthy()
    env.close()
    env.close()  # idempotent
    assert not env.healthy()
    with pytest.raises(RuntimeError, match="closed"):
        env.reset(form_task())
    assert served.pool.recent_episodes()[0].outcome == "abandoned"
    assert served.pool.devices()[0].state == "idle"


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("remote:http://127.0.0.1:8765")):
        make_env("remote:127.0.0.1:8765")


def test_the_token_comes_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with make_pool() as pool, running_server(create_app(pool, token="tok")) as url:
        monkeypatch.delenv(TOKEN_ENV, raising=False)
        with remote(url) as env, pytest.raises(PermissionError, match=TOKEN_ENV):
            env.reset(form_task())
        with remote(url, token="tok") as env:
            env.reset(form_task())
        monkeypatch.setenv(TOKEN_ENV, "tok")
        with remote(url) as env:
            env.reset(form_task())


def test_connection_errors_are_retried(served: Served) -> None:
    failures = iter([True, True])

    def refuse(_request: Request) -> None:
        if next(failures, False):
            raise TransportError("ConnectionRefusedError: connection refused")

    transport = Interceptor(served.url, before=refuse)
    with remote(served.url, transport=transport) as env:
        env.reset(form_task())
        assert transport.sent == ["POST /sessions"] * 3


def test_a_lost_step_reply_is_retried_without_stepping_twice(served: Served) -> None:
    lost = iter([True])

    def lose_first_step_reply(request: Request, _reply: Reply) -> None:
        if request.path.endswith("/step") and next(lost, False):
            raise TransportError("ConnectionResetError: connection reset")

    with remote(served.url, transport=Interceptor(served.url, after=lose_first_step_reply)) as env:
        env.reset(form_task())
        result = env.step(SOLVE_ANN[0])
        assert result.observation.ui_elements[0].text == "ann"
        assert served.devices.envs[0]._steps == 1
        assert env.step(SOLVE_ANN[1]).success
    assert served.pool.stats().counters["step_replays"] == 1


def test_a_lost_create_reply_is_retried_without_leasing_twice(served: Served) -> None:
    lost = iter([True])

    def lose_first_reply(_request: Request, _reply: Reply) -> None:
        if next(lost, False):
            raise TransportError("ConnectionResetError: connection reset")

    with remote(served.url, transport=Interceptor(served.url, after=lose_first_reply)) as env:
        env.reset(form_task())
        assert [d.state for d in served.pool.devices()] == ["leased"]
        assert served.pool.stats().counters["sessions_created"] == 1


def test_no_capacity_is_retried_until_a_device_frees_up() -> None:
    with make_pool(num_devices=1) as pool, running_server(create_app(pool)) as url:
        holder = remote(url)
        holder.reset(form_task())

        def free_the_device(_request: Request, reply: Reply) -> None:
            if reply.status == 503:
                holder.close()

        transport = Interceptor(url, after=free_the_device)
        with remote(url, transport=transport) as env:
            env.reset(form_task(seed=1))
            assert transport.statuses == [503, 201]


def test_no_capacity_past_the_retries_is_env_crashed() -> None:
    with make_pool(num_devices=1) as pool, running_server(create_app(pool)) as url, remote(url) as holder:
        holder.reset(form_task())
        with remote(url, retries=2) as env, pytest.raises(EnvCrashed, match="no_capacity"):
            env.reset(form_task(seed=1))


def test_an_unreachable_server_is_env_crashed_after_the_retries() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with remote(f"http://127.0.0.1:{port}", retries=1) as env:
            assert not env.healthy()
            with pytest.raises(EnvCrashed, match="did not answer POST /sessions after 2 tries"):
                env.reset(form_task())


def test_rollouts_over_a_remote_env_rerun_an_episode_whose_device_crashed() -> None:
    with make_pool(lambda: FormEnv(crash_on_step=1), lease_wait_s=30.0) as pool, \
            running_server(create_app(pool)) as url, remote(url, max_steps=4) as env:
        stats = RolloutStats()
        policy = ScriptedPolicy([a.as_dict() for a in SOLVE_ANN])
        (trajectory,) = collect(group_requests([form_task()], n=1), [env], policy, max_steps=4, stats=stats)
        assert trajectory.termination is Termination.SUCCESS and trajectory.outcome == 1.0
        assert (stats.env_errors, stats.reruns) == (1, 1)
        assert [e.outcome for e in pool.recent_episodes()] == ["success", "env_error"]


@pytest.mark.browser
def test_the_trainers_make_envs_drives_a_real_miniwob_device_through_the_server() -> None:
    from admire.config_schema import EnvSection
    from admire.envs.building import make_envs
    from admire.envs.miniwob import MiniWoBEnv
    from tests.support.server_helpers import OraclePolicy

    devices = RecordingFactory(lambda: MiniWoBEnv(max_steps=10))
    pool = DevicePool(devices, backend="miniwob")
    with pool, running_server(create_app(pool)) as url, ExitStack() as stack:
        section = EnvSection.model_validate({"src": [f"remote:{url}"], "max_envs": [1], "max_steps": 8,
                                             "screenshots": False, "suite": "miniwob-demo"})
        envs = make_envs(section, stack)
        assert [type(e) for e in envs] == [RemoteEnv]
        policy = OraclePolicy("login-user", truth=lambda: devices.envs[0].ground_truth())
        tasks = [make_task("miniwob/login-user", seed=s) for s in (3, 4)]
        trajectories = collect(group_requests(tasks, n=1), envs, policy, max_steps=8)
        assert [t.termination for t in trajectories] == [Termination.SUCCESS] * 2
        assert all(len(t.steps) == 3 for t in trajectories)  # username, password, login
        assert [e.outcome for e in pool.recent_episodes()] == ["success", "success"]


@pytest.mark.browser
def test_admire_serve_serves_real_miniwob_devices_to_a_remote_env() -> None:
    import subprocess
    import sys
    import time

    port = free_port()
    command = [sys.executable, "-m", "admire.cli", "serve", "--num-devices", "1", "--port", str(port),
               "--token", "tok-tok-tok-tok-tok", "--log-level", "info"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        with remote(url, token="tok-tok-tok-tok-tok") as env:
            while not env.healthy():
                assert server.poll() is None and time.monotonic() < deadline, "admire serve did not come up"
                time.sleep(0.2)
            observation = env.reset(make_task("miniwob/click-test", seed=1))
            button = next(i for i, e in enumerate(observation.ui_elements) if e.class_name == "button")
            assert env.step(Action(action_type="click", index=button)).success
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=60)
    log = output.decode(errors="replace")
    assert server.returncode == 0 and "admire.server: pool closed" in log, log  # devices closed on SIGTERM


class RawServer:
    """A loopback HTTP server written by hand, for what uvicorn will not do on cue: close a keep-alive
    connection, hang up on a request, chunk a reply. ``script`` answers each request read: the reply
    bytes, and whether to close the connection afterwards (``None`` bytes: close without replying)."""

    def __init__(self, script) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn, conn.makefile("rb") as reader:
                while True:
                    head = self._read_head(reader)
                    if not head:
                        break
                    length = re.search(rb"Content-Length: (\d+)", head)
                    self.requests.append(head + reader.read(int(length.group(1)) if length else 0))
                    reply, close = self.script(len(self.requests))
                    if reply is not None:
                        conn.sendall(reply)
                    if close or reply is None:
                        break

    @staticmethod
    def _read_head(reader) -> bytes:
        """A request's head up to its blank line; b"" when the client hung up first (readline then answers b""
        forever: waiting for the blank line would spin)."""
        lines = []
        while (line := reader.readline()) not in (b"\r\n", b""):
            lines.append(line)
        return b"".join(lines) if line else b""

    def close(self) -> None:
        self.sock.close()


def ok(body: bytes = b'{"ok": true}') -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def test_keep_alive_sends_many_requests_over_one_connection() -> None:
    server = RawServer(lambda n: (ok(), False))
    transport = KeepAlive(server.url, timeout_s=5, connect_timeout_s=5)
    try:
        replies = [transport.send("POST", "/x", b'{"a": 1}', {"Content-Type": "application/json"}) for _ in range(3)]
        assert [(r.status, r.json()) for r in replies] == [(200, {"ok": True})] * 3
        assert replies[0].headers["content-type"] == "application/json"
        assert server.connections == 1 and len(server.requests) == 3
        assert server.requests[0].startswith(b"POST /x HTTP/1.1\r\n") and server.requests[0].endswith(b'{"a": 1}')
    finally:
        transport.close()
        server.close()


def test_a_keep_alive_connection_the_server_closed_is_replaced_and_each_request_sent_once() -> None:
    server = RawServer(lambda n: (ok(), True))  # replies, then hangs up (as uvicorn does with idle ones)
    transport = KeepAlive(server.url, timeout_s=5, connect_timeout_s=5)
    try:
        assert transport.send("GET", "/a", None, {}).ok
        wait_for_closed = time.monotonic() + 5
        while not transport._closed_by_server() and time.monotonic() < wait_for_closed:
            time.sleep(0.01)
        assert transport.send("GET", "/b", None, {}).ok
        assert server.connections == 2 and [r.split(b" ")[1] for r in server.requests] == [b"/a", b"/b"]
    finally:
        transport.close()
        server.close()


def test_a_request_lost_on_a_reused_connection_is_sent_once_more_on_a_new_one() -> None:
    server = RawServer(lambda n: (None if n == 2 else ok(), False))  # hangs up on the 2nd request unanswered
    transport = KeepAlive(server.url, timeout_s=5, connect_timeout_s=5)
    try:
        assert transport.send("GET", "/a", None, {}).ok
        assert transport.send("GET", "/b", None, {}).ok
        assert server.connections == 2 and [r.split(b" ")[1] for r in server.requests] == [b"/a", b"/b", b"/b"]
    finally:
        transport.close()
        server.close()


def test_a_request_lost_on_a_new_connection_is_a_transport_error_not_a_silent_resend() -> None:
    server = RawServer(lambda n: (None, True))
    transport = KeepAlive(server.url, timeout_s=5, connect_timeout_s=5)
    try:
        with pytest.raises(TransportError, match="closed the connection"):
            transport.send("POST", "/a", b"{}", {})
        assert len(server.requests) == 1
    finally:
        transport.close()
        server.close()


def test_chunked_replies_and_replies_that_end_with_the_connection_are_read_whole() -> None:
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n"
    to_the_end = b"HTTP/1.0 503 Service Unavailable\r\nretry-after: 2\r\n\r\nbusy"
    server = RawServer(lambda n: (chunked, False) if n == 1 else (to_the_end, True))
    transport = KeepAlive(server.url, timeout_s=5, connect_timeout_s=5)
    try:
        assert transport.send("GET", "/a", None, {}).json() == {"a": 1}
        reply = transport.send("GET", "/b", None, {})
        assert (reply.status, reply.content, reply.headers["retry-after"]) == (503, b"busy", "2")
    finally:
        transport.close()
        server.close()


def test_a_server_that_does_not_answer_in_time_is_a_transport_error() -> None:
    answered = threading.Event()
    server = RawServer(lambda n: (ok(), False) if answered.wait(10) else (None, True))
    transport = KeepAlive(server.url, timeout_s=0.2, connect_timeout_s=5)
    try:
        with pytest.raises(TransportError, match="timed out"):
            transport.send("GET", "/slow", None, {})
    finally:
        answered.set()
        transport.close()
        server.close()


def test_a_reply_that_is_not_http_is_a_transport_error_and_a_header_with_a_line_break_a_value_error() -> None:
    server = RawServer(lambda n: (b"SSH-2.0-OpenSSH\r\n\r\n", True))
    transport = KeepAlive(server.url, timeout_s=5, connect_timeout_s=5)
    try:
        with pytest.raises(TransportError, match="not an HTTP"):
            transport.send("GET", "/a", None, {})
        with pytest.raises(ValueError, match="line break"):  # a mistake here, not a network fault to retry
            transport.send("GET", "/a", None, {"Authorization": "Bearer x\r\nX-Evil: 1"})
        assert len(server.requests) == 1
    finally:
        transport.close()
        server.close()


class HeaderRecorder(Interceptor):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.headers: list[dict] = []

    def send(self, method: str, path: str, body: bytes | None, headers, timeout_s: float | None = None) -> Reply:
        self.headers.append(dict(headers))
        return super().send(method, path, body, headers, timeout_s)


def test_each_remote_env_sends_its_own_client_id_and_cannot_touch_anothers_session(served: Served) -> None:
    mine, theirs = HeaderRecorder(served.url), HeaderRecorder(served.url)
    with remote(served.url, transport=mine) as env, remote(served.url, transport=theirs) as other:
        env.reset(form_task())
        env.step(SOLVE_ANN[0])
        assert env.client_id != other.client_id
        assert {h["X-Admire-Client"] for h in mine.headers} == {env.client_id}
        other.reset(form_task(seed=2))
        other._session, other._seq = env.session_id, 1  # the other client aims at this client's session
        with pytest.raises(EnvCrashed, match="unknown_session"):
            other.step(SOLVE_ANN[1])
        assert served.devices.envs[0]._steps == 1  # nothing was stepped for it
        assert env.step(SOLVE_ANN[1]).success  # the owner's episode went on


def test_a_too_long_text_never_leaves_the_client(served: Served) -> None:
    from admire.actions import MAX_TEXT_CHARS

    transport = Interceptor(served.url)
    with remote(served.url, transport=transport) as env:
        env.reset(form_task())
        with pytest.raises(InvalidAction, match="text_too_long"):
            env.step(Action(action_type="input_text", index=0, text="x" * (MAX_TEXT_CHARS + 1)))
        assert not any(sent.endswith("/step") for sent in transport.sent)


class LongTextPolicy:
    """Writes an action with a 60 KB text first (as an Action record, not via the parser), then solves."""

    def act(self, observations, histories, greedy: bool = False):
        from admire.actions import format_output
        from admire.agent.base import PolicyOutput

        outputs = []
        for history in histories:
            if not history:
                action = Action(action_type="input_text", index=0, text="x" * 60_000)
                outputs.append(PolicyOutput(text="Action: (too long)", action=action, log_prob=0.0))
            else:
                action = SOLVE_ANN[min(len(history) - 1, 1)]
                outputs.append(PolicyOutput(text=format_output(action), action=action, log_prob=0.0))
        return outputs

    def log_prob(self, decisions):
        raise NotImplementedError


@pytest.mark.parametrize("policy", [LongTextPolicy(), ScriptedPolicy(
    ['Action: {"action_type": "input_text", "index": 0, "text": "' + "x" * 60_000 + '"}', *SOLVE_ANN])],
    ids=["action-record", "model-text"])
def test_a_policy_writing_a_too_long_text_gets_a_format_invalid_step_and_the_episode_goes_on(served: Served,
                                                                                            policy) -> None:
    with remote(served.url) as env:
        (trajectory,) = collect(group_requests([form_task()], n=1), [env], policy, max_steps=6)
    assert trajectory.termination == Termination.SUCCESS
    first = trajectory.steps[0]
    assert not first.format_valid and "text_too_long" in (first.parse_error or "")
    assert [s.format_valid for s in trajectory.steps] == [False, True, True]
    assert [e.outcome for e in served.pool.recent_episodes()] == ["success"]

"""Hostile-input probes of the env server, as rows of a table (and the probes that held from the start).

HTTP probes run against the real app (``create_app`` over a pool of fake devices) set up as ``admire
serve`` sets it up: on loopback without a token (only loopback Host names answered), or with a token.
Each row is a request — method, path, headers, body bytes — and the status and ``error`` code it must
get; every row also checks that nothing changed: no device, session, episode or step was created,
touched or ended by it. The owner's session (``{sid}``) exists before each probe, so probes aimed at it
show it is left alone.

CLI probes run ``admire serve`` with bad arguments through ``tests/support/probe_harness.py``; each must fail
with one ``admire serve: error:`` line and exit 2 before anything starts (no pool, no port).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from admire.actions import MAX_TEXT_CHARS
from admire.server.app import LOOPBACK_HOSTS, create_app
from admire.server.pool import DevicePool
from tests.support.probe_harness import CliProbe, run_cli_probe
from tests.support.server_helpers import RecordingFactory, TaskCheckingEnv, make_pool

TOKEN = "probe-token-1"
OWNER = {"X-Admire-Client": "owner-client-1"}
INTRUDER = {"X-Admire-Client": "other-client-2"}
JSON = {"content-type": "application/json"}
DEEP = b"[" * 5000 + b"]" * 5000


@dataclass(frozen=True)
class HttpProbe:
    """One request and the answer it must get. ``{sid}`` in the path is the owner's live session."""

    id: str
    method: str
    path: str
    status: int
    code: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    app: str = "loopback"
    """``loopback``: no token, loopback Host names only (``admire serve``'s default); ``token``: a token."""
    held: bool = False
    """True for a probe that held before its row's fix was needed: kept so it keeps holding."""


def step(action: bytes) -> bytes:
    return b'{"action": ' + action + b', "seq": 0}'


PROBES: list[HttpProbe] = [
    # --- item 9: these did not hold
    HttpProbe("deep-json-step", "POST", "/sessions/{sid}/step", 422, "json_too_deep", {**OWNER, **JSON}, step(DEEP)),
    HttpProbe("deep-json-step-in-a-field", "POST", "/sessions/{sid}/step", 422, "json_too_deep", {**OWNER, **JSON},
              step(b'{"action_type": "click", "index": ' + DEEP + b"}")),
    HttpProbe("deep-json-step-not-json-typed", "POST", "/sessions/{sid}/step", 422, "json_too_deep",
              {**OWNER, "content-type": "text/plain"}, step(DEEP)),
    HttpProbe("deep-json-create", "POST", "/sessions", 422, "json_too_deep", {**OWNER, **JSON},
              b'{"task": "fake/form", "params": {"a": ' + DEEP + b"}}"),
    HttpProbe("deep-json-with-token", "POST", "/sessions/{sid}/step", 422, "json_too_deep",
              {**OWNER, **JSON, "Authorization": f"Bearer {TOKEN}"}, step(DEEP), app="token"),
    HttpProbe("number-too-long-to-parse", "POST", "/sessions/{sid}/step", 400, "bad_request", {**OWNER, **JSON},
              step(b'{"action_type": "click", "index": ' + b"9" * 5000 + b"}")),
    HttpProbe("index-string-too-long", "POST", "/sessions/{sid}/step", 422, "invalid_action", {**OWNER, **JSON},
              step(b'{"action_type": "click", "index": "' + b"9" * 5000 + b'"}')),
    HttpProbe("text-too-long", "POST", "/sessions/{sid}/step", 422, "invalid_action", {**OWNER, **JSON},
              step(b'{"action_type": "input_text", "index": 0, "text": "' + b"x" * 60_000 + b'"}')),
    HttpProbe("text-just-over-the-limit", "POST", "/sessions/{sid}/step", 422, "invalid_action", {**OWNER, **JSON},
              step(b'{"action_type": "input_text", "index": 0, "text": "' + b"x" * (MAX_TEXT_CHARS + 1) + b'"}')),
    HttpProbe("get-sessions", "GET", "/sessions", 405, "method_not_allowed", OWNER, held=True),
    HttpProbe("put-sessions", "PUT", "/sessions", 405, "method_not_allowed", {**OWNER, **JSON}, b"{}", held=True),
    HttpProbe("get-a-session", "GET", "/sessions/{sid}", 405, "method_not_allowed", OWNER, held=True),
    HttpProbe("docs-without-token", "GET", "/docs", 401, "unauthorized", app="token"),
    HttpProbe("openapi-without-token", "GET", "/openapi.json", 401, "unauthorized", app="token"),
    HttpProbe("redoc-without-token", "GET", "/redoc", 401, "unauthorized", app="token"),
    HttpProbe("openapi-wrong-token", "GET", "/openapi.json", 401, "unauthorized",
              {"Authorization": "Bearer nope"}, app="token"),
    HttpProbe("step-anothers-session", "POST", "/sessions/{sid}/step", 404, "unknown_session", {**INTRUDER, **JSON},
              step(b'{"action_type": "click", "index": 1}')),
    HttpProbe("step-anothers-session-with-token", "POST", "/sessions/{sid}/step", 404, "unknown_session",
              {**INTRUDER, **JSON, "Authorization": f"Bearer {TOKEN}"}, step(b'{"action_type": "click", "index": 1}'),
              app="token"),
    HttpProbe("close-anothers-session", "DELETE", "/sessions/{sid}", 404, "unknown_session", INTRUDER),
    HttpProbe("step-without-client-id", "POST", "/sessions/{sid}/step", 422, "invalid_request", JSON,
              step(b'{"action_type": "click", "index": 1}')),
    HttpProbe("close-without-client-id", "DELETE", "/sessions/{sid}", 422, "invalid_request"),
    HttpProbe("create-without-client-id", "POST", "/sessions", 422, "invalid_request", JSON, b'{"task": "fake/form"}'),
    HttpProbe("client-id-with-a-tab", "POST", "/sessions", 422, "invalid_request",
              {"X-Admire-Client": "abc\tdefghij", **JSON}, b'{"task": "fake/form"}'),
    HttpProbe("request-id-reused-for-another-task", "POST", "/sessions", 409, "request_id_reused", {**OWNER, **JSON},
              b'{"task": "fake/form", "seed": 9, "request_id": "owners-request"}'),
    HttpProbe("dns-rebinding-host", "POST", "/sessions", 400, "bad_host",
              {**OWNER, **JSON, "host": "attacker.example:8765"}, b'{"task": "fake/form"}'),
    HttpProbe("dns-rebinding-host-health", "GET", "/health", 400, "bad_host", {"host": "attacker.example"}),
    HttpProbe("dns-rebinding-look-alike", "GET", "/devices", 400, "bad_host", {"host": "127.0.0.1.attacker.example"}),
    HttpProbe("empty-host", "GET", "/devices", 400, "bad_host", {"host": ""}),
    HttpProbe("bad-content-length", "POST", "/sessions", 400, "bad_request",
              {**OWNER, **JSON, "content-length": "abc"}, b'{"task": "fake/form"}'),
    # --- client text no device may take: a lone surrogate (valid JSON, not text; it crashed the browser, and
    # three quarantined the device), a client-controlled format string as the goal template
    HttpProbe("surrogate-in-typed-text", "POST", "/sessions/{sid}/step", 422, "invalid_action", {**OWNER, **JSON},
              step(b'{"action_type": "input_text", "index": 0, "text": "a\\ud800b"}')),
    HttpProbe("surrogate-in-answer", "POST", "/sessions/{sid}/step", 422, "invalid_action", {**OWNER, **JSON},
              step(b'{"action_type": "answer", "text": "\\udfff"}')),
    HttpProbe("surrogate-in-params-value", "POST", "/sessions", 422, "invalid_request", {**OWNER, **JSON},
              b'{"task": "fake/form", "params": {"x": "a\\ud800b"}}'),
    HttpProbe("surrogate-in-params-key", "POST", "/sessions", 422, "invalid_request", {**OWNER, **JSON},
              b'{"task": "fake/form", "params": {"\\udc00": 1}}'),
    HttpProbe("goal-template-width-spec", "POST", "/sessions", 422, "invalid_request", {**OWNER, **JSON},
              b'{"task": "fake/form", "params": {"goal_template": "{utterance:>100000000}"}}'),
    HttpProbe("goal-template-unknown-field", "POST", "/sessions", 422, "invalid_request", {**OWNER, **JSON},
              b'{"task": "fake/form", "params": {"goal_template": "{nope}"}}'),
    HttpProbe("goal-template-attribute-chain", "POST", "/sessions", 422, "invalid_request", {**OWNER, **JSON},
              b'{"task": "fake/form", "params": {"goal_template": "{utterance.__class__.__mro__}"}}'),
    # --- probes that held from the start
    HttpProbe("traversal-in-session-id", "POST", "/sessions/..%2f..%2fdevices/step", 404, "not_found",
              {**OWNER, **JSON}, b"{}", held=True),
    HttpProbe("traversal-in-device-id", "GET", "/devices/..%2f..%2fetc%2fpasswd/screenshot", 404, "not_found",
              held=True),
    HttpProbe("traversal-dots", "GET", "/../../etc/passwd", 404, "not_found", held=True),
    HttpProbe("bad-session-id", "POST", "/sessions/not-an-id/step", 422, "invalid_request", {**OWNER, **JSON},
              step(b'{"action_type": "click", "index": 1}'), held=True),
    HttpProbe("script-in-task-name", "POST", "/sessions", 422, "invalid_request", {**OWNER, **JSON},
              b'{"task": "miniwob/<script>alert(1)</script>"}', held=True),
    HttpProbe("script-in-action", "POST", "/sessions/{sid}/step", 422, "invalid_action", {**OWNER, **JSON},
              step(b'{"action_type": "<script>alert(1)</script>"}'), held=True),
    HttpProbe("no-token", "POST", "/sessions", 401, "unauthorized", {**OWNER, **JSON}, b'{"task": "fake/form"}',
              app="token", held=True),
    HttpProbe("wrong-token", "GET", "/devices", 401, "unauthorized", {"Authorization": "Bearer wrong"}, app="token",
              held=True),
    HttpProbe("token-without-scheme", "GET", "/episodes", 401, "unauthorized", {"Authorization": TOKEN},
              app="token", held=True),
    HttpProbe("token-on-the-step-fast-path", "POST", "/sessions/{sid}/step", 401, "unauthorized",
              {**OWNER, **JSON, "Authorization": f"Bearer {TOKEN}x"}, step(b'{"action_type": "click", "index": 1}'),
              app="token", held=True),
    HttpProbe("body-of-50-mb", "POST", "/sessions", 413, "request_too_large", {**OWNER, **JSON},
              b'{"task": "fake/form", "params": {"a": "' + b"x" * (50 << 20) + b'"}}', held=True),
    HttpProbe("step-body-of-50-mb", "POST", "/sessions/{sid}/step", 413, "request_too_large", {**OWNER, **JSON},
              step(b'{"action_type": "input_text", "text": "' + b"x" * (50 << 20) + b'"}'), held=True),
    HttpProbe("malformed-json", "POST", "/sessions/{sid}/step", 422, "invalid_request", {**OWNER, **JSON},
              b'{"action": ', held=True),
    HttpProbe("nan-in-params", "POST", "/sessions", 422, "invalid_request", {**OWNER, **JSON},
              b'{"task": "fake/form", "params": {"x": NaN}}', held=True),
    HttpProbe("unknown-route", "GET", "/admin", 404, "not_found", held=True),
]


@dataclass
class Server:
    client: TestClient
    pool: DevicePool
    devices: RecordingFactory
    sid: str


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The app set up as the probe's row says, with the owner's session ``sid`` under way."""
    kind = request.node.callspec.params["probe"].app
    devices = RecordingFactory(TaskCheckingEnv)
    with make_pool(devices, num_devices=1, max_devices=2) as pool:
        options = {"token": TOKEN} if kind == "token" else {"allowed_hosts": LOOPBACK_HOSTS}
        app = create_app(pool, **options)
        client = TestClient(app, base_url="http://127.0.0.1:8765", raise_server_exceptions=False)
        auth = {"Authorization": f"Bearer {TOKEN}"} if kind == "token" else {}
        created = client.post("/sessions", json={"task": "fake/form", "seed": 1, "request_id": "owners-request"},
                              headers={**OWNER, **auth})
        assert created.status_code == 201, created.text
        yield Server(client, pool, devices, created.json()["session_id"])


def state(server: Server) -> dict[str, Any]:
    """Everything a probe must leave as it was: devices, sessions, episodes, steps taken on devices."""
    stats = server.pool.stats()
    return {"devices": [(d.id, d.state, d.session_id, d.restarts, d.failures) for d in server.pool.devices()],
            "episodes": [(e.session_id, e.steps, e.outcome) for e in server.pool.recent_episodes()],
            "active": stats.sessions_active,
            "counters": {k: stats.counters.get(k, 0) for k in ("sessions_created", "steps", "env_errors",
                                                               "restarts", "quarantines")},
            "device_steps": [env._steps for env in server.devices.envs]}


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_http_probe(probe: HttpProbe, server: Server) -> None:
    before = state(server)
    response = server.client.request(probe.method, probe.path.replace("{sid}", server.sid), headers=probe.headers,
                                     content=probe.body)
    assert response.status_code == probe.status, response.text[:500]
    body = response.json()
    assert body["error"] == probe.code, body
    assert body["detail"] and len(body["detail"]) < 1000 and "Traceback" not in body["detail"]
    assert state(server) == before, f"{probe.id} changed the pool's state"


# ------------------------------------------------------------------------------------------ CLI


CLI_PROBES: list[CliProbe] = [
    CliProbe("port-too-high", ("serve", "--port", "99999"), 2, r"--port must be between 1 and 65535, got 99999"),
    CliProbe("port-zero", ("serve", "--port", "0"), 2, r"--port must be between 1 and 65535"),
    CliProbe("port-negative", ("serve", "--port", "-1"), 2, r"--port must be between 1 and 65535"),
    CliProbe("port-not-a-number", ("serve", "--port", "http"), 2, r"argument --port: invalid int value"),
    CliProbe("max-request-bytes-tiny", ("serve", "--max-request-bytes", "10"), 2,
             r"--max-request-bytes must be between 1024 and \d+, got 10"),
    CliProbe("max-request-bytes-huge", ("serve", "--max-request-bytes", "99999999999"), 2, r"--max-request-bytes"),
    CliProbe("num-devices-negative", ("serve", "--num-devices", "-1"), 2, r"--num-devices must be between 0 and"),
    CliProbe("num-devices-huge", ("serve", "--num-devices", "1000000"), 2, r"--num-devices must be between 0 and"),
    CliProbe("max-devices-zero", ("serve", "--max-devices", "0"), 2, r"--max-devices must be between 1 and"),
    CliProbe("max-below-num-devices", ("serve", "--num-devices", "3", "--max-devices", "1"), 2,
             r"--max-devices \(1\) must be >= --num-devices \(3\)"),
    CliProbe("max-failures-zero", ("serve", "--max-failures", "0"), 2, r"--max-failures must be between 1 and"),
    CliProbe("max-steps-zero", ("serve", "--max-steps", "0"), 2, r"--max-steps must be between 1 and 1000"),
    CliProbe("concurrency-zero", ("serve", "--concurrency-limit", "0"), 2, r"--concurrency-limit must be between"),
    CliProbe("lease-ttl-nan", ("serve", "--lease-ttl", "nan"), 2, r"--lease-ttl must be a positive number"),
    CliProbe("lease-ttl-zero", ("serve", "--lease-ttl", "0"), 2, r"--lease-ttl must be a positive number"),
    CliProbe("lease-ttl-tiny", ("serve", "--lease-ttl", "0.001"), 2, r"--lease-ttl must be at least 1 seconds"),
    CliProbe("no-devices-no-max", ("serve", "--num-devices", "0"), 2, r"--num-devices 0 starts devices only on demand"),
    CliProbe("token-too-short", ("serve", "--token", "x"), 2, r"the token has 1 character\(s\); at least 16"),
    CliProbe("request-timeout-tiny", ("serve", "--request-timeout", "0.01"), 2,
             r"--request-timeout must be at least 1 seconds"),
    CliProbe("request-timeout-nan", ("serve", "--request-timeout", "nan"), 2, r"--request-timeout must be a positive"),
    CliProbe("call-timeout-inf", ("serve", "--call-timeout", "inf"), 2, r"--call-timeout must be a positive"),
    CliProbe("ray-cpus-negative", ("serve", "--ray-cpus-per-device", "-1"), 2, r"--ray-cpus-per-device must be"),
    CliProbe("empty-host", ("serve", "--host", " "), 2, r"--host is empty"),
    CliProbe("token-with-a-space", ("serve", "--token", "two words"), 2, r"printable ASCII without spaces"),
    CliProbe("dashboard-token-too-short", ("serve", "--dashboard-token", "short"), 2,
             r"the dashboard token has 5 character\(s\); at least 16"),
    CliProbe("dashboard-token-is-the-clients-token", ("serve", "--token", "s3cret-s3cret-s3cret", "--dashboard-token",
                                                      "s3cret-s3cret-s3cret"), 2,
             r"the dashboard token equals the clients' token, so every client could watch"),
    CliProbe("public-host-without-token", ("serve", "--host", "0.0.0.0"), 2,
             r"refusing to listen on '0.0.0.0' without a token", held=True),
    CliProbe("named-host-without-token", ("serve", "--host", "example.org"), 2, r"without a token", held=True),
    CliProbe("android-world-odd-port", ("serve", "--backend", "android_world", "--console-ports", "5555"), 2,
             r"--console-ports: 5555 cannot be an emulator console port"),
    CliProbe("unknown-backend", ("serve", "--backend", "nope"), 2, r"unknown environment backend 'nope'", held=True),
    CliProbe("remote-backend", ("serve", "--backend", "remote"), 2, r"serve a device backend", held=True),
    CliProbe("bad-executor", ("serve", "--executor", "k8s"), 2, r"argument --executor: invalid choice", held=True),
    CliProbe("settle-unknown", ("serve", "--settle", "later"), 2, r"argument --settle: invalid choice: 'later'"),
    CliProbe("settle-max-too-long", ("serve", "--settle-max-s", "60"), 2,
             r"--settle-max-s must be between 0 \(no wait\) and 10 seconds, got 60"),
    CliProbe("settle-quiet-negative", ("serve", "--settle-quiet-s", "-1"), 2, r"--settle-quiet-s must be between 0"),
    CliProbe("settle-without-miniwob", ("serve", "--backend", "android_world", "--settle", "wall"), 2,
             r"--settle is only for --backend miniwob; drop it or pass --backend miniwob"),
]


def test_the_settle_flags_reach_every_device_the_server_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from admire.commands.serve import add_arguments, device_factory, page_options
    from admire.envs.base import ENVS

    built: list[dict[str, Any]] = []
    monkeypatch.setattr(ENVS, "lookup", lambda name: lambda **options: built.append(options))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--settle", "wall", "--settle-max-s", "2.5"])
    device_factory("miniwob", None, False, options=page_options(args))()
    assert built == [{"max_steps": 10, "screenshots": False, "settle": "wall", "settle_max_s": 2.5}]


@pytest.mark.parametrize("probe", CLI_PROBES, ids=[p.id for p in CLI_PROBES])
def test_cli_probe(probe: CliProbe, tmp_path, capsys, monkeypatch, nothing_starts) -> None:
    run_cli_probe(probe, tmp_path, capsys, monkeypatch)


def test_a_port_in_use_is_one_line_before_any_device_starts(tmp_path, capsys, monkeypatch, nothing_starts) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        probe = CliProbe("port-in-use", ("serve", "--port", str(port)), 2,
                         rf"cannot listen on 127\.0\.0\.1:{port} .*pick another --port")
        run_cli_probe(probe, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("token", [None, "serve-token-1-of-16"])
def test_admire_serve_wires_the_host_check_on_loopback_and_the_token_elsewhere(token: str | None, tmp_path,
                                                                               monkeypatch) -> None:
    """The app ``admire serve`` runs: without a token it answers loopback names only; with one, the token guards."""
    import uvicorn

    from admire.cli import main
    from admire.commands.serve import TOKEN_ENV

    served: list[Any] = []
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.setattr(uvicorn, "run", lambda app, **_options: served.append(app))
    monkeypatch.chdir(tmp_path)
    argv = ["serve", "--num-devices", "0", "--max-devices", "1", "--no-dashboard", "--port", "1"]
    argv += ["--token", token] if token else []
    monkeypatch.setattr("admire.commands.serve.check_port_free", lambda host, port: None)  # port 1: never bound
    assert main(argv) == 0
    client = TestClient(served[0], base_url="http://127.0.0.1:1")
    evil = {"host": "attacker.example"}
    if token is None:
        assert client.get("/health").status_code == 200
        assert client.get("/health", headers=evil).json()["error"] == "bad_host"
    else:
        assert client.get("/health", headers=evil).status_code == 200  # the token guards, whatever the name
        assert client.get("/openapi.json", headers=evil).json()["error"] == "unauthorized"

"""The HTTP API in-process (FastAPI's test client) on fake devices: the episode round trip, tokens,
body limits, and a clear 4xx for every mistake a client can make."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from admire.server.app import create_app
from admire.server.pool import DevicePool
from admire.types import Observation
from admire.wire import CLIENT_HEADER
from tests.support.fakes import FormEnv
from tests.support.paths import REPO
from tests.support.server_helpers import (
    FAKE_PNG,
    FakeClock,
    RecordingFactory,
    ScreenshotEnv,
    TaskCheckingEnv,
    make_pool,
)

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CLIENT = {"X-Admire-Client": "client-a-0001"}
"""Every request of these tests comes from this client, as RemoteEnv sends its own id on every request."""
TYPE_ANN = {"action_type": "input_text", "index": 0, "text": "ann"}
SUBMIT = {"action_type": "click", "index": 1}


@pytest.fixture
def factory() -> RecordingFactory:
    return RecordingFactory(TaskCheckingEnv)


@pytest.fixture
def pool(factory: RecordingFactory) -> Iterator[DevicePool]:
    with make_pool(factory, num_devices=1, max_devices=2) as pool:
        yield pool


@pytest.fixture
def client(pool: DevicePool) -> TestClient:
    return api(create_app(pool), raise_server_exceptions=False)


def api(app, **options) -> TestClient:
    return TestClient(app, headers=CLIENT, **options)


def new_session(client: TestClient, **body) -> str:
    response = client.post("/sessions", json={"task": "fake/form", "seed": 1, "params": {"name": "ann"}, **body})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def assert_error(response, status: int, code: str, *phrases: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code
    for phrase in phrases:
        assert phrase in body["detail"], (phrase, body["detail"])
    return body


def test_an_episode_over_http(client: TestClient, pool: DevicePool, factory: RecordingFactory) -> None:
    created = client.post("/sessions", json={"task": "fake/form", "seed": 3, "max_steps": 5,
                                             "params": {"name": "ann"}})
    assert created.status_code == 201
    body = created.json()
    assert body["task"] == {"name": "fake/form", "seed": 3, "max_steps": 5, "params": {"name": "ann"}}
    assert Observation.model_validate(body["observation"]).goal == 'Enter "ann" and press Submit.'
    assert factory.envs[0].tasks[-1].max_steps == 5
    sid = body["session_id"]
    typed = client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0}).json()
    assert (typed["done"], typed["seq"], typed["observation"]["ui_elements"][0]["text"]) == (False, 0, "ann")
    done = client.post(f"/sessions/{sid}/step", json={"action": SUBMIT, "seq": 1}).json()
    assert (done["done"], done["success"], done["info"]["termination"]) == (True, True, "success")
    closed = client.delete(f"/sessions/{sid}")
    assert closed.json() == {"session_id": sid, "outcome": "success"}
    (episode,) = client.get("/episodes").json()
    assert (episode["outcome"], episode["steps"], episode["seed"]) == ("success", 2, 3)


def test_the_app_keeps_the_pool_for_a_dashboard(pool: DevicePool) -> None:
    assert create_app(pool).state.pool is pool


def test_devices_are_listed_without_screenshot_bytes_which_have_their_own_url() -> None:
    with make_pool(ScreenshotEnv, num_devices=2) as pool:
        client = api(create_app(pool))
        new_session(client, screenshots=False)
        devices = client.get("/devices").json()
        assert [(d["id"], d["state"]) for d in devices] == [(0, "leased"), (1, "idle")]
        assert "last_screenshot" not in devices[0]
        assert devices[0]["screenshot_url"] == "/devices/0/screenshot" and devices[1]["screenshot_url"] is None
        png = client.get("/devices/0/screenshot")
        assert (png.status_code, png.headers["content-type"], png.content) == (200, "image/png", FAKE_PNG)
        assert_error(client.get("/devices/1/screenshot"), 404, "no_screenshot", "device 1")


def test_a_device_screen_is_shown_only_to_the_client_whose_session_leases_it() -> None:
    with make_pool(ScreenshotEnv, num_devices=1) as pool:
        app = create_app(pool)
        owner, other = api(app), api(app)
        other.headers[CLIENT_HEADER] = "another-client-0001"
        sid = new_session(owner, screenshots=False)
        assert owner.get("/devices/0/screenshot").status_code == 200
        assert_error(other.get("/devices/0/screenshot"), 404, "no_screenshot", "not leased by this client")
        assert other.get("/devices").json()[0]["screenshot_url"] is None
        owner.delete(f"/sessions/{sid}")
        assert_error(owner.get("/devices/0/screenshot"), 404, "no_screenshot")  # no lease: nobody's screen


def test_observations_carry_the_png_only_when_the_session_asks() -> None:
    with make_pool(ScreenshotEnv, num_devices=2) as pool:
        client = api(create_app(pool))
        with_png = client.post("/sessions", json={"task": "fake/form"}).json()["observation"]
        without = client.post("/sessions", json={"task": "fake/form", "screenshots": False}).json()["observation"]
        assert Observation.model_validate_json(json.dumps(with_png)).screenshot.png == FAKE_PNG  # base64 on the wire
        assert without["screenshot"] is None


def test_a_token_is_required_when_set_and_compared_exactly(pool: DevicePool) -> None:
    client = api(create_app(pool, token=TOKEN))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                    {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": "Bearer s3cret-tökén".encode("latin-1")}):
        response = client.post("/sessions", json={"task": "fake/form"}, headers=headers)
        assert_error(response, 401, "unauthorized", "Authorization: Bearer")
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert_error(client.get("/metrics"), 401, "unauthorized")
    assert_error(client.get("/devices"), 401, "unauthorized")
    assert client.get("/health").status_code == 200  # probes need no token
    assert client.post("/sessions", json={"task": "fake/form"}, headers=AUTH).status_code == 201
    assert client.get("/metrics", headers=AUTH).status_code == 200


def test_a_body_over_the_limit_is_refused_with_413(pool: DevicePool) -> None:
    client = api(create_app(pool, max_request_bytes=2048))
    big = {"task": "fake/form", "params": {"blob": "x" * 4096}}
    assert_error(client.post("/sessions", json=big), 413, "request_too_large", "2048 bytes")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"task": "fake/form", "params": {"blob": "'
        for _ in range(8):
            yield b"x" * 512
        yield b'"}}'

    assert_error(client.post("/sessions", content=chunks()), 413, "request_too_large")
    assert client.post("/sessions", json={"task": "fake/form", "params": {"blob": "x" * 1000}}).status_code == 201


@pytest.mark.parametrize(("body", "status", "code", "phrase"), [
    ({"task": "miniwob/login-user"}, 400, "bad_task", "runs 'fake' tasks"),
    ({"task": "fake/unknown"}, 400, "bad_task", "unknown task 'unknown'"),
    ({"task": "login-user"}, 422, "invalid_request", "body.task"),
    ({"task": "fake/form", "seed": -1}, 422, "invalid_request", "body.seed"),
    ({"task": "fake/form", "seed": "seven"}, 422, "invalid_request", "body.seed"),
    ({"task": "fake/form", "seed": 2**40}, 422, "invalid_request", "body.seed"),
    ({"task": "fake/form", "max_steps": 0}, 422, "invalid_request", "body.max_steps"),
    ({"task": "fake/form", "oops": 1}, 422, "invalid_request", "body.oops"),
    ({"seed": 1}, 422, "invalid_request", "body.task: Field required"),
])
def test_a_bad_session_request_is_a_4xx_that_says_what_was_wrong(client: TestClient, body: dict, status: int,
                                                                   code: str, phrase: str) -> None:
    assert_error(client.post("/sessions", json=body), status, code, phrase)


def test_non_finite_task_params_are_refused(client: TestClient) -> None:
    response = client.post("/sessions", content=b'{"task": "fake/form", "params": {"x": [NaN]}}',
                           headers={"content-type": "application/json"})
    assert_error(response, 422, "invalid_request", "params.x[0] must be a finite number")


@pytest.mark.parametrize(("params", "phrase"), [
    (b'{"x": "a\\ud800b"}', "params.x holds a lone UTF-16 surrogate"),
    (b'{"\\udc00": 1}', "a key of params holds a lone UTF-16 surrogate"),
    (b'{"goal_template": "{nope}"}', "goal_template may hold only {utterance}, got '{nope}'"),
    (b'{"goal_template": "{utterance:>100000000}"}', "got '{utterance:>100000000}'"),
    (b'{"goal_template": "{utterance.__class__}"}', "got '{utterance.__class__}'"),
    (b'{"goal_template": "no field"}', "goal_template must contain {utterance}"),
    (b'{"goal_template": 7}', "goal_template must be a string"),
])
def test_task_params_a_device_cannot_take_are_refused_before_a_device_is_leased(client: TestClient, params: bytes,
                                                                                phrase: str) -> None:
    response = client.post("/sessions", content=b'{"task": "fake/form", "params": ' + params + b"}",
                           headers={"content-type": "application/json"})
    assert_error(response, 422, "invalid_request", phrase)
    assert all(device["session_id"] is None for device in client.get("/devices").json())


def test_malformed_json_is_a_422(client: TestClient) -> None:
    response = client.post("/sessions", content=b'{"task": ', headers={"content-type": "application/json"})
    assert_error(response, 422, "invalid_request")


@pytest.mark.parametrize(("action", "phrase"), [
    ({"action_type": "fly"}, "unknown action_type 'fly'"),
    ({"action_type": "click"}, "needs an index or <x, y>"),
    ({"action_type": "click", "index": 1, "x": 3, "y": 4}, "not both"),
    ({"action_type": "click", "index": 1, "bogus": 2}, "unknown key(s) bogus"),
    ({"action_type": "click", "index": 7}, "index 7 is out of range"),
])
def test_an_invalid_action_is_a_422_and_the_episode_goes_on(client: TestClient, action: dict, phrase: str) -> None:
    sid = new_session(client)
    assert_error(client.post(f"/sessions/{sid}/step", json={"action": action, "seq": 0}), 422, "invalid_action",
                 phrase)
    assert client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0}).status_code == 200


def test_unknown_and_expired_sessions_are_404_and_410() -> None:
    clock = FakeClock()
    with make_pool(clock=clock, lease_ttl_s=60) as pool:
        client = api(create_app(pool))
        assert_error(client.post(f"/sessions/{'0' * 32}/step", json={"action": SUBMIT}), 404, "unknown_session")
        assert_error(client.delete(f"/sessions/{'0' * 32}"), 404, "unknown_session")
        assert_error(client.post("/sessions/not-an-id/step", json={"action": SUBMIT}), 422, "invalid_request",
                     "session_id")
        sid = new_session(client)
        clock.now += 61
        pool.reclaim_expired()
        assert_error(client.post(f"/sessions/{sid}/step", json={"action": SUBMIT}), 410, "session_expired",
                     "expired after 60 s")
        assert client.get("/episodes").json()[0]["outcome"] == "abandoned"


def test_no_free_device_is_a_503_with_retry_after(client: TestClient) -> None:
    new_session(client)
    new_session(client)  # grown to max_devices=2
    response = client.post("/sessions", json={"task": "fake/form"})
    body = assert_error(response, 503, "no_capacity", "busy")
    assert int(response.headers["Retry-After"]) >= 1 and body["retry_after_s"] > 0


def test_a_device_crash_is_a_503_env_crashed_and_the_device_comes_back() -> None:
    with make_pool(lambda: FormEnv(crash_on_step=0), lease_wait_s=30.0) as pool:
        client = api(create_app(pool))
        sid = new_session(client)
        response = client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0})
        assert_error(response, 503, "env_crashed", "device 0 crashed", "start a new session")
        assert "Retry-After" in response.headers
        assert_error(client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 1}), 409, "episode_over")
        sid = new_session(client)  # waits for the restart
        assert client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0}).status_code == 200
        assert client.get("/devices").json()[0]["restarts"] == 1


def test_a_retried_step_returns_the_recorded_reply_and_does_not_step_twice(client: TestClient,
                                                                         factory: RecordingFactory) -> None:
    sid = new_session(client)
    first = client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0})
    again = client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0})
    assert first.json() == again.json() and factory.envs[0]._steps == 1
    body = assert_error(client.post(f"/sessions/{sid}/step", json={"action": SUBMIT, "seq": 3}), 409,
                        "step_out_of_order", "next seq is 1")
    assert body["expected_seq"] == 1


def test_a_retried_create_returns_the_same_session(client: TestClient, pool: DevicePool) -> None:
    body = {"task": "fake/form", "request_id": "retry-me"}
    first, again = client.post("/sessions", json=body).json(), client.post("/sessions", json=body).json()
    assert first == again and [d.state for d in pool.devices()] == ["leased"]


def test_health_and_metrics(client: TestClient) -> None:
    health = client.get("/health").json()
    assert (health["status"], health["backend"], health["devices"]["idle"]) == ("ok", "fake", 1)
    sid = new_session(client)
    client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0})
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = response.text.splitlines()
    assert "admire_sessions_active 1.0" in lines and "admire_steps_total 1.0" in lines
    assert "admire_step_latency_seconds_count 1.0" in lines and "# TYPE admire_step_latency_seconds histogram" in lines


def test_health_is_down_when_every_device_is_quarantined() -> None:
    with make_pool(lambda: FormEnv(crash_on_step=0), crashed_device_restart=False) as pool:
        client = api(create_app(pool))
        sid = new_session(client)
        client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN})
        assert client.get("/health").json()["status"] == "down"
        assert_error(client.post("/sessions", json={"task": "fake/form"}), 503, "no_capacity", "quarantined")


def test_unknown_routes_and_methods_answer_in_the_error_format(client: TestClient) -> None:
    assert_error(client.get("/nope"), 404, "not_found")
    assert_error(client.put("/sessions"), 405, "method_not_allowed")


def test_the_openapi_document_describes_every_route(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert set(spec["paths"]) == {"/sessions", "/sessions/{session_id}/step", "/sessions/{session_id}",
                                  "/devices", "/devices/{device_id}/screenshot", "/episodes", "/health", "/metrics"}
    step = spec["paths"]["/sessions/{session_id}/step"]["post"]
    assert {"409", "422", "503"} <= set(step["responses"])


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                                ("127.0.0.2", True), ("0.0.0.0", False), ("10.0.0.5", False),
                                                ("my-host", False)])
def test_only_loopback_hosts_may_go_without_a_token(host: str, loopback: bool) -> None:
    from admire.commands.serve import check_exposure, is_loopback

    assert is_loopback(host) is loopback
    check_exposure(host, "a-token")  # any host is fine with a token


def test_a_step_token_is_checked_on_the_fast_path_too(pool: DevicePool) -> None:
    client = api(create_app(pool, token=TOKEN))
    sid = client.post("/sessions", json={"task": "fake/form"}, headers=AUTH).json()["session_id"]
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {TOKEN}x"}):
        assert_error(client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0}, headers=headers),
                     401, "unauthorized")
    assert pool.stats().counters.get("steps", 0) == 0
    lower = {"Authorization": f"bearer {TOKEN}"}  # the scheme is case-insensitive on both paths
    assert client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0}, headers=lower).status_code == 200


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/vnd.x+json"])
def test_a_step_is_answered_alike_with_any_json_content_type(client: TestClient, content_type: str) -> None:
    """``application/json`` takes the fast path, other JSON types the FastAPI route: one reply."""
    sid = new_session(client)
    body = json.dumps({"action": TYPE_ANN, "seq": 0}).encode()
    fast = client.post(f"/sessions/{sid}/step", content=body, headers={"content-type": "application/json"})
    other = client.post(f"/sessions/{sid}/step", content=body, headers={"content-type": content_type})  # a replay
    assert (fast.status_code, other.status_code) == (200, 200)
    assert fast.json() == other.json() and fast.json()["observation"]["ui_elements"][0]["text"] == "ann"


@pytest.mark.parametrize(("body", "content_type", "where"), [
    (b'{"action": ', "application/json", "body"),
    (b'{"action": {"action_type": "click", "index": 0}, "seq": -1}', "application/json", "body.seq"),
    (b'{"action": {"action_type": "click", "index": 0}, "extra": 1}', "application/json", "body.extra"),
    (b'["a list"]', "application/json", "body"),
    (b'{"action": {"action_type": "click", "index": 0}}', "text/plain", "body"),
])
def test_a_bad_step_body_is_refused_as_the_route_refuses_it(client: TestClient, pool: DevicePool, body: bytes,
                                                            content_type: str, where: str) -> None:
    sid = new_session(client)
    response = client.post(f"/sessions/{sid}/step", content=body, headers={"content-type": content_type})
    assert_error(response, 422, "invalid_request", where)
    assert pool.stats().counters.get("steps", 0) == 0


def test_an_unexpected_error_on_the_step_path_is_a_500_that_names_itself(pool: DevicePool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    client = api(create_app(pool), raise_server_exceptions=False)
    sid = new_session(client)

    def broken(*_args, **_kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(pool, "step", broken)
    assert_error(client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN}), 500, "internal_error", "KeyError")


OTHER = {"X-Admire-Client": "client-b-0002"}


def test_a_session_answers_only_the_client_that_created_it(client: TestClient, pool: DevicePool,
                                                          factory: RecordingFactory) -> None:
    sid = new_session(client)
    step = {"action": TYPE_ANN, "seq": 0}
    for headers in (OTHER, {"content-type": "application/json", **OTHER}):  # route and fast path alike
        assert_error(client.post(f"/sessions/{sid}/step", json=step, headers=headers), 404, "unknown_session")
    assert_error(client.delete(f"/sessions/{sid}", headers=OTHER), 404, "unknown_session")
    assert factory.envs[0]._steps == 0 and [d.state for d in pool.devices()] == ["leased"]
    assert client.post(f"/sessions/{sid}/step", json=step).status_code == 200  # its owner still can
    assert client.delete(f"/sessions/{sid}").json()["outcome"] == "abandoned"


def test_session_requests_without_a_client_id_are_refused(client: TestClient, pool: DevicePool) -> None:
    bare = TestClient(client.app)
    assert_error(bare.post("/sessions", json={"task": "fake/form"}), 422, "invalid_request", "X-Admire-Client")
    assert_error(bare.post("/sessions", json={"task": "fake/form"}, headers={"X-Admire-Client": "short"}), 422,
                 "invalid_request", "X-Admire-Client")
    sid = new_session(client)
    assert_error(bare.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN}), 422, "invalid_request",
                 "X-Admire-Client")
    assert pool.stats().counters.get("steps", 0) == 0 and pool.stats().counters["sessions_created"] == 1


def test_listings_show_a_session_id_only_to_its_owner(client: TestClient) -> None:
    sid = new_session(client)
    assert client.get("/devices").json()[0]["session_id"] == sid
    assert client.get("/episodes").json()[0]["session_id"] == sid
    assert client.get("/devices", headers=OTHER).json()[0]["session_id"] is None
    assert client.get("/episodes", headers=OTHER).json()[0]["session_id"] is None
    assert TestClient(client.app).get("/devices").json()[0]["session_id"] is None
    assert TestClient(client.app).get("/episodes").json()[0]["session_id"] is None


def test_a_request_id_is_the_clients_own_and_reusing_it_for_another_task_is_a_409(client: TestClient,
                                                                                  pool: DevicePool) -> None:
    body = {"task": "fake/form", "seed": 1, "request_id": "retry-me"}
    first = client.post("/sessions", json=body).json()["session_id"]
    assert_error(client.post("/sessions", json={**body, "seed": 2}), 409, "request_id_reused", "new request_id")
    assert_error(client.post("/sessions", json={**body, "task": "fake/other"}), 409, "request_id_reused")
    assert client.post("/sessions", json=body).json()["session_id"] == first  # a true retry: same session
    other = client.post("/sessions", json=body, headers=OTHER)  # another client's id space
    assert other.status_code == 201 and other.json()["session_id"] != first
    assert pool.stats().counters["sessions_created"] == 2


def test_with_a_token_the_openapi_document_and_docs_need_it_too(pool: DevicePool) -> None:
    client = api(create_app(pool, token=TOKEN))
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert_error(client.get(path), 401, "unauthorized")
        assert_error(client.get(path, headers={"Authorization": "Bearer wrong"}), 401, "unauthorized")
        assert client.get(path, headers=AUTH).status_code == 200
    assert "/sessions" in client.get("/openapi.json", headers=AUTH).json()["paths"]
    assert client.get("/health").status_code == 200
    assert api(create_app(pool)).get("/openapi.json").status_code == 200  # no token: open, like everything


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.1:8765", True), ("localhost:1", True), ("LOCALHOST", True), ("[::1]:8765", True), ("127.0.0.1", True),
    ("evil.example:8765", False), ("127.0.0.1.evil.example", False), ("localhost.", False), ("[::1]x", False),
    ("0.0.0.0:8765", False), ("", False),
])
def test_on_loopback_without_a_token_only_loopback_host_names_are_answered(pool: DevicePool, host: str,
                                                                          allowed: bool) -> None:
    from admire.server.app import LOOPBACK_HOSTS

    client = api(create_app(pool, allowed_hosts=LOOPBACK_HOSTS), base_url="http://127.0.0.1:8765")
    response = client.post("/sessions", json={"task": "fake/form"}, headers={"host": host})
    if allowed:
        assert response.status_code == 201, response.text
    else:
        assert_error(response, 400, "bad_host", "connect to http://127.0.0.1")
        assert_error(client.get("/health", headers={"host": host}), 400, "bad_host")
        assert pool.stats().counters.get("sessions_created", 0) == 0


@pytest.mark.parametrize("where", ["action", "index", "seq"])
@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_deeply_nested_json_is_a_422_before_any_parser_sees_it(client: TestClient, pool: DevicePool, where: str,
                                                               content_type: str) -> None:
    sid = new_session(client)
    deep = b"[" * 5000 + b"]" * 5000
    body = {"action": b'{"action": ' + deep + b"}",
            "index": b'{"action": {"action_type": "click", "index": ' + deep + b"}}",
            "seq": b'{"action": {"action_type": "click", "index": 0}, "seq": ' + deep + b"}"}[where]
    response = client.post(f"/sessions/{sid}/step", content=body, headers={"content-type": content_type})
    assert_error(response, 422, "json_too_deep", "deeper than 32 levels")
    deep_params = b'{"task": "fake/form", "params": {"a": ' + deep + b"}}"
    assert_error(client.post("/sessions", content=deep_params, headers={"content-type": "application/json"}),
                 422, "json_too_deep")
    assert pool.stats().counters.get("steps", 0) == 0 and pool.stats().counters["sessions_created"] == 1


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    from admire.server.app import json_deeper_than

    assert not json_deeper_than(b'{"a": "' + b"[" * 100 + b'\\"' + b"{" * 100 + b'"}', 2)
    assert json_deeper_than(b'{"a": "\\"", "b": [[[1]]]}', 3)
    assert not json_deeper_than(b"[]" * 10_000, 1)


def test_a_too_long_text_is_an_invalid_action_and_the_device_never_types_it(client: TestClient,
                                                                           factory: RecordingFactory) -> None:
    from admire.actions import MAX_TEXT_CHARS

    sid = new_session(client)
    action = {**TYPE_ANN, "text": "x" * (MAX_TEXT_CHARS + 1)}
    assert_error(client.post(f"/sessions/{sid}/step", json={"action": action, "seq": 0}), 422, "invalid_action",
                 "text_too_long")
    assert factory.envs[0]._steps == 0
    assert client.post(f"/sessions/{sid}/step", json={"action": TYPE_ANN, "seq": 0}).status_code == 200


def test_a_number_too_long_to_parse_is_a_400_bad_request(client: TestClient) -> None:
    sid = new_session(client)
    body = b'{"action": {"action_type": "click", "index": ' + b"9" * 5000 + b"}}"
    assert_error(client.post(f"/sessions/{sid}/step", content=body, headers={"content-type": "application/json"}),
                 400, "bad_request", "could not be read as JSON")


def test_docs_list_exactly_the_error_codes_the_server_can_answer() -> None:
    """``ERROR_CODES`` is the one list; the docs' table, the pool's errors and every code written in
    app.py agree with it, each with its status."""
    import re
    from pathlib import Path

    from admire.server import app as app_module
    from admire.server import errors
    from admire.server.errors import ERROR_CODES, PoolError

    root = REPO
    table = root.joinpath("docs/server.md").read_text().split("### Errors", 1)[1].split("\n## ", 1)[0]
    documented = {(code, int(status)) for status, codes in re.findall(r"^\| (\d{3}) \| ([^|]+) \|", table, re.M)
                  for code in re.findall(r"`([a-z_]+)`", codes)}
    assert documented == {(code, entry.status) for code, entry in ERROR_CODES.items()}

    kinds = [k for k in vars(errors).values() if isinstance(k, type) and issubclass(k, PoolError)]
    assert all(ERROR_CODES[k.code].status == k.status for k in kinds)
    source = Path(app_module.__file__).read_text()
    written = set(re.findall(r'(?:_error|_refuse)\([^"]*?(\d{3}), "([a-z_]+)"', source))
    written |= {(str(status), code) for status, code in app_module._FRAMEWORK_ERRORS.values()}
    assert written and all(ERROR_CODES[code].status == int(status) for status, code in written)
    assert {code for _, code in written} | {k.code for k in kinds} | {"invalid_action", "invalid_request",
                                                                      "bad_request"} == set(ERROR_CODES)

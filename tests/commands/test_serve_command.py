"""``admire serve`` as a user runs it: a subprocess with real MiniWoB++ devices, played through
``RemoteEnv``, watched on its dashboard at ``/ui`` in real headless Chromium."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from admire.envs import make_task
from admire.envs.remote import RemoteEnv
from admire.server.background import free_port
from admire.types import Action
from tests.support.server_helpers_http import card, episodes_text, headless_chromium, wait_for


def _wait_until_idle(url: str, devices: int, server: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert server.poll() is None, "admire serve exited"
        try:
            if httpx.get(f"{url}/health", timeout=2).json()["devices"]["idle"] >= devices:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "admire serve did not start its devices"
        time.sleep(0.25)


@pytest.fixture(scope="module")
def serve() -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "admire.cli", "serve", "--num-devices", "2", "--port", str(port),
                               "--screenshots", "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_idle(url, 2, server)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert server.returncode == 0


@pytest.mark.browser
def test_the_dashboard_of_admire_serve_shows_its_devices_and_episodes(serve: str) -> None:
    with RemoteEnv(serve, max_steps=5, screenshots=True) as env:
        observation = env.reset(make_task("miniwob/click-test", seed=2))
        button = next(i for i, e in enumerate(observation.ui_elements) if e.class_name == "button")
        assert env.step(Action(action_type="click", index=button)).success
        played_on = httpx.get(f"{serve}/episodes").json()[0]["device_id"]

    with headless_chromium() as browser:
        browser.get(f"{serve}/ui/")
        assert wait_for(lambda: card(browser, 0) and card(browser, 1)), "the two devices are not shown"
        assert wait_for(lambda: (card(browser, played_on) or {}).get("image")), "no screen on the device it used"
        assert card(browser, played_on)["state"] == "idle"
        assert wait_for(lambda: "miniwob/click-test" in episodes_text(browser))
        assert "success" in episodes_text(browser)


def test_with_a_token_the_dashboard_asks_for_its_own_login_and_is_off_without_one() -> None:
    # The page shows every client's screen: a client's token must not open it.
    for dashboard_token in ("d4shboard-d4shboard", None):
        port = free_port()
        extra = ["--dashboard-token", dashboard_token] if dashboard_token else []
        server = subprocess.Popen([sys.executable, "-m", "admire.cli", "serve", "--num-devices", "1", "--port",
                                   str(port), "--token", "s3cret-s3cret-s3cret", "--log-level", "warning", *extra])
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_until_idle(url, 1, server)
            assert httpx.get(f"{url}/devices").status_code == 401
            with httpx.Client(base_url=url) as client:
                if dashboard_token is None:
                    assert client.get("/ui/config").status_code in (401, 404)  # not served: no route, no page
                    assert client.get("/ui/").status_code in (401, 404)
                    continue
                assert client.get("/ui/config").status_code == 401  # not without a login
                clients_token = {"username": "admire", "password": "s3cret-s3cret-s3cret"}
                assert client.post("/ui/login", data=clients_token).status_code == 400
                login = {"username": "admire", "password": dashboard_token}
                assert client.post("/ui/login", data=login).status_code == 200
                assert client.get("/ui/config").status_code == 200
        finally:
            server.terminate()
            server.wait(timeout=60)

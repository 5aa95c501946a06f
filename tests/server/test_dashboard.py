"""The dashboard at ``/ui`` over a fake ``PoolView``: what the cards and the episode table show, and the
page itself in real headless Chromium (it loads offline, shows the pool, and follows its changes)."""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import urlparse

import pytest

pytest.importorskip("gradio")

from fastapi import FastAPI
from fastapi.testclient import TestClient

from admire.server.dashboard import build_dashboard, device_cards, episode_table, mount_dashboard, snapshot
from admire.server.views import DeviceView, EpisodeView
from tests.support.server_helpers_http import (
    card,
    episodes_text,
    headless_chromium,
    requested_urls,
    serve_in_thread,
    wait_for,
)

NOW = 1_700_000_000.0


def tiny_png(rgb: tuple[int, int, int] = (200, 30, 30), width: int = 4, height: int = 3) -> bytes:
    """A valid RGB PNG, built by hand so the test needs no imaging library."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class FakePool:
    """Answers the ``PoolView`` protocol from lists a test edits while the page is open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self._devices = [
            DeviceView(id=0, state="idle", restarts=1, last_screenshot=tiny_png(), last_change=NOW - 5),
            DeviceView(id=1, state="stepping", task="miniwob/login-user", session_id="s-live", failures=2,
                       last_change=NOW - 70),
        ]
        self._episodes = [
            EpisodeView(session_id="s-done", device_id=0, task="miniwob/click-test", seed=3, steps=2,
                        outcome="success", started_at=NOW - 30, finished_at=NOW - 28),
            EpisodeView(session_id="s-live", device_id=1, task="miniwob/login-user", seed=5, steps=1,
                        outcome="running", started_at=NOW - 10),
        ]

    def devices(self) -> list[DeviceView]:
        with self._lock:
            self.calls += 1
            return list(self._devices)

    def recent_episodes(self, limit: int = 50) -> list[EpisodeView]:
        with self._lock:
            return list(self._episodes[-limit:])

    def update(self, device: DeviceView | None = None, episode: EpisodeView | None = None) -> None:
        with self._lock:
            if device is not None:
                self._devices = [device if d.id == device.id else d for d in self._devices]
            if episode is not None:
                self._episodes = [e for e in self._episodes if e.session_id != episode.session_id] + [episode]


class BrokenPool:
    def devices(self) -> list[DeviceView]:
        raise ConnectionError("pool lock timed out")

    def recent_episodes(self, limit: int = 50) -> list[EpisodeView]:
        return []


# --------------------------------------------------------------------------------------------------
# What is rendered (no browser)
# --------------------------------------------------------------------------------------------------


def test_cards_show_each_device_with_its_screen_and_counters() -> None:
    page = device_cards(FakePool().devices(), now=NOW)
    assert "2 device(s): 1 idle, 1 stepping" in page
    assert page.count('class="admire-card"') == 2
    assert 'data-device="1" data-state="stepping"' in page and "miniwob/login-user" in page
    assert page.count("data:image/png;base64,") == 1  # device 0 has a screen, device 1 says it has none
    assert "no screenshot yet" in page
    assert 'class="admire-failures">2<' in page and 'class="admire-restarts">1<' in page
    assert "stepping for 1 min 10 s" in page


def test_text_from_clients_is_escaped_and_only_png_bytes_are_embedded() -> None:
    evil = DeviceView(id=3, state="leased", task='miniwob/<img src=x onerror="alert(1)">',
                      last_screenshot=b"<svg onload=alert(1)>")
    page = device_cards([evil], now=NOW)
    assert "<img src=x" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "data:image" not in page and "no screenshot yet" in page


def test_episode_rows_are_newest_first_with_outcome_and_duration() -> None:
    rows = episode_table(FakePool().recent_episodes(), now=NOW)
    assert [row[0] for row in rows] == ["s-live", "s-done"]
    assert rows[1][2:6] == ["miniwob/click-test", 3, 2, "success"]
    assert rows[1][7] == "2 s" and rows[0][7] == "10 s"  # a running episode counts up to now


def test_a_pool_that_fails_shows_its_error_instead_of_breaking_the_page() -> None:
    cards, rows = snapshot(BrokenPool(), 10, clock=lambda: NOW)
    assert "The pool did not answer: ConnectionError: pool lock timed out" in cards and rows == []


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="refresh_s must be > 0"):
        build_dashboard(FakePool(), refresh_s=0)
    with pytest.raises(ValueError, match="episode_rows must be >= 1"):
        build_dashboard(FakePool(), episode_rows=0)


def test_mounted_page_and_theme_reference_no_web_fonts() -> None:
    app = FastAPI()
    assert mount_dashboard(app, FakePool()) is app
    with TestClient(app) as client:
        page, theme = client.get("/ui/"), client.get("/ui/theme.css")
    assert page.status_code == 200 and "ADMIRE env server" in page.text
    assert theme.status_code == 200 and "Source Sans Pro" in theme.text
    for text in (page.text, theme.text):
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text


def test_with_auth_the_pool_is_hidden_until_login() -> None:
    app = FastAPI()
    mount_dashboard(app, FakePool(), auth=("admire", "s3cret"))
    with TestClient(app) as client:
        assert client.get("/ui/config").status_code == 401
        assert client.post("/ui/login", data={"username": "admire", "password": "wrong"}).status_code == 400
        assert client.post("/ui/login", data={"username": "admire", "password": "s3cret"}).status_code == 200
        assert client.get("/ui/config").status_code == 200


# --------------------------------------------------------------------------------------------------
# The page in Chromium
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium(log_network=True) as driver:
        yield driver


def served(pool: FakePool, refresh_s: float) -> Any:
    app = FastAPI()
    mount_dashboard(app, pool, refresh_s=refresh_s)
    return serve_in_thread(app)


@pytest.mark.browser
def test_the_page_loads_offline_and_shows_devices_and_episodes(browser: Any) -> None:
    pool = FakePool()
    with served(pool, refresh_s=3600) as url:
        requested_urls(browser)  # forget earlier pages
        browser.get(url + "/ui")
        assert wait_for(lambda: (card(browser, 0) or {}).get("image")), "no device cards on the page"
        assert card(browser, 0) == {"state": "idle", "task": "—", "restarts": "1", "failures": "0",
                                    "title": "device 0", "image": 4}  # the PNG decoded: 4 px wide
        assert card(browser, 1) == {"state": "stepping", "task": "miniwob/login-user", "restarts": "0",
                                    "failures": "2", "title": "device 1", "image": None}
        table = wait_for(lambda: "s-done" in episodes_text(browser) and episodes_text(browser))
        for cell in ("s-done", "miniwob/click-test", "success", "s-live", "running"):
            assert cell in table
        assert browser.title == "ADMIRE env server"
        strangers = [u for u in requested_urls(browser)
                     if not u.startswith("data:") and urlparse(u).hostname != "127.0.0.1"]
        assert strangers == []  # nothing fetched from the internet (fonts, scripts, analytics)


@pytest.mark.browser
def test_the_refresh_button_shows_changes_in_the_pool(browser: Any) -> None:
    pool = FakePool()
    with served(pool, refresh_s=3600) as url:  # the timer never fires during this test
        browser.get(url + "/ui")
        assert wait_for(lambda: card(browser, 1))
        pool.update(device=replace(pool.devices()[1], state="restarting", restarts=4, task=None),
                    episode=EpisodeView(session_id="s-live", device_id=1, task="miniwob/login-user", seed=5,
                                        steps=3, outcome="env_error", started_at=NOW - 10, finished_at=NOW - 2))
        assert card(browser, 1)["state"] == "stepping"  # nothing changes by itself
        browser.find_element("css selector", "#admire-refresh").click()
        assert wait_for(lambda: (card(browser, 1) or {}).get("state") == "restarting")
        assert card(browser, 1)["restarts"] == "4" and card(browser, 1)["task"] == "—"
        assert wait_for(lambda: "env_error" in episodes_text(browser))


@pytest.mark.browser
def test_the_timer_keeps_the_page_current(browser: Any) -> None:
    pool = FakePool()
    with served(pool, refresh_s=0.5) as url:
        browser.get(url + "/ui")
        assert wait_for(lambda: card(browser, 0))
        pool.update(device=replace(pool.devices()[0], state="quarantined", failures=3,
                                   last_screenshot=tiny_png((0, 90, 200), width=8, height=6)))
        assert wait_for(lambda: (card(browser, 0) or {}).get("state") == "quarantined")
        assert wait_for(lambda: card(browser, 0)["image"] == 8)  # the new screenshot replaced the old one
        assert card(browser, 0)["failures"] == "3"
        calls = pool.calls
        assert wait_for(lambda: pool.calls > calls)  # and it keeps asking


@pytest.mark.browser
def test_the_page_follows_a_real_pool_of_miniwob_devices(browser: Any) -> None:
    from admire.envs.miniwob import MiniWoBEnv
    from admire.envs.oracles import get_oracle
    from admire.server.pool import DevicePool, PoolConfig
    from admire.types import Task

    config = PoolConfig(num_devices=1, lease_wait_s=60)
    with DevicePool(lambda: MiniWoBEnv(max_steps=5, screenshots=True), config, backend="miniwob") as pool:
        start = pool.create_session(Task(name="miniwob/click-test", seed=2))
        with served(pool, refresh_s=0.5) as url:
            browser.get(url + "/ui")
            shown = wait_for(lambda: card(browser, start.device_id) or {})
            assert shown["state"] == "leased" and shown["task"] == "miniwob/click-test"
            assert wait_for(lambda: card(browser, start.device_id)["image"]) == 160  # MiniWoB's 160×210 task area
            assert wait_for(lambda: "running" in episodes_text(browser))
            action = get_oracle("click-test")(start.observation, {}, ())
            assert pool.step(start.session_id, action).success
            assert wait_for(lambda: "success" in episodes_text(browser))
            assert wait_for(lambda: card(browser, start.device_id)["state"] == "idle")

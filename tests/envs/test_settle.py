"""The settled screen: observations are read once the page is quiet, on the page's own clock (virtual, the
default) or in real time (wall), so a seeded run is reproducible. Real Chromium; the shared session env."""

from __future__ import annotations

import time

import pytest
import torch

from admire.agent.dom_policy import DomPolicy
from admire.envs import make_task
from admire.envs.miniwob import MiniWoBEnv
from admire.envs.miniwob_settle import DEFAULT_SETTLE, DEFAULT_SETTLE_MAX_S, SETTLE_MODES
from admire.envs.suites import EVAL_SEED_START
from admire.rl.rollout import collect, group_requests
from admire.types import Action, Observation
from tests.support.fakes import TrigramEncoder

pytestmark = pytest.mark.browser

AUTOCOMPLETE = "miniwob/use-autocomplete"
SETTLING = ("virtual", "wall")


def page_now(env: MiniWoBEnv) -> float:
    return float(env.driver.execute_script("return performance.now();"))


def suggestions(observation: Observation, prefix: str) -> list[str]:
    return [e.text for e in observation.ui_elements
            if not e.is_editable and e.text and e.text.startswith(prefix) and e.class_name in ("div", "li", "a")]


def type_prefix(env: MiniWoBEnv, seed: int):
    observation = env.reset(make_task(AUTOCOMPLETE, seed=seed))
    prefix = env.ground_truth()["start"]
    box = next(i for i, e in enumerate(observation.ui_elements) if e.is_editable)
    return prefix, env.step(Action(action_type="input_text", index=box, text=prefix, clear_text=True))


@pytest.mark.parametrize("mode", SETTLING)
def test_the_autocomplete_menu_is_in_the_observation_right_after_typing(miniwob_env, mode):
    # jQuery-UI opens the menu 300 ms after the last keystroke; read at once, the screen has no menu.
    miniwob_env.settle = mode
    prefix, result = type_prefix(miniwob_env, seed=EVAL_SEED_START)
    assert suggestions(result.observation, prefix), [e.text for e in result.observation.ui_elements]
    assert result.info["settled"] is True and result.info["settle_s"] >= 0.3 - 0.02


def test_read_at_once_the_autocomplete_menu_is_not_there_yet(miniwob_env):
    miniwob_env.settle = "off"
    prefix, result = type_prefix(miniwob_env, seed=EVAL_SEED_START)
    assert suggestions(result.observation, prefix) == []
    assert result.info["settled"] is False


@pytest.mark.parametrize("mode", SETTLING)
def test_a_reset_shows_no_menu_left_open_by_the_last_episode(miniwob_env, mode):
    miniwob_env.settle = mode
    prefix, result = type_prefix(miniwob_env, seed=EVAL_SEED_START)
    assert suggestions(result.observation, prefix)
    fresh = miniwob_env.reset(make_task(AUTOCOMPLETE, seed=EVAL_SEED_START + 1))
    assert suggestions(fresh, prefix) == []
    assert all(not e.text for e in fresh.ui_elements if e.class_name in ("li", "div"))


def test_settle_options_are_validated():
    with pytest.raises(ValueError, match="settle_max_s"):
        MiniWoBEnv(settle_max_s=-1)
    with pytest.raises(ValueError, match="settle_quiet_s"):
        MiniWoBEnv(settle_quiet_s=60)
    with pytest.raises(ValueError, match="settle must be one of virtual, wall, off, got 'later'"):
        MiniWoBEnv(settle="later")
    assert DEFAULT_SETTLE == "virtual" and SETTLE_MODES == ("virtual", "wall", "off")


# --------------------------------------------------------------------------------------------------
# Virtual time: the page's clock runs only while the env plays it
# --------------------------------------------------------------------------------------------------

def test_on_virtual_time_the_page_clock_stands_still_between_calls(miniwob_env):
    miniwob_env.reset(make_task(AUTOCOMPLETE, seed=EVAL_SEED_START))
    before = page_now(miniwob_env)
    time.sleep(0.3)
    assert page_now(miniwob_env) == before
    assert miniwob_env.driver.execute_script("return Date.now();") == miniwob_env.driver.execute_script(
        "return Date.now();")


def test_on_virtual_time_a_300_ms_menu_costs_page_time_not_wall_time(miniwob_env):
    miniwob_env.reset(make_task(AUTOCOMPLETE, seed=EVAL_SEED_START))
    prefix = miniwob_env.ground_truth()["start"]
    box = next(i for i, e in enumerate(miniwob_env._page.elements) if e.is_editable)
    before = page_now(miniwob_env)
    result = miniwob_env.step(Action(action_type="input_text", index=box, text=prefix, clear_text=True))
    played_ms = page_now(miniwob_env) - before
    assert suggestions(result.observation, prefix)
    assert 300 <= played_ms < 300 + DEFAULT_SETTLE_MAX_S * 1000  # the menu's delay, played on the page's clock
    assert result.info["settle_s"] == pytest.approx(played_ms / 1000, abs=0.02)


def test_on_virtual_time_wait_plays_the_clock_for_its_duration_instead_of_sleeping(miniwob_env):
    miniwob_env.wait_s = 30.0  # a sleep this long would stall the test
    miniwob_env.reset(make_task(AUTOCOMPLETE, seed=EVAL_SEED_START))
    miniwob_env.driver.execute_script("window.__fired = 0; setTimeout(function () { window.__fired = 1; }, 20000);")
    before, wall = page_now(miniwob_env), time.monotonic()
    miniwob_env.step(Action(action_type="wait"))
    assert page_now(miniwob_env) - before >= 30000
    assert time.monotonic() - wall < 20  # no 30 s sleep
    assert miniwob_env.driver.execute_script("return window.__fired;") == 1  # a long timer due in the wait fired
    miniwob_env.wait_s = 0.5


def test_on_virtual_time_a_page_that_never_settles_is_read_after_the_budget(miniwob_env):
    # An endless animation (as chase-circle's) and an endless chain of short timers: read after settle_max_s
    # of page time, marked unsettled, not a hang.
    miniwob_env.settle_max_s = 1.0
    observation = miniwob_env.reset(make_task("miniwob/click-button", seed=EVAL_SEED_START))
    miniwob_env.driver.execute_script("""
        window.__loops = true;
        var spin = function () {
            window.__frames = (window.__frames || 0) + 1;
            if (window.__loops) { requestAnimationFrame(spin); }
        };
        requestAnimationFrame(spin);
        var tick = function () {
            window.__ticks = (window.__ticks || 0) + 1;
            if (window.__loops) { setTimeout(tick, 50); }
        };
        setTimeout(tick, 50);""")
    before, wall = page_now(miniwob_env), time.monotonic()
    try:
        result = miniwob_env.step(Action(action_type="scroll", direction="down"))
    finally:
        miniwob_env.driver.execute_script("window.__loops = false;")  # the shared page's next episode has none
    assert result.info["settled"] is False
    assert page_now(miniwob_env) - before == pytest.approx(1000, abs=1)
    assert 55 <= miniwob_env.driver.execute_script("return window.__frames;") <= 61  # 60 frames a second of page time
    assert 19 <= miniwob_env.driver.execute_script("return window.__ticks;") <= 20
    assert time.monotonic() - wall < 10
    assert observation.ui_elements  # the page was read


def test_on_virtual_time_a_css_transition_is_driven_to_its_end(miniwob_env):
    miniwob_env.reset(make_task("miniwob/click-button", seed=EVAL_SEED_START))
    miniwob_env.driver.execute_script("""
        var box = document.createElement('div');
        box.id = 'grow'; box.style.width = '10px'; box.style.height = '5px'; box.style.transition = 'width 0.6s linear';
        document.getElementById('area').appendChild(box);
        box.getBoundingClientRect();
        box.style.width = '110px';""")
    before = page_now(miniwob_env)
    result = miniwob_env.step(Action(action_type="scroll", direction="down"))
    width = miniwob_env.driver.execute_script("return getComputedStyle(document.getElementById('grow')).width;")
    assert result.info["settled"] is True
    assert width == "110px"
    assert page_now(miniwob_env) - before == pytest.approx(600, abs=20)


class SlowImages:
    """A loopback server that answers every request with a 10 x 10 PNG after ``delay_s``: a CSS image that is
    still loading when an action returns, as a fresh browser's first look at email-inbox's icons is."""

    def __init__(self, delay_s: float) -> None:
        import http.server
        import struct
        import threading
        import zlib

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        rows = b"".join(b"\x00" + b"\x80\x20\x20" * 10 for _ in range(10))
        png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 10, 10, 8, 2, 0, 0, 0))
               + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                time.sleep(delay_s)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(png)))
                self.end_headers()
                self.wfile.write(png)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("mode", [*SETTLING, "off"])
def test_a_css_image_still_loading_is_waited_for(miniwob_env, mode):
    images = SlowImages(delay_s=0.4)
    try:
        miniwob_env.settle = mode
        miniwob_env.reset(make_task("miniwob/click-button", seed=EVAL_SEED_START))
        miniwob_env.driver.execute_script(
            "var icon = document.createElement('span'); icon.id = 'slow-icon';"
            "icon.style.content = 'url(' + arguments[0] + '/icon-' + arguments[1] + '.png)';"
            "document.getElementById('area').appendChild(icon);", images.url, mode)
        result = miniwob_env.step(Action(action_type="scroll", direction="down"))
    finally:
        images.close()
    shown = [e for e in result.observation.ui_elements if e.resource_id == "slow-icon"]
    if mode == "off":  # read at once: the icon has no size yet, so the screen leaves it out
        assert shown == [] and result.info["settled"] is False
    else:
        assert len(shown) == 1 and result.info["settled"] is True


def test_switching_the_mode_reloads_the_page_with_the_other_hooks(miniwob_env):
    miniwob_env.settle = "wall"
    miniwob_env.reset(make_task(AUTOCOMPLETE, seed=EVAL_SEED_START))
    assert miniwob_env.driver.execute_script("return !!window.__admireSettle.virtual;") is False
    miniwob_env.settle = "virtual"
    miniwob_env.reset(make_task(AUTOCOMPLETE, seed=EVAL_SEED_START))
    assert miniwob_env.driver.execute_script("return !!window.__admireSettle.virtual;") is True


TASKS = (("use-autocomplete", 3), ("click-collapsible", 1))
"""Seeds 1,000,000-1,000,002 of use-autocomplete include one (…001) where, read at once, the untrained
policy's second step depends on whether the menu had time to open."""


class ThinkingPolicy:
    """A policy that takes ``delay_s`` before each decision, as a slower or busier machine would."""

    def __init__(self, policy: DomPolicy, delay_s: float) -> None:
        self.policy, self.delay_s = policy, delay_s

    def act(self, observations, histories, greedy: bool = False):
        time.sleep(self.delay_s)
        return self.policy.act(observations, histories, greedy=greedy)


def evaluation(env: MiniWoBEnv, delay_s: float, order: int) -> dict[tuple[str, int], tuple[float, tuple[str, ...]]]:
    """A greedy seeded evaluation of a fixed untrained policy: outcome and actions per (task, seed).
    ``order`` (1 or -1) changes what ran on the browser before each episode."""
    policy = ThinkingPolicy(DomPolicy(seed=0, prior_strength=1.0, encoder=TrigramEncoder(dim=384)), delay_s)
    tasks = [make_task(f"miniwob/{t}", seed=EVAL_SEED_START + i) for t, n in TASKS for i in range(n)][::order]
    with torch.no_grad():
        trajectories = collect(group_requests(tasks, 1), [env], policy, max_steps=4, greedy=True)
    return {(t.task.name, t.task.seed): (t.outcome, tuple(s.raw_output for s in t.steps)) for t in trajectories}


@pytest.mark.parametrize("mode", SETTLING)
def test_the_same_seeded_evaluation_twice_gives_the_same_episodes(miniwob_env, mode):
    # Once as fast as it goes, once with 0.4 s of thinking per step and in the reverse order.
    miniwob_env.settle = mode
    first = evaluation(miniwob_env, delay_s=0.0, order=1)
    second = evaluation(miniwob_env, delay_s=0.4, order=-1)
    assert len(first) == sum(n for _, n in TASKS)
    assert {k: v[0] for k, v in first.items()} == {k: v[0] for k, v in second.items()}
    assert first == second  # the same actions too, not only the same outcomes

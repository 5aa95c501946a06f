"""The MiniWoB++ backend: action planning and DOM reading (unit), then the real env in Chromium."""

from __future__ import annotations

import json
import os
import signal
import struct
import tempfile
import time
from pathlib import Path

import pytest

from admire.envs import EnvCrashed, InvalidAction, make_env, make_task
from admire.envs.miniwob import FAILURE, LIFTED_EPISODE_MAX_TIME_MS, MiniWoBEnv, check_task
from admire.envs.miniwob_actions import plan_action
from admire.envs.miniwob_browser import (
    MAX_SCRATCH_PATH_CHARS,
    BrowserNotFound,
    browser_processes,
    new_scratch_dir,
    resolve_browser_paths,
)
from admire.envs.miniwob_dom import ElementTarget, read_page
from admire.envs.oracles import get_oracle, run_oracle
from admire.types import Action, Observation, Task, UIElement

VIEWPORT = (780.0, 437.0)
PAGE_POINT = (80.0, 105.0)
TARGETS = (
    ElementTarget(ref=7, center=(71.0, 88.5), tag="input_text"),
    ElementTarget(ref=-3, center=(40.0, 120.0), tag="t"),
    ElementTarget(ref=9, center=(90.0, 900.0), tag="button"),  # scrolled below the window
)


def plan(action: dict, targets=TARGETS):
    return plan_action(Action(**action), targets, VIEWPORT, PAGE_POINT, wait_s=0.25)


def kinds(action: dict) -> list[str]:
    return [op.kind for op in plan(action).ops]


# --------------------------------------------------------------------------------------------------
# Planning actions (no browser)
# --------------------------------------------------------------------------------------------------

def test_click_by_index_uses_the_dom_ref_even_off_screen():
    assert plan({"action_type": "click", "index": 2}).ops[0].ref == 9
    assert kinds({"action_type": "long_press", "index": 0}) == ["CLICK_ELEMENT"]


def test_click_on_a_text_node_clicks_its_bbox_centre():
    op = plan({"action_type": "click", "index": 1}).ops[0]
    assert (op.kind, op.coords) == ("CLICK_COORDS", (40.0, 120.0))


def test_click_by_point_clicks_there():
    op = plan({"action_type": "click", "x": 12, "y": 34}).ops[0]
    assert (op.kind, op.coords) == ("CLICK_COORDS", (12.0, 34.0))


def test_double_tap_is_two_element_clicks_or_a_real_double_click():
    assert kinds({"action_type": "double_tap", "index": 0}) == ["CLICK_ELEMENT", "CLICK_ELEMENT"]
    assert kinds({"action_type": "double_tap", "x": 5, "y": 5}) == ["DBLCLICK_COORDS"]


def test_index_out_of_range_is_invalid_and_names_the_valid_range():
    with pytest.raises(InvalidAction, match=r"index 3 is out of range.*3 elements.*0\.\.2"):
        plan({"action_type": "click", "index": 3})
    with pytest.raises(InvalidAction, match="valid indices: none"):
        plan({"action_type": "click", "index": 0}, targets=())


def test_points_outside_the_window_are_invalid():
    with pytest.raises(InvalidAction, match="outside the browser window"):
        plan({"action_type": "click", "x": 900, "y": 10})
    with pytest.raises(InvalidAction, match="element 2's centre"):
        plan({"action_type": "scroll", "index": 2, "direction": "down"})


def test_input_text_types_into_the_element_and_clears_only_when_asked():
    assert kinds({"action_type": "input_text", "index": 0, "text": "bob"}) == ["FOCUS_ELEMENT_AND_TYPE_TEXT"]
    cleared = plan({"action_type": "input_text", "index": 0, "text": "bob", "clear_text": True}).ops
    assert [(op.kind, op.key or op.text) for op in cleared] == [
        ("CLICK_ELEMENT", None), ("PRESS_KEY", "C-a"), ("PRESS_KEY", "<Backspace>"), ("TYPE_TEXT", "bob")]
    assert kinds({"action_type": "input_text", "text": "bob"}) == ["TYPE_TEXT"]  # into the focused one
    assert kinds({"action_type": "input_text", "index": 1, "text": "x"}) == ["CLICK_COORDS", "TYPE_TEXT"]


def test_keys_scrolls_and_swipes():
    assert plan({"action_type": "keyboard_enter"}).ops[0].key == "<Enter>"
    page = plan({"action_type": "scroll", "direction": "down"}).ops[0]
    assert (page.kind, page.coords) == ("SCROLL_DOWN_COORDS", PAGE_POINT)
    assert kinds({"action_type": "scroll", "index": 0, "direction": "left"}) == ["SCROLL_LEFT_COORDS"]
    assert kinds({"action_type": "swipe", "direction": "up"}) == ["SCROLL_DOWN_COORDS"]  # finger up


def test_status_ends_the_episode_and_phone_actions_do_nothing():
    assert plan({"action_type": "status", "goal_status": "complete"}).ends_episode
    for action in ({"action_type": "navigate_home"}, {"action_type": "navigate_back"},
                   {"action_type": "open_app", "app_name": "Chrome"}, {"action_type": "answer", "text": "4"}):
        result = plan(action)
        assert result.ops == () and not result.ends_episode
    waited = plan({"action_type": "wait"}).ops
    assert [(op.kind, op.seconds) for op in waited] == [("SLEEP", 0.25)]


# --------------------------------------------------------------------------------------------------
# Reading the DOM (no browser: the dicts have the shape of core.getDOMInfo())
# --------------------------------------------------------------------------------------------------

def node(tag, ref, left, top, width, height, children=(), **extra):
    return {"tag": tag, "ref": ref, "left": left, "top": top, "width": width, "height": height,
            "children": list(children), "id": extra.pop("id", ""), "classes": extra.pop("classes", ""),
            **extra}


def login_dom(username_value="", text_ref=-1):
    return node("BODY", 1, 0, 0, 780, 210, [
        node("DIV", 2, 0, 50, 160, 150, id="area", children=[
            node("LABEL", 3, 2, 62, 48, 11, text="Username"),
            node("INPUT_text", 4, 7, 78, 128, 21, id="username", text="", value=username_value, focused=True),
            node("INPUT_checkbox", 5, 7, 110, 13, 13, id="ch0", text="", value=True),
            node("P", 6, 2, 130, 150, 20, children=[
                node("t", text_ref, 2, 130, 40, 11, text="Pick"),
                node("SELECT", 7, 45, 130, 100, 18, id="options"),
            ]),
            node("SPAN", 8, 120, 300, 12, 12, text="", classes="trash"),
            node("BUTTON", 9, 2, 166, 86, 31, id="subbtn", text="Login"),
        ]),
    ])


def login_page(**kwargs):
    extras = {"4": {"label": "Username", "placeholder": "", "disabled": False},
              "5": {"label": "apples", "placeholder": "", "disabled": False},
              "7": {"label": "", "placeholder": "", "disabled": False, "options": ["Ann", "Bob"],
                    "selected": "Ann"}}
    raw = {"done": False, "raw_reward": 0, "env_reward": 0, "reason": None, "utterance": "Log in.",
           "dom": login_dom(**kwargs), "extras": extras}
    return read_page(raw, (160, 210))


def test_read_page_lists_leaves_and_inputs_but_not_containers():
    page = login_page()
    assert [e.class_name for e in page.elements] == [
        "label", "input_text", "input_checkbox", "t", "select", "span", "button"]
    assert [t.ref for t in page.targets] == [3, 4, 5, -1, 7, 8, 9]
    assert page.elements[0].bbox == (2.0, 50.0, 62.0, 73.0)  # (x_min, x_max, y_min, y_max)
    assert page.targets[1].center == (71.0, 88.5)


def test_inputs_carry_label_value_and_flags():
    field, box, _, select, icon, button = login_page(username_value="bob").elements[1:]
    assert (field.hint_text, field.text, field.resource_id) == ("Username", "bob", "username")
    assert field.is_editable and field.is_focused and not field.is_checkable
    assert (box.hint_text, box.text, box.is_checkable, box.is_checked) == ("apples", None, True, True)
    assert (select.text, select.content_description, select.hint_text) == ("Ann", "options: Ann, Bob", "options")
    assert icon.content_description == "trash" and not icon.is_visible  # below the 160x210 task area
    assert button.text == "Login" and button.is_visible and not button.is_editable


def test_signature_sees_typing_but_not_text_ref_renumbering():
    assert login_page().signature == login_page(text_ref=-42).signature
    assert login_page().signature != login_page(username_value="b").signature


def test_a_finished_page_has_no_elements():
    page = read_page({"done": True, "raw_reward": -1, "env_reward": -1, "reason": "wrong",
                      "utterance": "Log in."}, (160, 210))
    assert page.done and page.raw_reward == -1.0 and page.elements == () and page.reason == "wrong"


def test_fields_come_from_the_page_when_it_gives_them():
    raw = {"done": False, "raw_reward": 0, "env_reward": 0, "reason": None,
           "utterance": {"utterance": "Fly to X.", "fields": {"to": "X"}}, "dom": login_dom()}
    page = read_page(raw, (160, 210))
    assert page.utterance == "Fly to X." and page.fields == (("to", "X"),)


# --------------------------------------------------------------------------------------------------
# Set-up errors (no browser started)
# --------------------------------------------------------------------------------------------------

def test_a_missing_browser_says_how_to_install_it(tmp_path):
    with pytest.raises(BrowserNotFound, match=r"apt-get install -y chromium chromium-driver"):
        resolve_browser_paths(chrome_binary=str(tmp_path / "no-chromium"))
    with pytest.raises(BrowserNotFound, match="chromedriver not found"):
        MiniWoBEnv(chromedriver=str(tmp_path / "no-driver"))


def test_a_scratch_root_too_deep_for_chromium_falls_back_to_tmp(tmp_path):
    deep = tmp_path / ("d" * 40)
    scratch = new_scratch_dir(deep)
    try:
        assert len(str(scratch)) <= MAX_SCRATCH_PATH_CHARS and scratch.parent == Path("/tmp")
        assert list(deep.iterdir()) == []
    finally:
        scratch.rmdir()
    short = new_scratch_dir()  # the session TMPDIR of conftest is short enough
    try:
        assert short.parent == Path(tempfile.gettempdir()).resolve()
    finally:
        short.rmdir()


def test_unknown_tasks_are_refused_with_a_suggestion():
    with pytest.raises(ValueError, match="did you mean login-user"):
        check_task(Task(name="miniwob/login-usr"))
    with pytest.raises(ValueError, match="'miniwob/<task>'"):
        check_task(Task(name="android/login-user"))


# --------------------------------------------------------------------------------------------------
# The real env (Chromium)
# --------------------------------------------------------------------------------------------------

browser = pytest.mark.browser


def login(env: MiniWoBEnv, seed: int = 3) -> tuple[Observation, dict[str, str]]:
    observation = env.reset(make_task("miniwob/login-user", seed=seed))
    return observation, env.ground_truth()


def index_of(observation: Observation, **fields) -> int:
    for i, element in enumerate(observation.ui_elements):
        if all(getattr(element, k) == v for k, v in fields.items()):
            return i
    raise AssertionError(f"no element with {fields} in {observation.ui_elements}")


@browser
def test_registered_as_miniwob_and_observation_is_the_page(miniwob_env):
    assert isinstance(miniwob_env, MiniWoBEnv)
    observation, truth = login(miniwob_env)
    assert observation.goal.startswith("Enter the username") and observation.step == 0
    assert [e.class_name for e in observation.ui_elements] == [
        "label", "input_text", "label", "input_password", "button"]
    assert observation.ui_elements[1].hint_text == "Username"
    assert observation.ui_elements[3].hint_text == "Password"
    assert set(truth) == {"username", "password"} and observation.screenshot is None


@browser
def test_make_env_builds_the_real_backend():
    env = make_env("miniwob", max_steps=4)
    try:
        assert isinstance(env, MiniWoBEnv) and env.max_steps == 4
        assert env.healthy() and env.process_ids() == {}  # the browser starts on the first reset
    finally:
        env.close()


@browser
@pytest.mark.parametrize("template", ["login-user", "enter-password", "click-checkboxes", "choose-list",
                                      "use-autocomplete", "email-inbox-reply", "click-tab-2"])
def test_ground_truth_never_enters_the_observation(miniwob_env, template):
    observation = miniwob_env.reset(make_task(f"miniwob/{template}", seed=11))
    truth = miniwob_env.ground_truth()
    assert truth, "the task should have fields for this test to mean anything"
    dumped = observation.model_dump(mode="json")
    assert set(dumped) == set(Observation.model_fields)  # no room for a fields dict or an extra key
    assert all(set(e) == set(UIElement.model_fields) for e in dumped["ui_elements"])
    elements = json.dumps(dumped["ui_elements"])
    for value in truth.values():  # a value the page does not show is known from the goal alone
        if value not in observation.goal:
            assert value not in elements, f"{value!r} leaked into the elements"


@browser
def test_the_typed_secret_is_not_on_screen_before_typing(miniwob_env):
    observation, truth = login(miniwob_env, seed=5)
    assert truth["password"] in observation.goal
    assert truth["password"] not in json.dumps(observation.model_dump(mode="json")["ui_elements"])


@browser
def test_same_seed_same_episode_other_seed_other_episode(miniwob_env):
    first, _ = login(miniwob_env, seed=21)
    again, _ = login(miniwob_env, seed=21)
    other, _ = login(miniwob_env, seed=22)
    assert first == again
    assert other.goal != first.goal


@browser
def test_an_episode_starts_with_nothing_focused_whatever_the_last_one_focused(miniwob_env):
    """click-button-sequence moves its buttons rather than rebuilding them: the last episode's focus would
    carry over, and the same seed's first screen (and whether a click changes it) would depend on it."""
    task = make_task("miniwob/click-button-sequence", seed=8)
    fresh = miniwob_env.reset(task)
    miniwob_env.step(Action(action_type="click", index=1))  # TWO focused, the episode failed
    again = miniwob_env.reset(task)
    assert not any(e.is_focused for e in again.ui_elements)
    assert again == fresh
    assert miniwob_env.step(Action(action_type="click", index=0)).info["screen_changed"] is True


@browser
def test_the_in_page_timer_is_lifted_and_stays_lifted(miniwob_env):
    def page_limit() -> tuple[float, str]:
        return tuple(miniwob_env.driver.execute_script(
            "return [core.EPISODE_MAX_TIME, document.getElementById('timer-countdown').textContent];"))

    login(miniwob_env)
    assert page_limit() == (LIFTED_EPISODE_MAX_TIME_MS, "1000000 / 1000000sec")
    login(miniwob_env, seed=4)  # a second episode on the same page
    assert page_limit()[0] == LIFTED_EPISODE_MAX_TIME_MS
    miniwob_env.reset(make_task("miniwob/click-test", seed=1))  # a new page is a new script context
    assert page_limit() == (LIFTED_EPISODE_MAX_TIME_MS, "1000000 / 1000000sec")


@browser
def test_a_correct_login_succeeds(miniwob_env):
    _, truth = login(miniwob_env)
    miniwob_env.step(Action(action_type="input_text", index=1, text=truth["username"]))
    middle = miniwob_env.step(Action(action_type="input_text", index=3, text=truth["password"]))
    assert not middle.done and middle.info["termination"] is None and middle.info["screen_changed"]
    assert middle.observation.ui_elements[1].text == truth["username"]
    final = miniwob_env.step(Action(action_type="click", index=4))
    assert final.done and final.success
    assert final.info["raw_reward"] == 1.0 and final.info["termination"] == "success"


@browser
def test_a_wrong_answer_ends_the_episode_as_a_failure(miniwob_env):
    _, truth = login(miniwob_env)
    miniwob_env.step(Action(action_type="input_text", index=1, text=truth["username"]))
    miniwob_env.step(Action(action_type="input_text", index=3, text=truth["password"] + "x"))
    result = miniwob_env.step(Action(action_type="click", index=4))
    assert result.done and not result.success
    assert result.info["termination"] == FAILURE and result.info["raw_reward"] == -1.0
    with pytest.raises(RuntimeError, match="call reset"):
        miniwob_env.step(Action(action_type="wait"))


@browser
def test_the_step_budget_ends_the_episode_as_max_steps(miniwob_env):
    miniwob_env.reset(make_task("miniwob/login-user", seed=3).model_copy(update={"max_steps": 3}))
    results = [miniwob_env.step(Action(action_type="navigate_home")) for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].info["termination"] == "max_steps" and not results[-1].success
    assert [r.info["screen_changed"] for r in results] == [False, False, False]

    miniwob_env.max_steps = 2  # without Task.max_steps, the env's budget applies
    login(miniwob_env)
    miniwob_env.step(Action(action_type="navigate_back"))
    assert miniwob_env.step(Action(action_type="navigate_back")).info["termination"] == "max_steps"


@browser
def test_an_invalid_index_raises_and_the_episode_goes_on(miniwob_env):
    observation, truth = login(miniwob_env)
    with pytest.raises(InvalidAction, match="out of range"):
        miniwob_env.step(Action(action_type="click", index=len(observation.ui_elements)))
    with pytest.raises(InvalidAction, match="needs an index"):
        miniwob_env.step({"action_type": "click"})  # a dict breaking a schema rule
    assert miniwob_env.steps_taken == 0 and miniwob_env.healthy()
    oracle, history = get_oracle("login-user"), []
    for _ in range(3):  # the same episode carries on to success
        action = oracle(observation, truth, history)
        result = miniwob_env.step(action)
        history.append(action)
        observation = result.observation
    assert result.success and miniwob_env.steps_taken == 3


@browser
def test_status_stops_the_episode_without_success(miniwob_env):
    login(miniwob_env)
    result = miniwob_env.step(Action(action_type="status", goal_status="complete"))
    assert result.done and not result.success and result.info["termination"] == "agent_stop"


@browser
def test_clear_text_replaces_and_plain_typing_appends(miniwob_env):
    login(miniwob_env)
    miniwob_env.step(Action(action_type="input_text", index=1, text="abc"))
    appended = miniwob_env.step(Action(action_type="input_text", index=1, text="de"))
    assert appended.observation.ui_elements[1].text == "abcde"
    replaced = miniwob_env.step(Action(action_type="input_text", index=1, text="xy", clear_text=True))
    assert replaced.observation.ui_elements[1].text == "xy"
    focused = miniwob_env.step(Action(action_type="input_text", text="z"))  # no index: the focused field
    assert focused.observation.ui_elements[1].text == "xyz"


@browser
def test_checkbox_clicks_change_the_screen_and_no_ops_do_not(miniwob_env):
    observation = miniwob_env.reset(make_task("miniwob/click-checkboxes", seed=2))
    box = index_of(observation, class_name="input_checkbox")
    checked = miniwob_env.step(Action(action_type="click", index=box))
    assert checked.observation.ui_elements[box].is_checked and checked.info["screen_changed"]
    idle = miniwob_env.step(Action(action_type="answer", text="hello"))
    assert not idle.info["screen_changed"] and not idle.done


@browser
def test_keyboard_enter_types_a_newline_in_a_textarea(miniwob_env):
    observation = miniwob_env.reset(make_task("miniwob/email-inbox-reply", seed=7))
    truth = miniwob_env.ground_truth()
    for text in (truth["by"], "Reply"):  # open the email, then its reply form
        observation = miniwob_env.step(Action(action_type="click", index=index_of(observation, text=text))).observation
    box = index_of(observation, resource_id="reply-text")
    miniwob_env.step(Action(action_type="input_text", index=box, text="a"))
    miniwob_env.step(Action(action_type="keyboard_enter"))
    result = miniwob_env.step(Action(action_type="input_text", text="b"))
    assert result.observation.ui_elements[box].text == "a\nb"


@browser
def test_scroll_moves_the_inbox_and_back(miniwob_env):
    observation = miniwob_env.reset(make_task("miniwob/email-inbox", seed=4))
    assert len(observation.ui_elements) > 30, "this seed should have a list longer than the screen"
    first_top = observation.ui_elements[2].bbox[2]
    down = miniwob_env.step(Action(action_type="scroll", direction="down"))
    assert down.info["screen_changed"] and down.observation.ui_elements[2].bbox[2] < first_top
    up = miniwob_env.step(Action(action_type="swipe", direction="down"))  # a finger down scrolls up
    assert up.observation.ui_elements[2].bbox[2] == pytest.approx(first_top)


@browser
def test_screenshots_on_request_and_upscaled(miniwob_env):
    observation, _ = login(miniwob_env)
    assert observation.screenshot is None
    miniwob_env.screenshots = True
    shot = login(miniwob_env)[0].screenshot
    assert shot is not None and shot.png[:8] == b"\x89PNG\r\n\x1a\n"
    assert (shot.width, shot.height) == (160, 210) == struct.unpack(">II", shot.png[16:24])
    miniwob_env.screenshot_scale = 2.0
    step = miniwob_env.step(Action(action_type="click", index=1))
    assert (step.observation.screenshot.width, step.observation.screenshot.height) == (320, 420)


@browser
def test_one_browser_runs_many_tasks(miniwob_env):
    login(miniwob_env)
    pid = miniwob_env.browser_pid()
    for template in ("click-test", "click-button", "login-user"):
        run = run_oracle(miniwob_env, make_task(f"miniwob/{template}", seed=8))
        assert run.success, template
    assert miniwob_env.browser_pid() == pid


@browser
def test_a_killed_browser_raises_env_crashed_and_restart_recovers():
    env = MiniWoBEnv()
    try:
        login(env)
        old_scratch = env._scratch
        os.kill(env.browser_pid(), signal.SIGKILL)
        with pytest.raises(EnvCrashed, match="restart"):
            env.step(Action(action_type="click", index=1))
        assert not env.healthy()
        with pytest.raises(EnvCrashed):
            login(env)
        env.restart()
        assert env.healthy() and not old_scratch.exists() and browser_processes(old_scratch) == {}
        assert run_oracle(env, make_task("miniwob/login-user", seed=3)).success
    finally:
        env.close()


@browser
def test_close_leaves_no_process_and_no_scratch_folder():
    env = MiniWoBEnv()
    login(env)
    scratch = Path(env._scratch)
    processes = env.process_ids()
    names = set(processes.values())
    assert {"chromedriver", "chromium"} <= names, names
    assert list(scratch.iterdir()), "Chromium should have written its temp files into the scratch TMPDIR"
    env.close()
    env.close()  # idempotent
    deadline = time.monotonic() + 5
    while browser_processes(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert browser_processes(scratch) == {}
    alive = [pid for pid in processes if _running(pid)]
    assert alive == [], f"processes of the closed env still running: {alive}"
    assert not scratch.exists()
    with pytest.raises(RuntimeError, match="closed"):
        login(env)


def _running(pid: int) -> bool:
    """A live (non-zombie) Chromium or chromedriver process with this pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    name = stat[stat.index("(") + 1: stat.rindex(")")]
    return name.startswith("chrom") and stat.rsplit(")", 1)[1].split()[0] != "Z"

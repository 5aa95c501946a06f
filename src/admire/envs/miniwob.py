"""MiniWoB++ (PyPI ``miniwob`` 1.1) in headless Debian Chromium, as a ``GuiEnv``: the embedded default.

What this adds to miniwob's gym env, and why:

* **Our Chromium flags and a scratch TMPDIR** per env (:mod:`admire.envs.miniwob_browser`), so that a
  pool of browsers stays off the network and ``close`` leaves no process and no folder behind.
* **Many tasks, one browser.** ``reset(task)`` with another template navigates the same browser to
  that task's page (about 0.2 s) instead of starting a new Chromium (about 1 s); the page is loaded
  afresh, so the episode is the one a new gym env would give.
* **No wall-clock limit.** MiniWoB pages end an episode after 7–30 s; a policy that thinks longer than
  that would fail for being slow. Every reset sets ``core.EPISODE_MAX_TIME`` to 10^9 ms and the step
  budget is enforced here instead (``max_steps``, or ``Task.max_steps``).
* **A settled screen.** After reset and after every action the page is read only once it is quiet
  (no pending short timer, animation frame or animation), at most ``settle_max_s`` later: by default on
  the page's own clock, played forward callback by callback (:mod:`admire.envs.miniwob_clock`), or in
  real time with ``settle="wall"`` (:mod:`admire.envs.miniwob_settle`). A menu that opens 0.3 s after
  typing is in the observation whatever the machine's speed, so a seeded run is reproducible.
* **Fewer round trips.** A step is the action's own call(s) plus one call that waits for the page to
  settle and reads it (:data:`~admire.envs.miniwob_settle.SETTLE_READ_JS`), against four to five
  calls in miniwob's step.
  Actions are executed by miniwob's own ``execute_action_on_chromedriver``; the DOM is parsed by
  miniwob's own ``DOMElement``; rewards are the page's ``WOB_RAW_REWARD_GLOBAL``.
* **AndroidWorld's action and element vocabulary**, so policies never know which backend they face.

Outcome: success is ``raw_reward == 1``; a page that ends the episode otherwise (a wrong answer) is a
``failure``. ``StepResult.info`` carries ``raw_reward``, ``termination`` (``success``, ``failure``,
``agent_stop``, ``max_steps``, or ``None`` while running), ``screen_changed``, ``settle_s`` (how long
the step waited for the page to settle: page time on virtual time, wall time otherwise), ``settled``
(False: the page was still busy at the cap) and ``settle_mode`` (``virtual``, ``wall`` or ``off``).

The task's parsed ``fields`` (miniwob's ground truth) never enter an ``Observation``; only
:meth:`MiniWoBEnv.ground_truth` returns them, and it is for oracles and tests, never for agents.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import functools
import logging
import struct
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from admire.actions import ActionError, validate_action
from admire.envs.base import EnvCrashed, InvalidAction, StepResult
from admire.envs.goal_template import fill_goal_template
from admire.envs.miniwob_actions import HORIZONTAL_SCROLLS, SLEEP, ActionPlan, MiniwobOp, plan_action
from admire.envs.miniwob_browser import (
    BrowserNotFound,
    browser_processes,
    flagged_instance_class,
    main_browser_pid,
    new_scratch_dir,
    resolve_browser_paths,
    shut_down,
)
from admire.envs.miniwob_clock import CLOCK_ADVANCE_JS, CLOCK_HOOK_JS, CLOCK_SETTLE_READ_JS
from admire.envs.miniwob_dom import Page, read_page
from admire.envs.miniwob_settle import (
    DEFAULT_SETTLE,
    DEFAULT_SETTLE_MAX_S,
    DEFAULT_SETTLE_QUIET_S,
    SETTLE_HOOK_JS,
    SETTLE_READ_JS,
    SHORT_TIMER_MS,
    SettleReport,
    check_settle_mode,
    check_settle_options,
    settle_report,
)
from admire.errors import brief
from admire.extras import require
from admire.types import Action, Observation, Screenshot, Task, Termination

require("miniwob", "selenium")  # without them: one line naming pip install 'admire[miniwob]', not a crash mid-episode

log = logging.getLogger(__name__)

DEFAULT_MAX_STEPS = 10
LIFTED_EPISODE_MAX_TIME_MS = 1e9
"""Long enough never to fire (11.6 days), short enough for setTimeout (at most 2^31 - 1 ms)."""
FAILURE = "failure"
"""Termination of an episode the page ended without success (wrong answer)."""
TASK_READY_POLL_S = 0.05
TASK_READY_MAX_WAIT_S = 2.0

_RESET_BODY = """
var S = window.__admireSettle;
if (!!S.virtual !== arguments[4] || S.leftovers()) { return 'reload'; }
core.EPISODE_MAX_TIME = arguments[1];
core.endEpisode(0);
if (document.activeElement && document.activeElement !== document.body) { document.activeElement.blur(); }
if (S.startEpisode) { S.startEpisode(); }
Math.seedrandom(arguments[2]);
core.setDataMode(arguments[3]);
core.startEpisodeReal();
return WOB_TASK_READY;
"""
RESET_JS = {"virtual": CLOCK_HOOK_JS + _RESET_BODY, "wall": SETTLE_HOOK_JS + _RESET_BODY,
            "off": SETTLE_HOOK_JS + _RESET_BODY}
"""Per settle mode: miniwob's ``force_stop`` + ``begin_task`` (seed, data mode, start) in one call, timer lifted
first; the mode's hooks are installed before the episode starts, so its first timers are counted (and, on
virtual time, run by the page clock, whose frames then count from the episode's start). Answers ``'reload'``
(and starts nothing) when the page carries the other mode's hooks, or when the last episode left visible
elements outside the task area, e.g. use-autocomplete's open menu: the page is then loaded afresh, so an
episode never shows another episode's leftovers. The focus is taken off whatever the last episode focused: a
task that repositions its elements rather than rebuilding them (click-button-sequence) would otherwise start
with the last episode's button focused, and its first screen would depend on the episode before. Arguments:
short-timer ms, max time, seed, data mode, whether the page runs on virtual time."""


@functools.cache
def miniwob_task_names() -> tuple[str, ...]:
    """Every task the installed ``miniwob`` package registers (``miniwob/<task>-v1`` gym ids)."""
    import gymnasium
    import miniwob  # noqa: F401 - registers the gym ids

    names = []
    for env_id in gymnasium.registry:
        if env_id.startswith("miniwob/") and env_id.endswith("-v1"):
            names.append(env_id[len("miniwob/"):-len("-v1")])
    return tuple(sorted(names))


def check_task(task: Task) -> str:
    """The template of a MiniWoB task, or a ValueError that says what would have been right."""
    if task.backend != "miniwob" or "/" not in task.name:
        raise ValueError(f"the miniwob env runs tasks named 'miniwob/<task>', got {task.name!r}")
    goal_template = task.params.get("goal_template")
    if goal_template is not None:
        fill_goal_template(goal_template, "")  # a bad one is refused here, before the browser is touched
    template = task.template
    known = miniwob_task_names()
    if template not in known:
        close = difflib.get_close_matches(template, known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see admire.envs.suites 'miniwob-all'"
        raise ValueError(f"unknown MiniWoB task {template!r}{hint}")
    return template


class MiniWoBEnv:
    """One headless Chromium running MiniWoB++ tasks one episode at a time.

    Options: ``max_steps`` (step budget when the task sets none), ``screenshots`` (attach a PNG of the
    task area to every observation), ``screenshot_scale`` (render the screenshot at this zoom, e.g. 2
    for VLMs; element bboxes and x/y actions stay in CSS pixels), ``wait_s`` (how long ``wait``
    sleeps), ``scroll_px`` (wheel distance of one scroll), ``chrome_binary``/``chromedriver``
    (default: ``MINIWOB_CHROME_BINARY``/``MINIWOB_CHROMEDRIVER``, else ``/usr/bin/...``),
    ``scratch_root`` (where the per-env TMPDIR goes), ``command_timeout_s`` (a browser call that takes
    longer is a crash), ``data_mode`` (miniwob's train/test generator switch), ``settle`` (how the page
    is read after reset and each action, :data:`SETTLE_MODES`: ``virtual``, the default, plays the page's
    own clock until no short timer, frame or animation is pending, at most ``settle_max_s`` of page time;
    ``wall`` waits in real time until the same holds and the DOM has not changed for ``settle_quiet_s``,
    default 0.02 s, at most ``settle_max_s``, default 1.5 s; ``off``, or ``settle_max_s=0``, reads at once,
    which is not reproducible on timing-sensitive tasks).

    The browser starts on the first ``reset``. Not thread-safe: one env per thread.
    """

    def __init__(
        self,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        screenshots: bool = False,
        screenshot_scale: float = 1.0,
        wait_s: float = 0.5,
        scroll_px: int = 100,
        chrome_binary: str | None = None,
        chromedriver: str | None = None,
        scratch_root: str | Path | None = None,
        command_timeout_s: float = 60.0,
        data_mode: str = "train",
        settle: str = DEFAULT_SETTLE,
        settle_quiet_s: float = DEFAULT_SETTLE_QUIET_S,
        settle_max_s: float = DEFAULT_SETTLE_MAX_S,
    ) -> None:
        if int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if not 0.25 <= float(screenshot_scale) <= 8:
            raise ValueError(f"screenshot_scale must be between 0.25 and 8, got {screenshot_scale}")
        self.max_steps = int(max_steps)
        self.screenshots = bool(screenshots)
        self.screenshot_scale = float(screenshot_scale)
        self.wait_s = float(wait_s)
        self.scroll_px = int(scroll_px)
        self.command_timeout_s = float(command_timeout_s)
        self.data_mode = data_mode
        self.settle = check_settle_mode(settle)
        self.settle_quiet_s, self.settle_max_s = check_settle_options(settle_quiet_s, settle_max_s)
        self.last_settle = SettleReport(settled=False, waited_s=0.0, busy="")
        self._paths = resolve_browser_paths(chrome_binary, chromedriver)  # fails early if missing
        self._scratch_root = scratch_root
        self._instance: Any = None  # FlaggedSeleniumInstance, built lazily
        self._scratch: Path | None = None
        self._finalizer: weakref.finalize | None = None
        self._config: Any = None
        self._crashed = False
        self._closed = False
        self._task: Task | None = None
        self._fields: tuple[tuple[str, str], ...] = ()
        self._page: Page | None = None
        self._steps = 0
        self._budget = self.max_steps
        self._episode_over = True

    # ---------------------------------------------------------------------------------- GuiEnv

    def reset(self, task: Task) -> Observation:
        """Start an episode of ``task`` (seeded: the same seed gives the same episode)."""
        self._check_open()
        template = check_task(task)
        if self._crashed:
            raise EnvCrashed("the MiniWoB browser crashed earlier; call restart() before reset()")
        if self._instance is None:
            self._launch(template)
        elif self._instance.task_name != template:
            self._switch(template)
        self._episode_over = True
        self._task = task
        with self._guard("starting an episode"):
            mode = self._settle_mode()
            args = (RESET_JS[mode], SHORT_TIMER_MS, LIFTED_EPISODE_MAX_TIME_MS, int(task.seed), self.data_mode,
                    mode == "virtual")
            ready = self._driver.execute_script(*args)
            if ready == "reload":
                self._switch(template)
                ready = self._driver.execute_script(*args)
            self._wait_until_ready(ready)
            page = self._read()
        self._fields = page.fields if page.fields is not None else self._extract_fields(page.utterance)
        self._page = page
        self._steps = 0
        self._budget = int(task.max_steps) if task.max_steps else self.max_steps
        self._episode_over = False
        return self._observation(page)

    def step(self, action: Action | Mapping[str, Any]) -> StepResult:
        """Execute one action. ``InvalidAction`` leaves the page, the episode and the step count as
        they were; ``EnvCrashed`` means the browser is gone (``restart()``)."""
        self._check_open()
        if self._crashed:
            raise EnvCrashed("the MiniWoB browser crashed earlier; call restart()")
        if self._episode_over or self._page is None:
            raise RuntimeError("no episode is running: call reset(task) first (the last one has ended)")
        try:
            action = validate_action(action)
        except ActionError as exc:
            raise InvalidAction(str(exc)) from exc
        page = self._page
        plan = plan_action(action, page.targets, self._viewport, self._page_point, self.wait_s)
        with self._guard(f"executing a {action.action_type} action"):
            for op in plan.ops:
                self._run(op)
            after = self._read()
        self._steps += 1
        return self._result(plan, page, after)

    def close(self) -> None:
        """Quit the browser, kill what is left of it, remove its scratch folder. Idempotent."""
        self._closed = True
        self._episode_over = True
        self._shut_down_browser()

    def healthy(self) -> bool:
        """False once the browser has died (a round trip to it fails) or the env is closed."""
        if self._closed or self._crashed:
            return False
        if self._instance is None:
            return True
        driver = self._driver
        process = getattr(getattr(driver, "service", None), "process", None)
        if process is not None and process.poll() is not None:
            self._crashed = True
            return False
        try:
            driver.execute_script("return 1;")
        except _crash_errors():
            self._crashed = True
            return False
        return True

    # ------------------------------------------------------------------------------- beyond GuiEnv

    def restart(self) -> None:
        """Replace the browser with a new one (on the same task page); the next call is ``reset``."""
        self._check_open()
        template = self._instance.task_name if self._instance is not None else None
        self._shut_down_browser()
        self._crashed = False
        self._episode_over = True
        self._page = None
        if template is not None:
            self._launch(template)

    def ground_truth(self) -> dict[str, str]:
        """ORACLE-ONLY: the episode's parsed task fields (miniwob's ``fields``), e.g. the password to
        type. Scripted oracles and tests may read this; a policy must never see it."""
        if self._task is None:
            raise RuntimeError("no episode yet: call reset(task) first")
        return dict(self._fields)

    @property
    def task(self) -> Task | None:
        return self._task

    @property
    def steps_taken(self) -> int:
        return self._steps

    @property
    def driver(self) -> Any:
        """The Selenium driver, for tests and debugging; acting through it bypasses the step budget."""
        return None if self._instance is None else self._instance.driver

    def process_ids(self) -> dict[int, str]:
        """Live processes of this env's browser (chromedriver, Chromium and its helpers): pid -> name."""
        return {} if self._scratch is None else browser_processes(self._scratch)

    def browser_pid(self) -> int | None:
        """The main Chromium process, or None when there is none."""
        if self._scratch is None or self._instance is None:
            return None
        process = getattr(getattr(self._driver, "service", None), "process", None)
        return main_browser_pid(self._scratch, None if process is None else process.pid)

    def __enter__(self) -> MiniWoBEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ internals

    @property
    def _driver(self) -> Any:
        return self._instance.driver

    @property
    def _viewport(self) -> tuple[float, float]:
        return (float(self._instance.inner_width), float(self._instance.inner_height))

    @property
    def _page_point(self) -> tuple[float, float]:
        return (self._instance.task_width / 2.0, self._instance.task_height / 2.0)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this MiniWoB env is closed; make a new one")

    def _new_instance(self, template: str) -> Any:
        return flagged_instance_class()(template, paths=self._paths, scratch=self._scratch,
                                        command_timeout_s=self.command_timeout_s, data_mode=self.data_mode)

    def _launch(self, template: str) -> None:
        self._scratch = new_scratch_dir(self._scratch_root)
        instance = self._new_instance(template)
        try:
            instance.create_driver()
        except Exception as exc:
            shut_down(getattr(instance, "driver", None), self._scratch)
            self._scratch = None
            if isinstance(exc, BrowserNotFound):
                raise
            raise EnvCrashed(f"could not start Chromium for MiniWoB task {template!r}: {brief(exc)}") from exc
        self._instance = instance
        self._finalizer = weakref.finalize(self, shut_down, instance.driver, self._scratch)
        self._config = _action_config(instance, self.scroll_px)

    def _switch(self, template: str) -> None:
        instance = self._new_instance(template)
        with self._guard(f"opening the page of task {template!r}"):
            instance.adopt_driver(self._driver)
        self._instance = instance
        self._config = _action_config(instance, self.scroll_px)

    def _shut_down_browser(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # runs shut_down once, however often this is called
        self._finalizer = None
        self._instance = None
        self._scratch = None

    @contextlib.contextmanager
    def _guard(self, doing: str):
        """Turn a dead browser's many exceptions into ``EnvCrashed``; keep ours as they are."""
        from selenium.common.exceptions import MoveTargetOutOfBoundsException

        try:
            yield
        except (EnvCrashed, InvalidAction):
            raise
        except MoveTargetOutOfBoundsException as exc:
            raise InvalidAction(f"the pointer would leave the browser window: {brief(exc)}") from exc
        except (*_crash_errors(), RuntimeError) as exc:
            self._crashed = True
            raise EnvCrashed(f"the MiniWoB browser failed while {doing}: {brief(exc)}; call restart()") from exc

    def _wait_until_ready(self, ready: bool) -> None:
        deadline = time.monotonic() + TASK_READY_MAX_WAIT_S
        while not ready:
            if time.monotonic() > deadline:
                raise RuntimeError(f"task {self._instance.task_name!r} did not become ready")
            time.sleep(TASK_READY_POLL_S)
            ready = self._driver.execute_script("return WOB_TASK_READY;")

    def _settle_mode(self) -> str:
        return "off" if self.settle_max_s <= 0 else self.settle

    def _read(self) -> Page:
        """Wait for the page to settle (bounded), then read it: one browser call. The wait is part of
        the step's own browser call, so it counts against nothing but wall time, and a browser that
        dies during it fails like any other call (inside ``_guard``)."""
        instance = self._instance
        mode = self._settle_mode()
        script = CLOCK_SETTLE_READ_JS if mode == "virtual" else SETTLE_READ_JS
        max_ms = 0.0 if mode == "off" else self.settle_max_s * 1000
        raw = self._driver.execute_async_script(script, SHORT_TIMER_MS, self.settle_quiet_s * 1000, max_ms)
        if not isinstance(raw, Mapping):
            raise RuntimeError(f"reading the page answered {type(raw).__name__}, not an object")
        if "error" in raw and "done" not in raw:
            raise RuntimeError(f"reading the page failed in the page: {raw['error']}")
        self.last_settle = settle_report(raw)
        return read_page(raw, (instance.task_width, instance.task_height))

    def _extract_fields(self, utterance: str) -> tuple[tuple[str, str], ...]:
        try:
            return tuple((str(k), str(v)) for k, v in self._instance.field_extractor(utterance))
        except (ValueError, KeyError) as exc:  # a field regex that misses: no ground truth, no crash
            log.warning("no fields for %r: %s", utterance, exc)
            return ()

    def _run(self, op: MiniwobOp) -> None:
        from miniwob.action import ActionTypes
        from miniwob.selenium_actions import execute_action_on_chromedriver

        if op.kind == SLEEP:
            if self._settle_mode() == "virtual":  # the page's clock runs for the wait; nothing sleeps
                self._driver.execute_async_script(CLOCK_ADVANCE_JS, SHORT_TIMER_MS, op.seconds * 1000)
            else:
                time.sleep(op.seconds)
            return
        if op.kind in HORIZONTAL_SCROLLS:
            self._scroll_horizontally(op)
            return
        config = self._config
        action: dict[str, Any] = {"action_type": config.action_types.index(ActionTypes[op.kind])}
        if op.ref is not None:
            action["ref"] = op.ref
        if op.coords is not None:
            action["coords"] = op.coords
        if op.text is not None:
            action["text"] = op.text
        if op.key is not None:
            action["key"] = config.allowed_keys.index(op.key)
        execute_action_on_chromedriver(action, self._fields, config, self._driver)

    def _scroll_horizontally(self, op: MiniwobOp) -> None:
        """miniwob's wheel scroll, sideways (it has only up and down)."""
        from selenium.webdriver.common.action_chains import ActionChains

        assert op.coords is not None
        amount = self._config.scroll_amount * (-1 if op.kind == "SCROLL_LEFT_COORDS" else 1)
        chain = ActionChains(self._driver)
        chain.w3c_actions.wheel_action.scroll(x=int(op.coords[0]), y=int(op.coords[1]), delta_x=amount,
                                              duration=self._config.scroll_time)
        chain.w3c_actions.perform()

    def _screenshot(self) -> Screenshot:
        instance = self._instance
        clip = {"x": 0, "y": 0, "width": instance.task_width, "height": instance.task_height,
                "scale": self.screenshot_scale}
        data = self._driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "clip": clip})
        png = base64.b64decode(data["data"])
        width, height = struct.unpack(">II", png[16:24])  # the PNG's IHDR chunk
        return Screenshot.from_png(png, int(width), int(height))

    def _observation(self, page: Page) -> Observation:
        shot = None
        if self.screenshots and not page.done:
            with self._guard("taking a screenshot"):
                shot = self._screenshot()
        goal = page.utterance or (self._page.utterance if self._page is not None else "")
        template = self._task.params.get("goal_template") if self._task is not None else None
        if template:  # a suite's goal template (android-miniwob: AndroidWorld's MiniWoB family)
            goal = fill_goal_template(template, goal)
        return Observation(goal=goal, ui_elements=page.elements, screenshot=shot, step=self._steps)

    def _result(self, plan: ActionPlan, before: Page, after: Page) -> StepResult:
        success = after.done and after.raw_reward == 1.0
        termination: str | None = None
        if after.done:
            termination = Termination.SUCCESS.value if success else FAILURE
        elif plan.ends_episode:
            termination = Termination.AGENT_STOP.value
        elif self._steps >= self._budget:
            termination = Termination.MAX_STEPS.value
        observation = self._observation(after)
        info = {
            "raw_reward": after.raw_reward,
            "env_reward": after.env_reward,
            "reason": after.reason,
            "termination": termination,
            "screen_changed": after.done or after.signature != before.signature,
            "step": self._steps,
            "max_steps": self._budget,
            "miniwob_actions": [op.kind for op in plan.ops],
            "settle_s": round(self.last_settle.waited_s, 4),
            "settled": self.last_settle.settled,
            "settle_mode": self._settle_mode(),
        }
        self._page = after
        self._episode_over = termination is not None
        return StepResult(observation=observation, done=termination is not None, success=success, info=info)


def _crash_errors() -> tuple[type[BaseException], ...]:
    """What a dead or hung browser raises: Selenium's errors, and urllib3's or the socket's below them."""
    from selenium.common.exceptions import WebDriverException
    from urllib3.exceptions import HTTPError

    return (WebDriverException, HTTPError, OSError)


def _action_config(instance: Any, scroll_px: int) -> Any:
    from miniwob.action import ActionSpaceConfig

    config = ActionSpaceConfig.get_preset("all_supported")
    config.screen_width = instance.task_width
    config.screen_height = instance.task_height
    config.scroll_amount = scroll_px
    return config

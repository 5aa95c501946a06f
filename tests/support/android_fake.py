"""A faithful fake of one AndroidWorld device: the real ``AsyncEnv`` interface over a tiny stateful phone.

Why it is shaped this way: the adapter (``admire.envs.android_world``) must be tested against AndroidWorld's
own code, not against our idea of it, while CI has no emulator. So only the device is fake:

* ``FakeAsyncEnv`` subclasses AndroidWorld's real abstract ``interface.AsyncEnv`` (every abstract member is
  implemented) and executes actions exactly as ``AsyncAndroidEnv.execute_action`` does: ``answer`` into
  ``interaction_cache``, ``status`` a no-op, everything else through AndroidWorld's real
  ``actuation.execute_adb_action``, which issues the real ``adb_pb2.AdbRequest``s of ``adb_utils``.
* ``FakeController`` answers those requests (``execute_adb_call``) by changing a small ``Phone``: a launcher
  with two pages, a Notes app (a text field, a Save button, a scrollable list where a long press selects a
  note and a double tap stars it) and a Settings app with a Wi-Fi switch. Screens come back as real
  ``AndroidAccessibilityForest`` protos turned into real ``UIElement``s by AndroidWorld's
  ``representation_utils.forest_to_ui_elements``; ``pixels`` is an RGB array drawn from the same nodes.
* Tasks are real ``TaskEval`` subclasses (``NotesAddNote``, ``NotesAddTwoNotes`` with a fractional score)
  whose ``initialize_task``/``is_successful``/``tear_down`` talk to the phone through ``adb_utils`` only.
* Faults: ``env.crash()`` makes every later adb call and ``get_state`` raise android_env's
  ``AdbControllerError`` (a dead device); ``env.freeze()`` makes them block until ``unfreeze()`` (a frozen
  one, at most ``FREEZE_CAP_S``). A subprocess (``admire serve``) is faulted through the environment:
  ``ADMIRE_ANDROID_FAKE_CRASH_AFTER=k`` crashes the first device this process launches at its k-th action
  (later launches, i.e. restarts, are healthy); ``ADMIRE_ANDROID_FAKE_FREEZE_AFTER=k`` freezes it instead.

How to use it::

    from tests.support.android_fake import load_and_setup_env, DEVICES   # adds the source copy to sys.path
    ENVS.get("android_world")(launcher="tests.support.android_fake:load_and_setup_env",
                              task_registry="tests.support.android_fake:TASKS")
    env.reset(make_task("android_world/NotesAddNote", seed=3))

``DEVICES[console_port]`` is the last ``FakeAsyncEnv`` launched on that port (to inject faults in-process).
AndroidWorld is not on PyPI: its modules come from the unmodified copy in ``tests/third_party`` (see its
README); ``android_env`` and the rest come from ``pip install .[android]``. The copy has no ``registry.py``
(its import closure is all 116 tasks and their apps), so when ``android_world.registry`` is not importable
this module installs a stand-in whose ``TaskRegistry().get_registry("android_world")`` is :data:`TASKS`:
the adapter's default task lookup then finds the fake's tasks without extra options.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import re
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

THIRD_PARTY = Path(__file__).resolve().parents[1] / "third_party"


def use_source_copy() -> None:
    """Make ``import android_world`` find the copy in tests/third_party (unless a real install exists).

    ``android_world.env.setup_device.setup`` is replaced by an empty module: the real one imports the app
    installers (``apps.py`` → the information-retrieval protos that AndroidWorld generates at build time
    and does not keep in its source tree). ``TaskEval`` uses it only in ``install_apps_if_not_installed``
    and ``env_launcher`` only when ``emulator_setup=True``; neither runs against this fake.
    """
    if importlib.util.find_spec("android_world") is None and str(THIRD_PARTY) not in sys.path:
        sys.path.insert(0, str(THIRD_PARTY))
    name = "android_world.env.setup_device.setup"
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except ImportError:
            stub = types.ModuleType(name, "Stand-in: the real module needs AndroidWorld's generated protos.")
            sys.modules[name] = stub
            importlib.import_module("android_world.env.setup_device").setup = stub  # type: ignore[attr-defined]


use_source_copy()

from android_env.components import errors  # noqa: E402
from android_env.proto import adb_pb2  # noqa: E402
from android_env.proto.a11y import android_accessibility_forest_pb2  # noqa: E402
from android_world.env import actuation, adb_utils, interface, json_action, representation_utils  # noqa: E402
from android_world.task_evals import task_eval  # noqa: E402

WIDTH, HEIGHT = 360, 640
FREEZE_CAP_S = 30.0
"""A frozen fake blocks at most this long, so a test that forgets to unfreeze still ends."""
LAUNCHER = "com.google.android.apps.nexuslauncher"
NOTES = "com.example.notes"
SETTINGS = "com.android.settings"
NOTES_FILE = "/sdcard/notes.txt"
VISIBLE_ROWS = 3
DEVICES: dict[int, FakeAsyncEnv] = {}
_launches = 0


# --------------------------------------------------------------------------------------------------
# The phone
# --------------------------------------------------------------------------------------------------

@dataclass
class Node:
    """One accessibility node before it becomes a proto: bounds are (left, top, right, bottom)."""

    bounds: tuple[int, int, int, int]
    cls: str
    text: str = ""
    desc: str = ""
    hint: str = ""
    rid: str = ""
    clickable: bool = False
    long_clickable: bool = False
    editable: bool = False
    focused: bool = False
    checkable: bool = False
    checked: bool = False
    selected: bool = False
    scrollable: bool = False
    tap: str = ""
    """What a tap does: a key into ``Phone._tap``."""
    children: list[Node] = field(default_factory=list)


@dataclass
class Phone:
    """The device's state. Every change comes from an adb request (``FakeController.execute_adb_call``)."""

    app: str = LAUNCHER
    home_page: int = 0
    draft: str = ""
    field_focused: bool = False
    notes: list[str] = field(default_factory=list)
    starred: set[str] = field(default_factory=set)
    selected: str | None = None
    scroll: int = 0
    wifi: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    adb_log: list[str] = field(default_factory=list)
    """One short line per adb request, in order (what the actions really did)."""

    # ------------------------------------------------------------------ screens

    def root(self) -> Node:
        if self.app == NOTES:
            return self._notes_screen()
        if self.app == SETTINGS:
            return Node((0, 0, WIDTH, HEIGHT), "android.widget.FrameLayout", children=[
                Node((0, 0, WIDTH, 60), "android.widget.TextView", text="Settings"),
                Node((0, 80, WIDTH, 140), "android.widget.Switch", text="Wi-Fi", rid=f"{SETTINGS}:id/wifi",
                     clickable=True, checkable=True, checked=self.wifi, tap="wifi"),
            ])
        icons = ([Node((40, 500, 140, 600), "android.widget.TextView", text="Notes", desc="Notes", clickable=True,
                       tap="open_notes")] if self.home_page == 0 else
                 [Node((40, 500, 140, 600), "android.widget.TextView", text="Settings", desc="Settings",
                       clickable=True, tap="open_settings")])
        return Node((0, 0, WIDTH, HEIGHT), "android.widget.FrameLayout", desc=f"Home page {self.home_page + 1}",
                    children=icons)

    def _notes_screen(self) -> Node:
        rows = []
        for i, note in enumerate(self.notes[self.scroll:self.scroll + VISIBLE_ROWS]):
            top = 260 + 80 * i
            rows.append(Node((0, top, WIDTH, top + 80), "android.widget.TextView", text=note,
                             rid=f"{NOTES}:id/note", clickable=True, long_clickable=True,
                             checkable=True, checked=note in self.starred, selected=note == self.selected))
        return Node((0, 0, WIDTH, HEIGHT), "android.widget.FrameLayout", children=[
            Node((0, 0, WIDTH, 60), "android.widget.TextView", text="Notes"),
            Node((10, 80, 260, 140), "android.widget.EditText", text=self.draft, hint="Title",
                 rid=f"{NOTES}:id/title", clickable=True, editable=True, focused=self.field_focused, tap="focus"),
            Node((270, 80, 350, 140), "android.widget.Button", text="Save", rid=f"{NOTES}:id/save",
                 clickable=True, tap="save"),
            Node((0, 260, WIDTH, 260 + 80 * VISIBLE_ROWS), "android.widget.ListView", desc="Saved notes",
                 scrollable=True, children=rows),
        ])

    def nodes(self) -> list[Node]:
        out: list[Node] = []

        def walk(node: Node) -> None:
            out.append(node)
            for child in node.children:
                walk(child)

        walk(self.root())
        return out

    def forest(self) -> android_accessibility_forest_pb2.AndroidAccessibilityForest:
        """The screen as the accessibility forwarder would send it."""
        forest = android_accessibility_forest_pb2.AndroidAccessibilityForest()
        window = forest.windows.add()
        window.id = 1
        window.bounds_in_screen.right, window.bounds_in_screen.bottom = WIDTH, HEIGHT
        ids: dict[int, int] = {}
        nodes = self.nodes()
        for i, node in enumerate(nodes):
            ids[id(node)] = i + 1
        for node in nodes:
            proto = window.tree.nodes.add()
            proto.unique_id = ids[id(node)]
            box = proto.bounds_in_screen
            box.left, box.top, box.right, box.bottom = node.bounds
            proto.class_name, proto.text, proto.content_description = node.cls, node.text, node.desc
            proto.hint_text, proto.view_id_resource_name = node.hint, node.rid
            proto.package_name = self.app
            proto.is_clickable, proto.is_long_clickable = node.clickable, node.long_clickable
            proto.is_editable, proto.is_focused, proto.is_focusable = node.editable, node.focused, node.editable
            proto.is_checkable, proto.is_checked = node.checkable, node.checked
            proto.is_selected, proto.is_scrollable = node.selected, node.scrollable
            proto.is_enabled = proto.is_visible_to_user = True
            proto.child_ids.extend(ids[id(child)] for child in node.children)
        return forest

    def pixels(self) -> np.ndarray:
        """An RGB screen: each node a rectangle whose colour depends on what it shows."""
        image = np.full((HEIGHT, WIDTH, 3), 245, dtype=np.uint8)
        for node in self.nodes():
            left, top, right, bottom = node.bounds
            key = f"{node.cls}|{node.text}|{node.desc}|{node.checked}|{node.selected}|{node.focused}"
            colour = np.frombuffer(hashlib.sha256(key.encode()).digest()[:3], dtype=np.uint8)
            image[top + 2:bottom - 2, left + 2:right - 2] = colour
        return image

    # ------------------------------------------------------------------ input

    def node_at(self, x: int, y: int) -> Node | None:
        hit = None
        for node in self.nodes():  # the deepest (last drawn) node under the point wins
            left, top, right, bottom = node.bounds
            if left <= x < right and top <= y < bottom:
                hit = node
        return hit

    def tap(self, x: int, y: int) -> None:
        node = self.node_at(x, y)
        if node is None:
            return
        if node.rid == f"{NOTES}:id/note":
            self.selected = None
            return
        self.field_focused = node.tap == "focus"
        if node.tap == "save":
            self.save()
        elif node.tap == "wifi":
            self.wifi = not self.wifi
        elif node.tap == "open_notes":
            self.open(NOTES)
        elif node.tap == "open_settings":
            self.open(SETTINGS)

    def double_tap(self, x: int, y: int) -> None:
        node = self.node_at(x, y)
        if node is not None and node.rid == f"{NOTES}:id/note":
            self.starred.symmetric_difference_update({node.text})

    def long_press(self, x: int, y: int) -> None:
        node = self.node_at(x, y)
        if node is not None and node.rid == f"{NOTES}:id/note":
            self.selected = node.text

    def swipe(self, x1: int, y1: int, x2: int, y2: int) -> None:
        dx, dy = x2 - x1, y2 - y1
        if abs(dx) > abs(dy):
            if self.app == LAUNCHER:
                self.home_page = 1 if dx < 0 else 0
            return
        if self.app == NOTES:
            step = 1 if dy < 0 else -1  # the finger moves up: later notes come into view
            self.scroll = max(0, min(self.scroll + step, max(0, len(self.notes) - VISIBLE_ROWS)))

    def type(self, text: str) -> None:
        if self.app == NOTES and self.field_focused:
            self.draft += text

    def enter(self) -> None:
        if self.app == NOTES and self.field_focused:
            self.save()

    def save(self) -> None:
        if self.draft:
            self.notes.append(self.draft)
        self.draft = ""

    def open(self, package: str) -> None:
        self.app = package if package in (NOTES, SETTINGS, LAUNCHER) else self.app
        self.field_focused, self.scroll = False, 0

    def home(self) -> None:
        self.app, self.home_page, self.field_focused = LAUNCHER, 0, False


def _unescape_adb_text(text: str) -> str:
    """The inverse of ``adb_utils._adb_text_format`` (``%s`` is a space, ``\\x`` is ``x``)."""
    return re.sub(r"\\(.)", r"\1", text.replace("%s", " "))


# --------------------------------------------------------------------------------------------------
# The controller: android_env's execute_adb_call against the phone
# --------------------------------------------------------------------------------------------------

class FakeController:
    """What ``adb_utils`` needs of ``AndroidWorldController``: ``execute_adb_call``, plus the helpers
    AndroidWorld's code calls on a controller (``get_ui_elements``, ``device_screen_size``)."""

    def __init__(self, phone: Phone, console_port: int) -> None:
        self.phone = phone
        self.console_port = console_port
        self.crashed = False
        self.closed = False
        self.last_tap: tuple[int, int] | None = None
        """adb_utils.double_tap is two taps; the phone takes two on one point, no screen read between, as one."""
        self._thawed = threading.Event()
        self._thawed.set()

    @property
    def env(self) -> FakeController:  # miniwob_base reaches the android_env through controller.env
        return self

    @property
    def device_screen_size(self) -> tuple[int, int]:
        return (WIDTH, HEIGHT)

    def get_ui_elements(self) -> list[representation_utils.UIElement]:
        self.check_alive()
        return representation_utils.forest_to_ui_elements(self.phone.forest(), screen_size=(WIDTH, HEIGHT))

    def check_alive(self) -> None:
        """Block while frozen; raise android_env's error once crashed or closed."""
        self._thawed.wait(FREEZE_CAP_S)
        if self.crashed or self.closed:
            raise errors.AdbControllerError(f"device emulator-{self.console_port} is offline")

    def execute_adb_call(self, request: adb_pb2.AdbRequest) -> adb_pb2.AdbResponse:
        self.check_alive()
        phone = self.phone
        response = adb_pb2.AdbResponse(status=adb_pb2.AdbResponse.Status.OK)
        kind = request.WhichOneof("command")
        point = (request.tap.x, request.tap.y) if kind == "tap" else None
        if kind == "tap":
            phone.adb_log.append(f"tap {request.tap.x} {request.tap.y}")
            if point == self.last_tap:  # a second tap on the same point with no screen read between
                phone.double_tap(*point)
            else:
                phone.tap(*point)
        elif kind == "press_button":
            button = adb_pb2.AdbRequest.PressButton.Button.Name(request.press_button.button)
            phone.adb_log.append(f"press {button}")
            {"HOME": phone.home, "BACK": phone.home, "ENTER": phone.enter}.get(button, lambda: None)()
        elif kind == "input_text":
            phone.adb_log.append(f"text {request.input_text.text}")
            phone.type(_unescape_adb_text(request.input_text.text))
        elif kind == "start_activity":
            phone.adb_log.append(f"start {request.start_activity.full_activity}")
            phone.open(request.start_activity.full_activity.split("/")[0])
        elif kind == "get_current_activity":
            response.get_current_activity.full_activity = f"{phone.app}/.MainActivity"
        elif kind == "settings":
            put = request.settings.put
            phone.settings[put.key] = put.value
        elif kind == "generic":
            output = self._generic(list(request.generic.args))
            response.generic.output = output.encode()
        else:
            phone.adb_log.append(f"other {kind}")
        self.last_tap = point
        return response

    def _generic(self, args: list[str]) -> str:
        phone = self.phone
        shell = args[1:] if args[:1] == ["shell"] else args
        line = " ".join(shell)
        if shell[:2] == ["input", "swipe"]:
            x1, y1, x2, y2 = (int(v) for v in shell[2:6])
            duration = int(shell[6]) if len(shell) > 6 and shell[6] else 0  # "" when none is given
            if (x1, y1) == (x2, y2) and duration >= 500:
                phone.adb_log.append(f"long_press {x1} {y1}")
                phone.long_press(x1, y1)
            else:
                phone.adb_log.append(f"swipe {x1} {y1} {x2} {y2}")
                phone.swipe(x1, y1, x2, y2)
        elif shell[:1] == ["input"] and "keycombination" in shell:
            phone.adb_log.append("clear_text")
            phone.draft = ""
        elif shell[:2] == ["monkey", "-p"]:
            phone.adb_log.append(f"start {shell[2]}")
            phone.open(shell[2])
        elif line == "whoami":
            return "root\n"
        elif line == "dumpsys activity recents":
            return ""
        elif line == f"cat {NOTES_FILE}":
            return "".join(f"{note}\n" for note in phone.notes)
        elif line == f"rm -f {NOTES_FILE}":
            phone.notes, phone.starred, phone.selected, phone.draft = [], set(), None, ""
        elif shell[:2] == ["am", "broadcast"]:
            phone.adb_log.append(f"broadcast {shell[3] if len(shell) > 3 else ''}")
            return "Broadcasting: Intent\nBroadcast completed: result=0\n"
        return ""

    def close(self) -> None:
        self.closed = True


# --------------------------------------------------------------------------------------------------
# The AsyncEnv
# --------------------------------------------------------------------------------------------------

class FakeAsyncEnv(interface.AsyncEnv):
    """AndroidWorld's ``AsyncEnv`` over the fake phone; ``execute_action`` is ``AsyncAndroidEnv``'s logic."""

    interaction_cache = ""  # an abstract property of AsyncEnv, a plain attribute in AsyncAndroidEnv

    def __init__(self, console_port: int = 5554, grpc_port: int = 8554, crash_after: int | None = None,
                 freeze_after: int | None = None) -> None:
        self.phone = Phone()
        self._controller = FakeController(self.phone, console_port)
        self.console_port, self.grpc_port = console_port, grpc_port
        self.interaction_cache = ""
        self.crash_after, self.freeze_after = crash_after, freeze_after
        self.actions: list[json_action.JSONAction] = []
        self.resets = 0

    # ---------------------------------------------------------------- faults

    def crash(self) -> None:
        """The device dies: every later call raises ``AdbControllerError``."""
        self._controller.crashed = True

    def freeze(self) -> None:
        """The device hangs: every later call blocks until :meth:`unfreeze` (or ``FREEZE_CAP_S``)."""
        self._controller._thawed.clear()

    def unfreeze(self) -> None:
        self._controller._thawed.set()

    # ---------------------------------------------------------------- AsyncEnv

    @property
    def controller(self) -> FakeController:  # type: ignore[override]
        return self._controller

    def reset(self, go_home: bool = False) -> interface.State:
        if go_home:
            adb_utils.press_home_button(self.controller)
        self.interaction_cache = ""
        self.resets += 1
        return self.get_state()

    def get_state(self, wait_to_stabilize: bool = False) -> interface.State:
        self._controller.check_alive()
        self._controller.last_tap = None
        return interface.State.create_and_infer_elements(self.phone.pixels(), self.phone.forest(),
                                                         screen_size=(WIDTH, HEIGHT))

    def ask_question(self, question: str, timeout_seconds: float = -1.0) -> str | None:
        raise NotImplementedError("ask_question is not implemented.")  # as in AsyncAndroidEnv

    def execute_action(self, action: json_action.JSONAction) -> None:
        self.actions.append(action)
        if self.crash_after is not None and len(self.actions) >= self.crash_after:
            self.crash()
        if self.freeze_after is not None and len(self.actions) >= self.freeze_after:
            self.freeze()
        if action.action_type == json_action.ANSWER:
            self.interaction_cache = action.text
            if action.text:
                self.display_message(action.text, header="Agent answered:")
            return
        if action.action_type == json_action.STATUS:
            return
        state = self.get_state(wait_to_stabilize=False)
        actuation.execute_adb_action(action, state.ui_elements, self.logical_screen_size, self.controller)

    def display_message(self, message: str, header: str = "") -> None:
        adb_utils.send_android_intent(command="broadcast", action="com.example.ACTION_UPDATE_OVERLAY",
                                      env=self.controller, extras={"task_type_string": header,
                                                                   "goal_string": message})

    @property
    def foreground_activity_name(self) -> str:
        return adb_utils.get_current_activity(self.controller)[0] or ""

    @property
    def device_screen_size(self) -> tuple[int, int]:
        return (WIDTH, HEIGHT)

    @property
    def logical_screen_size(self) -> tuple[int, int]:
        return (WIDTH, HEIGHT)

    def close(self) -> None:
        self._controller.close()
        self.unfreeze()

    def hide_automation_ui(self) -> None:
        adb_utils.issue_generic_request("shell settings put system pointer_location 0", self.controller)

    @property
    def orientation(self) -> int:
        return 0

    @property
    def physical_frame_boundary(self) -> tuple[int, int, int, int]:
        return (0, 0, WIDTH, HEIGHT)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


def load_and_setup_env(console_port: int = 5554, emulator_setup: bool = False, freeze_datetime: bool = True,
                       adb_path: str = "~/Android/Sdk/platform-tools/adb", grpc_port: int = 8554) -> FakeAsyncEnv:
    """``env_launcher.load_and_setup_env``'s signature; freezes the date through the real ``datetime_utils``
    as the real one does. The first launch of the process takes the faults named in the environment."""
    global _launches
    from android_world.utils import datetime_utils

    _launches += 1
    first = _launches == 1
    env = FakeAsyncEnv(console_port, grpc_port,
                       crash_after=_env_int("ADMIRE_ANDROID_FAKE_CRASH_AFTER") if first else None,
                       freeze_after=_env_int("ADMIRE_ANDROID_FAKE_FREEZE_AFTER") if first else None)
    if freeze_datetime:
        datetime_utils.setup_datetime(env.controller)
    DEVICES[console_port] = env
    return env


# --------------------------------------------------------------------------------------------------
# Tasks: real TaskEval subclasses that read the phone through adb
# --------------------------------------------------------------------------------------------------

WORDS = ("groceries", "meeting", "holiday", "recipe", "budget", "garden", "books", "workout", "travel", "ideas")


def saved_notes(env: interface.AsyncEnv) -> list[str]:
    response = adb_utils.issue_generic_request(["shell", "cat", NOTES_FILE], env.controller)
    return [line for line in response.generic.output.decode().splitlines() if line]


class NotesAddNote(task_eval.TaskEval):
    """Add one note: two to four steps (open Notes, type the title, save)."""

    app_names = ()
    complexity = 1
    schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"title": {"type": "string"}},
                                        "required": ["title"]}
    template = "Add a note titled '{title}' in the Notes app."

    @classmethod
    def generate_random_params(cls) -> dict[str, Any]:
        return {"title": random.choice(WORDS)}

    def initialize_task(self, env: interface.AsyncEnv) -> None:
        super().initialize_task(env)
        adb_utils.issue_generic_request(["shell", "rm", "-f", NOTES_FILE], env.controller)

    def is_successful(self, env: interface.AsyncEnv) -> float:
        super().is_successful(env)
        return 1.0 if self.params["title"] in saved_notes(env) else 0.0


class NotesAddTwoNotes(task_eval.TaskEval):
    """Add two notes; the score is the fraction added (AndroidWorld's composite tasks score this way)."""

    app_names = ()
    complexity = 1.5
    schema: ClassVar[dict[str, Any]] = {"type": "object", "required": ["first", "second"],
                                        "properties": {"first": {"type": "string"}, "second": {"type": "string"}}}
    template = "Add two notes in the Notes app: '{first}' and '{second}'."

    @classmethod
    def generate_random_params(cls) -> dict[str, Any]:
        first, second = random.sample(WORDS, 2)
        return {"first": first, "second": second}

    def initialize_task(self, env: interface.AsyncEnv) -> None:
        super().initialize_task(env)
        adb_utils.issue_generic_request(["shell", "rm", "-f", NOTES_FILE], env.controller)

    def is_successful(self, env: interface.AsyncEnv) -> float:
        super().is_successful(env)
        notes = saved_notes(env)
        return (int(self.params["first"] in notes) + int(self.params["second"] in notes)) / 2


TASKS: dict[str, type[task_eval.TaskEval]] = {"NotesAddNote": NotesAddNote, "NotesAddTwoNotes": NotesAddTwoNotes}
"""The fake's task registry (name -> TaskEval class), as ``TaskRegistry().get_registry(family)`` returns."""


class TaskRegistry:
    """Stand-in for ``android_world.registry.TaskRegistry`` when the real one is not importable."""

    ANDROID_WORLD_FAMILY = "android_world"
    ANDROID_FAMILY = "android"

    def get_registry(self, family: str) -> dict[str, type[task_eval.TaskEval]]:
        if family not in (self.ANDROID_WORLD_FAMILY, self.ANDROID_FAMILY):
            raise ValueError(f"Unsupported family: {family}")
        return dict(TASKS)


def _install_registry_stand_in() -> None:
    name = "android_world.registry"
    if name in sys.modules or importlib.util.find_spec(name) is not None:
        return
    module = types.ModuleType(name, "Stand-in registry of tests/support/android_fake.py (the fake's tasks).")
    module.TaskRegistry = TaskRegistry  # type: ignore[attr-defined]
    sys.modules[name] = module


_install_registry_stand_in()

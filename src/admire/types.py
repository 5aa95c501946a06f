"""The plain data every layer of ADMIRE passes around.

Everything here is frozen and round-trips through JSON losslessly, so a trajectory written by a
rollout worker on one machine is the same object when a trainer, the viewer or a test reads it back.
Models are pydantic rather than dataclasses because validation at the boundary (env server, JSONL
files, model output) is where bad data enters; inside the pipeline nothing re-validates.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticSerializationError

JsonValue = Any
"""A value that JSON can carry (the env's ``info`` dicts, task parameters)."""


class Frozen(BaseModel):
    """Base for all records: immutable, strict about unknown keys, bytes as base64 in JSON."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        ser_json_bytes="base64",
        val_json_bytes="base64",
        ser_json_inf_nan="constants",
    )

    def to_json(self) -> str:
        """The record as JSON. A lone UTF-16 surrogate is not text and UTF-8 cannot hold it, yet a page or a
        server's JSON (``"\\ud800"``) can hand one over in an element's text or a goal: it is written as
        U+FFFD, so one odd character never costs the whole trajectory."""
        try:
            return self.model_dump_json(exclude_defaults=False)
        except PydanticSerializationError as exc:
            if "surrogates not allowed" not in str(exc):
                raise
        return type(self).model_validate(_without_lone_surrogates(self.model_dump())).model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        return cls.model_validate_json(text)


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys included) replaced by U+FFFD; a pair written as
    two code units becomes the character it encodes."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_without_lone_surrogates(v) for v in value)
    return value


class Termination(StrEnum):
    """Why an episode ended (method.md §1). ``env_error`` trajectories are never scored."""

    SUCCESS = "success"
    AGENT_STOP = "agent_stop"
    MAX_STEPS = "max_steps"
    ENV_ERROR = "env_error"


class Task(Frozen):
    """One episode's task: ``name`` is ``<backend>/<template>``; the seed fixes its parameters."""

    name: str
    seed: int = 0
    max_steps: int | None = None
    params: dict[str, JsonValue] = Field(default_factory=dict)

    @property
    def backend(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def template(self) -> str:
        return self.name.split("/", 1)[1] if "/" in self.name else self.name


BBox = tuple[float, float, float, float]
"""(x_min, x_max, y_min, y_max) in screen pixels, AndroidWorld's order."""


class UIElement(Frozen):
    """One element of the screen, with the fields of AndroidWorld's ``UIElement``.

    MiniWoB++ DOM elements map onto the same fields (tag → ``class_name``, label → ``hint_text``),
    so policies, descriptions and milestones never know which backend produced a screen.
    """

    text: str | None = None
    content_description: str | None = None
    class_name: str | None = None
    hint_text: str | None = None
    resource_id: str | None = None
    package_name: str | None = None
    tooltip: str | None = None
    bbox: BBox | None = None
    is_clickable: bool = False
    is_editable: bool = False
    is_checkable: bool = False
    is_checked: bool = False
    is_focused: bool = False
    is_scrollable: bool = False
    is_selected: bool = False
    is_enabled: bool = True
    is_visible: bool = True
    is_focusable: bool = False
    is_long_clickable: bool = False

    @property
    def center(self) -> tuple[float, float] | None:
        if self.bbox is None:
            return None
        x_min, x_max, y_min, y_max = self.bbox
        return ((x_min + x_max) / 2.0, (y_min + y_max) / 2.0)

    def contains(self, x: float, y: float) -> bool:
        if self.bbox is None:
            return False
        x_min, x_max, y_min, y_max = self.bbox
        return x_min <= x <= x_max and y_min <= y <= y_max


class Screenshot(Frozen):
    """A screenshot kept once by content hash: inline PNG bytes, or only the reference once stored."""

    ref: str
    width: int
    height: int
    png: bytes | None = None

    @classmethod
    def from_png(cls, png: bytes, width: int, height: int) -> Screenshot:
        return cls(ref=png_ref(png), width=width, height=height, png=png)

    def stored(self) -> Screenshot:
        """The same screenshot without its bytes, for trajectories that keep PNGs beside them."""
        return self.model_copy(update={"png": None})


def png_ref(png: bytes) -> str:
    return "sha256-" + hashlib.sha256(png).hexdigest()[:32]


class Observation(Frozen):
    """What the agent sees at one step. Never carries a task's ground truth."""

    goal: str
    ui_elements: tuple[UIElement, ...] = ()
    screenshot: Screenshot | None = None
    step: int = 0

    def without_screenshot(self) -> Observation:
        """The same screen without its screenshot: what a rollout that keeps none stores, and what the
        server sends a session that asked for none."""
        return self if self.screenshot is None else self.model_copy(update={"screenshot": None})


ActionType = Literal[
    "click",
    "double_tap",
    "long_press",
    "scroll",
    "swipe",
    "input_text",
    "navigate_home",
    "navigate_back",
    "keyboard_enter",
    "open_app",
    "status",
    "wait",
    "answer",
    "unknown",
]
Direction = Literal["up", "down", "left", "right"]
GoalStatus = Literal["complete", "infeasible"]


class Action(Frozen):
    """AndroidWorld's JSON action as a record. Construct validated ones with ``admire.actions.validate_action``."""

    action_type: ActionType
    index: int | None = None
    x: float | None = None
    y: float | None = None
    text: str | None = None
    direction: Direction | None = None
    goal_status: GoalStatus | None = None
    app_name: str | None = None
    keycode: str | None = None
    clear_text: bool | None = None

    def as_dict(self) -> dict[str, JsonValue]:
        """The compact JSON action a model would write: only the fields that are set."""
        return self.model_dump(exclude_none=True)


class Step(Frozen):
    """One step of a trajectory: what the model said, what it meant, what happened."""

    index: int
    observation: Observation
    raw_output: str
    action: Action | None = None
    parse_error: str | None = None
    format_valid: bool = True
    reason: str | None = None
    model_description: str | None = None
    grounded_description: str = ""
    screen_changed: bool = True
    log_prob: float | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    info: dict[str, JsonValue] = Field(default_factory=dict)


class Trajectory(Frozen):
    """One episode. ``outcome`` is O(τ) ∈ {0, 1}; ``env_error`` episodes are excluded from training."""

    id: str
    task: Task
    goal: str
    steps: tuple[Step, ...] = ()
    outcome: float = Field(default=0.0, allow_inf_nan=False)  # NaN would score, and write, as no number can
    termination: Termination
    epoch: int = 0
    group: int = 0
    info: dict[str, JsonValue] = Field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.outcome >= 1.0

    @property
    def excluded(self) -> bool:
        return self.termination is Termination.ENV_ERROR


class RewardBreakdown(Frozen):
    """Every term of R_total(t) for one step, so that the viewer can explain any reward (method.md §4)."""

    outcome: float = 0.0
    format: float = 0.0
    milestone: float = 0.0
    process: float = 0.0
    judge: float = 0.0
    total: float = 0.0
    milestone_weight: float = 0.0
    matched_milestone: str | None = None
    matched_index: int | None = None
    similarity: float | None = None
    hits: int = 0
    num_milestones: int = 0

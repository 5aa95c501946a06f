"""The env server's wire format: request and response bodies, shared by the API and its client.

A module of its own, below both, so that the client (``admire.envs.remote``, a backend like any other)
validates replies with the very models the server answers with without importing the server or FastAPI.
Limits here (name pattern, seed range, nesting depth of ``params``) are part of the contract: what passes
them is safe to hand to a device.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from admire.envs.goal_template import fill_goal_template
from admire.types import Action, Observation, Task

DeviceState = Literal["starting", "idle", "leased", "stepping", "restarting", "quarantined", "stopped"]
EpisodeOutcome = Literal["running", "success", "failure", "env_error", "abandoned"]

TASK_NAME_PATTERN = r"^[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+$"
MAX_SEED = 2**31 - 1
"""Seeds go to the page's ``Math.seedrandom``; 31 bits keeps them exact everywhere on the way."""
MAX_STEPS = 1000
MAX_SEQ = 1_000_000
MAX_PARAM_DEPTH = 8
REQUEST_ID_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"
SESSION_ID_PATTERN = r"^[0-9a-f]{32}$"
MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects a request body may have, checked on the raw bytes before any
parser recurses into it (a body of 5000 ``[`` was a RecursionError, a 500). A step body is 2 levels
deep and a session request at most ``MAX_PARAM_DEPTH`` + 2."""
CLIENT_HEADER = "X-Admire-Client"
"""The header naming the client a session belongs to: sent on every request, generated once per client."""
CLIENT_ID_PATTERN = r"^[A-Za-z0-9_\-]{8,64}$"


ACTION_SCHEMA = {**Action.model_json_schema(), "title": "Action"}
"""Documented as the ``Action`` record; received as a plain object so that ``validate_action`` names
the rule a bad action breaks (and accepts the spellings models write, like ``"index": "3"``)."""


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateSession(Body):
    """Start one episode of ``task`` (its full name, ``<backend>/<template>``) on a leased device."""

    task: str = Field(max_length=200, pattern=TASK_NAME_PATTERN, examples=["miniwob/login-user"])
    seed: int = Field(0, ge=0, le=MAX_SEED, description="the same seed gives the same episode")
    max_steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="step budget (default: the device's)")
    params: dict[str, Any] = Field(default_factory=dict, description="task parameters (JSON, finite numbers)")
    screenshots: bool = Field(True, description="include the PNG in observations when the device takes them")
    request_id: str | None = Field(None, pattern=REQUEST_ID_PATTERN,
                                   description="repeat it on a retry to get the same session, not a second one; "
                                               "the same id with another task is refused (409)")

    @field_validator("params")
    @classmethod
    def _finite_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        _check_json(value, "params", 0)
        if "goal_template" in value:  # filled into the goal on the device: refused here, not crashed there
            fill_goal_template(value["goal_template"], "")
        return value

    def to_task(self) -> Task:
        return Task(name=self.task, seed=self.seed, max_steps=self.max_steps, params=self.params)


class SessionCreated(Body):
    session_id: str
    device_id: int
    task: Task
    observation: Observation


class StepRequest(Body):
    """One action; ``seq`` is the number of steps this session has taken before it (0 for the first).

    A request repeating the last ``seq`` gets the recorded reply again (safe retries); any other
    ``seq`` than the next one is refused with 409. Without ``seq`` every request acts.
    """

    action: Annotated[dict[str, Any], WithJsonSchema(ACTION_SCHEMA)] = Field(
        description="an AndroidWorld JSON action, e.g. {\"action_type\": \"click\", \"index\": 3}",
        examples=[{"action_type": "click", "index": 0}])
    seq: int | None = Field(None, ge=0, le=MAX_SEQ)


class StepReply(Body):
    seq: int | None
    observation: Observation
    done: bool
    success: bool
    info: dict[str, Any]


class SessionClosed(Body):
    session_id: str
    outcome: EpisodeOutcome


class DeviceInfo(Body):
    """A device as ``/devices`` lists it: the dashboard's ``DeviceView`` without the PNG bytes."""

    id: int
    state: DeviceState
    task: str | None
    session_id: str | None = Field(description="the leasing session, shown only to the client that created it")
    restarts: int
    failures: int
    last_change: float
    screenshot_url: str | None = Field(description="the last screenshot as PNG, when the device took one")


class EpisodeInfo(Body):
    session_id: str | None = Field(description="the session, shown only to the client that created it")
    device_id: int
    task: str
    seed: int
    steps: int
    outcome: EpisodeOutcome
    started_at: float
    finished_at: float | None


class Health(Body):
    status: Literal["ok", "degraded", "down"] = Field(
        description="ok: a device is idle or can be started; degraded: all busy or restarting; down: none usable")
    backend: str | None
    devices: dict[str, int]
    sessions_active: int


class ErrorBody(Body):
    """Every error: ``error`` is a stable code (see docs/server.md), ``detail`` says what to do."""

    error: str
    detail: str
    retry_after_s: float | None = None
    expected_seq: int | None = None


def json_safe(value: Any, depth: int = 0) -> Any:
    """A value JSON can carry strictly: non-finite floats become None, unknown objects their ``str``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > 32:
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, depth + 1) for v in value]
    return str(value)


def _check_json(value: Any, where: str, depth: int) -> None:
    if depth > MAX_PARAM_DEPTH:
        raise ValueError(f"{where} is nested deeper than {MAX_PARAM_DEPTH} levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value}")
    if isinstance(value, str):
        _check_text(value, where)
    if isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, f"a key of {where}")
            _check_json(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]", depth + 1)


def _check_text(value: str, where: str) -> None:
    """Text a device can be handed: a lone UTF-16 surrogate (valid JSON, ``"\\ud800"``) is no Unicode text,
    and it reaches a browser or a JSON file only to break it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where} holds a lone UTF-16 surrogate, which is not text; send valid Unicode") from None

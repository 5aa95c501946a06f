"""Trajectories that the LLM tests show to the stub's "model": built with the real data model and the
real grounded descriptions, so a prompt in a test reads like a prompt in training."""

from __future__ import annotations

from admire.actions import describe, validate_action
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement

LOGIN_GOAL = 'Enter the username "alice" and the password "x1", then press Login.'


def _screen(checked: bool = False, step: int = 0) -> Observation:
    return Observation(
        goal=LOGIN_GOAL,
        step=step,
        ui_elements=(
            UIElement(hint_text="Username", class_name="input_text", is_editable=True, bbox=(0, 100, 0, 20)),
            UIElement(hint_text="Password", class_name="input_password", is_editable=True, bbox=(0, 100, 25, 45)),
            UIElement(text="Remember me", class_name="input_checkbox", is_checkable=True, is_checked=checked,
                      bbox=(0, 100, 50, 60)),
            UIElement(text="Login", class_name="button", is_clickable=True, bbox=(0, 50, 70, 90)),
        ),
    )


def _step(index: int, action: dict | None, reason: str | None = None, changed: bool = True,
          checked: bool = False) -> Step:
    observation = _screen(checked=checked, step=index)
    if action is None:
        return Step(index=index, observation=observation, raw_output="Action: {click", format_valid=False,
                    parse_error="no JSON object after 'Action:'", reason=reason, screen_changed=False)
    parsed = validate_action(action)
    return Step(index=index, observation=observation, raw_output=f"Action: {action}", action=parsed,
                reason=reason, grounded_description=describe(parsed, observation), screen_changed=changed)


def login_trajectory(trajectory_id: str = "traj-login-1") -> Trajectory:
    """A successful but untidy login: a wait, a check undone, an unparsable output among the steps."""
    steps = (
        _step(0, {"action_type": "click", "index": 0}, reason="Focus the username field first."),
        _step(1, {"action_type": "input_text", "index": 0, "text": "alice"}),
        _step(2, {"action_type": "wait"}, changed=False),
        _step(3, {"action_type": "click", "index": 2}, reason="Maybe remember me helps."),
        _step(4, {"action_type": "click", "index": 2}, checked=True),
        _step(5, {"action_type": "input_text", "index": 1, "text": "x1"}, reason="Now the password."),
        _step(6, None),
        _step(7, {"action_type": "click", "index": 3}, reason="Submit the form."),
    )
    return Trajectory(id=trajectory_id, task=Task(name="miniwob/login-user", seed=3), goal=LOGIN_GOAL,
                      steps=steps, outcome=1.0, termination=Termination.SUCCESS)


def shortcut_trajectory() -> Trajectory:
    """A cleaner success of the same task: three steps."""
    steps = (
        _step(0, {"action_type": "input_text", "index": 0, "text": "alice"}),
        _step(1, {"action_type": "input_text", "index": 1, "text": "x1"}),
        _step(2, {"action_type": "click", "index": 3}),
    )
    return Trajectory(id="traj-login-2", task=Task(name="miniwob/login-user", seed=4), goal=LOGIN_GOAL,
                      steps=steps, outcome=1.0, termination=Termination.SUCCESS)

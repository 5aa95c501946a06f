"""Scripted oracles for MiniWoB++ tasks: proof that a task can be solved through the public interface.

An oracle sees what a policy sees (the ``Observation``) plus the task's ground truth (the
ORACLE-ONLY ``env.ground_truth()``: the values a person would read off the instruction), and answers
one JSON action. Oracles decide from the screen, not from a fixed script, so one that is thrown off
(a slow menu, a popup) looks again and carries on; ``history`` (the actions taken so far in this
episode) is only needed where the screen does not show progress (which tabs were already opened).

What they are for: the tests that prove each task solvable at 100% with our action mapping, the task
choice of suites (a suite only lists tasks an oracle solves), and demonstrations. Agents must never
read ground truth; oracles are not agents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from admire.actions import validate_action
from admire.envs.base import GuiEnv
from admire.types import Action, Observation, Task, UIElement

Oracle = Callable[[Observation, Mapping[str, str], Sequence[Action]], Action]
"""``oracle(observation, ground_truth, history) -> Action``."""

_ORACLES: dict[str, Oracle] = {}


def register_oracle(*templates: str) -> Callable[[Oracle], Oracle]:
    """Register an oracle for one or more task templates (``"login-user"``)."""

    def decorator(oracle: Oracle) -> Oracle:
        for template in templates:
            if template in _ORACLES and _ORACLES[template] is not oracle:
                raise ValueError(f"an oracle for {template!r} is already registered")
            _ORACLES[template] = oracle
        return oracle

    return decorator


def get_oracle(task: str) -> Oracle:
    """The oracle of a task template; ``"miniwob/login-user"`` and ``"login-user"`` both work."""
    template = task.split("/", 1)[1] if "/" in task else task
    try:
        return _ORACLES[template]
    except KeyError:
        raise KeyError(f"no oracle for task {template!r}; oracles exist for: {', '.join(oracle_tasks())}") from None


def oracle_tasks() -> list[str]:
    """Templates that have an oracle, sorted."""
    return sorted(_ORACLES)


# --------------------------------------------------------------------------------------------------
# Running an oracle
# --------------------------------------------------------------------------------------------------

class GroundTruthEnv(GuiEnv, Protocol):
    def ground_truth(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class OracleRun:
    """One oracle episode: how it ended and what was done."""

    task: Task
    success: bool
    termination: str | None
    actions: tuple[Action, ...] = ()
    infos: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    observations: tuple[Observation, ...] = ()
    """The screen before each action (what a policy imitating the oracle would have seen)."""


def run_oracle(env: GroundTruthEnv, task: Task, oracle: Oracle | None = None, max_steps: int = 30) -> OracleRun:
    """Play one episode of ``task`` with its oracle (or ``oracle``) on ``env``."""
    oracle = oracle or get_oracle(task.template)
    observation = env.reset(task)
    truth = env.ground_truth()
    actions: list[Action] = []
    infos: list[dict[str, Any]] = []
    screens: list[Observation] = []
    for _ in range(max_steps):
        action = validate_action(oracle(observation, truth, tuple(actions)))
        screens.append(observation)
        result = env.step(action)
        actions.append(action)
        infos.append(dict(result.info))
        observation = result.observation
        if result.done:
            return OracleRun(task, result.success, result.info.get("termination"), tuple(actions), tuple(infos),
                             tuple(screens))
    return OracleRun(task, False, None, tuple(actions), tuple(infos), tuple(screens))


# --------------------------------------------------------------------------------------------------
# Reading the screen
# --------------------------------------------------------------------------------------------------

def click(index: int) -> Action:
    return Action(action_type="click", index=index)


def type_into(index: int, text: str) -> Action:
    return Action(action_type="input_text", index=index, text=text, clear_text=True)


def give_up() -> Action:
    return Action(action_type="status", goal_status="infeasible")


def not_there_yet(history: Sequence[Action], patience: int = 3) -> Action:
    """What to do when the element needed next is missing: wait for it (icons load late, menus open
    after a delay), and give up after ``patience`` waits in a row."""
    recent = history[-patience:]
    if len(recent) == patience and all(a.action_type == "wait" for a in recent):
        return give_up()
    return Action(action_type="wait")


def find(observation: Observation, test: Callable[[UIElement], bool], start: int = 0) -> int | None:
    """Index of the first element at or after ``start`` that passes ``test``."""
    for i in range(start, len(observation.ui_elements)):
        if test(observation.ui_elements[i]):
            return i
    return None


def find_text(observation: Observation, text: str, *class_names: str) -> int | None:
    """Index of the first visible element showing exactly ``text`` (of the given tags, if any)."""
    return find(observation, lambda e: e.text == text and e.is_visible
                and (not class_names or e.class_name in class_names))


def button(observation: Observation, caption: str) -> int | None:
    """A button by its caption, ignoring case (MiniWoB capitalises at random)."""
    return find(observation, lambda e: e.class_name in ("button", "input_button", "input_submit")
                and (e.text or "").strip().lower() == caption.lower())


def field_by_label(observation: Observation, label: str) -> int | None:
    return find(observation, lambda e: e.is_editable and (e.hint_text or "").lower() == label.lower())


def by_resource_id(observation: Observation, resource_id: str) -> int | None:
    return find(observation, lambda e: e.resource_id == resource_id)


def click_or_wait(index: int | None, history: Sequence[Action]) -> Action:
    return not_there_yet(history) if index is None else click(index)


def fill_then_submit(observation: Observation, wanted: Sequence[tuple[int | None, str]],
                     submit: int | None, history: Sequence[Action]) -> Action:
    """Type each value whose field does not hold it yet, then press ``submit``."""
    for index, value in wanted:
        if index is None:
            return not_there_yet(history)
        if observation.ui_elements[index].text != value:
            return type_into(index, value)
    return click_or_wait(submit, history)


# --------------------------------------------------------------------------------------------------
# The oracles
# --------------------------------------------------------------------------------------------------

@register_oracle("click-test")
def click_test(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    return click_or_wait(find(observation, lambda e: e.class_name == "button"), history)


@register_oracle("click-test-2", "click-button")
def click_named_button(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    target = find(observation, lambda e: e.class_name == "button" and e.text == truth["target"])
    return click_or_wait(target, history)


@register_oracle("click-link")
def click_link(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    return click_or_wait(find_text(observation, truth["target"], "span", "a"), history)


@register_oracle("focus-text")
def focus_text(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    return click_or_wait(find(observation, lambda e: e.is_editable), history)


@register_oracle("enter-text")
def enter_text(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    box = find(observation, lambda e: e.is_editable)
    return fill_then_submit(observation, [(box, truth["target"])], button(observation, "Submit"), history)


@register_oracle("enter-password")
def enter_password(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    password = truth["target"]
    fields = [(field_by_label(observation, "Password"), password),
              (field_by_label(observation, "Verify password"), password)]
    return fill_then_submit(observation, fields, button(observation, "Submit"), history)


@register_oracle("login-user", "login-user-popup")
def login_user(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    cancel = by_resource_id(observation, "popup-cancel")
    if cancel is not None:  # login-user-popup: dismiss the popup ("OK" there fails the task)
        return click(cancel)
    fields = [(field_by_label(observation, "Username"), truth["username"]),
              (field_by_label(observation, "Password"), truth["password"])]
    return fill_then_submit(observation, fields, by_resource_id(observation, "subbtn"), history)


@register_oracle("click-checkboxes", "click-checkboxes-transfer")
def click_checkboxes(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    wanted = {value for key, value in truth.items() if key.startswith("target")}
    for i, element in enumerate(observation.ui_elements):
        if element.is_checkable and element.is_checked != (element.hint_text in wanted):
            return click(i)
    return click_or_wait(button(observation, "Submit"), history)


@register_oracle("click-option")
def click_option(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    option = find(observation, lambda e: e.is_checkable and e.hint_text == truth["target"])
    if option is None or not observation.ui_elements[option].is_checked:
        return click_or_wait(option, history)
    return click_or_wait(button(observation, "Submit"), history)


@register_oracle("choose-list")
def choose_list(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    select = find(observation, lambda e: e.class_name == "select")
    if select is None:
        return not_there_yet(history)
    if observation.ui_elements[select].text != truth["target"]:
        # Typing into a focused <select> picks the option that starts with what was typed.
        return Action(action_type="input_text", index=select, text=truth["target"])
    return click_or_wait(button(observation, "Submit"), history)


@register_oracle("click-tab-2", "click-tab-2-easy", "click-tab-2-medium")
def click_tab_2(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Click the link when the open tab shows it; else open the next tab (tab 1 is open at the start)."""
    link = find_text(observation, truth["target"], "span")
    if link is not None:
        return click(link)
    tabs_opened = sum(1 for action in history if action.action_type == "click")
    return click_or_wait(find_text(observation, f"Tab #{tabs_opened + 2}", "a"), history)


@register_oracle("use-autocomplete", "use-autocomplete-nodelay")
def use_autocomplete(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Type the prefix, pick a suggestion with the right ending, submit. The menu opens ~0.3 s after
    typing, so an empty menu right after typing is waited for."""
    start, end = truth["start"], truth.get("end", "")

    def fits(text: str | None) -> bool:
        return bool(text) and text.startswith(start) and text.endswith(end)  # type: ignore[union-attr]

    box = find(observation, lambda e: e.is_editable)
    if box is None:
        return not_there_yet(history)
    typed = observation.ui_elements[box].text or ""
    if fits(typed):
        return click_or_wait(button(observation, "Submit"), history)
    suggestion = find(observation, lambda e: not e.is_editable and e.class_name in ("div", "li", "a")
                      and fits(e.text))
    if suggestion is not None:
        return click(suggestion)
    if typed != start:
        return type_into(box, start)
    return not_there_yet(history)


EMAIL_ICON_OF_TASK = {"delete": "trash", "star": "star"}


@register_oracle("email-inbox", "email-inbox-noscroll", "email-inbox-delete", "email-inbox-important",
                 "email-inbox-reply", "email-inbox-forward", "email-inbox-star-reply")
def email_inbox(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Delete and star from the inbox row; reply and forward from the opened email.

    Icons are images that may still be loading (zero size, so not on screen yet): they are waited
    for. Forwarding is ambiguous when two emails share a sender (the page checks the body): the first
    is taken, as a person would.
    """
    task, sender = truth.get("task", ""), truth["by"]
    reply_box = by_resource_id(observation, "reply-text")
    if reply_box is not None:
        return fill_then_submit(observation, [(reply_box, truth["message"])],
                                by_resource_id(observation, "send-reply"), history)
    if by_resource_id(observation, "forward-text") is not None:
        recipient = find(observation, lambda e: e.is_editable and e.class_name == "input_text")
        return fill_then_submit(observation, [(recipient, truth["to"])],
                                by_resource_id(observation, "send-forward"), history)
    if find_text(observation, "Reply", "div") is not None:  # an opened email
        caption = {"reply": "Reply", "forward": "Forward"}.get(task)
        return click_or_wait(find_text(observation, caption, "div") if caption else None, history)
    row = find(observation, lambda e: e.text == sender and e.class_name == "div")
    icon = EMAIL_ICON_OF_TASK.get(task)
    if row is None or icon is None:
        return click_or_wait(row, history)  # open it to reply or forward
    target = find(observation, lambda e: (e.content_description or "").split(" ")[0] == icon, start=row)
    return click_or_wait(target, history)

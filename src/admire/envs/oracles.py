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
from admire.agent.spans import goal_spans
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


def scroll_down() -> Action:
    return Action(action_type="scroll", direction="down")


def on_screen(element: UIElement) -> bool:
    """Visible with an area: the rule by which the ``dom`` policy offers an element at all, so an
    oracle that only acts on such elements leaves demonstrations a policy can imitate step by step."""
    return element.is_visible and _has_area(element)


def click_or_scroll(observation: Observation, index: int | None, history: Sequence[Action]) -> Action:
    """Click the element when it is on screen; scroll down to it when it is below the fold.

    MiniWoB++ could click an element anywhere on the page, but a policy only sees the screen: the
    oracle scrolls as a person would, so its path is one the policy's actions can take.
    """
    if index is None:
        return not_there_yet(history)
    element = observation.ui_elements[index]
    if on_screen(element) or element.bbox is None or element.bbox[2] < 0:
        return click(index)  # on screen, or above it (only scrolling down is ever needed)
    return scroll_down()


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


@register_oracle("click-button-sequence")
def click_button_sequence(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Button ONE, then button TWO: two fixed clicks, the smallest two-step task (the CPU verl smoke's)."""
    return click_or_wait(button(observation, "TWO" if history else "ONE"), history)


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


@register_oracle("click-checkboxes", "click-checkboxes-transfer", "click-checkboxes-large")
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
                 "email-inbox-reply", "email-inbox-forward", "email-inbox-star-reply", "email-inbox-forward-nl",
                 "email-inbox-forward-nl-turk", "email-inbox-nl-turk")
def email_inbox(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Delete and star from the inbox row; reply and forward from the opened email.

    Icons are images that may still be loading (zero size, so not on screen yet): they are waited
    for. Forwarding is ambiguous when two emails share a sender (the page checks the body): the first
    is taken, as a person would.
    """
    sender = truth["by"]
    task = truth.get("task") or ("forward" if "to" in truth else "")  # the -nl tasks only forward
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
        return click_or_scroll(observation, row, history)  # open it to reply or forward
    target = find(observation, lambda e: (e.content_description or "").split(" ")[0] == icon, start=row)
    return click_or_scroll(observation, target, history)


@register_oracle("social-media-all", "social-media-some")
def social_media(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Toggle the named button on the user's posts from the top down (all of them, or ``amount``),
    scrolling down to each, then scroll to Submit. A toggled button's classes say ``active``."""
    control, user = truth["button"].lower(), truth["user"]
    targets = []
    for i, element in enumerate(observation.ui_elements):
        if element.text == user:
            found = find(observation, lambda e: _classes(e)[:1] == [control], start=i)
            if found is not None:
                targets.append(found)
    done = [i for i in targets if "active" in _classes(observation.ui_elements[i])]
    todo = [i for i in targets if i not in done]
    wanted = int(truth["amount"]) if "amount" in truth else len(targets)
    if len(done) < wanted and todo:
        return click_or_scroll(observation, todo[0], history)
    return click_or_scroll(observation, button(observation, "Submit"), history)


@register_oracle("social-media")
def social_media_one(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Click the named button on the user's first post: Reply, Retweet and Like are on the post;
    the others are in its "more" menu, opened first."""
    caption, user = truth["button"], truth["user"]
    row = find(observation, lambda e: e.text == user)
    if row is None:
        return not_there_yet(history)
    control = find(observation, lambda e: _classes(e)[:1] == [caption.lower()], start=row)
    if control is not None and caption.lower() in ("reply", "retweet", "like"):
        return click_or_scroll(observation, control, history)
    item = find(observation, lambda e: e.class_name == "li" and _has_area(e)  # "Block @user", "Report"
                and (e.text == caption or (e.text or "").startswith(caption + " ")), start=row)
    if item is not None:
        return click_or_scroll(observation, item, history)
    return click_or_scroll(observation, find(observation, lambda e: _classes(e)[:1] == ["more"], start=row), history)


def _has_area(element: UIElement) -> bool:
    if element.bbox is None:
        return element.is_visible
    x_min, x_max, y_min, y_max = element.bbox
    return x_max > x_min and y_max > y_min


def _classes(element: UIElement) -> list[str]:
    return (element.content_description or "").split()


@register_oracle("order-food")
def order_food(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Press each named dish's "+" once (by name), or one dish of the type "+" ``amount`` times (by
    type), scrolling down the menu to it, then scroll to "Order!". A dish's count shows between its
    "-" and "+" once it is ordered."""
    menu = _menu(observation)
    if truth.get("criterion") == "type":
        kind, amount = truth["type"], int(truth["amount"])
        dishes = [d for d in menu if kind in d.types]
        wanted = {dishes[0].name: amount} if dishes else {}
    else:
        wanted = {value: 1 for key, value in truth.items() if key.startswith("target")}
    for dish in menu:
        if dish.count < wanted.get(dish.name, 0):
            return click_or_scroll(observation, dish.plus, history)
    return click_or_scroll(observation, button(observation, "Order!"), history)


@dataclass(frozen=True)
class _Dish:
    name: str
    types: frozenset[str]
    plus: int
    count: int


def _menu(observation: Observation) -> list[_Dish]:
    """The dishes of an order-food menu, in screen order: name, diet icons, "-", [count], "+"."""
    elements = observation.ui_elements
    dishes: list[_Dish] = []
    name: str | None = None
    types: set[str] = set()
    count = 0
    for i, element in enumerate(elements):
        if element.text == "+" and name is not None:
            dishes.append(_Dish(name, frozenset(types), i, count))
            name, types, count = None, set(), 0
        elif element.class_name == "div" and element.text:
            name, types, count = element.text, set(), 0
        elif element.class_name == "img" and element.content_description:
            types.add(element.content_description)
        elif (element.text or "").isdigit():
            count = int(element.text or 0)
    return dishes


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


# Not choose-date itself: its picker fades in and out and stays open across episodes, so a step
# can hit a closing calendar and an episode depends on the one before (choose-date-nodelay fixes both).
@register_oracle("choose-date-nodelay", "choose-date-easy", "choose-date-medium")
def choose_date(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Open the date picker, page back (or on) to the month, click the day, submit.

    Typing into the picker's field does nothing in these tasks, so the calendar is the only way; it
    opens on the last allowed month (December 2016).
    """
    month, day, year = int(truth["month"]), int(truth["day"]), int(truth["year"])
    field = by_resource_id(observation, "datepicker")
    if field is None:
        return not_there_yet(history)
    if observation.ui_elements[field].text == f"{month:02d}/{day:02d}/{year}":
        return click_or_wait(button(observation, "Submit"), history)
    return pick_date(observation, field, (year, month, day), history)


def pick_date(observation: Observation, field: int, date: tuple[int, int, int], history: Sequence[Action]) -> Action:
    """One step of choosing ``(year, month, day)`` in a jQuery UI date picker attached to ``field``."""
    year, month, day = date
    shown_month = find(observation, lambda e: e.text in MONTHS and e.is_visible)
    shown_year = find(observation, lambda e: (e.text or "").isdigit() and len(e.text or "") == 4
                      and e.is_visible and e.class_name == "span")
    if shown_month is None or shown_year is None:
        # The calendar is closed. Focusing the field opens it; the policy's way to focus a field is
        # to type a span of the goal into it (the keys are ignored): the date as the goal writes it.
        date_text = f"{month:02d}/{day:02d}/{year}"
        spans = [span.text for span in goal_spans(observation.goal)]
        return Action(action_type="input_text", index=field,
                      text=date_text if date_text in spans or not spans else spans[0])
    shown = (int(observation.ui_elements[shown_year].text or 0),
             MONTHS.index(observation.ui_elements[shown_month].text or "") + 1)
    if shown > (year, month):
        return click_or_wait(find(observation, lambda e: e.class_name == "a" and e.content_description == "Prev"),
                             history)
    if shown < (year, month):
        return click_or_wait(find(observation, lambda e: e.class_name == "a" and e.content_description == "Next"),
                             history)
    return click_or_wait(find(observation, lambda e: e.class_name == "a" and e.text == str(day) and e.is_visible),
                         history)


# Not book-flight itself: its suggestions open 0.3 s after typing, longer than the few no-op
# scrolls a policy (or this oracle) would wait.
@register_oracle("book-flight-nodelay")
def book_flight(observation: Observation, truth: Mapping[str, str], history: Sequence[Action]) -> Action:
    """Fill From and To through their autocompletes, pick the date in the calendar, search, and book
    the cheapest (or shortest) flight of the results."""
    prices = [(i, _number(e.text)) for i, e in enumerate(observation.ui_elements)
              if (e.text or "").startswith("Book flight for")]
    if prices:
        if truth["criterion"] == "cheapest":
            best = min(prices, key=lambda p: p[1])[0]
        else:
            durations = [_minutes(e.text or "") for e in observation.ui_elements if _minutes(e.text or "") is not None]
            best = prices[min(range(len(prices)), key=lambda k: durations[k])][0]
        return click_or_scroll(observation, best, history)
    for field_id, wanted in (("flight-from", truth["from"]), ("flight-to", truth["to"])):
        field = by_resource_id(observation, field_id)
        if field is None:
            return not_there_yet(history)
        typed = observation.ui_elements[field].text or ""
        if _airport_matches(typed, wanted) and typed.endswith(")"):
            continue
        item = find(observation, lambda e, wanted=wanted: e.class_name in ("div", "li", "a")
                    and _airport_matches(e.text or "", wanted) and (e.text or "").endswith(")"))
        if item is not None:
            # A suggestion below the screen cannot be scrolled to (the page does not scroll): it is
            # clicked all the same, a step the dom policy cannot take.
            return click(item)
        if not typed:
            return Action(action_type="input_text", index=field, text=_span_prefix(observation.goal, wanted))
        # The suggestions open a moment after typing; scrolling the unscrollable form is the wait a
        # policy without a wait action can take.
        recent = history[-3:]
        if len(recent) == 3 and all(a.action_type == "scroll" for a in recent):
            return give_up()
        return scroll_down()
    field = by_resource_id(observation, "datepicker")
    month, day, year = (int(part) for part in truth["date"].split("/"))
    if field is None:
        return not_there_yet(history)
    if observation.ui_elements[field].text != truth["date"]:
        return pick_date(observation, field, (year, month, day), history)
    return click_or_wait(by_resource_id(observation, "search"), history)


def _span_prefix(goal: str, wanted: str) -> str:
    """The longest span of the goal (what the dom policy can type) that starts ``wanted``:
    "Salt Lake City" for "Salt Lake City, UT", "LEX" for "LEX"."""
    fits = [span.text for span in goal_spans(goal) if wanted.startswith(span.text)]
    return max(fits, key=len) if fits else wanted.split(",")[0]


def _airport_matches(text: str, wanted: str) -> bool:
    """"Iliamna, AK (ILI)" is the airport of "Iliamna, AK" and of "ILI"."""
    return text.startswith(wanted) or f"({wanted})" in text


def _number(text: str | None) -> float:
    digits = "".join(ch for ch in (text or "") if ch.isdigit() or ch == ".")
    return float(digits) if digits else float("inf")


def _minutes(text: str) -> int | None:
    """"5h 30m" → 330; anything else → None."""
    parts = text.split()
    if len(parts) != 2 or not (parts[0].endswith("h") and parts[1].endswith("m")):
        return None
    try:
        return int(parts[0][:-1]) * 60 + int(parts[1][:-1])
    except ValueError:
        return None

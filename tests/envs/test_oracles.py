"""Oracles: the registry, decisions on hand-made screens, and 100% success in real Chromium."""

from __future__ import annotations

import pytest

from admire.agent.candidates import enumerate_candidates
from admire.agent.pretrain import _without_noop_clear
from admire.envs import make_task
from admire.envs.oracles import (
    click_or_scroll,
    get_oracle,
    not_there_yet,
    oracle_tasks,
    register_oracle,
    run_oracle,
)
from admire.envs.suites import EVAL_SEED_START, get_suite
from admire.types import Action, Observation, Task, UIElement

SEEDS = range(EVAL_SEED_START, EVAL_SEED_START + 20)
LONG_TASKS = get_suite("miniwob-long").templates
LONG_BUDGET = 30  # env steps per episode for the long suite (its oracles take up to 15)


def screen(*elements: UIElement, goal: str = "") -> Observation:
    return Observation(goal=goal, ui_elements=elements)


def at(y: float, x: float = 10.0, h: float = 12.0) -> tuple[float, float, float, float]:
    """A bbox (x_min, x_max, y_min, y_max) on a 160x210 MiniWoB screen; y >= 210 is below the fold."""
    return (x, x + 20.0, y, y + h)


SCROLL = {"action_type": "scroll", "direction": "down"}


def test_registry_knows_at_least_the_required_tasks():
    required = {"login-user", "enter-password", "click-checkboxes", "click-tab-2", "use-autocomplete",
                "email-inbox", "choose-list", "enter-text", "click-button"}
    assert required <= set(oracle_tasks())
    assert get_oracle("miniwob/login-user") is get_oracle("login-user")


def test_unknown_oracle_names_the_known_ones():
    with pytest.raises(KeyError, match=r"no oracle for task 'draw-circle'.*login-user"):
        get_oracle("miniwob/draw-circle")


def test_registering_a_second_oracle_for_a_task_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_oracle("login-user")(lambda observation, truth, history: Action(action_type="wait"))


def test_every_task_of_the_curated_suites_has_an_oracle():
    for name in ("miniwob-smoke", "miniwob-demo", "miniwob-multistep", "miniwob-warmstart", "miniwob-long",
                 "miniwob-long-warmstart", "miniwob-long-warmstart-lists", "miniwob-lm"):
        missing = [t for t in get_suite(name).templates if t not in oracle_tasks()]
        assert missing == [], f"{name} lists tasks no oracle solves: {missing}"


def test_checkbox_oracle_fixes_the_first_wrong_box_then_submits():
    oracle = get_oracle("click-checkboxes")
    truth = {"target 0": "b", "button": "submit"}
    boxes = [UIElement(class_name="input_checkbox", hint_text=name, is_checkable=True, is_checked=checked)
             for name, checked in (("a", True), ("b", False))]
    submit = UIElement(class_name="button", text="Submit")
    assert oracle(screen(*boxes, submit), truth, ()).index == 0  # 'a' is checked but not wanted
    fixed = [b.model_copy(update={"is_checked": b.hint_text == "b"}) for b in boxes]
    assert oracle(screen(*fixed, submit), truth, ()).index == 2


def test_login_oracle_types_missing_values_then_logs_in():
    oracle = get_oracle("login-user")
    truth = {"username": "ann", "password": "pw"}
    user = UIElement(class_name="input_text", hint_text="Username", is_editable=True, text="")
    password = UIElement(class_name="input_password", hint_text="Password", is_editable=True, text="")
    login = UIElement(class_name="button", text="Login", resource_id="subbtn")
    first = oracle(screen(user, password, login), truth, ())
    assert first.as_dict() == {"action_type": "input_text", "index": 0, "text": "ann", "clear_text": True}
    done = screen(user.model_copy(update={"text": "ann"}), password.model_copy(update={"text": "pw"}), login)
    assert oracle(done, truth, ()).as_dict() == {"action_type": "click", "index": 2}


def test_a_missing_element_is_waited_for_then_given_up():
    waits = (Action(action_type="wait"),) * 3
    assert not_there_yet(waits[:2]).action_type == "wait"
    assert not_there_yet(waits).as_dict() == {"action_type": "status", "goal_status": "infeasible"}


@pytest.mark.browser
@pytest.mark.parametrize("template", [t for t in oracle_tasks() if t not in LONG_TASKS])
def test_oracle_solves_its_task_on_20_eval_seeds(miniwob_env, template):
    runs = [run_oracle(miniwob_env, make_task(f"miniwob/{template}", seed=seed)) for seed in SEEDS]
    failed = [(run.task.seed, run.termination, [a.as_dict() for a in run.actions]) for run in runs
              if not run.success]
    assert failed == []
    assert all(run.termination == "success" for run in runs)


# --------------------------------------------------------------------------------------------------
# The long suite (miniwob-long) and its oracles
# --------------------------------------------------------------------------------------------------

def test_the_long_suite_and_its_warm_start_share_no_task():
    long = get_suite("miniwob-long")
    assert len(long.tasks) >= 6
    for warm in ("miniwob-long-warmstart", "miniwob-long-warmstart-lists"):
        assert set(long.tasks).isdisjoint(get_suite(warm).tasks), warm


def test_an_element_below_the_fold_is_scrolled_to_before_it_is_clicked():
    on, below = UIElement(text="Submit", bbox=at(150)), UIElement(text="Submit", bbox=at(560), is_visible=False)
    assert click_or_scroll(screen(on), 0, ()).as_dict() == {"action_type": "click", "index": 0}
    assert click_or_scroll(screen(below), 0, ()).as_dict() == SCROLL


def _post(user: str, y: float, active: bool = False) -> list[UIElement]:
    visible = y < 210
    return [UIElement(class_name="span", text=user, bbox=at(y), is_visible=visible),
            UIElement(class_name="span", content_description="reply active" if active else "reply",
                      bbox=at(y + 30), is_visible=y + 30 < 210),
            UIElement(class_name="span", content_description="like", bbox=at(y + 30, x=80),
                      is_visible=y + 30 < 210)]


def test_social_media_oracle_presses_the_users_buttons_top_down_then_scrolls_to_submit():
    oracle = get_oracle("social-media-all")
    truth = {"button": "Reply", "user": "@ann", "submit": "Submit"}
    submit = UIElement(class_name="button", text="Submit", bbox=at(400), is_visible=False)
    posts = [*_post("@bob", 50), *_post("@ann", 110), *_post("@ann", 250)]
    assert oracle(screen(*posts, submit), truth, ()).index == 4  # @ann's first reply, not @bob's
    done_first = [*_post("@bob", 50), *_post("@ann", 110, active=True), *_post("@ann", 250)]
    assert oracle(screen(*done_first, submit), truth, ()).as_dict() == SCROLL  # the second is below
    all_done = [*_post("@bob", 50), *_post("@ann", 110, active=True), *_post("@ann", 150, active=True)]
    assert oracle(screen(*all_done, submit), truth, ()).as_dict() == SCROLL  # Submit is below
    shown = submit.model_copy(update={"bbox": at(180), "is_visible": True})
    assert oracle(screen(*all_done, shown), truth, ()).index == 9


def test_social_media_some_stops_at_the_asked_amount():
    oracle = get_oracle("social-media-some")
    truth = {"button": "Reply", "amount": "1", "user": "@ann", "submit": "Submit"}
    submit = UIElement(class_name="button", text="Submit", bbox=at(190))
    posts = [*_post("@ann", 20, active=True), *_post("@ann", 110)]
    assert oracle(screen(*posts, submit), truth, ()).index == 6


def _dish(name: str, icon: str, y: float, count: int = 0) -> list[UIElement]:
    visible = y < 210
    row = [UIElement(class_name="div", text=name, bbox=at(y), is_visible=visible),
           UIElement(class_name="img", content_description=icon, bbox=at(y + 14), is_visible=visible),
           UIElement(class_name="span", text="-", bbox=at(y, x=98), is_visible=visible)]
    if count:
        row.append(UIElement(class_name="span", text=str(count), bbox=at(y, x=105), is_visible=visible))
    return [*row, UIElement(class_name="span", text="+", bbox=at(y, x=117), is_visible=visible)]


def test_order_food_oracle_orders_named_dishes_then_scrolls_to_order():
    oracle = get_oracle("order-food")
    order = UIElement(class_name="button", text="Order!", bbox=at(800), is_visible=False)
    truth = {"criterion": "name", "target 0": "Soup", "target 1": "Cake"}
    menu = [*_dish("Bread", "vegan", 60), *_dish("Soup", "vegan", 120), *_dish("Cake", "dairy", 300)]
    assert oracle(screen(*menu, order), truth, ()).index == 7  # Soup's "+"
    soup_done = [*_dish("Bread", "vegan", 60), *_dish("Soup", "vegan", 120, count=1), *_dish("Cake", "dairy", 300)]
    assert oracle(screen(*soup_done, order), truth, ()).as_dict() == SCROLL  # Cake is below
    both = [*_dish("Bread", "vegan", 60), *_dish("Soup", "vegan", 120, count=1),
            *_dish("Cake", "dairy", 150, count=1)]
    assert oracle(screen(*both, order), truth, ()).as_dict() == SCROLL  # Order! is below
    assert oracle(screen(*both, order.model_copy(update={"bbox": at(190), "is_visible": True})),
                  truth, ()).index == len(both)


def test_order_food_oracle_by_type_orders_the_amount_of_one_dish_of_that_type():
    oracle = get_oracle("order-food")
    truth = {"criterion": "type", "amount": "2", "type": "dairy"}
    order = UIElement(class_name="button", text="Order!", bbox=at(190))
    once = [*_dish("Bread", "vegan", 60), *_dish("Cake", "dairy", 120, count=1)]
    assert oracle(screen(*once, order), truth, ()).index == 8  # Cake's "+" again
    twice = [*_dish("Bread", "vegan", 60), *_dish("Cake", "dairy", 120, count=2)]
    assert oracle(screen(*twice, order), truth, ()).index == len(twice)


def _calendar(month: str, days: int = 31) -> list[UIElement]:
    return [UIElement(class_name="a", content_description="Prev", bbox=at(60)),
            UIElement(class_name="a", content_description="Next", bbox=at(60, x=120)),
            UIElement(class_name="span", text=month, bbox=at(60, x=50)),
            UIElement(class_name="span", text="2016", bbox=at(60, x=85)),
            *(UIElement(class_name="a", text=str(d), bbox=at(90 + 2 * d)) for d in range(1, days + 1))]


def test_date_oracle_opens_the_picker_by_typing_the_date_pages_back_and_clicks_the_day():
    oracle = get_oracle("choose-date-nodelay")
    goal = "Select 05/29/2016 as the date and hit submit."
    truth = {"month": "5", "day": "29", "year": "2016"}
    field = UIElement(class_name="input_text", resource_id="datepicker", is_editable=True, text="", bbox=at(60))
    submit = UIElement(class_name="button", text="Submit", bbox=at(180))
    opened = oracle(screen(field, submit, goal=goal), truth, ())
    assert opened.as_dict() == {"action_type": "input_text", "index": 0, "text": "05/29/2016"}
    december = screen(field, submit, *_calendar("December"), goal=goal)
    assert december.ui_elements[oracle(december, truth, ()).index].content_description == "Prev"
    january = screen(field, submit, *_calendar("January"), goal=goal)
    assert january.ui_elements[oracle(january, truth, ()).index].content_description == "Next"
    may = screen(field, submit, *_calendar("May"), goal=goal)
    assert may.ui_elements[oracle(may, truth, ()).index].text == "29"
    chosen = screen(field.model_copy(update={"text": "05/29/2016"}), submit, goal=goal)
    assert oracle(chosen, truth, ()).index == 1


def test_flight_oracle_books_the_cheapest_or_the_shortest_result():
    oracle = get_oracle("book-flight-nodelay")
    results = []
    for y, duration, price in ((60, "5h 10m", "$300"), (120, "2h 5m", "$900"), (180, "9h 0m", "$150")):
        results += [UIElement(class_name="div", text=duration, bbox=at(y)),
                    UIElement(class_name="button", text=f"Book flight for {price}", bbox=at(y + 20))]
    truth = {"from": "Iliamna, AK", "to": "LEX", "date": "10/11/2016"}
    assert oracle(screen(*results), {**truth, "criterion": "cheapest"}, ()).index == 5
    assert oracle(screen(*results), {**truth, "criterion": "shortest"}, ()).index == 3


def test_flight_oracle_types_a_span_of_the_goal_then_picks_the_matching_suggestion():
    oracle = get_oracle("book-flight-nodelay")
    goal = "Book the cheapest one-way flight from: Salt Lake City, UT to: LEX on 10/11/2016."
    truth = {"criterion": "cheapest", "from": "Salt Lake City, UT", "to": "LEX", "date": "10/11/2016"}
    origin = UIElement(class_name="input_text", resource_id="flight-from", is_editable=True, text="", bbox=at(80))
    dest = UIElement(class_name="input_text", resource_id="flight-to", is_editable=True, text="", bbox=at(105))
    first = oracle(screen(origin, dest, goal=goal), truth, ())
    assert first.as_dict() == {"action_type": "input_text", "index": 0, "text": "Salt Lake City"}
    typed = origin.model_copy(update={"text": "Salt Lake City"})
    suggestion = UIElement(class_name="div", text="Salt Lake City, UT (SLC)", bbox=at(130))
    assert oracle(screen(typed, dest, goal=goal), truth, ()).as_dict() == SCROLL  # the menu is not open yet
    assert oracle(screen(typed, dest, suggestion, goal=goal), truth, ()).index == 2
    picked = origin.model_copy(update={"text": "Salt Lake City, UT (SLC)"})
    assert oracle(screen(picked, dest, goal=goal), truth, ()).as_dict() == {
        "action_type": "input_text", "index": 1, "text": "LEX"}


def test_email_oracle_forwards_when_the_instruction_names_a_recipient():
    oracle = get_oracle("email-inbox-forward-nl-turk")
    opened = screen(UIElement(class_name="div", text="Reply", bbox=at(180)),
                    UIElement(class_name="div", text="Forward", bbox=at(180, x=80)))
    assert oracle(opened, {"by": "Ann", "to": "Bob"}, ()).index == 1


def _expressible_share(run) -> float:
    """Share of an oracle's steps that are candidates of the dom policy (what behaviour cloning can use)."""
    hits = sum(_without_noop_clear(action, screen_before) in {c.action for c in enumerate_candidates(screen_before)}
               for screen_before, action in zip(run.observations, run.actions, strict=True))
    return hits / max(len(run.actions), 1)


@pytest.mark.browser
@pytest.mark.parametrize("template", LONG_TASKS)
def test_long_suite_oracle_solves_two_eval_seeds(miniwob_env, template):
    runs = [run_oracle(miniwob_env, Task(name=f"miniwob/{template}", seed=seed, max_steps=LONG_BUDGET),
                       max_steps=LONG_BUDGET) for seed in SEEDS[:2]]
    assert [(run.task.seed, run.termination) for run in runs if not run.success] == []


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("template", LONG_TASKS)
def test_long_suite_oracle_solves_20_eval_seeds_in_five_or_more_policy_steps(miniwob_env, template):
    """What makes the suite long: 100% oracle success, most instances need >= 5 steps, and (nearly)
    every step is one the dom policy could take, so the length is the policy's too."""
    runs = [run_oracle(miniwob_env, Task(name=f"miniwob/{template}", seed=seed, max_steps=LONG_BUDGET),
                       max_steps=LONG_BUDGET) for seed in SEEDS]
    assert [(run.task.seed, run.termination) for run in runs if not run.success] == []
    steps = sorted(len(run.actions) for run in runs)
    assert steps[len(steps) // 2] >= 5 and sum(s >= 5 for s in steps) >= 0.75 * len(steps), steps
    assert max(steps) <= LONG_BUDGET // 2, steps
    shares = [_expressible_share(run) for run in runs]
    assert sum(shares) / len(shares) >= 0.95, shares

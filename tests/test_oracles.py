"""Oracles: the registry, decisions on hand-made screens, and 100% success in real Chromium."""

from __future__ import annotations

import pytest

from admire.envs import make_task
from admire.envs.oracles import (
    get_oracle,
    not_there_yet,
    oracle_tasks,
    register_oracle,
    run_oracle,
)
from admire.envs.suites import EVAL_SEED_START, get_suite
from admire.types import Action, Observation, UIElement

SEEDS = range(EVAL_SEED_START, EVAL_SEED_START + 20)


def screen(*elements: UIElement) -> Observation:
    return Observation(goal="", ui_elements=elements)


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
    for name in ("miniwob-smoke", "miniwob-demo", "miniwob-multistep"):
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
@pytest.mark.parametrize("template", oracle_tasks())
def test_oracle_solves_its_task_on_20_eval_seeds(miniwob_env, template):
    runs = [run_oracle(miniwob_env, make_task(f"miniwob/{template}", seed=seed)) for seed in SEEDS]
    failed = [(run.task.seed, run.termination, [a.as_dict() for a in run.actions]) for run in runs
              if not run.success]
    assert failed == []
    assert all(run.termination == "success" for run in runs)

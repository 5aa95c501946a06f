"""The dom policy: sampling, log-probs, gradients, checkpoints, behaviour cloning, and real parts."""

from __future__ import annotations

import copy
import io
import re

import numpy as np
import pytest
import torch

from admire.actions import parse_model_output, validate_action
from admire.agent.base import Decision, make_policy
from admire.agent.dom_policy import PRIOR_WEIGHTS, DomPolicy, UnknownDecisionError
from admire.agent.features import FEATURE_INDEX, NUM_FEATURES, FeatureBuilder
from admire.agent.pretrain import pretrain, record_oracle_demonstrations
from admire.embeddings import EmbeddingCache
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement
from tests.support.fakes import TrigramEncoder

LOGIN_GOAL = 'Enter the username "karrie" and the password "X1z" into the text fields and press login.'
USERNAME = UIElement(text="", hint_text="Username", class_name="input_text", bbox=(7, 135, 78, 99),
                     is_clickable=True, is_editable=True)
PASSWORD = UIElement(text="", hint_text="Password", class_name="input_password", bbox=(7, 115, 130, 151),
                     is_clickable=True, is_editable=True)
LOGIN = UIElement(text="Login", class_name="button", bbox=(2, 89, 166, 197), is_clickable=True)
LOGIN_SCREEN = Observation(goal=LOGIN_GOAL, ui_elements=(USERNAME, PASSWORD, LOGIN))
CHECKBOX_SCREEN = Observation(
    goal="Select nLXZO and click Submit.",
    ui_elements=(
        *(UIElement(class_name="input_checkbox", hint_text=name, bbox=(6, 26, 20 * i, 20 * i + 13),
                    is_clickable=True, is_checkable=True)
          for i, name in enumerate(["USa", "nLXZO", "6Y6", "qq"])),
        UIElement(text="Submit", class_name="button", bbox=(2, 97, 101, 132), is_clickable=True),
    ),
)


def make(seed: int = 0, **options) -> DomPolicy:
    return DomPolicy(seed=seed, encoder=TrigramEncoder(dim=384), **options)


def step(observation: Observation, action: dict, index: int = 0) -> Step:
    action_obj = validate_action(action)
    return Step(index=index, observation=observation, raw_output=f"Action: {action}", action=action_obj)


# --------------------------------------------------------------------------------------------------
# act and log_prob
# --------------------------------------------------------------------------------------------------

def test_log_prob_of_what_act_wrote_equals_the_log_prob_act_returned():
    policy = make()
    observations = [LOGIN_SCREEN, CHECKBOX_SCREEN, LOGIN_SCREEN]  # different candidate counts: padding
    histories = [(), (), (step(LOGIN_SCREEN, {"action_type": "input_text", "index": 0, "text": "karrie"}),)]
    outputs = policy.act(observations, histories)
    decisions = [Decision(o, tuple(h), out.text)
                 for o, h, out in zip(observations, histories, outputs, strict=True)]
    recomputed = policy.log_prob(decisions)
    assert recomputed.shape == (3,)
    assert torch.allclose(recomputed, torch.tensor([out.log_prob for out in outputs]), atol=1e-5)
    assert recomputed.requires_grad


def test_act_writes_a_parseable_reason_and_action_and_reports_the_candidate():
    policy = make()
    (out,) = policy.act([LOGIN_SCREEN], [()])
    parsed = parse_model_output(out.text)
    assert out.text.startswith("Reason: ")
    assert parsed.action == out.action and parsed.reason
    candidates = policy.candidates(LOGIN_SCREEN)
    assert out.info["num_candidates"] == len(candidates)
    assert candidates[out.info["candidate_index"]].action == out.action
    assert out.log_prob < 0 and out.info["entropy"] > 0


def test_greedy_is_deterministic_and_takes_the_most_likely_candidate():
    policy = make()
    first = policy.act([LOGIN_SCREEN, CHECKBOX_SCREEN], [(), ()], greedy=True)
    again = policy.act([LOGIN_SCREEN, CHECKBOX_SCREEN], [(), ()], greedy=True)
    assert [o.text for o in first] == [o.text for o in again]
    screen = policy.features.build(LOGIN_SCREEN, ())
    best = int(policy.candidate_log_probs([screen])[0].argmax())
    assert first[0].info["candidate_index"] == best


def test_sampling_is_reproducible_from_the_seed_whatever_the_global_rng():
    a, b = make(seed=3), make(seed=3)
    torch.manual_seed(1)
    texts_a = [o.text for o in a.act([LOGIN_SCREEN] * 40, [()] * 40)]
    torch.manual_seed(2)
    texts_b = [o.text for o in b.act([LOGIN_SCREEN] * 40, [()] * 40)]
    assert texts_a == texts_b
    assert len(set(texts_a)) > 1, "sampling explores more than one candidate"


def test_a_reinforce_step_on_a_decision_raises_its_probability():
    policy = make()
    text = policy.act([LOGIN_SCREEN], [()])[0].text
    decision = Decision(LOGIN_SCREEN, (), text)
    before = policy.log_prob([decision])
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    optimizer.zero_grad()
    (-before.sum()).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters())
    optimizer.step()
    after = policy.log_prob([decision])
    assert after.item() > before.item() + 1e-3


def test_a_negative_advantage_lowers_the_probability():
    policy = make()
    decision = Decision(LOGIN_SCREEN, (), policy.act([LOGIN_SCREEN], [()])[0].text)
    before = policy.log_prob([decision]).item()
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    optimizer.zero_grad()
    policy.log_prob([decision]).sum().backward()
    optimizer.step()
    assert policy.log_prob([decision]).item() < before - 1e-3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("I do not know what to do", "does not parse into an action"),
        ('Reason: x\nAction: {"action_type": "click", "index": 42}', "is not among the"),
        ('Action: {"action_type": "input_text", "index": 0, "text": "mallory"}', "is not among the"),
        ('Reason: x\nAction: {"action_type": "click", "x": 10, "y": 90}', "is not among the"),
    ],
)
def test_a_text_that_is_no_candidate_raises_a_clear_error(text, message):
    policy = make()
    good = Decision(LOGIN_SCREEN, (), policy.act([LOGIN_SCREEN], [()])[0].text)
    with pytest.raises(UnknownDecisionError, match=message) as info:
        policy.log_prob([good, Decision(LOGIN_SCREEN, (), text)])
    assert "cannot score this decision" in str(info.value)


def test_mismatched_inputs_are_refused_with_a_clear_error():
    policy = make()
    with pytest.raises(ValueError, match="one history"):
        policy.act([LOGIN_SCREEN, LOGIN_SCREEN], [()])
    assert policy.act([], []) == []
    small = DomPolicy(encoder=TrigramEncoder(dim=16))
    with pytest.raises(ValueError, match="embedding_dim"):
        small.act([LOGIN_SCREEN], [()])
    assert DomPolicy(encoder=TrigramEncoder(dim=16), embedding_dim=16).act([LOGIN_SCREEN], [()])


# --------------------------------------------------------------------------------------------------
# Checkpoints, registry, size
# --------------------------------------------------------------------------------------------------

def test_state_dict_round_trip_restores_weights_and_sampler():
    trained = make(seed=0)
    optimizer = torch.optim.Adam(trained.parameters(), lr=0.1)
    decision = Decision(LOGIN_SCREEN, (), trained.act([LOGIN_SCREEN], [()])[0].text)
    optimizer.zero_grad()
    (-trained.log_prob([decision]).sum()).backward()
    optimizer.step()
    buffer = io.BytesIO()
    torch.save(trained.state_dict(), buffer)
    buffer.seek(0)
    restored = make(seed=99)
    restored.load_state_dict(torch.load(buffer))
    decisions = [Decision(LOGIN_SCREEN, (), trained.act([LOGIN_SCREEN], [()], greedy=True)[0].text), decision]
    assert torch.allclose(trained.log_prob(decisions), restored.log_prob(decisions))
    assert [o.text for o in trained.act([LOGIN_SCREEN] * 20, [()] * 20)] == \
        [o.text for o in restored.act([LOGIN_SCREEN] * 20, [()] * 20)]


def test_a_checkpoint_of_another_shape_is_refused():
    with pytest.raises((ValueError, RuntimeError), match=r"size mismatch|differently shaped"):
        make(hidden_size=16).load_state_dict(make(hidden_size=32).state_dict())


def test_a_deep_copy_is_an_independent_policy_sharing_the_frozen_embeddings():
    policy = make()
    reference = copy.deepcopy(policy)
    assert reference.embeddings is policy.embeddings
    decision = Decision(LOGIN_SCREEN, (), policy.act([LOGIN_SCREEN], [()])[0].text)
    before = reference.log_prob([decision]).item()
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    optimizer.zero_grad()
    (-policy.log_prob([decision]).sum()).backward()
    optimizer.step()
    assert reference.log_prob([decision]).item() == pytest.approx(before)
    assert policy.log_prob([decision]).item() > before


def test_registered_as_dom_and_small():
    policy = make_policy("dom", encoder=TrigramEncoder(dim=384), seed=1)
    assert isinstance(policy, DomPolicy)
    assert sum(p.numel() for p in policy.parameters()) < 10_000


def test_the_encoder_is_chosen_by_name_like_the_matchers():
    from admire.embeddings import shared_encoder

    # The default name is the matcher's default: one model per process, nothing loaded until an encode.
    assert DomPolicy().embeddings.encoder is shared_encoder()
    assert make_policy("dom", encoder="all-MiniLM-L6-v2").embeddings.encoder is shared_encoder()
    with pytest.raises(ValueError, match="unknown encoder 'no-such-model'"):
        DomPolicy(encoder="no-such-model")


def test_the_config_key_chooses_the_policys_encoder_and_a_bad_one_is_refused_before_training():
    from admire.config import load_config
    from admire.config_schema import ConfigError, validate_config
    from admire.embeddings import shared_encoder
    from admire.rl.builders import build_policy

    cfg = load_config(overrides=["actor_rollout_ref.model.encoder=all-MiniLM-L6-v2"])
    validate_config(cfg)
    assert build_policy(cfg).embeddings.encoder is shared_encoder()
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.model\.encoder: unknown encoder 'nope'"):
        validate_config(load_config(overrides=["actor_rollout_ref.model.encoder=nope"]))


def test_embeddings_are_cached_by_text():
    encoder = TrigramEncoder(dim=384)
    policy = DomPolicy(encoder=encoder)
    policy.act([LOGIN_SCREEN], [()])
    calls = encoder.calls
    policy.act([LOGIN_SCREEN, LOGIN_SCREEN], [(), ()])
    policy.log_prob([Decision(LOGIN_SCREEN, (), policy.act([LOGIN_SCREEN], [()])[0].text)])
    assert encoder.calls == calls
    cache = EmbeddingCache(TrigramEncoder(dim=384), capacity=2)
    rows = cache.embed(["a", "b", "c", ""])
    assert len(cache) == 2 and not rows[3].any() and rows[0].any()


# --------------------------------------------------------------------------------------------------
# History features
# --------------------------------------------------------------------------------------------------

def feature(features, candidates, action: dict, name: str) -> float:
    target = validate_action(action)
    (row,) = [i for i, c in enumerate(candidates) if c.action == target]
    return float(features.numeric[row, FEATURE_INDEX[name]])


def test_history_marks_what_was_done_and_what_is_still_pending():
    builder = FeatureBuilder(EmbeddingCache(TrigramEncoder(dim=384)))
    type_karrie = {"action_type": "input_text", "index": 0, "text": "karrie"}
    type_password = {"action_type": "input_text", "index": 1, "text": "X1z"}
    click_login = {"action_type": "click", "index": 2}
    fresh = builder.build(LOGIN_SCREEN, ())
    assert feature(fresh, fresh.candidates, type_karrie, "pending_this") == 1.0
    assert feature(fresh, fresh.candidates, click_login, "pending_others") == pytest.approx(2 / 4)
    assert feature(fresh, fresh.candidates, type_karrie, "repeats_earlier_action") == 0.0

    filled = LOGIN_SCREEN.model_copy(update={"ui_elements": (USERNAME.model_copy(update={"text": "karrie"}),
                                                             PASSWORD, LOGIN)})
    history = (step(LOGIN_SCREEN, type_karrie),)
    later = builder.build(filled, history)
    assert feature(later, later.candidates, type_karrie, "repeats_earlier_action") == 1.0
    assert feature(later, later.candidates, type_karrie, "typed_into_before") == 1.0
    assert feature(later, later.candidates, type_karrie, "field_holds_span") == 1.0
    assert feature(later, later.candidates, type_karrie, "pending_this") == 0.0
    assert feature(later, later.candidates, type_password, "span_typed_before") == 0.0
    assert feature(later, later.candidates, type_password, "pending_this") == 1.0
    assert feature(later, later.candidates, click_login, "pending_others") == pytest.approx(1 / 4)
    assert feature(later, later.candidates, click_login, "last_type") == 1.0
    assert feature(later, later.candidates, {"action_type": "input_text", "index": 1, "text": "karrie"},
                   "span_typed_before") == 1.0


def test_labels_of_fields_are_not_pending_work():
    builder = FeatureBuilder(EmbeddingCache(TrigramEncoder(dim=384)))
    label = UIElement(text="Username", class_name="label", bbox=(2, 50, 62, 73), is_clickable=True)
    screen = LOGIN_SCREEN.model_copy(update={"ui_elements": (label, USERNAME, PASSWORD, LOGIN)})
    typed = screen.model_copy(update={"ui_elements": (label, USERNAME.model_copy(update={"text": "karrie"}),
                                                      PASSWORD.model_copy(update={"text": "X1z"}), LOGIN)})
    history = (step(screen, {"action_type": "input_text", "index": 1, "text": "karrie"}),
               step(screen, {"action_type": "input_text", "index": 2, "text": "X1z"}, 1))
    done = builder.build(typed, history)
    click_login = {"action_type": "click", "index": 3}
    assert feature(done, done.candidates, click_login, "pending_this") == 1.0
    assert feature(done, done.candidates, click_login, "pending_others") == 0.0
    assert feature(done, done.candidates, {"action_type": "click", "index": 0}, "pending_this") == 0.0


def test_a_checked_box_is_no_longer_pending():
    builder = FeatureBuilder(EmbeddingCache(TrigramEncoder(dim=384)))
    click = {"action_type": "click", "index": 1}
    fresh = builder.build(CHECKBOX_SCREEN, ())
    assert feature(fresh, fresh.candidates, click, "pending_this") == 1.0
    assert feature(fresh, fresh.candidates, {"action_type": "click", "index": 0}, "pending_this") == 0.0
    boxes = list(CHECKBOX_SCREEN.ui_elements)
    boxes[1] = boxes[1].model_copy(update={"is_checked": True})
    checked = builder.build(CHECKBOX_SCREEN.model_copy(update={"ui_elements": tuple(boxes)}), ())
    assert feature(checked, checked.candidates, click, "pending_this") == 0.0
    assert feature(checked, checked.candidates, click, "is_checked") == 1.0


# --------------------------------------------------------------------------------------------------
# Behaviour cloning
# --------------------------------------------------------------------------------------------------

def demo(seed: int) -> Trajectory:
    filled = LOGIN_SCREEN.model_copy(update={"ui_elements": (USERNAME.model_copy(update={"text": "karrie"}),
                                                             PASSWORD, LOGIN)})
    actions = [
        (LOGIN_SCREEN, {"action_type": "input_text", "index": 0, "text": "karrie", "clear_text": True}),
        (filled, {"action_type": "input_text", "index": 1, "text": "X1z"}),
        (filled, {"action_type": "click", "x": 40.0, "y": 180.0}),  # by coordinates: not a dom candidate
        (filled, {"action_type": "input_text", "index": 0, "text": "karrie", "clear_text": True}),  # clears
        (filled, {"action_type": "click", "index": 2}),
    ]
    steps = [step(screen, a, i).model_copy(update={"raw_output": f"Reason: demo\nAction: {a}"})
             for i, (screen, a) in enumerate(actions)]
    steps.append(Step(index=5, observation=LOGIN_SCREEN, raw_output="no action here", action=None))
    return Trajectory(id=f"demo-{seed}", task=Task(name="miniwob/login-user", seed=seed), goal=LOGIN_GOAL,
                      steps=tuple(steps), outcome=1.0, termination=Termination.SUCCESS)


def test_behaviour_cloning_learns_the_demonstrated_actions_and_counts_what_it_skipped():
    policy = make(prior_strength=0.0)
    failed = demo(9).model_copy(update={"outcome": 0.0, "termination": Termination.MAX_STEPS})
    metrics = pretrain(policy, [demo(0), demo(1), failed], epochs=30, lr=0.05)
    assert metrics["decisions"] == 12, "the failed trajectory is not a demonstration"
    assert metrics["used"] == 6, "clearing an empty field before typing is the policy's plain typing"
    assert metrics["skipped_not_candidate"] == 4
    assert metrics["skipped_unparsed"] == 2
    assert metrics["nll_after"] < metrics["nll_before"]
    assert metrics["accuracy_after"] == 1.0
    assert policy.act([LOGIN_SCREEN], [()], greedy=True)[0].action == validate_action(
        {"action_type": "input_text", "index": 0, "text": "karrie"})


def test_behaviour_cloning_without_usable_steps_reports_it():
    metrics = pretrain(make(), [], epochs=3)
    assert metrics["used"] == 0 and np.isnan(metrics["nll_after"])


# --------------------------------------------------------------------------------------------------
# Real parts: the MiniLM encoder, and MiniWoB++ in Chromium
# --------------------------------------------------------------------------------------------------

def test_real_encoder_pairs_each_quoted_span_with_its_field():
    policy = DomPolicy()  # all-MiniLM-L6-v2 from the installed wheel, offline
    screen = policy.features.build(LOGIN_SCREEN, ())
    karrie_user = {"action_type": "input_text", "index": 0, "text": "karrie"}
    karrie_pass = {"action_type": "input_text", "index": 1, "text": "karrie"}
    x1z_user = {"action_type": "input_text", "index": 0, "text": "X1z"}
    x1z_pass = {"action_type": "input_text", "index": 1, "text": "X1z"}
    def similarity(action: dict) -> float:
        return feature(screen, screen.candidates, action, "sim_context_element")

    assert similarity(karrie_user) > similarity(karrie_pass)
    assert similarity(x1z_pass) > similarity(x1z_user)
    outputs = policy.act([LOGIN_SCREEN, CHECKBOX_SCREEN], [(), ()])
    decisions = [Decision(o, (), out.text)
                 for o, out in zip([LOGIN_SCREEN, CHECKBOX_SCREEN], outputs, strict=True)]
    assert torch.allclose(policy.log_prob(decisions), torch.tensor([o.log_prob for o in outputs]), atol=1e-5)


def test_with_the_prior_the_untrained_policy_types_a_quoted_span_into_its_own_field():
    policy = DomPolicy(prior_strength=1.0)
    (out,) = policy.act([LOGIN_SCREEN], [()], greedy=True)
    assert out.action.as_dict() in (
        {"action_type": "input_text", "index": 0, "text": "karrie"},
        {"action_type": "input_text", "index": 1, "text": "X1z"},
    )
    prior = torch.zeros(NUM_FEATURES)
    for name, value in PRIOR_WEIGHTS.items():
        prior[FEATURE_INDEX[name]] = value
    assert torch.allclose(policy.scorer.linear.weight[0].detach(), prior)
    assert not torch.allclose(make().scorer.linear.weight[0].detach(), prior), "off by default"


@pytest.mark.browser
def test_real_miniwob_login_screen_offers_the_username_and_password_of_the_utterance():
    from admire.envs.base import make_env, make_task

    env = make_env("miniwob", max_steps=5)
    try:
        observation = env.reset(make_task("miniwob/login-user", seed=3))
        username, password = re.findall(r'"([^"]+)"', observation.goal)
        policy = DomPolicy()
        candidates = policy.candidates(observation)
        fields = {e.hint_text: i for i, e in enumerate(observation.ui_elements) if e.is_editable}
        offered = {(c.element_index, c.action.text) for c in candidates if c.kind == "type"}
        assert (fields["Username"], username) in offered
        assert (fields["Password"], password) in offered
        (out,) = policy.act([observation], [()])
        result = env.step(out.action)  # whatever was sampled is a valid action on the real page
        assert result.observation.goal == observation.goal or result.done
        recomputed = policy.log_prob([Decision(observation, (), out.text)]).item()
        assert recomputed == pytest.approx(out.log_prob, abs=1e-5)
    finally:
        env.close()


@pytest.mark.browser
def test_oracle_demonstrations_on_real_miniwob_teach_a_task_by_behaviour_cloning():
    from admire.envs.base import make_env, make_task

    env = make_env("miniwob", max_steps=6)
    try:
        tasks = [make_task("miniwob/enter-text", seed=s) for s in range(8)]
        demos = record_oracle_demonstrations(env, tasks)
        assert all(d.success for d in demos)
        policy = DomPolicy(prior_strength=0.0)  # no hand-set prior: what it knows, it learnt from the demos
        metrics = pretrain(policy, demos)
        assert metrics["used"] == metrics["decisions"] > 0, "every oracle step is a dom candidate"
        assert metrics["nll_after"] < metrics["nll_before"]
        assert metrics["accuracy_after"] == 1.0
        observation = env.reset(make_task("miniwob/enter-text", seed=50))
        history: list[Step] = []
        for index in range(4):
            (out,) = policy.act([observation], [history], greedy=True)
            result = env.step(out.action)
            history.append(Step(index=index, observation=observation, raw_output=out.text, action=out.action))
            observation = result.observation
            if result.done:
                break
        assert result.success, f"the cloned policy did: {[s.action.as_dict() for s in history]}"
    finally:
        env.close()

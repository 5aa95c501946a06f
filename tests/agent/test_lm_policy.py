"""The lm policy on the tiny prepared Qwen models: acting, canonical log-probs, LoRA, the reference model,
checkpoints, screenshots, and one real MiniWoB++ step."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from admire.actions import parse_model_output
from admire.agent.base import POLICIES, Decision, Policy, make_policy
from admire.agent.lm_policy import LMPolicy
from admire.types import Observation, Screenshot, UIElement
from tests.support.models import tiny_qwen2_5_vl_dir, tiny_qwen2_dir  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")  # inside peft

LOGIN = Observation(goal='Log in as "ann" with the password "pw".', ui_elements=(
    UIElement(hint_text="Username", class_name="input_text", is_editable=True),
    UIElement(hint_text="Password", class_name="input_password", is_editable=True),
    UIElement(text="Login", class_name="button", is_clickable=True),
))
CLICK = Observation(goal="Click the button.", ui_elements=(UIElement(text="ONE", class_name="button"),))
SHORT = 12  # max_new_tokens for most tests: the tiny model is random, long answers add only time
ANSWER = 'Reason: the field is empty.\nAction: {"action_type": "input_text", "index": 0, "text": "ann"}\n' \
         "Description: types ann into the username field"


def screenshot(seed: int) -> Screenshot:
    from PIL import Image

    pixels = (np.random.default_rng(seed).random((84, 56, 3)) * 255).astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return Screenshot.from_png(buffer.getvalue(), 56, 84)


@pytest.fixture(scope="module")
def text_policy(tiny_qwen2_dir) -> LMPolicy:  # noqa: F811 - the fixture imported above
    """A policy the tests only read (no optimizer steps, no loads into it)."""
    torch.set_num_threads(1)
    return LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=SHORT)


def decisions_of(outputs, observations) -> list[Decision]:
    return [Decision(o, (), out.text) for o, out in zip(observations, outputs, strict=True)]


# --------------------------------------------------------------------------------------------------
# Options and errors
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [None, "", "does/not/exist"])
def test_a_missing_model_directory_is_one_line_naming_admire_models_prepare(path):
    with pytest.raises(ValueError, match=r"admire models prepare NAME DIR") as caught:
        LMPolicy(path=path)
    assert "\n" not in str(caught.value)


def test_unknown_options_are_a_type_error_naming_the_known_ones():
    # The options are keyword parameters (the trainer passes a config's keys the policy declares, and names
    # the known ones for any other: tests/commands/test_probes_config.py, lm-foreign-option).
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'temprature'"):
        LMPolicy(path="x", temprature=0.7)
    with pytest.raises(TypeError, match=r"unknown lora option\(s\): rank; known: r, alpha"):
        LMPolicy(path="x", lora={"rank": 4})
    with pytest.raises(ValueError, match=r"max_pixels must be at least 1"):
        LMPolicy(path="x", max_pixels=0)


def test_lm_is_a_registered_policy_and_a_text_model_refuses_screenshots(tiny_qwen2_dir):  # noqa: F811
    assert "lm" in POLICIES.names()
    policy = make_policy("lm", path=str(tiny_qwen2_dir), seed=1, encoder=object())  # the trainer passes an encoder
    assert isinstance(policy, LMPolicy) and isinstance(policy, Policy) and policy.screenshots is False
    with pytest.raises(ValueError, match="screenshots=true needs a vision-language model"):
        LMPolicy(path=str(tiny_qwen2_dir), screenshots=True)


# --------------------------------------------------------------------------------------------------
# Acting and canonical log-probs
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("greedy", [True, False])
def test_acts_log_prob_is_the_log_prob_of_its_decision(text_policy, greedy):
    observations = [LOGIN, CLICK, LOGIN, CLICK]
    for batch in (observations[:1], observations):
        outputs = text_policy.act(batch, [[] for _ in batch], greedy=greedy)
        decisions = decisions_of(outputs, batch)
        with torch.no_grad():
            one_by_one = [float(text_policy.log_prob([d])[0]) for d in decisions]
        for output, expected, count in zip(outputs, one_by_one, text_policy.num_tokens(decisions), strict=True):
            assert output.log_prob == pytest.approx(expected, abs=1e-4)
            assert output.info["num_tokens"] == count == len(output.info["token_log_probs"])
            assert sum(output.info["token_log_probs"]) == pytest.approx(output.log_prob, abs=1e-4)


def test_greedy_answers_do_not_depend_on_the_batch_they_were_padded_into(text_policy):
    alone = [text_policy.act([o], [[]], greedy=True)[0].text for o in (LOGIN, CLICK)]
    together = [out.text for out in text_policy.act([LOGIN, CLICK, CLICK, LOGIN], [[]] * 4, greedy=True)]
    assert together == [alone[0], alone[1], alone[1], alone[0]]


def test_sampling_is_reproducible_from_the_seed_and_moves_on_between_calls(tiny_qwen2_dir, text_policy):  # noqa: F811
    first, second = (LMPolicy(path=str(tiny_qwen2_dir), seed=3, max_new_tokens=SHORT) for _ in range(2))
    other = text_policy  # seed 0
    runs = [[out.text for out in p.act([LOGIN, CLICK], [[], []])] for p in (first, second, other)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    torch.manual_seed(123)  # the global RNG does not decide what the policy samples
    assert [out.text for out in first.act([LOGIN, CLICK], [[], []])] == \
           [out.text for out in second.act([LOGIN, CLICK], [[], []])] != runs[0]


def test_token_log_probs_are_the_models_own_next_token_log_probs_with_a_right_padded_mask(text_policy):
    decisions = [Decision(LOGIN, (), ANSWER), Decision(CLICK, (), "Reason: x"), Decision(CLICK, (), "")]
    counts = text_policy.num_tokens(decisions)
    log_probs, entropy, mask = text_policy.token_log_probs_and_entropy(decisions)
    assert log_probs.shape == mask.shape == entropy.shape == (3, max(counts))
    assert mask.sum(dim=1).tolist() == counts and counts[2] == 1  # an empty answer is its end-of-turn token
    for row, count in enumerate(counts):
        assert mask[row, :count].eq(1).all() and mask[row, count:].eq(0).all()
        assert log_probs[row, count:].eq(0).all() and entropy[row, count:].eq(0).all()
    assert (entropy[mask.bool()] > 0).all()
    # The same numbers straight from the model's full logits over the prompt + canonical response.
    tokenizer, model = text_policy.tokenizer, text_policy.model
    prompt = text_policy._encode_prompt(LOGIN, ())["input_ids"][0].tolist()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    response = [*tokenizer(ANSWER, add_special_tokens=False)["input_ids"], end]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0]
    expected = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).gather(-1, torch.tensor(response)[:, None])
    assert torch.allclose(log_probs[0, :counts[0]].detach(), expected[:, 0], atol=1e-4)
    assert float(text_policy.log_prob(decisions[:1]).detach()[0]) == pytest.approx(float(expected.sum()), abs=1e-3)


def test_scoring_from_the_full_logits_gives_the_same_numbers_for_models_whose_head_is_not_a_plain_linear_map(
        text_policy):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from admire.agent.lm_policy import _head_reads_last_hidden_state

    gemma = Gemma2ForCausalLM(Gemma2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, head_dim=8,
                                           num_attention_heads=4, num_key_value_heads=2, vocab_size=64))
    assert not _head_reads_last_hidden_state(gemma, 1)  # soft-capped logits
    assert text_policy._head_on_hidden  # Qwen2: the head alone, at response positions only
    decisions = [Decision(LOGIN, (), ANSWER), Decision(CLICK, (), "Reason: x")]
    with torch.no_grad():
        fast = text_policy.token_log_probs_and_entropy(decisions)
        text_policy._head_on_hidden = False
        try:
            full = text_policy.token_log_probs_and_entropy(decisions)
        finally:
            text_policy._head_on_hidden = True
    for a, b in zip(fast, full, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_an_answer_that_does_not_parse_is_an_action_of_none_not_an_error(text_policy):
    output = text_policy.act([LOGIN], [[]], greedy=True)[0]  # random weights: gibberish
    assert parse_model_output(output.text).action is None
    assert output.action is None and output.info["parse_error"]


# --------------------------------------------------------------------------------------------------
# LoRA, the reference model, trainable parameters
# --------------------------------------------------------------------------------------------------

def one_step(policy: LMPolicy, lr: float = 0.05) -> None:
    optimizer = torch.optim.Adam(policy.trainable_parameters(), lr=lr)
    loss = -policy.log_prob([Decision(LOGIN, (), ANSWER)]).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_with_lora_gradients_reach_only_the_adapter_and_the_state_dict_is_the_adapter(tiny_qwen2_dir):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir), lora={"r": 4}, max_new_tokens=SHORT)
    trainable = {id(p) for p in policy.trainable_parameters()}
    names = {n for n, p in policy.named_parameters() if id(p) in trainable}
    assert names and all("lora_" in n for n in names)
    policy.log_prob([Decision(LOGIN, (), ANSWER)]).sum().backward()
    with_grad = {n for n, p in policy.named_parameters() if p.grad is not None}
    assert with_grad == names
    assert any(float(p.grad.abs().sum()) > 0 for n, p in policy.named_parameters() if "lora_B" in n)
    state = policy.state_dict()
    assert set(state) - {"_extra_state"} and all(k.startswith("adapter.") for k in set(state) - {"_extra_state"})
    assert sum(v.numel() for k, v in state.items() if k != "_extra_state") == sum(
        p.numel() for p in policy.trainable_parameters())


def test_lora_on_the_top_layers_only_leaves_the_layers_below_without_autograd(tiny_qwen2_dir):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir), lora={"r": 4, "layers": 1}, max_new_tokens=SHORT)
    layers = policy._network().model.layers
    top = len(layers) - 1
    names = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert names and all(f".layers.{top}." in n for n in names)
    below_needs_grad: list[bool] = []
    hook = layers[0].register_forward_hook(lambda m, i, out: below_needs_grad.append(
        (out[0] if isinstance(out, tuple) else out).requires_grad))
    before = float(policy.log_prob([Decision(LOGIN, (), ANSWER)]).sum())
    hook.remove()
    assert below_needs_grad and not any(below_needs_grad)  # no graph is kept below the adapted layer
    one_step(policy)
    assert float(policy.log_prob([Decision(LOGIN, (), ANSWER)]).sum()) > before + 1e-3
    with pytest.raises(ValueError, match=r"lora layers must be a number of decoder layers in \[1, "):
        LMPolicy(path=str(tiny_qwen2_dir), lora={"layers": 0})


def test_lora_on_the_top_layers_of_a_vision_language_model_leaves_the_vision_tower_alone(
        tiny_qwen2_5_vl_dir):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_5_vl_dir), lora={"r": 4, "layers": 1}, max_new_tokens=SHORT)
    names = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)
    assert not [n for n, _ in policy.named_modules() if "visual" in n and "lora" in n]


@pytest.mark.parametrize("options", [{"lora": {"r": 4}}, {"keep_reference": True}], ids=["lora", "frozen-copy"])
def test_the_reference_equals_the_policy_until_an_optimizer_step_moves_the_policy(tiny_qwen2_dir, options):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=SHORT, **options)
    decision = [Decision(CLICK, (), ANSWER)]
    with torch.no_grad():
        before = policy.log_prob(decision)
        with policy.reference():
            reference_before = policy.log_prob(decision)
    assert torch.equal(before, reference_before)
    one_step(policy)
    with torch.no_grad():
        after = policy.log_prob(decision)
        with policy.reference():
            reference_after = policy.log_prob(decision)
    assert torch.equal(reference_after, reference_before)
    assert float(after[0]) > float(before[0]) + 1e-3  # the step raised the answer's probability


def test_without_lora_or_a_kept_copy_there_is_no_reference(text_policy):
    with pytest.raises(ValueError, match="keep_reference=True"), text_policy.reference():
        pass


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{"lora": {"r": 4}}, {}], ids=["adapter", "full"])
def test_save_and_load_restore_the_trained_policy_exactly(tiny_qwen2_dir, tmp_path, options):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=SHORT, seed=5, **options)
    one_step(policy)
    saved = policy.save_pretrained(tmp_path / "saved")
    files = {p.name for p in saved.iterdir()}
    assert ("adapter_model.safetensors" in files) == bool(options) and "admire-lm-policy.json" in files
    decisions = [Decision(LOGIN, (), ANSWER), Decision(CLICK, (), "Reason: none")]
    with torch.no_grad():
        expected = policy.log_prob(decisions)
    fresh = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=SHORT, seed=9, **options)
    with torch.no_grad():
        assert not torch.equal(fresh.log_prob(decisions), expected)
        fresh.load_pretrained(saved)
        assert torch.equal(fresh.log_prob(decisions), expected)
    assert [o.text for o in fresh.act([LOGIN], [[]])] == [o.text for o in policy.act([LOGIN], [[]])]  # the sampler
    rebuilt = LMPolicy.from_pretrained(saved)
    with torch.no_grad():
        assert torch.equal(rebuilt.log_prob(decisions), expected)


def test_the_module_state_dict_round_trips_through_load_state_dict(tiny_qwen2_dir):  # noqa: F811
    trained = LMPolicy(path=str(tiny_qwen2_dir), lora={"r": 4}, max_new_tokens=SHORT)
    one_step(trained)
    fresh = LMPolicy(path=str(tiny_qwen2_dir), lora={"r": 4}, max_new_tokens=SHORT, seed=7)
    fresh.load_state_dict(trained.state_dict())
    decision = [Decision(LOGIN, (), ANSWER)]
    with torch.no_grad():
        assert torch.equal(fresh.log_prob(decision), trained.log_prob(decision))
    with pytest.raises(ValueError, match="do not fit this lm policy's LoRA adapter"):
        LMPolicy(path=str(tiny_qwen2_dir), lora={"r": 2}).load_state_dict(trained.state_dict())


# --------------------------------------------------------------------------------------------------
# The vision-language model
# --------------------------------------------------------------------------------------------------

def test_the_vision_language_model_reads_the_screenshot(tiny_qwen2_5_vl_dir):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_5_vl_dir), max_new_tokens=SHORT)
    assert policy.vision_language and policy.screenshots
    screens = [LOGIN.model_copy(update={"screenshot": screenshot(seed)}) for seed in (0, 1)]
    with torch.no_grad():
        first, second = (policy.log_prob([Decision(s, (), ANSWER)]) for s in screens)
        first_again = policy.log_prob([Decision(screens[0], (), ANSWER)])
    assert torch.equal(first, first_again) and not torch.allclose(first, second)
    mixed = [screens[0], LOGIN, screens[1]]  # rows with and without an image in one batch
    outputs = policy.act(mixed, [[]] * 3)
    with torch.no_grad():
        for output, screen in zip(outputs, mixed, strict=True):
            assert output.log_prob == pytest.approx(float(policy.log_prob([Decision(screen, (), output.text)])[0]),
                                                    abs=1e-4)


@pytest.mark.browser
def test_a_real_miniwob_step_from_the_vision_language_policy(miniwob_env, tiny_qwen2_5_vl_dir):  # noqa: F811
    from admire.envs import InvalidAction, make_task

    miniwob_env.screenshots = True
    observation = miniwob_env.reset(make_task("miniwob/click-test", seed=0))
    assert observation.screenshot is not None and observation.screenshot.png
    policy = LMPolicy(path=str(tiny_qwen2_5_vl_dir), max_new_tokens=SHORT)
    output = policy.act([observation], [[]])[0]
    assert output.info["num_tokens"] >= 1
    if output.action is None:  # random weights: a format error, which never reaches the env
        assert output.info["parse_error"]
        return
    try:
        result = miniwob_env.step(output.action)
    except InvalidAction:
        return
    assert result.observation.goal == observation.goal


def test_a_new_policy_acts_in_eval_mode_and_its_prefix_cache_keeps_no_training_noise(tiny_qwen2_dir):  # noqa: F811
    from admire.agent.lm_rollout import PrefixCache, _prefill

    policy = LMPolicy(path=str(tiny_qwen2_dir), lora={"r": 4, "dropout": 0.5}, max_new_tokens=SHORT)
    assert not any(module.training for module in policy.modules())  # PEFT builds its dropout training
    network, ids, cache = policy._network(), list(range(10, 40)), PrefixCache()
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero: no delta, so nothing for a dropout to drop
                parameter.normal_(generator=torch.Generator().manual_seed(0))
        clean = _prefill(network, ids)
        policy.train()  # e.g. a KL read between PPO minibatches, dropout on
        noisy = cache.get(network, ids)
        policy.eval()
        again = cache.get(network, ids)
    assert not torch.equal(noisy[-1][0], clean[-1][0])  # the dropout did draw noise
    assert all(torch.equal(k, ck) and torch.equal(v, cv) for (k, v), (ck, cv) in zip(again, clean, strict=True))

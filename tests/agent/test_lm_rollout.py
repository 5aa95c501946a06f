"""The lm policy's cached rollout (admire.agent.lm_rollout) on the tiny prepared Qwen2: its log-probs are a
plain forward's, its prefix follows the weights, the scorer's gradient is the unshared one, the bfloat16
sampler is re-scored, and the pieces (grouped attention, top-p draw) do what they say."""

from __future__ import annotations

import pytest
import torch

from admire.agent.base import Decision
from admire.agent.lm_policy import LMPolicy
from admire.agent.lm_rollout import (
    PACKED_FLOAT16,
    HalfWeightLinear,
    KVArena,
    PreallocatedLayer,
    SamplingSettings,
    _choose,
    cpu_multiplies_bfloat16,
    cpu_packs_half_weights,
    grouped_attention,
)
from admire.types import Observation, UIElement
from tests.support.models import needs_fbgemm, tiny_qwen2_5_vl_dir, tiny_qwen2_dir  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")  # inside peft

SCREENS = [
    Observation(goal=f'Log in as "{name}".', ui_elements=(
        UIElement(hint_text="Username", class_name="input_text", is_editable=True),
        UIElement(text="Login", class_name="button", is_clickable=True)))
    for name in ("ann", "bob", "carmen", "ann")  # the last repeats the first: one prefill for both
]
TOKENS = 10


def plain_token_log_probs(policy: LMPolicy, observation: Observation, text: str) -> list[float]:
    """What a plain forward of the whole prompt + answer gives, without any of the rollout's machinery."""
    prompt = policy._encode_prompt(observation, ())["input_ids"][0].tolist()
    answer = policy._response_ids(text)
    network = policy._network()
    with torch.no_grad():
        logits = network(input_ids=torch.tensor([prompt + answer]), use_cache=False).logits[0].float()
    log_probs = torch.log_softmax(logits / float(policy.options["temperature"]), dim=-1)
    return [float(log_probs[len(prompt) - 1 + k, token]) for k, token in enumerate(answer)]


@pytest.fixture(scope="module")
def exact_policy(tiny_qwen2_dir) -> LMPolicy:  # noqa: F811
    torch.set_num_threads(1)
    return LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=TOKENS, sampler_dtype="float32", lora={"r": 4})


def test_the_cached_rollout_is_the_default_for_text_models_and_generate_for_vision_language(
        tiny_qwen2_dir, tiny_qwen2_5_vl_dir):  # noqa: F811
    assert LMPolicy(path=str(tiny_qwen2_dir)).rollout == "cached"
    assert LMPolicy(path=str(tiny_qwen2_5_vl_dir)).rollout == "generate"
    with pytest.raises(ValueError, match="rollout='cached' is for text models"):
        LMPolicy(path=str(tiny_qwen2_5_vl_dir), rollout="cached")
    with pytest.raises(ValueError, match="rollout must be one of auto, cached, generate"):
        LMPolicy(path=str(tiny_qwen2_dir), rollout="fast")
    with pytest.raises(ValueError, match="sampler_dtype=bfloat16 needs rollout='cached'"):
        LMPolicy(path=str(tiny_qwen2_dir), rollout="generate", sampler_dtype="bfloat16")


def test_sampled_log_probs_are_a_plain_forwards_of_the_same_weights(exact_policy):
    # The random tiny model runs to the cap: the end token's log-prob comes from one step more.
    outputs = exact_policy.act(SCREENS, [[] for _ in SCREENS])
    assert any(o.info["sampled_canonical"] for o in outputs)
    for observation, output in zip(SCREENS, outputs, strict=True):
        plain = plain_token_log_probs(exact_policy, observation, output.text)
        assert output.info["num_tokens"] == len(plain)
        assert output.info["token_log_probs"] == pytest.approx(plain, abs=2e-4)
        assert output.log_prob == pytest.approx(sum(plain), abs=2e-3)


def test_identical_prompts_in_a_batch_still_draw_their_own_answers(exact_policy):
    outputs = exact_policy.act([SCREENS[0]] * 4, [[]] * 4)
    assert len({o.text for o in outputs}) > 1


def test_the_shared_prefix_follows_an_optimizer_step(tiny_qwen2_dir):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=TOKENS, sampler_dtype="float32", lora={"r": 4})
    policy.act(SCREENS[:1], [[]])  # fills the prefix cache with the untrained weights
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=1.0)
    decisions = [Decision(SCREENS[0], (), "Reason: x\nAction: {}")]
    (-policy.log_prob(decisions).sum()).backward()
    optimizer.step()
    output = policy.act(SCREENS[:1], [[]])[0]
    assert output.info["token_log_probs"] == pytest.approx(plain_token_log_probs(policy, SCREENS[0], output.text),
                                                           abs=2e-4)
    with policy.reference():  # the adapter switched off: another prefix, and the base model's numbers
        reference = policy.token_log_probs(decisions)[0]
        assert reference[0, 0] == pytest.approx(plain_token_log_probs(policy, SCREENS[0], decisions[0].text)[0],
                                                abs=2e-4)
    assert not torch.allclose(reference, policy.token_log_probs(decisions)[0].detach())


def test_the_shared_prefix_scorer_gives_the_unshared_gradient(tiny_qwen2_dir):  # noqa: F811
    decisions = [Decision(s, (), f"Reason: step {i}\nAction: {{}}") for i, s in enumerate(SCREENS)]
    gradients, adapter = {}, None
    for rollout in ("cached", "generate"):
        policy = LMPolicy(path=str(tiny_qwen2_dir), rollout=rollout, lora={"r": 4}, sampler_dtype="float32")
        if adapter is None:
            adapter = policy.state_dict()
        policy.load_state_dict(adapter)  # the same (randomly initialised) adapter in both
        log_probs, mask = policy.token_log_probs(decisions)
        ((log_probs * mask).sum() / mask.sum()).backward()
        gradients[rollout] = torch.cat([p.grad.flatten() for p in policy.trainable_parameters()])
    assert gradients["cached"].abs().sum() > 0
    assert torch.allclose(gradients["cached"], gradients["generate"], atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("sampler, largest_drift", [
    ("bfloat16", 0.05), pytest.param(PACKED_FLOAT16, 0.005, marks=needs_fbgemm())])
def test_a_low_precision_sampler_is_rescored_in_the_policys_precision_and_reports_its_drift(
        tiny_qwen2_dir, sampler, largest_drift):  # noqa: F811
    # The packed float16 draft decodes in float32, as the verifying forward does: the two caches must not
    # share the arena's buffers, or the verification would score a prompt the draft overwrote.
    policy = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=TOKENS, sampler_dtype=sampler, lora={"r": 4})
    outputs = policy.act(SCREENS, [[] for _ in SCREENS])
    drifts = [o.info["sampler_drift"] for o in outputs if o.info["sampled_canonical"]]
    assert drifts and all(d >= 0 for d in drifts) and max(drifts) > 0  # a low precision is not float32
    assert max(drifts) < largest_drift  # but the same model: its rotary frequencies and weights are the trained ones
    for observation, output in zip(SCREENS, outputs, strict=True):
        assert output.info["token_log_probs"] == pytest.approx(
            plain_token_log_probs(policy, observation, output.text), abs=2e-4)


@needs_fbgemm()
def test_a_half_weight_linear_multiplies_as_nn_linear_does_to_float16_precision():
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 20)
    half = HalfWeightLinear(48, 20, bias=True)
    x = torch.randn(2, 3, 48)
    with pytest.raises(RuntimeError, match="before pack"):
        half(x)
    half.pack(linear.weight, linear.bias)
    expected = linear(x).detach()
    assert half(x).shape == expected.shape
    assert torch.allclose(half(x), expected, atol=2e-3 * float(expected.abs().max()))
    assert not torch.equal(half(x), expected)  # float16 weights, not float32 ones
    assert half.nbytes == 48 * 20 * 2 + 20 * 4
    with torch.no_grad():
        linear.weight[0, 0] = 1e6  # beyond float16: fbgemm saturates what it is handed, in place
    kept = linear.weight.detach().clone()
    half.pack(linear.weight, linear.bias)
    assert torch.equal(linear.weight.detach(), kept)  # the (trained) weight itself is untouched


@needs_fbgemm()
def test_a_packed_copy_follows_the_trained_weights_after_an_optimizer_step(tiny_qwen2_dir):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=TOKENS, sampler_dtype=PACKED_FLOAT16, lora={"r": 4})
    network, copy = policy._network(), policy._low_precision
    assert copy is not None and copy.name == PACKED_FLOAT16
    ids = policy._encode_prompt(SCREENS[0], ())["input_ids"]

    def gap() -> float:
        with torch.no_grad():
            exact = network(input_ids=ids).logits
            return float((copy.refreshed(network)(input_ids=ids).logits - exact).abs().max())

    with torch.no_grad():  # Qwen2's q/k/v biases, zero as initialised: given values, a dropped one would show
        biases = [p.normal_(0.0, 0.5) for name, p in network.named_parameters() if name.endswith("bias")]
    assert biases and gap() < 1e-2
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=5.0)
    (-policy.log_prob([Decision(SCREENS[0], (), "Reason: x\nAction: {}")]).sum()).backward()
    optimizer.step()  # the adapter's delta is no longer zero: a stale copy would miss it
    with torch.no_grad():
        stale = float((network(input_ids=ids).logits - copy.network(input_ids=ids).logits).abs().max())
    assert stale > 1e-2 and gap() < 1e-2
    assert not any(isinstance(m, torch.nn.Linear) for m in copy.network.modules())


@needs_fbgemm()
def test_training_gives_a_packed_drafts_weights_back_and_the_next_act_packs_them_again(tiny_qwen2_dir):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=TOKENS, sampler_dtype=PACKED_FLOAT16, lora={"r": 4},
                      seed=3)
    twin = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=TOKENS, sampler_dtype=PACKED_FLOAT16, lora={"r": 4},
                    seed=3)
    copy = policy._low_precision
    assert copy is not None
    for p in (policy, twin):
        p.act(SCREENS, [[]] * len(SCREENS))
    assert copy.weight_bytes > 0
    policy.train()
    assert sum(m.nbytes for m in copy.network.modules() if hasattr(m, "_packed")) == 0
    assert all(m._packed is None for m in copy.network.modules() if hasattr(m, "_packed"))
    policy.eval()
    again, same = policy.act(SCREENS, [[]] * len(SCREENS)), twin.act(SCREENS, [[]] * len(SCREENS))
    assert [o.text for o in again] == [o.text for o in same]  # repacked from the same weights: the same draws
    assert copy.weight_bytes > 0


def test_a_sampler_precision_is_checked_when_the_policy_is_built(tiny_qwen2_dir, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="sampler_dtype must be auto, packed_float16 or one of"):
        LMPolicy(path=str(tiny_qwen2_dir), sampler_dtype="float8")
    with pytest.raises(ValueError, match="sampler_dtype=packed_float16 is for a float32 model on a CPU"):
        LMPolicy(path=str(tiny_qwen2_dir), sampler_dtype=PACKED_FLOAT16, dtype="bfloat16")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags : fpu sse2 avx\n")
    assert not cpu_packs_half_weights(cpuinfo)
    cpuinfo.write_text("flags : fpu avx avx2 f16c\n")
    assert cpu_packs_half_weights(cpuinfo) == ("fbgemm" in torch.backends.quantized.supported_engines)


def test_auto_drafts_in_bfloat16_where_the_cpu_multiplies_it_else_with_packed_half_weights(
        tiny_qwen2_dir, tmp_path):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir))
    expected = "bfloat16" if cpu_multiplies_bfloat16() else PACKED_FLOAT16 if cpu_packs_half_weights() else None
    assert (policy._low_precision.name if policy._low_precision is not None else None) == expected
    assert LMPolicy(path=str(tiny_qwen2_dir), rollout="generate")._low_precision is None
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags : fpu avx2 avx512f\n")
    assert not cpu_multiplies_bfloat16(cpuinfo)
    cpuinfo.write_text("flags : fpu avx512f avx512_bf16\n")
    assert cpu_multiplies_bfloat16(cpuinfo)
    assert not cpu_multiplies_bfloat16(tmp_path / "missing")


def test_sampling_is_reproducible_from_the_seed(tiny_qwen2_dir):  # noqa: F811
    texts = [[o.text for o in LMPolicy(path=str(tiny_qwen2_dir), seed=3, max_new_tokens=TOKENS).act(SCREENS, [[]] * 4)]
             for _ in range(2)]
    assert texts[0] == texts[1]


@pytest.mark.parametrize("masked", [True, False])
def test_grouped_attention_equals_attention_over_repeated_heads(masked):
    torch.manual_seed(0)
    query, key, value = torch.randn(2, 6, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    mask[1, :, :, 0] = False
    mask[1, :, 0, 0] = True  # a padded row still sees itself
    module = torch.nn.Module()
    module.is_causal = True
    out, _ = grouped_attention(module, query, key, value, mask if masked else None, scaling=0.3)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(3, dim=1), value.repeat_interleave(3, dim=1),
        attn_mask=mask if masked else None, is_causal=not masked, scale=0.3).transpose(1, 2)
    assert torch.allclose(out, expected, atol=1e-5)


def test_a_top_p_draw_stays_inside_the_nucleus_and_follows_the_probabilities():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).repeat(4000, 1)
    settings = SamplingSettings(max_new_tokens=1, temperature=1.0, top_p=0.75, greedy=False, stop_ids=(0,),
                                pad_id=0, end_id=0)
    drawn = _choose(probs.log(), settings, torch.Generator().manual_seed(0))
    counts = torch.bincount(drawn, minlength=4).float() / len(drawn)
    assert counts[2:].sum() == 0  # 0.5 + 0.3 reach 0.75: tokens 2 and 3 are cut
    assert counts[0] == pytest.approx(0.5 / 0.8, abs=0.03)
    full = _choose(probs.log(), SamplingSettings(1, 1.0, 1.0, False, (0,), 0, 0), torch.Generator().manual_seed(1))
    assert torch.bincount(full, minlength=4).float().div(len(full)).tolist() == pytest.approx([0.5, 0.3, 0.15, 0.05],
                                                                                             abs=0.03)


# --------------------------------------------------------------------------------------------------
# The key/value arena: buffers reused from one act to the next, rows moved in place
# --------------------------------------------------------------------------------------------------

def filled_layer(rows: int, arena: KVArena | None) -> PreallocatedLayer:
    """A layer of ``rows`` rows whose row r holds the value r at its 3 filled positions (of 5)."""
    keys = torch.arange(rows, dtype=torch.float32).view(rows, 1, 1, 1).expand(rows, 2, 3, 4)
    buffers = arena.take(1, 6, 2, 5, 4, keys)[0] if arena is not None else None
    return PreallocatedLayer(keys, keys.clone(), 5, buffers)


@pytest.mark.parametrize("order", [[0, 2, 3], [1, 3], [0, 0, 1, 1, 1], [0, 1, 1, 2, 3, 3], [2, 0], [3, 1, 1]])
def test_rows_dropped_or_repeated_in_the_arena_are_those_a_gather_gives(order):
    expected = filled_layer(4, None)
    expected.batch_select_indices(torch.tensor(order))
    moved = filled_layer(4, KVArena())
    moved.batch_select_indices(torch.tensor(order))
    assert torch.equal(moved.keys, expected.keys) and torch.equal(moved.values, expected.values)
    assert moved.keys[:, 0, 0, 0].tolist() == [float(i) for i in order]


def test_the_arena_hands_back_the_same_buffers_until_a_batch_needs_more():
    arena = KVArena()
    like = torch.zeros(0)
    first = arena.take(2, rows=4, heads=3, capacity=50, dim=8, like=like)
    again = arena.take(2, rows=3, heads=3, capacity=20, dim=8, like=like)
    assert [k.data_ptr() for k, _ in first] == [k.data_ptr() for k, _ in again]
    grown = arena.take(2, rows=8, heads=3, capacity=20, dim=8, like=like)
    assert grown[0][0].shape == (8, 3, 50, 8)  # grown to the larger of each
    assert arena.take(2, 2, 3, 20, 8, like.to(torch.bfloat16))[0][0].dtype == torch.bfloat16  # one set per dtype
    draft = arena.take(2, rows=3, heads=3, capacity=20, dim=8, like=like, slot="draft")  # a draft in float32
    assert {k.data_ptr() for k, _ in draft}.isdisjoint({k.data_ptr() for k, _ in grown})
    arena.clear()
    assert arena.nbytes == 0


def test_acts_in_reused_buffers_draw_and_score_what_fresh_buffers_do(tiny_qwen2_dir):  # noqa: F811
    torch.set_num_threads(1)
    policies = [LMPolicy(path=str(tiny_qwen2_dir), seed=5, max_new_tokens=TOKENS) for _ in range(2)]
    for _ in range(2):  # the second act of each reuses the first's buffers
        policies[1]._arena.clear()  # this one always starts from fresh buffers
        fresh, reused = (p.act(SCREENS, [[]] * 4) for p in (policies[1], policies[0]))
        assert [o.text for o in reused] == [o.text for o in fresh]
        assert [o.info["token_log_probs"] for o in reused] == [o.info["token_log_probs"] for o in fresh]
    assert policies[0]._arena.nbytes > 0
    policies[0].train()
    assert policies[0]._arena.nbytes == 0  # given back for the update's activations


def test_a_drafted_row_in_another_spelling_is_scored_canonically_by_the_verifying_forward(
        tiny_qwen2_dir, monkeypatch):  # noqa: F811
    policy = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=24, sampler_dtype="bfloat16", lora={"r": 4})
    second_forwards: list[int] = []
    original = policy._score
    monkeypatch.setattr(policy, "_score", lambda decisions, *a, **k: second_forwards.append(len(decisions))
                        or original(decisions, *a, **k))
    outputs = []
    for _ in range(4):  # random weights at temperature 1: some drafted ids are not their text's tokenization
        outputs += list(zip(SCREENS, policy.act(SCREENS, [[] for _ in SCREENS]), strict=True))
    other_spelling = [(o, out) for o, out in outputs if not out.info["sampled_canonical"]]
    assert other_spelling, "no row was drafted in another spelling; the test needs one"
    fitting = [len(policy._response_ids(out.text)) - 1 <= 24 for _, out in outputs]
    assert sum(second_forwards) == fitting.count(False)  # only rows whose canonical answer overruns the cap
    for observation, output in other_spelling:
        assert output.info["token_log_probs"] == pytest.approx(
            plain_token_log_probs(policy, observation, output.text), abs=2e-4)


def test_generate_ignores_sampling_settings_that_a_models_generation_config_carries(tiny_qwen2_dir):  # noqa: F811
    # transformers fills every setting a GenerationConfig leaves unset from the model's own (Qwen2.5-VL ships
    # repetition_penalty 1.05): the answers would then not be drawn from softmax(logits / temperature).
    plain = LMPolicy(path=str(tiny_qwen2_dir), rollout="generate", max_new_tokens=TOKENS)
    shipped = LMPolicy(path=str(tiny_qwen2_dir), rollout="generate", max_new_tokens=TOKENS)
    shipped.model.generation_config.repetition_penalty = 50.0
    shipped.model.generation_config.no_repeat_ngram_size = 1
    shipped.model.generation_config.min_p = 0.9  # acts only when sampling
    shipped.model.generation_config.typical_p = 0.2
    greedy = [o.text for o in plain.act(SCREENS, [[] for _ in SCREENS], greedy=True)]
    assert [o.text for o in shipped.act(SCREENS, [[] for _ in SCREENS], greedy=True)] == greedy
    sampled = [o.text for o in plain.act(SCREENS, [[] for _ in SCREENS])]  # both samplers seeded alike
    assert [o.text for o in shipped.act(SCREENS, [[] for _ in SCREENS])] == sampled

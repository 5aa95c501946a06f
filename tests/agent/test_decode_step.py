"""The plain-tensor decode step (admire.agent.decode_step): the model's own logits and cache, step after step,
on the two supported architectures with padded rows, and the model's forward kept wherever it would differ."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from admire.agent.decode_step import lean_step_for
from admire.agent.lm_rollout import _model_step, _preallocated_cache, use_grouped_attention
from tests.support.models import tiny_qwen2_dir  # noqa: F401


def tiny_llama(**overrides: object) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True, **overrides)
    return LlamaForCausalLM(config).eval()


def logits_of_steps(network: torch.nn.Module, step: object, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Six decode steps of four rows (two of them with padding holes) from a random prefilled cache: the
    logits of every step and the keys the cache holds afterwards."""
    config = network.config
    heads = config.num_key_value_heads
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    generator = torch.Generator().manual_seed(1)
    prefilled = [(torch.randn(1, heads, 12, dim, generator=generator, dtype=dtype),
                  torch.randn(1, heads, 12, dim, generator=generator, dtype=dtype))
                 for _ in range(config.num_hidden_layers)]
    cache = _preallocated_cache(prefilled, 4, 20)
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[:2, 3:6] = 0
    positions = torch.tensor([9, 9, 12, 12])
    tokens = torch.tensor([5, 17, 250, 3])
    outputs = []
    with torch.no_grad():
        for _ in range(6):
            mask = torch.cat([mask, mask.new_ones(4, 1)], dim=1)
            logits = step(tokens, mask, positions, cache)  # type: ignore[operator]
            outputs.append(logits.float())
            tokens, positions = logits.argmax(dim=-1), positions + 1
    return torch.stack(outputs), cache.layers[-1].keys.float().clone()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_lean_step_gives_the_models_logits_and_cache_on_llama(dtype):
    network = tiny_llama(attention_bias=False).to(dtype)
    use_grouped_attention(network)
    lean = lean_step_for(network)
    assert lean is not None
    expected, expected_keys = logits_of_steps(network, _model_step(network), dtype)
    got, got_keys = logits_of_steps(network, lean, dtype)
    tolerance = 1e-5 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(got_keys, expected_keys, atol=tolerance, rtol=tolerance)


def test_the_lean_step_gives_the_models_logits_on_qwen2_with_its_qkv_biases(tiny_qwen2_dir):  # noqa: F811
    network = AutoModelForCausalLM.from_pretrained(str(tiny_qwen2_dir), dtype=torch.float32).eval()
    use_grouped_attention(network)
    lean = lean_step_for(network)
    assert lean is not None
    assert network.model.layers[0].self_attn.q_proj.bias is not None  # the biases are read, not dropped
    expected, _ = logits_of_steps(network, _model_step(network), torch.float32)
    got, _ = logits_of_steps(network, lean, torch.float32)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_architectures_the_step_would_compute_differently_keep_the_models_forward():
    assert lean_step_for(tiny_llama(hidden_act="gelu")) is None
    assert lean_step_for(tiny_llama(mlp_bias=True)) is None
    mistral = MistralForCausalLM(MistralConfig(vocab_size=300, hidden_size=48, intermediate_size=96,
                                               num_hidden_layers=1, num_attention_heads=6, num_key_value_heads=2))
    assert lean_step_for(mistral) is None


def test_the_lean_step_computes_a_lora_adapters_delta_and_leaves_it_out_when_disabled():
    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(tiny_llama(attention_bias=False), LoraConfig(r=2, target_modules="all-linear"))
    with torch.no_grad():
        for name, parameter in wrapped.named_parameters():
            if "lora_B" in name:  # a trained adapter: a zero B would hide a skipped delta
                parameter.normal_(0.0, 0.5)
    network = wrapped.get_base_model().eval()
    use_grouped_attention(network)
    lean = lean_step_for(network)
    assert lean is not None
    adapted, _ = logits_of_steps(network, _model_step(network), torch.float32)
    torch.testing.assert_close(logits_of_steps(network, lean, torch.float32)[0], adapted, atol=1e-5, rtol=1e-5)
    with wrapped.disable_adapter():
        base, _ = logits_of_steps(network, _model_step(network), torch.float32)
        torch.testing.assert_close(logits_of_steps(network, lean, torch.float32)[0], base, atol=1e-5, rtol=1e-5)
    assert (adapted - base).abs().max() > 1e-2  # the adapter changes the logits the step gives

"""One decode step of a Llama-family model as plain tensor calls, for sampling only.

Why this exists beside the model's own forward: at batch 8 on a CPU, a decode step of SmolLM2-135M through
transformers spends a large share of its time outside the matrix products and the attention (torch's
profiler; the numbers are in docs/lm-policy.md): per step it builds a mask, per layer it repeats that mask
for each query group, and it walks thirty layers of ``nn.Module`` calls. The step below calls the same
modules and does the same arithmetic (RMSNorm, rotary embedding from the model's own rotary module, grouped-query
attention over the cache, SiLU-gated MLP, the tied or untied head), with one boolean padding mask per step
broadcast over every head and query.

The projections are called as modules, not read as weights, so a PEFT LoRA layer adds its adapter's delta
(or leaves it out inside ``disable_adapter``) exactly as the model's forward does: the policy's own weights,
adapter and all, sample through this step. In float32 its logits are the model's forward's (a test holds
them to 1e-5, with and without an adapter). It also serves the bfloat16 draft, whose answers one forward of
the trained weights scores again (:func:`admire.agent.lm_rollout.sample_and_verify`). Architectures outside
:data:`SUPPORTED_MODEL_TYPES`, or with a feature this step does not compute (sliding windows, biases on the
MLP, another activation), keep the model's forward: :func:`lean_step_for` returns None for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

SUPPORTED_MODEL_TYPES = frozenset({"llama", "qwen2"})
"""Architectures whose decoder layer is exactly norm → attention (q/k/v/o projections, rotary, GQA) →
norm → SiLU-gated MLP, with pre-norm residuals."""

DecodeStep = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""``step(tokens [B], attention_mask [B, L], positions [B], cache) -> logits [B, vocab]``: appends the
tokens' keys and values to ``cache`` (a transformers cache of ``update``-able layers) and returns the next
token's logits."""


def lean_step_for(network: nn.Module) -> DecodeStep | None:
    """The plain-tensor decode step for ``network`` (a ``*ForCausalLM`` of a supported type), or None when
    its architecture holds something the step would compute differently."""
    config = getattr(network, "config", None)
    if config is None or getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return None
    if getattr(config, "hidden_act", None) != "silu" or getattr(config, "mlp_bias", False):
        return None
    if getattr(config, "use_sliding_window", False) or getattr(config, "pretraining_tp", 1) != 1:
        return None
    model = getattr(network, "model", None)
    layers = getattr(model, "layers", None)
    if not isinstance(layers, nn.ModuleList) or getattr(model, "rotary_emb", None) is None:
        return None
    return _LeanStep(network)


class _LeanStep:
    """The step for one network; calls its modules on every call, so weights rewritten in place (a
    refreshed draft, an optimizer step) are used as they are."""

    def __init__(self, network: nn.Module) -> None:
        config = network.config
        self.network = network
        self.model = network.model
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.scale = self.head_dim ** -0.5
        self.eps = float(config.rms_norm_eps)

    def __call__(self, tokens: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor,
                 cache: Any) -> torch.Tensor:
        model = self.model
        batch = tokens.shape[0]
        groups = self.heads // self.kv_heads
        x = model.embed_tokens(tokens)                                   # [B, hidden]
        cos, sin = model.rotary_emb(x[:, None, :], positions[:, None])   # [B, 1, head_dim]
        cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)     # [B, 1, 1, head_dim]
        visible = attention_mask.bool()[:, None, None, :]                # [B, 1, 1, L]
        for index, layer in enumerate(model.layers):
            attention = layer.self_attn
            h = _rms_norm(x, layer.input_layernorm, self.eps)
            q = attention.q_proj(h).view(batch, self.kv_heads, groups, self.head_dim)
            k = attention.k_proj(h).view(batch, self.kv_heads, 1, self.head_dim)
            v = attention.v_proj(h).view(batch, self.kv_heads, 1, self.head_dim)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            keys, values = cache.layers[index].update(k, v)
            # the query heads of a group are rows of one head: each key/value head is read once, in place
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible, scale=self.scale)
            x = x + attention.o_proj(out.reshape(batch, self.heads * self.head_dim))
            mlp = layer.mlp
            h = _rms_norm(x, layer.post_attention_layernorm, self.eps)
            gated = F.silu(mlp.gate_proj(h)) * mlp.up_proj(h)
            x = x + mlp.down_proj(gated)
        x = _rms_norm(x, model.norm, self.eps)
        return self.network.get_output_embeddings()(x)


def _rms_norm(x: torch.Tensor, norm: nn.Module, eps: float) -> torch.Tensor:
    """transformers' Llama RMSNorm: normalised in float32, cast back, then scaled by the weight."""
    wide = x.float()
    return norm.weight * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary embedding in transformers' half-split layout (``rotate_half``)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin

"""Fast sampling and scoring for the ``lm`` policy on a CPU: one shared prefix, a key/value cache, no waste.

Why this exists instead of ``model.generate`` plus a scoring forward (the measurements are in
docs/lm-policy.md): on two CPU cores, a batch of eight GUI prompts spends its time in four places that
``generate`` cannot avoid, and one more this module adds:

* **The same system turn, prefilled again for every row and every step.** 473 of a 576-token prompt are
  the fixed system turn (the action list and the answer format). Its keys and values are computed once per
  version of the weights (:class:`PrefixCache`) and shared by every row; identical prompts in a batch (the
  first screen of a GRPO group) are prefilled once.
* **Grouped-query attention copying the whole cache.** transformers' SDPA path repeats the key/value heads
  to the query heads on a CPU whenever there is a padding mask: for SmolLM2 (9 query, 3 key/value heads)
  that copies the cache three times per layer and decode step, two thirds of a step's time.
  :func:`grouped_attention` folds the query heads into their groups instead and copies nothing; it is
  registered as a transformers attention implementation, so the model's own code calls it.
* **A cache that is concatenated on every step.** :class:`PreallocatedLayer` writes each step's keys
  and values into a buffer sized for the whole answer.
* **A second forward to score what was sampled.** The sampling step already holds
  ``softmax(logits / temperature)`` over the trained weights; when the sampled ids are the canonical
  tokenization of the decoded text (the usual case), those are the log-probs PPO needs and no re-scoring
  forward runs. Rows that are not canonical are re-scored by the caller.
* **Decoding in bfloat16 where the CPU multiplies it natively.** A decode step multiplies eight rows by
  every weight; in float32 that runs at a fraction of memory speed, in bfloat16 (AVX-512 BF16, AMX) about
  twice as fast. :class:`LowPrecisionCopy` keeps a bfloat16 copy of the trained weights (LoRA merged
  in), refreshed when they change, to draft the answers with (:func:`sample_and_verify`): the prompts are
  prefilled in the policy's precision, the copy decodes from that cache, and one forward of the trained
  weights over the drafted answers gives their log-probs; the per-token gap between the two (the
  sampler's drift) is reported, and PPO's old log-probs stay those of the trained weights.

With the policy's own weights (no copy) everything computes in the policy's dtype, so the log-probs are
those of a plain forward of the same weights up to float rounding (a test checks it). Text-only models; a
vision-language prompt puts image tokens inside the user turn and uses ``generate``.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils.checkpoint
from torch import nn
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from admire.agent.decode_step import DecodeStep, lean_step_for

GROUPED_ATTENTION = "admire_grouped_sdpa"
"""The name under which :func:`grouped_attention` is registered with transformers."""


# -------------------------------------------------------------------------------------------------
# Attention without copying the key/value heads
# -------------------------------------------------------------------------------------------------

def grouped_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **_: Any) -> tuple[torch.Tensor, None]:
    """SDPA for grouped-query attention that never repeats the key/value heads.

    ``query`` is ``[B, H, q, d]`` and ``key``/``value`` ``[B, K, L, d]`` with ``H = K * G``; query head
    ``h`` reads key/value head ``h // G`` (transformers' ``repeat_kv`` order). The ``G`` query heads of a
    group become ``G * q`` query rows of one head, so each key/value head is read once, in place. With a
    mask, the mask's ``q`` rows repeat for every group member; without one (a causal prefill), torch's own
    ``enable_gqa`` does the work, since folded rows would break the causal pattern.
    """
    batch, heads, length, dim = query.shape
    groups = heads // key.shape[1]
    if attention_mask is None and length > 1:
        causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, dropout_p=dropout, scale=scaling, is_causal=bool(causal), enable_gqa=groups > 1)
        return out.transpose(1, 2).contiguous(), None
    folded = query.reshape(batch, key.shape[1], groups * length, dim)
    mask = attention_mask[:, :, :, : key.shape[-2]] if attention_mask is not None else None
    if mask is not None and groups > 1:
        mask = mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=mask, dropout_p=dropout,
                                                           scale=scaling)
    return out.reshape(batch, heads, length, dim).transpose(1, 2).contiguous(), None


def use_grouped_attention(network: nn.Module) -> bool:
    """Register :func:`grouped_attention` with transformers and switch ``network`` to it; False (and nothing
    changed) for a model that does not take a pluggable attention function."""
    AttentionInterface.register(GROUPED_ATTENTION, grouped_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(GROUPED_ATTENTION, sdpa_mask)
    if not getattr(network, "_can_set_attn_implementation", lambda: False)():
        return False
    network.set_attn_implementation(GROUPED_ATTENTION)
    return network.config._attn_implementation == GROUPED_ATTENTION


# -------------------------------------------------------------------------------------------------
# The shared prefix
# -------------------------------------------------------------------------------------------------

def weights_version(module: nn.Module) -> tuple[int, ...]:
    """Changes whenever a parameter is written in place (an optimizer step, ``load_state_dict``): the sum
    of the parameters' version counters, and their identities (a replaced parameter is a new tensor)."""
    total = 0
    identity = 0
    for parameter in module.parameters():
        total += parameter._version
        identity = hash((identity, id(parameter)))
    return total, identity


class PrefixCache:
    """The keys and values of one token prefix (the fixed system turn), kept while the weights that
    computed them are unchanged. ``get`` recomputes when the ids, the weights' version, ``mode`` (e.g.
    the reference model) or the network's training flag (a LoRA dropout draws noise in training mode only)
    differ from the cached ones; under autograd it always computes afresh, so the gradient flows through
    the prefix too."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._layers: list[tuple[torch.Tensor, torch.Tensor]] = []

    def get(self, network: nn.Module, ids: Sequence[int], mode: Any = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        key = (tuple(ids), weights_version(network), mode, network.training)
        if torch.is_grad_enabled():
            return _prefill(network, ids)
        if key != self._key:
            self._layers, self._key = _prefill(network, ids), key
        return self._layers


def _prefill(network: nn.Module, ids: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The prefix's keys and values per layer; under autograd each layer is recomputed in the backward
    pass (see :func:`score_hidden`), its keys and values recorded by :class:`RecordingLayer`."""
    device = next(network.parameters()).device
    model = body(network)
    cache = DynamicCache()
    cache.layers = [RecordingLayer() for _ in range(network.config.get_text_config(decoder=True).num_hidden_layers)]
    with _layers_checkpointed(model, torch.is_grad_enabled()):
        model(input_ids=torch.tensor([list(ids)], device=device), past_key_values=cache, use_cache=True)
    return [(layer.keys, layer.values) for layer in cache.layers]


def body(network: nn.Module) -> nn.Module:
    """The transformer without its output head (``LlamaModel`` inside ``LlamaForCausalLM``)."""
    return getattr(network, network.base_model_prefix)


def shared_prefix(rows: Sequence[Sequence[int]], prefix: Sequence[int]) -> int:
    """``len(prefix)`` when every row starts with it and is longer, else 0 (no sharing)."""
    n = len(prefix)
    if n and all(len(row) > n and list(row[:n]) == list(prefix) for row in rows):
        return n
    return 0


# -------------------------------------------------------------------------------------------------
# A low-precision copy to sample with
# -------------------------------------------------------------------------------------------------

def cpu_multiplies_bfloat16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU has native bfloat16 arithmetic (AVX-512 BF16 or AMX); False where unknown."""
    return bool(_cpu_flags(cpuinfo) & {"avx512_bf16", "amx_bf16"})


def cpu_packs_half_weights(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether torch here multiplies float32 activations by packed float16 weights (:class:`HalfWeightLinear`):
    torch built with fbgemm, on an x86 CPU with AVX2 and F16C, which its kernels need; False where unknown."""
    engines = getattr(torch.backends.quantized, "supported_engines", [])
    return "fbgemm" in engines and {"avx2", "f16c"} <= _cpu_flags(cpuinfo)


def _cpu_flags(cpuinfo: Path) -> set[str]:
    try:
        return set(cpuinfo.read_text().split())
    except OSError:
        return set()


PACKED_FLOAT16 = "packed_float16"
"""A sampler precision: every linear layer's weight held in float16 and packed for fbgemm, which multiplies it
with float32 activations; embeddings, norms, attention and the cache stay float32.

Why, on a CPU without native bfloat16 (docs/lm-policy.md has what was measured): at eight rows, float32
products run far below memory speed, and fbgemm's half-weight kernels read half the bytes in kernels made for
few rows. float16 keeps three more mantissa bits than bfloat16, so the draft drifts less from the trained
weights."""


FLOAT16_MAX = 65504.0


class HalfWeightLinear(nn.Module):
    """``nn.Linear``'s arithmetic with the weight (and bias) packed by ``torch.ops.quantized``'s float16
    prepack: float32 in, float32 out. Sampling only (no autograd); ``pack`` sets the weights."""

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.in_features, self.out_features, self.has_bias = in_features, out_features, bias
        self._packed: Any = None
        self.nbytes = 0

    def pack(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """Weights beyond float16's range are clamped to ±65504 first, on a copy: fbgemm's prepack saturates
        them in place, which would write into a float32 weight it is handed directly (a trained one)."""
        values = weight.detach().float().contiguous()
        if bool(values.abs().amax() > FLOAT16_MAX):
            values = values.clamp(-FLOAT16_MAX, FLOAT16_MAX)
        kept_bias = None if bias is None else bias.detach().float().clone()
        self._packed = torch.ops.quantized.linear_prepack_fp16(values, kept_bias)
        self.nbytes = weight.numel() * 2 + (bias.numel() * 4 if bias is not None else 0)

    def release(self) -> None:
        self._packed, self.nbytes = None, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._packed is None:
            raise RuntimeError("HalfWeightLinear used before pack(): refresh the copy from the trained weights")
        return torch.ops.quantized.linear_dynamic_fp16(x, self._packed)


class LowPrecisionCopy:
    """A plain copy of the model that samples in its place, in ``precision`` (a dtype, or
    :data:`PACKED_FLOAT16`): every weight is the trained one (a LoRA adapter's delta merged in, unless the
    adapter is switched off), cast or packed. ``refreshed`` rewrites it when the trained weights' version has
    changed since the last call. It is built from the model before any adapter is attached, so it holds no
    adapter layers of its own. ``dtype`` is its activations' (float32 for packed float16 weights)."""

    def __init__(self, model: nn.Module, precision: torch.dtype | str) -> None:
        if isinstance(precision, str) and precision != PACKED_FLOAT16:
            raise ValueError(f"a sampler precision is a torch dtype or {PACKED_FLOAT16!r}, got {precision!r}")
        self.packed = precision == PACKED_FLOAT16
        self.dtype = torch.float32 if self.packed else precision
        self.name = PACKED_FLOAT16 if self.packed else str(self.dtype).removeprefix("torch.")
        self.network = _empty_like(model, self.dtype, half_weight_linears=self.packed)
        self._version: tuple[int, ...] | None = None

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights one decode step reads: the parameters (a packed copy's input embedding excepted: a
        step looks up one row of it per answer, and its head is a packed layer of its own) and the packed
        linear layers."""
        packed = sum(m.nbytes for m in self.network.modules() if isinstance(m, HalfWeightLinear))
        skipped = {id(p) for m in self.network.modules() if self.packed and isinstance(m, nn.Embedding)
                   for p in m.parameters()}
        return packed + sum(p.numel() * p.element_size() for p in self.network.parameters() if id(p) not in skipped)

    def release(self) -> None:
        """Give a packed copy's weights back until the next ``refreshed`` packs them again. Why: a training
        step changes the trained weights, so the copy is repacked after it anyway, and during the step its
        memory (about half the model's float32 bytes) is wanted for activations. A dtype copy keeps its
        weights (they are rewritten in place, not rebuilt)."""
        if not self.packed:
            return
        for module in self.network.modules():
            if isinstance(module, HalfWeightLinear):
                module.release()
        self._version = None

    def refreshed(self, trained: nn.Module) -> nn.Module:
        """The copy, rewritten first if the trained weights changed. A packed copy's other parameters
        (embeddings, norms: float32 like the trained ones) share the trained tensors' storage, no copy."""
        version = weights_version(trained)
        if version != self._version:
            with torch.no_grad():
                sources = dict(trained.named_modules())
                for name, module in self.network.named_modules():
                    if isinstance(module, HalfWeightLinear):
                        bias = _effective(sources[name], "bias") if module.has_bias else None
                        module.pack(_effective(sources[name], "weight"), bias)
                        continue
                    for key, target in list(module.named_parameters(recurse=False)):
                        value = _effective(sources[name], key)
                        if self.packed:
                            module._parameters[key] = nn.Parameter(value.detach(), requires_grad=False)
                        else:
                            target.copy_(value)
            self._version = version
        return self.network


def _empty_like(model: nn.Module, dtype: torch.dtype, *, half_weight_linears: bool = False) -> nn.Module:
    """The model's architecture with uninitialised ``dtype`` weights (no float32 copy on the way: built on
    the meta device, then given storage), its tied weights tied again and its buffers (rotary frequencies)
    copied as they are; ``refreshed`` fills the weights. With ``half_weight_linears`` every ``nn.Linear``
    (the output head too, tied or not) becomes an unpacked :class:`HalfWeightLinear` and every other parameter
    stays on the meta device until ``refreshed`` binds the trained one: no storage is taken for any weight
    here; the head then holds its own packed copy of a tied embedding, and nothing is tied again."""
    with torch.device("meta"):
        clone = type(model)(copy.deepcopy(model.config)).to(dtype)
    if half_weight_linears:
        for name, module in list(clone.named_modules()):
            if isinstance(module, nn.Linear):
                owner, _, key = name.rpartition(".")
                setattr(clone.get_submodule(owner), key,
                        HalfWeightLinear(module.in_features, module.out_features, module.bias is not None))
    else:
        clone = clone.to_empty(device=next(model.parameters()).device)
        if hasattr(clone, "tie_weights"):
            clone.tie_weights()
    for name, buffer in model.named_buffers():
        owner, _, key = name.rpartition(".")
        clone.get_submodule(owner)._buffers[key] = buffer.detach().clone()
    return clone.requires_grad_(False).eval()


def _effective(module: nn.Module, key: str) -> torch.Tensor:
    """A parameter as the module computes with it: a PEFT LoRA layer's base weight plus its active
    adapters' deltas (none while adapters are disabled); any other module's own parameter."""
    base = getattr(module, "base_layer", None)
    if base is None:
        return getattr(module, key)
    value = getattr(base, key)
    if key == "weight" and not getattr(module, "disable_adapters", False):
        for adapter in getattr(module, "active_adapters", []):
            if adapter in getattr(module, "lora_A", {}):
                value = value + module.get_delta_weight(adapter)
    return value


# -------------------------------------------------------------------------------------------------
# A cache written in place
# -------------------------------------------------------------------------------------------------

class KVArena:
    """Key/value buffers kept from one batch to the next, one set per slot and dtype.

    Why: a batch's cache is a few hundred MB (SmolLM2-135M, batch 8: 240 MB in float32), and memory fresh from
    the system costs a page fault per page on first write. Allocated anew for every act, that was a tenth of
    the act's time on this machine; buffers reused are already mapped. Only one cache per slot and dtype may be
    alive at a time (``sample`` uses one; ``sample_and_verify`` two, the draft's in the ``draft`` slot), so a
    caller keeps one arena per policy."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[Any, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def take(self, count: int, rows: int, heads: int, capacity: int, dim: int, like: torch.Tensor,
             slot: str = "") -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``count`` (keys, values) buffers of at least ``[rows, heads, capacity, dim]``, in ``like``'s dtype
        and device; grown (and the old ones dropped) when a batch needs more. Two caches alive at once in
        one dtype (a draft decoding in the policy's own dtype) take different ``slot``s."""
        key = (slot, like.dtype, like.device, count, heads, dim)
        held = self._buffers.get(key)
        if held is None or held[0][0].shape[0] < rows or held[0][0].shape[2] < capacity:
            self._buffers.pop(key, None)  # dropped before the larger ones are made
            size = (max(rows, held[0][0].shape[0] if held else 0), heads,
                    max(capacity, held[0][0].shape[2] if held else 0), dim)
            held = [(like.new_empty(size), like.new_empty(size)) for _ in range(count)]
            self._buffers[key] = held
        return held

    def clear(self) -> None:
        """Give the buffers back (before training, where the memory is wanted for activations)."""
        self._buffers.clear()

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for held in self._buffers.values() for k, v in held)


def _preallocated_cache(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], rows: int, capacity: int,
                        arena: KVArena | None = None, *, room_rows: int = 0,
                        dtype: torch.dtype | None = None, slot: str = "") -> DynamicCache:
    """A cache of ``rows`` rows starting with ``layers``' keys and values (one row, or ``rows``), cast to
    ``dtype`` (default theirs), with room for ``capacity`` positions; in ``arena``'s buffers when given, with
    room for ``room_rows`` rows (rows a repeated prompt will fill), else in fresh ones."""
    cache = DynamicCache()
    first = layers[0][0]
    like = first if dtype is None else first.new_empty(0, dtype=dtype)
    room: list[tuple[torch.Tensor, torch.Tensor] | None]
    if arena is not None:
        room = list(arena.take(len(layers), max(rows, room_rows), first.shape[1], capacity, first.shape[3], like,
                               slot))
    else:
        room = [None] * len(layers)
    cache.layers = [PreallocatedLayer(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), capacity, buffers,
                                      dtype=like.dtype)
                    for (k, v), buffers in zip(layers, room, strict=True)]
    return cache


class PreallocatedLayer(DynamicLayer):
    """A cache layer whose keys and values live in a buffer sized for the whole answer: a decode step
    writes one column in place instead of concatenating the cache (no gradient: sampling only). In given
    ``buffers`` (a ``KVArena``'s), rows are also dropped and repeated in place where the order allows."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int,
                 buffers: tuple[torch.Tensor, torch.Tensor] | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        shape = (keys.shape[0], keys.shape[1], capacity, keys.shape[3])
        if buffers is None:
            buffers = (keys.new_empty(shape, dtype=dtype), values.new_empty(shape, dtype=dtype))
        self._room_keys, self._room_values = buffers[0][:, :, :capacity], buffers[1][:, :, :capacity]
        self._keys, self._values = self._room_keys[: shape[0]], self._room_values[: shape[0]]
        self._length = keys.shape[2]
        self._keys[:, :, : self._length] = keys
        self._values[:, :, : self._length] = values
        self.dtype, self.device, self.is_initialized = self._keys.dtype, keys.device, True
        self._views()

    def _views(self) -> None:
        self.keys = self._keys[:, :, : self._length]
        self.values = self._values[:, :, : self._length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        end = self._length + key_states.shape[2]
        if end > self._keys.shape[2]:
            raise RuntimeError(f"the key/value buffer holds {self._keys.shape[2]} positions; {end} were asked for")
        self._keys[:, :, self._length:end] = key_states
        self._values[:, :, self._length:end] = value_states
        self._length = end
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep rows ``indices`` (in that order; a row may repeat). Dropping rows (sources at or after
        their targets) and repeating rows (sources at or before them) move rows in place, in the order
        that reads each source before it is overwritten; any other selection gathers into new buffers."""
        order = [int(i) for i in indices.tolist()]
        ascending = all(a <= b for a, b in itertools.pairwise(order))
        in_room = len(order) <= self._room_keys.shape[0]
        if ascending and in_room and all(source >= target for target, source in enumerate(order)):
            moves = list(enumerate(order))
        elif ascending and in_room and all(source <= target for target, source in enumerate(order)):
            moves = list(reversed(list(enumerate(order))))
        else:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self._room_keys, self._room_values = self._keys, self._values
            self._views()
            return
        for target, source in moves:
            if target != source:
                self._room_keys[target, :, : self._length] = self._room_keys[source, :, : self._length]
                self._room_values[target, :, : self._length] = self._room_values[source, :, : self._length]
        self._keys, self._values = self._room_keys[: len(order)], self._room_values[: len(order)]
        self._views()


# -------------------------------------------------------------------------------------------------
# Sampling
# -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sampled:
    """One row's answer: the sampled ids (the stop token last when one was sampled), each id's log-prob
    under ``softmax(logits / temperature)`` of the weights that sampled it, whether it stopped, and the
    log-prob of the end token right after the answer's last non-stop token: the canonical tokenization
    always ends with that token, whichever stop was sampled or when the answer was cut at the cap."""

    ids: list[int]
    log_probs: list[float]
    stopped: bool
    end_log_prob: float


@dataclass(frozen=True)
class SamplingSettings:
    max_new_tokens: int
    temperature: float
    top_p: float
    greedy: bool
    stop_ids: tuple[int, ...]
    pad_id: int
    end_id: int


@dataclass
class _Prompted:
    """A batch after its prompts' prefill: the cache (one row per prompt, room for the answers), the next
    token's logits, the attention mask so far and each row's next position."""

    cache: DynamicCache
    logits: torch.Tensor
    mask: torch.Tensor
    next_position: torch.Tensor


def sample(network: nn.Module, prefix: list[tuple[torch.Tensor, torch.Tensor]], prompts: Sequence[Sequence[int]],
           settings: SamplingSettings, generator: torch.Generator | None, arena: KVArena | None = None
           ) -> list[Sampled]:
    """Sample one answer per prompt in one batch: identical prompts prefilled once, the prefix's keys and
    values shared, finished rows dropped from the batch. ``prompts`` are the ids after the prefix. A row cut
    at ``max_new_tokens`` costs one forward step more, for its end token's log-prob. The cache lives in
    ``arena``'s buffers when one is given."""
    if not prompts:
        return []
    with torch.no_grad():
        return _decode(network, _prefill_prompts(network, prefix, prompts, settings, arena), settings, generator)


def sample_and_verify(exact: nn.Module, draft: nn.Module, prefix: list[tuple[torch.Tensor, torch.Tensor]],
                      prompts: Sequence[Sequence[int]], settings: SamplingSettings,
                      generator: torch.Generator | None, arena: KVArena | None = None,
                      canonical: Callable[[list[int]], list[int]] | None = None,
                      ) -> tuple[list[list[float]], list[Sampled], list[bool]]:
    """Draft the answers with ``draft`` (a lower-precision copy of ``exact``), score them with ``exact``.

    The prompts are prefilled once, by ``exact``; the draft decodes from that cache cast to its dtype and
    from the exact first-token distribution; then one ``exact`` forward over every answer, on the same
    prompt cache, gives each row's log-probs of its answer followed by the end token. The answer scored is
    ``canonical(drafted ids)`` (the tokenization of the drafted text, so a row sampled in another spelling
    needs no second forward) when given and no longer than ``max_new_tokens``, else the drafted ids with
    the stop token excluded. Returns those log-probs, the draft's samples (for the drift between the two)
    and, per row, whether the canonical answer was the one scored. Both caches live in ``arena``'s buffers
    when one is given (the draft's in its own slot, so a draft computing in the policy's dtype cannot share
    the prompt cache's buffers)."""
    if not prompts:
        return [], [], []
    with torch.no_grad():
        state = _prefill_prompts(exact, prefix, prompts, settings, arena)
        dtype = next(draft.parameters()).dtype
        capacity = state.cache.layers[0]._keys.shape[2]
        drafted_state = _Prompted(_preallocated_cache([(layer.keys, layer.values) for layer in state.cache.layers],
                                                      len(prompts), capacity, arena, dtype=dtype, slot="draft"),
                                  state.logits, state.mask, state.next_position)
        drafted = _decode(draft, drafted_state, settings, generator)
        answers, verified = [], []
        for d in drafted:
            ids = d.ids[:-1] if d.stopped else d.ids
            wanted = canonical(ids) if canonical is not None else None
            fits = wanted is not None and len(wanted) <= settings.max_new_tokens
            answers.append(wanted if fits else ids)
            verified.append(fits)
        return _score_answers(exact, state, answers, settings), drafted, verified


def _prefill_prompts(network: nn.Module, prefix: list[tuple[torch.Tensor, torch.Tensor]],
                     prompts: Sequence[Sequence[int]], settings: SamplingSettings,
                     arena: KVArena | None = None) -> _Prompted:
    """Prefill each distinct prompt once (left-padded after the shared prefix), then one cache row per
    prompt, with room for ``max_new_tokens`` + 1 more positions."""
    device = next(network.parameters()).device
    unique = list(dict.fromkeys(tuple(p) for p in prompts))
    row_of = [unique.index(tuple(p)) for p in prompts]
    width = max(len(p) for p in unique)
    prefix_len = prefix[0][0].shape[2] if prefix else 0
    capacity = prefix_len + width + settings.max_new_tokens + 1
    ids = torch.tensor([[settings.pad_id] * (width - len(p)) + list(p) for p in unique], device=device)
    mask = torch.tensor([[1] * prefix_len + [0] * (width - len(p)) + [1] * len(p) for p in unique], device=device)
    positions = torch.tensor([[0] * (width - len(p)) + list(range(prefix_len, prefix_len + len(p))) for p in unique],
                             device=device)
    if prefix:
        cache = _preallocated_cache(prefix, len(unique), capacity, arena, room_rows=len(prompts))
    else:
        cache = _empty_cache(network, len(unique), capacity, arena, room_rows=len(prompts))
    out = network(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                  logits_to_keep=1)
    index = torch.tensor(row_of, device=device)
    if row_of != list(range(len(unique))):  # a repeated prompt: its cache row copied for each of its rows
        cache.batch_select_indices(index)
    return _Prompted(cache, out.logits[index, -1], mask[index], positions[index, -1] + 1)


def _decode(network: nn.Module, state: _Prompted, settings: SamplingSettings,
            generator: torch.Generator | None) -> list[Sampled]:
    """The sampling loop from a prefilled batch; the state's cache is written to and shrunk as rows stop."""
    device = state.logits.device
    logits, mask, next_position = state.logits, state.mask, state.next_position
    rows = logits.shape[0]
    live = list(range(rows))
    chosen: list[list[int]] = [[] for _ in range(rows)]
    scores: list[list[float]] = [[] for _ in range(rows)]
    stopped = [False] * rows
    end_scores = [0.0] * rows
    stops = torch.tensor(settings.stop_ids, device=device)
    step_logits = lean_step_for(network) or _model_step(network)
    for step in range(settings.max_new_tokens + 1):
        log_probs = torch.log_softmax(logits.float() / settings.temperature, dim=-1)
        if step == settings.max_new_tokens:  # the rows cut at the cap: their end token's log-prob
            for slot, row in enumerate(live):
                end_scores[row] = float(log_probs[slot, settings.end_id])
            break
        tokens = _choose(log_probs, settings, generator)
        picked = log_probs.gather(1, tokens[:, None])[:, 0]
        done = torch.isin(tokens, stops)
        for slot, row in enumerate(live):
            chosen[row].append(int(tokens[slot]))
            scores[row].append(float(picked[slot]))
            if done[slot]:
                stopped[row], end_scores[row] = True, float(log_probs[slot, settings.end_id])
        if bool(done.all()):
            break
        if bool(done.any()):
            keep = (~done).nonzero()[:, 0]
            live = [live[int(i)] for i in keep]
            state.cache.batch_select_indices(keep)
            tokens, mask, next_position = tokens[keep], mask[keep], next_position[keep]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        logits = step_logits(tokens, mask, next_position, state.cache)
        next_position = next_position + 1
    return [Sampled(*row) for row in zip(chosen, scores, stopped, end_scores, strict=True)]


def _model_step(network: nn.Module) -> DecodeStep:
    """A decode step through the model's own forward (any architecture transformers runs)."""
    def step(tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        out = network(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions[:, None],
                      past_key_values=cache, use_cache=True)
        return out.logits[:, -1]
    return step


def _score_answers(network: nn.Module, state: _Prompted, answers: Sequence[Sequence[int]],
                   settings: SamplingSettings) -> list[list[float]]:
    """Each row's log-probs of ``answer + [end]`` under ``network``, from one forward of the answers
    (right-padded) on the prompt cache; the first token's distribution is the prefill's. The output head
    runs one row at a time, on that row's answer positions only: a batch's ``[rows, answer, vocabulary]``
    logits would be the largest tensor of the whole act."""
    first = torch.log_softmax(state.logits.float() / settings.temperature, dim=-1)
    width = max(len(a) for a in answers)
    hidden = None
    if width:
        device = first.device
        ids = torch.tensor([list(a) + [settings.pad_id] * (width - len(a)) for a in answers], device=device)
        filled = torch.tensor([[1] * len(a) + [0] * (width - len(a)) for a in answers], device=device)
        positions = state.next_position[:, None] + torch.arange(width, device=device)[None, :]
        hidden = body(network)(input_ids=ids, attention_mask=torch.cat([state.mask, filled], dim=1),
                               position_ids=positions, past_key_values=state.cache, use_cache=True).last_hidden_state
    head = network.get_output_embeddings()
    scored = []
    for row, answer in enumerate(answers):
        tokens = [*answer, settings.end_id]
        values = [float(first[row, tokens[0]])]
        if hidden is not None and answer:
            later = torch.log_softmax(head(hidden[row, : len(answer)]).float() / settings.temperature, dim=-1)
            values += later[torch.arange(len(answer)), torch.tensor(tokens[1:])].tolist()
        scored.append(values)
    return scored


def _empty_cache(network: nn.Module, rows: int, capacity: int, arena: KVArena | None = None,
                 room_rows: int = 0) -> DynamicCache:
    """No shared prefix: a cache that starts empty (a zero-length prefix of the right shape)."""
    config = network.config.get_text_config(decoder=True)
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    parameter = next(network.parameters())
    empty = parameter.new_zeros(1, heads, 0, dim)
    return _preallocated_cache([(empty, empty)] * config.num_hidden_layers, rows, capacity, arena,
                               room_rows=room_rows)


def _choose(log_probs: torch.Tensor, settings: SamplingSettings, generator: torch.Generator | None) -> torch.Tensor:
    """Greedy: the most likely token. Otherwise a draw from ``softmax(logits / T)`` cut to the smallest set
    of tokens whose probability reaches ``top_p`` (the log-prob reported stays the uncut one). The draw is
    an inverse-CDF lookup of one uniform number per row: ``torch.multinomial`` draws an exponential per
    vocabulary entry, a tenth of a decode step here."""
    if settings.greedy:
        return log_probs.argmax(dim=-1)
    probs = log_probs.exp()
    order = None
    if settings.top_p < 1.0:
        probs, order = probs.sort(dim=-1, descending=True)
        probs = probs.masked_fill(probs.cumsum(dim=-1) - probs >= settings.top_p, 0.0)
    cumulative = probs.cumsum(dim=-1)
    uniform = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cumulative.dtype)
    picked = torch.searchsorted(cumulative, uniform * cumulative[:, -1:], right=True).clamp(max=probs.shape[1] - 1)
    return (picked if order is None else order.gather(1, picked))[:, 0]


# -------------------------------------------------------------------------------------------------
# Scoring over a shared prefix
# -------------------------------------------------------------------------------------------------

def score_hidden(network: nn.Module, prefix: list[tuple[torch.Tensor, torch.Tensor]],
                 rows: Sequence[Sequence[int]], pad_id: int, checkpoint_layers: bool = True) -> torch.Tensor:
    """The last hidden states ``[N, W, hidden]`` of ``rows`` (ids after the prefix, right-padded to ``W``)
    on top of the shared prefix's keys and values; differentiable when autograd is on (the prefix's
    gradient is the sum over rows, as if each row had computed it).

    Under autograd, ``checkpoint_layers`` keeps only each decoder layer's input and recomputes the layer
    in the backward pass: a minibatch of eight 200-token answers otherwise holds several GiB of
    activations. transformers' own gradient checkpointing drops the cache, so it cannot share a prefix;
    here the prefix enters through :class:`FixedPrefixLayer`, which a recomputed layer can read again."""
    device = next(network.parameters()).device
    width = max(len(r) for r in rows)
    prefix_len = prefix[0][0].shape[2]
    ids = torch.tensor([list(r) + [pad_id] * (width - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * (prefix_len + len(r)) + [0] * (width - len(r)) for r in rows], device=device)
    positions = torch.arange(prefix_len, prefix_len + width, device=device).expand(len(rows), -1)
    n = len(rows)
    cache = DynamicCache()
    cache.layers = [FixedPrefixLayer(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in prefix]
    model = body(network)
    with _layers_checkpointed(model, checkpoint_layers and torch.is_grad_enabled()):
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                    use_cache=True)
    return out.last_hidden_state


@contextmanager
def _layers_checkpointed(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Within this block each decoder layer of ``model`` (its ``layers`` list) keeps only its inputs for the
    backward pass and runs again there (non-reentrant ``torch.utils.checkpoint``)."""
    layers = getattr(model, "layers", None)
    if not enabled or not isinstance(layers, nn.ModuleList):
        yield
        return
    originals = [layer.forward for layer in layers]
    try:
        for layer, forward in zip(layers, originals, strict=True):
            layer.forward = _checkpointed(forward)
        yield
    finally:
        for layer in layers:
            del layer.forward  # the instance attribute: the class's forward again


def _checkpointed(forward: Any) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return run


class RecordingLayer(DynamicLayer):
    """A cache layer for the prefix's forward: it keeps the last keys and values it was given (a layer run
    again in the backward pass gives the same ones) and returns them."""

    def __init__(self) -> None:
        super().__init__()
        self.is_initialized = True
        self.keys = self.values = torch.zeros(0)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values = key_states, value_states
        self.dtype, self.device = key_states.dtype, key_states.device
        return key_states, value_states

class FixedPrefixLayer(DynamicLayer):
    """A cache layer for one scoring forward: it returns the prefix's keys and values followed by the
    layer's own, and keeps nothing, so a layer recomputed in the backward pass sees the same inputs."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values = keys, values
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)

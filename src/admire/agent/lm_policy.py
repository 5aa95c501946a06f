"""The ``lm`` policy: a Hugging Face language model (text or Qwen2.5-VL) that reads the screen and writes
``Reason / Action / Description``, trainable with token-level PPO.

Why it is shaped this way:

* **One tokenization, used twice.** PPO divides the probability of a response under the new parameters
  by its probability when it was sampled; both must be over the same token sequence. A sampled id
  sequence need not be the one the tokenizer gives for the decoded text (BPE has many spellings of a
  string), and a ``Decision`` carries only text. So every log-prob here — the one ``act`` reports and
  every later one — is computed on the *canonical* tokenization: the prompt rebuilt by
  :func:`admire.agent.prompts.build_messages` and rendered by the model's chat template, then
  ``tokenizer(text)`` of the response followed by the end-of-turn token. ``act`` samples, decodes and then
  scores the decoded text through the same function PPO calls (one extra no-grad forward), so the two
  agree by construction.
* **The policy's distribution is ``softmax(logits / temperature)``.** Log-probs use the sampling
  temperature (as verl does), without the top-p cut, so the ratio is between the distributions that were
  actually sampled from, up to that cut.
* **The reference model is free with LoRA.** With an adapter the reference is the same network with the
  adapter switched off (``peft``'s ``disable_adapter``); without one, a frozen copy is kept only when
  asked (``keep_reference=True``), since it doubles the memory.
* **Small checkpoints.** With LoRA, ``state_dict()`` holds only the adapter (and the sampler's state), so
  the trainer's safetensors checkpoint is megabytes, not the base model again.
* **Nothing downloaded.** ``path`` is a local model directory (``admire models prepare``); every load is
  ``local_files_only``.
* **Rollouts at the machine's speed.** With ``rollout="cached"`` (the default for text models) ``act``
  samples through :mod:`admire.agent.lm_rollout`: the fixed system turn's keys and values computed once per
  weights version, grouped-query attention that copies nothing, a cache written in place, a low-precision
  draft (bfloat16 on CPUs that multiply it; float16 weights packed for fbgemm when asked for) verified by one
  forward of the trained weights, and the trained weights'
  log-probs from sampling or verifying kept when the sampled ids are canonical (otherwise that row is
  re-scored). Scoring shares the system turn across the batch too, gradient included.
  ``rollout="generate"`` is transformers' ``generate`` followed by one scoring forward, kept for comparison
  and for vision-language models, whose prompts hold image tokens.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from admire.extras import require

require("torch", "transformers", "safetensors", extra="lm", feature="the lm policy")

import torch  # noqa: E402
import torch.utils.checkpoint  # noqa: E402
from torch import nn  # noqa: E402

from admire.actions import parse_model_output  # noqa: E402
from admire.agent.base import Decision, PolicyOutput  # noqa: E402
from admire.agent.lm_rollout import (  # noqa: E402
    PACKED_FLOAT16,
    KVArena,
    LowPrecisionCopy,
    PrefixCache,
    SamplingSettings,
    body,
    cpu_multiplies_bfloat16,
    cpu_packs_half_weights,
    sample,
    sample_and_verify,
    score_hidden,
    shared_prefix,
    use_grouped_attention,
)
from admire.agent.prompts import DEFAULT_HISTORY_WINDOW, build_messages, system_prompt  # noqa: E402
from admire.models.chat import end_of_turn_id  # noqa: E402
from admire.types import Observation, Step  # noqa: E402

DEFAULT_MAX_PIXELS = 1280 * 28 * 28
"""Screenshots are scaled down to at most this many pixels: 1,280 Qwen2.5-VL image tokens (one per 28 × 28)."""

DEFAULTS: dict[str, Any] = {
    "path": None,
    "seed": 0,
    "temperature": 1.0,
    "top_p": 1.0,
    "max_new_tokens": 96,
    "history_window": DEFAULT_HISTORY_WINDOW,
    "screenshots": "auto",
    "max_pixels": DEFAULT_MAX_PIXELS,
    "lora": None,
    "dtype": "auto",
    "device": "auto",
    "keep_reference": False,
    "rollout": "auto",
    "sampler_dtype": "auto",
    "encoder": None,
}
"""Every option of the policy with its default; ``encoder`` is accepted and ignored (the trainer passes one
to every policy)."""

LORA_DEFAULTS: dict[str, Any] = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear", "layers": None}
"""``layers``: adapt only the top N decoder layers (None: all). Why: the layers below the lowest adapted one
then run without autograd, so a PPO or warm-start step backpropagates through N layers, not all of them
(SmolLM2-135M, 8 of 30 layers: about half the time of a minibatch)."""
OPTIONS_FILE = "admire-lm-policy.json"
"""What ``save_pretrained`` writes beside the weights: the options and the sampler's state."""
_COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                 "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ROLLOUTS = ("auto", "cached", "generate")
"""``cached``: :mod:`admire.agent.lm_rollout`; ``generate``: transformers' ``generate`` + one scoring forward;
``auto``: cached for text models, generate for vision-language ones."""


class LMPolicy(nn.Module):
    """A causal LM or Qwen2.5-VL as a GUI policy (see the module docstring). Options are keyword-only:
    ``path`` (required), ``seed``, ``temperature``, ``top_p``, ``max_new_tokens``, ``history_window``,
    ``screenshots`` ("auto": on for vision-language models), ``max_pixels`` (larger screenshots are scaled
    down first; ``DEFAULT_MAX_PIXELS``, None: no limit), ``lora`` (None, or a dict of ``r``, ``alpha``,
    ``dropout``, ``target_modules``), ``dtype`` ("auto": bfloat16 on CUDA, float32 on CPU), ``device``,
    ``keep_reference``, ``rollout`` ("auto": "cached" for text models, "generate" for vision-language ones)
    ``sampler_dtype`` (the cached rollout's drafting precision; "auto": bfloat16 on a CPU that multiplies it
    natively, else ``packed_float16`` where fbgemm runs (float16 weights packed for its few-row kernels,
    float32 arithmetic), else the model's own)
    and ``encoder`` (ignored)."""

    def __init__(
        self, *, path: Any = None, seed: int = 0, temperature: float = 1.0, top_p: float = 1.0,
        max_new_tokens: int = 96, history_window: int = DEFAULT_HISTORY_WINDOW, screenshots: Any = "auto",
        max_pixels: int | None = DEFAULT_MAX_PIXELS, lora: Any = None, dtype: str = "auto", device: str = "auto",
        keep_reference: bool = False, rollout: str = "auto", sampler_dtype: str = "auto", encoder: Any = None,
    ) -> None:
        super().__init__()
        self.options = _checked_options({
            "path": path, "seed": seed, "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens,
            "history_window": history_window, "screenshots": screenshots, "max_pixels": max_pixels, "lora": lora,
            "dtype": dtype, "device": device, "keep_reference": keep_reference, "rollout": rollout,
            "sampler_dtype": sampler_dtype, "encoder": encoder})
        path = _model_dir(self.options["path"])
        self.device = _device(self.options["device"])
        self.dtype = _dtype(self.options["dtype"], self.device)
        self.vision_language, model, self.tokenizer, self.processor = _load(path, self.dtype)
        self.screenshots = _screenshots(self.options["screenshots"], self.vision_language)
        self.rollout = _rollout(self.options["rollout"], self.vision_language)
        if self.rollout == "cached" and not use_grouped_attention(model):
            raise ValueError(f"rollout='cached' needs a model whose attention transformers can swap; "
                             f"{type(model).__name__} cannot: use rollout='generate'")
        model.to(self.device)
        sampler_dtype = _sampler_dtype(self.options["sampler_dtype"], self.dtype, self.device, self.rollout)
        self.end_id = end_of_turn_id(self.tokenizer)  # where the chat template closes a turn, not eos_token
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.end_id)
        self.stop_ids = _stop_ids(model, self.end_id)
        self._head_on_hidden = _head_reads_last_hidden_state(model, self.end_id)
        self._low_precision: LowPrecisionCopy | None = None
        if sampler_dtype != self.dtype and self._head_on_hidden:  # a draft is verified on the hidden states
            # not a submodule: outside state_dict, parameters() and .to()
            self.__dict__["_low_precision"] = LowPrecisionCopy(model, sampler_dtype)
        self.lora: dict[str, Any] | None = None
        self._reference_copy: nn.Module | None = None
        self._use_reference = False
        self._in_reference = False
        self._prefix_cache = PrefixCache()
        self._arena = KVArena()  # the cached rollout's key/value buffers, reused from one act to the next
        self._system_ids: list[int] | None = None
        if self.options["lora"]:
            self.lora = {**LORA_DEFAULTS, **self.options["lora"]}
            self.model = _with_lora(model, self.lora)
        else:
            self.model = model
            if self.options["keep_reference"]:  # not a submodule: outside state_dict, parameters() and .to()
                self.__dict__["_reference_copy"] = copy.deepcopy(model).requires_grad_(False).eval()
        self._sampler = torch.Generator().manual_seed(int(self.options["seed"]))
        self.eval()  # acting mode until a trainer says otherwise: PEFT builds its dropout layers training

    # ---------------------------------------------------------------------------------------------
    # The Policy protocol
    # ---------------------------------------------------------------------------------------------

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        """Generate one answer per screen in one left-padded batch, parse it, and score it canonically.

        A text that does not parse is an output with ``action=None`` (a format error), never an exception.
        ``info`` holds ``num_tokens``, ``token_log_probs``, ``sampled_canonical`` (whether the sampled ids
        were the canonical tokenization) and ``parse_error``.
        """
        if len(observations) != len(histories):
            raise ValueError(f"act got {len(observations)} observations but {len(histories)} histories; "
                             "pass one history (possibly empty) per observation")
        if not observations:
            return []
        if self.rollout == "cached":
            return self._act_cached(observations, histories, greedy)
        rows = [self._encode_prompt(o, h) for o, h in zip(observations, histories, strict=True)]
        batch = _collate(rows, [[] for _ in rows], self.pad_id, left=True)
        width = batch["input_ids"].shape[1]
        with torch.no_grad(), self._sampling_rng(greedy):
            sequences = self._network().generate(**_to(batch, self.device, self.dtype),
                                                 generation_config=self._generation_config(greedy))
        sampled = [_until_stop(row[width:].tolist(), self.stop_ids) for row in sequences]
        texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in sampled]
        decisions = [Decision(o, tuple(h), t) for o, h, t in zip(observations, histories, texts, strict=True)]
        with torch.no_grad():
            log_probs, mask, _ = self._score(decisions, rows, entropy=False)
        scored = [[float(v) for v in log_probs[i, :int(mask[i].sum())]] for i in range(len(decisions))]
        return [self._output(text, scores, ids == self._response_ids(text)[:-1])
                for text, scores, ids in zip(texts, scored, sampled, strict=True)]

    def _act_cached(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
                    greedy: bool) -> list[PolicyOutput]:
        """``act`` through :mod:`admire.agent.lm_rollout`. Sampling drafts with the low-precision copy where
        there is one (greedy decoding and the reference model use the weights themselves). A row whose answer
        ids are the canonical tokenization of its text keeps the log-probs the trained weights gave them while
        sampling or verifying, with the end token's after the answer (whichever stop was drawn, or where the
        cap cut it). A drafted row's verifying forward scores its canonical tokens directly, so a row the draft
        sampled in another spelling costs nothing more; without a draft such a row is re-scored."""
        rows = [self._encode_prompt(o, h) for o, h in zip(observations, histories, strict=True)]
        prompts = [row["input_ids"][0].tolist() for row in rows]
        network = self._network()
        drafting = (self._low_precision is not None and self._head_on_hidden and not self._in_reference
                    and not greedy)
        exact: list[list[float]] | None = None
        verified: list[bool] = []
        with torch.no_grad():
            prefix, shared = self._prefix(network, prompts)
            suffixes = [p[shared:] for p in prompts]
            if drafting:
                assert self._low_precision is not None
                draft = self._low_precision.refreshed(network)
                exact, samples, verified = sample_and_verify(
                    network, draft, prefix, suffixes, self._sampling(greedy), self._generator(greedy), self._arena,
                    canonical=lambda ids: self._response_ids(self.tokenizer.decode(ids, skip_special_tokens=True))[:-1])
            else:
                samples = sample(network, prefix, suffixes, self._sampling(greedy), self._generator(greedy),
                                 self._arena)
        texts, scored, canonical, rescore = [], [], [], []
        for i, drawn in enumerate(samples):
            answer = drawn.ids[:-1] if drawn.stopped else drawn.ids
            text = self.tokenizer.decode(answer, skip_special_tokens=True)
            wanted = self._response_ids(text)
            texts.append(text)
            canonical.append(answer == wanted[:-1])
            if exact is not None and verified[i]:  # the verifying forward scored the canonical tokens
                scored.append(exact[i])
            elif canonical[-1]:  # sampled by the trained weights themselves: their log-probs while sampling
                scored.append([*drawn.log_probs[:len(answer)], drawn.end_log_prob])
            else:
                scored.append([])
                rescore.append(i)
        if rescore:
            decisions = [Decision(observations[i], tuple(histories[i]), texts[i]) for i in rescore]
            with torch.no_grad():
                log_probs, mask, _ = self._score(decisions, [rows[i] for i in rescore], entropy=False)
            for j, i in enumerate(rescore):
                scored[i] = [float(v) for v in log_probs[j, :int(mask[j].sum())]]
        outputs = [self._output(t, s, c) for t, s, c in zip(texts, scored, canonical, strict=True)]
        if drafting:  # how far the draft's log-probs were from the trained weights', per token
            for output, drawn, exact_row in zip(outputs, samples, canonical, strict=True):
                if exact_row:
                    n = output.info["num_tokens"]
                    drafted = [*drawn.log_probs[:n - 1], drawn.end_log_prob]
                    gaps = [abs(a - b) for a, b in zip(output.info["token_log_probs"], drafted, strict=True)]
                    output.info["sampler_drift"] = sum(gaps) / len(gaps)
        return outputs

    @staticmethod
    def _output(text: str, token_log_probs: list[float], canonical: bool) -> PolicyOutput:
        parsed = parse_model_output(text)
        return PolicyOutput(text=text, action=parsed.action, log_prob=float(sum(token_log_probs)),
                            info={"num_tokens": len(token_log_probs), "token_log_probs": token_log_probs,
                                  "sampled_canonical": canonical, "parse_error": parsed.error})

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        """The sum of each response's token log-probs, shape ``[N]`` (differentiable)."""
        log_probs, mask = self.token_log_probs(decisions)
        return (log_probs * mask).sum(dim=1)

    # ---------------------------------------------------------------------------------------------
    # What token-level PPO uses
    # ---------------------------------------------------------------------------------------------

    def token_log_probs(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-response-token log-probs ``[N, T]`` (differentiable) and a float mask ``[N, T]`` (1 on response
        tokens, right-padded), over the canonical tokenization (see the module docstring)."""
        log_probs, mask, _ = self._score(decisions, None, entropy=False)
        return log_probs, mask

    def token_log_probs_and_entropy(self, decisions: Sequence[Decision]
                                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_probs, entropy, mask)``: ``token_log_probs`` with the entropy of each position's whole
        next-token distribution ``[N, T]`` between them (the order of ``log_prob_and_entropy``, mask last)."""
        log_probs, mask, entropy = self._score(decisions, None, entropy=True)
        assert entropy is not None
        return log_probs, entropy, mask

    def num_tokens(self, decisions: Sequence[Decision]) -> list[int]:
        """Response tokens of each decision under the canonical tokenization (the end-of-turn token included)."""
        return [len(self._response_ids(d.text)) for d in decisions]

    @contextmanager
    def reference(self) -> Iterator[None]:
        """Within this block the policy computes the reference model's outputs: LoRA switched off, or the
        frozen copy made at construction (``keep_reference=True``)."""
        if self.lora is not None:
            self._in_reference = True
            try:
                with self.model.disable_adapter():
                    yield
            finally:
                self._in_reference = False
            return
        if self._reference_copy is None:
            raise ValueError("this lm policy has no reference model: pass lora={...} (the reference is the base "
                             "model) or keep_reference=True (a frozen copy, twice the memory)")
        self._use_reference = self._in_reference = True
        try:
            yield
        finally:
            self._use_reference = self._in_reference = False

    def train(self, mode: bool = True) -> LMPolicy:
        """As ``nn.Module.train``; entering training gives the rollout's key/value buffers and a packed draft's
        weights back, so an update's activations have that memory (the next act maps the buffers again, once,
        and repacks the draft, which the update's new weights would have made it do anyway)."""
        if mode:
            self._arena.clear()
            if self._low_precision is not None:
                self._low_precision.release()
        return super().train(mode)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """What the optimizer should update: the adapter with LoRA, every weight without."""
        return [p for p in self.model.parameters() if p.requires_grad]

    # ---------------------------------------------------------------------------------------------
    # Checkpoints
    # ---------------------------------------------------------------------------------------------

    def get_extra_state(self) -> dict[str, Any]:
        """The sampler's state: a resumed run samples what the uninterrupted one would have."""
        return {"sampler": self._sampler.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._sampler.set_state(state["sampler"])

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "",
                   keep_vars: bool = False) -> dict[str, Any]:
        """The module's state; with LoRA only the adapter (``adapter.*``) and the sampler (``_extra_state``)."""
        if self.lora is None:
            return super().state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)
        from peft import get_peft_model_state_dict

        out = OrderedDict() if destination is None else destination
        for key, value in get_peft_model_state_dict(self.model).items():
            out[f"{prefix}adapter.{key}"] = value if keep_vars else value.detach()
        out[f"{prefix}_extra_state"] = self.get_extra_state()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Load what :meth:`state_dict` returned (with LoRA: the adapter only)."""
        if self.lora is None:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        from peft import get_peft_model_state_dict, set_peft_model_state_dict
        from torch.nn.modules.module import _IncompatibleKeys

        adapter = {k[len("adapter."):]: v for k, v in state_dict.items() if k.startswith("adapter.")}
        expected = get_peft_model_state_dict(self.model)
        missing = sorted(set(expected) - set(adapter))
        unexpected = sorted(k for k in state_dict if k != "_extra_state" and k[len("adapter."):] not in expected)
        misshapen = sorted(k for k, v in adapter.items() if k in expected and v.shape != expected[k].shape)
        if misshapen or (strict and (missing or unexpected)):
            example = (misshapen or missing or unexpected)[0]
            raise ValueError(f"these weights do not fit this lm policy's LoRA adapter ({len(missing)} missing, "
                             f"{len(unexpected)} unexpected, {len(misshapen)} of another shape, e.g. {example!r}); "
                             "build the policy with the lora options and model path it was trained with")
        set_peft_model_state_dict(self.model, adapter)
        if "_extra_state" in state_dict:
            self.set_extra_state(state_dict["_extra_state"])
        return _IncompatibleKeys(missing, unexpected)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write the adapter (PEFT's ``adapter_model.safetensors``) or the full model as safetensors, plus
        ``admire-lm-policy.json`` (the options and the sampler's state). A full save is itself a model
        directory (tokenizer and processor files are copied), usable as another policy's ``path``."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(target, safe_serialization=True)
        if self.lora is None:
            source = Path(self.options["path"])
            for name in _COPIED_FILES:
                if (source / name).is_file():
                    shutil.copyfile(source / name, target / name)
        options = {k: v for k, v in self.options.items() if k != "encoder"}
        options["path"] = str(Path(self.options["path"]).absolute())
        record = {"kind": "adapter" if self.lora is not None else "full", "options": options,
                  "sampler": base64.b64encode(self._sampler.get_state().numpy().tobytes()).decode("ascii")}
        (target / OPTIONS_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return target

    def load_pretrained(self, directory: str | Path) -> None:
        """Load what :meth:`save_pretrained` wrote into this policy (same base model and LoRA shape)."""
        source = Path(directory)
        record = _read_record(source)
        if (record["kind"] == "adapter") != (self.lora is not None):
            want = "with lora={...}" if record["kind"] == "adapter" else "without lora"
            raise ValueError(f"{source} holds {record['kind']} weights; build the policy {want} to load them")
        if self.lora is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            saved = {k: v for k, v in record["options"]["lora"].items()}
            if {**LORA_DEFAULTS, **saved} != self.lora:
                raise ValueError(f"{source} holds a LoRA adapter with {saved}, this policy has {self.lora}; build "
                                 "the policy with the same lora options")
            set_peft_model_state_dict(self.model, load_file(str(source / "adapter_model.safetensors")))
        elif source.resolve() != Path(self.options["path"]).resolve():  # built from it: the weights are loaded
            _, loaded, _, _ = _load(source, self.dtype)
            self.model.load_state_dict(loaded.state_dict())
        raw = base64.b64decode(record["sampler"])
        self._sampler.set_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))

    @classmethod
    def from_pretrained(cls, directory: str | Path, **overrides: Any) -> LMPolicy:
        """A policy built with the saved options (``overrides`` replace some) and the saved weights."""
        record = _read_record(Path(directory))
        options = {**record["options"], **overrides}
        if record["kind"] == "full" and "path" not in overrides:
            options["path"] = str(directory)  # a full save is a model directory of its own
        policy = cls(**options)
        policy.load_pretrained(directory)
        return policy

    # ---------------------------------------------------------------------------------------------
    # Internals
    # ---------------------------------------------------------------------------------------------

    def _network(self) -> nn.Module:
        """The transformers model that computes: the reference copy inside ``reference()``, else the live one
        (with LoRA, the base model whose layers PEFT wrapped in place)."""
        if self._use_reference and self._reference_copy is not None:
            return self._reference_copy
        return self.model.get_base_model() if self.lora is not None else self.model

    def _encode_prompt(self, observation: Observation, history: Sequence[Step]) -> dict[str, torch.Tensor]:
        """One prompt's model inputs (unpadded, batch of one): chat template, tokens and, for VL, pixels."""
        messages = build_messages(observation, history, history_window=int(self.options["history_window"]),
                                  screenshot=self.screenshots, max_pixels=self.options["max_pixels"])
        images = [part["image"] for message in messages if isinstance(message["content"], list)
                  for part in message["content"] if part.get("type") == "image"]
        if self.processor is not None:
            text = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return dict(self.processor(text=[text], images=images or None, return_tensors="pt"))
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return dict(self.tokenizer([text], add_special_tokens=False, return_tensors="pt"))

    def _response_ids(self, text: str) -> list[int]:
        """The canonical tokenization of a response: its text's tokens, then the end-of-turn token."""
        return [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.end_id]

    def _score(self, decisions: Sequence[Decision], rows: list[dict[str, torch.Tensor]] | None,
               entropy: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One right-padded forward over prompt + response, the head applied only at response positions.
        With the cached rollout the system turn is computed once for the whole batch (gradient included)."""
        if not decisions:
            empty = torch.zeros(0, 0, device=self.device)
            return empty, empty, (empty if entropy else None)
        if rows is None:
            rows = [self._encode_prompt(d.observation, d.history) for d in decisions]
        responses = [self._response_ids(d.text) for d in decisions]
        network = self._network()
        longest = max(len(r) for r in responses)
        offsets = torch.arange(longest, device=self.device)
        mask = (offsets[None, :] < torch.tensor([len(r) for r in responses], device=self.device)[:, None]).float()
        prompts = [row["input_ids"][0].tolist() for row in rows]
        sharing = self.rollout == "cached" and self._head_on_hidden
        prefix, shared = self._prefix(network, prompts) if sharing else ([], 0)
        head: nn.Module | None = network.get_output_embeddings()
        if shared:
            hidden = score_hidden(network, prefix, [p[shared:] + r for p, r in zip(prompts, responses, strict=True)],
                                  self.pad_id)
            states = _pick(hidden, [len(p) - shared - 1 for p in prompts], offsets)
        else:
            batch = _to(_collate(rows, responses, self.pad_id, left=False), self.device, self.dtype)
            starts = [len(p) - 1 for p in prompts]
            if self._head_on_hidden:  # the vocabulary-wide head only where a response token is predicted
                states = _pick(body(network)(**batch, use_cache=False).last_hidden_state, starts, offsets)
            else:  # a model whose logits are more than the head of the last hidden state (e.g. soft-capped)
                states, head = _pick(network(**batch, use_cache=False).logits, starts, offsets), None
        targets = torch.tensor([r + [self.pad_id] * (longest - len(r)) for r in responses], device=self.device)
        log_probs, ent = _token_scores(states, targets, head, float(self.options["temperature"]), entropy)
        return log_probs * mask, mask, (ent * mask if ent is not None else None)

    def _prefix(self, network: nn.Module, prompts: Sequence[Sequence[int]]
                ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int]:
        """The system turn's keys and values and its length, or ([], 0) when some prompt does not start with
        it (a chat template that renders the system turn differently inside a conversation)."""
        if self._system_ids is None:
            rendered = self.tokenizer.apply_chat_template([{"role": "system", "content": system_prompt()}],
                                                          tokenize=False)
            self._system_ids = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
        shared = shared_prefix(prompts, self._system_ids)
        if not shared:
            return [], 0
        return self._prefix_cache.get(network, self._system_ids, mode=self._in_reference), shared

    def _sampling(self, greedy: bool) -> SamplingSettings:
        return SamplingSettings(max_new_tokens=int(self.options["max_new_tokens"]),
                                temperature=float(self.options["temperature"]), top_p=float(self.options["top_p"]),
                                greedy=greedy, stop_ids=tuple(self.stop_ids), pad_id=self.pad_id,
                                end_id=self.end_id)

    def _generator(self, greedy: bool) -> torch.Generator | None:
        """A generator seeded from the policy's own sampler (one draw per sampled batch, as with generate)."""
        if greedy:
            return None
        seed = int(torch.randint(0, 2**62, (1,), generator=self._sampler))
        return torch.Generator(device=self.device).manual_seed(seed)

    def _generation_config(self, greedy: bool) -> Any:
        from transformers import GenerationConfig

        sampling = {} if greedy else {"temperature": float(self.options["temperature"]),
                                      "top_p": float(self.options["top_p"]), "top_k": 0,  # 0: no top-k cut
                                      "min_p": 0.0, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}
        # Every filter spelled out as off: generate fills a setting left unset from the model's own generation
        # config (Qwen2.5-VL ships repetition_penalty 1.05), and the log-probs PPO uses are softmax(logits / T).
        return GenerationConfig(do_sample=not greedy, max_new_tokens=int(self.options["max_new_tokens"]),
                                eos_token_id=self.stop_ids, pad_token_id=self.pad_id, repetition_penalty=1.0,
                                no_repeat_ngram_size=0, **sampling)

    @contextmanager
    def _sampling_rng(self, greedy: bool) -> Iterator[None]:
        """Sampling under a seed drawn from the policy's own generator: the same seed, the same outputs,
        whatever else used torch's global RNG; greedy decoding draws nothing."""
        if greedy:
            yield
            return
        seed = int(torch.randint(0, 2**62, (1,), generator=self._sampler))
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield


# -------------------------------------------------------------------------------------------------
# Loading and checking options
# -------------------------------------------------------------------------------------------------

def _checked_options(options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"unknown option(s) for the lm policy: {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    out = {**DEFAULTS, **options}
    if not float(out["temperature"]) > 0:
        raise ValueError(f"temperature must be above 0 (greedy decoding is act(greedy=True)), got {out['temperature']}")
    if not 0 < float(out["top_p"]) <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {out['top_p']}")
    if int(out["max_new_tokens"]) < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {out['max_new_tokens']}")
    if int(out["history_window"]) < 0:
        raise ValueError(f"history_window must be 0 or more, got {out['history_window']}")
    if out["max_pixels"] is not None and int(out["max_pixels"]) < 1:
        raise ValueError(f"max_pixels must be at least 1 (or null for no limit), got {out['max_pixels']}")
    if out["lora"] is True:  # `lora: true` in a config: the defaults
        out["lora"] = dict(LORA_DEFAULTS)
    if out["lora"]:
        if not isinstance(out["lora"], Mapping):
            raise TypeError(f"lora must be a mapping of {', '.join(LORA_DEFAULTS)} (or None), got {out['lora']!r}")
        bad = sorted(set(out["lora"]) - set(LORA_DEFAULTS))
        if bad:
            raise TypeError(f"unknown lora option(s): {', '.join(bad)}; known: {', '.join(LORA_DEFAULTS)}")
        out["lora"] = dict(out["lora"])
    return out


def _model_dir(path: Any) -> Path:
    """The model directory, or a one-line error naming ``admire models prepare``."""
    hint = "write one with `admire models prepare NAME DIR` (`admire models list` shows the names)"
    if not path:
        raise ValueError(f"the lm policy needs actor_rollout_ref.model.path, a local model directory; {hint}")
    directory = Path(str(path)).expanduser()
    if not (directory / "config.json").is_file():
        raise ValueError(f"actor_rollout_ref.model.path {str(path)!r} is not a model directory (no config.json); "
                         f"{hint}")
    return directory


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in _DTYPES:
        raise ValueError(f"dtype must be auto or one of {', '.join(_DTYPES)}, got {name!r}")
    return _DTYPES[name]


def _rollout(value: Any, vision_language: bool) -> str:
    if value not in ROLLOUTS:
        raise ValueError(f"rollout must be one of {', '.join(ROLLOUTS)}, got {value!r}")
    if value == "auto":
        return "generate" if vision_language else "cached"
    if value == "cached" and vision_language:
        raise ValueError("rollout='cached' is for text models; a vision-language prompt holds image tokens: use "
                         "rollout='generate' (or 'auto')")
    return str(value)


def _sampler_dtype(value: Any, dtype: torch.dtype, device: torch.device, rollout: str) -> torch.dtype | str:
    """The cached rollout's sampling precision: ``auto`` drafts a float32 model on a CPU in bfloat16 where the
    CPU multiplies it natively, else with :data:`PACKED_FLOAT16` where fbgemm's half-weight kernels run (AVX2
    and F16C), else (and on a GPU, or with ``generate``) samples with the model's own dtype, making no copy."""
    if value == "auto":
        if device.type != "cpu" or dtype != torch.float32 or rollout != "cached":
            return dtype
        if cpu_multiplies_bfloat16():
            return torch.bfloat16
        return PACKED_FLOAT16 if cpu_packs_half_weights() else dtype
    if value not in (*_DTYPES, PACKED_FLOAT16):
        raise ValueError(f"sampler_dtype must be auto, {PACKED_FLOAT16} or one of {', '.join(_DTYPES)}, got {value!r}")
    precision = PACKED_FLOAT16 if value == PACKED_FLOAT16 else _DTYPES[value]
    if precision == dtype:
        return dtype
    if precision == PACKED_FLOAT16:
        if device.type != "cpu" or dtype != torch.float32:
            raise ValueError(f"sampler_dtype={PACKED_FLOAT16} is for a float32 model on a CPU (fbgemm's kernels); "
                             f"this one is {str(dtype).removeprefix('torch.')} on {device.type}: use auto")
        if not cpu_packs_half_weights():
            raise ValueError(f"sampler_dtype={PACKED_FLOAT16} needs torch's fbgemm and a CPU with AVX2 and F16C; "
                             "this one lacks them: use auto")
    if rollout != "cached":
        raise ValueError(f"sampler_dtype={value} needs rollout='cached' (generate samples with the model itself)")
    return precision


def _screenshots(value: Any, vision_language: bool) -> bool:
    if value == "auto":
        return vision_language
    if value and not vision_language:
        raise ValueError("screenshots=true needs a vision-language model; this path holds a text-only model")
    return bool(value)


def _load(path: Path, dtype: torch.dtype) -> tuple[bool, nn.Module, Any, Any]:
    """(is vision-language, model, tokenizer, processor or None), by the directory's config."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if hasattr(config, "vision_config"):
        from admire.models.processor import load_processor

        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, local_files_only=True)
        processor = load_processor(path)
        return True, model, processor.tokenizer, processor
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    return False, model, AutoTokenizer.from_pretrained(path, local_files_only=True), None


def _with_lora(model: nn.Module, lora: Mapping[str, Any]) -> nn.Module:
    require("peft", extra="lm", feature="the lm policy's lora option")
    from peft import LoraConfig, get_peft_model

    targets, layers = lora["target_modules"], lora.get("layers")
    chosen: list[int] | None = None
    if layers is not None:
        total = int(getattr(model.config, "num_hidden_layers", 0) or getattr(
            getattr(model.config, "text_config", None), "num_hidden_layers", 0))
        if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= total:
            raise ValueError(f"lora layers must be a number of decoder layers in [1, {total}], got {layers!r}")
        chosen = list(range(total - layers, total))
        if targets == "all-linear":  # PEFT takes a layer subset only with the module names spelled out
            targets = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                              if isinstance(module, nn.Linear) and ".layers." in name})
    # layers_pattern: only paths through a `layers.<N>` list (Llama's, Qwen2's and Qwen2.5-VL's decoder);
    # without it PEFT takes any `<name>.<N>.` path, and Qwen2.5-VL's `visual.blocks.<N>` would get adapters
    # for the same numbers. A model whose decoder list has another name needs its own pattern.
    config = LoraConfig(r=int(lora["r"]), lora_alpha=float(lora["alpha"]), lora_dropout=float(lora["dropout"]),
                        target_modules=targets, layers_to_transform=chosen,
                        layers_pattern="layers" if chosen is not None else None)
    return get_peft_model(model, config)


def _head_reads_last_hidden_state(model: nn.Module, token: int) -> bool:
    """Whether the logits are exactly the output head applied to the last hidden state (Qwen, Llama, GPT-2:
    yes; Gemma 2's soft-capped logits: no). Then scoring runs the head only at response positions, which
    saves a [batch, length, vocabulary] tensor; otherwise it takes the model's full logits."""
    head = model.get_output_embeddings()
    config = getattr(model, "config", None)
    configs = [config, getattr(config, "text_config", None)]
    if head is None or any(getattr(c, "final_logit_softcapping", None) for c in configs):
        return False
    ids = torch.full((1, 3), token, dtype=torch.long, device=next(model.parameters()).device)
    with torch.no_grad():  # and a probe, for whatever else a model does after its head
        out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
        return bool(torch.allclose(head(out.hidden_states[-1]).float(), out.logits.float(), atol=1e-6, rtol=1e-5))


def _stop_ids(model: nn.Module, end_id: int) -> list[int]:
    """The end-of-turn token first, then whatever else the model's generation config stops on."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    extra = configured if isinstance(configured, list) else [configured] if configured is not None else []
    return [end_id] + [int(i) for i in extra if int(i) != end_id]


def _read_record(directory: Path) -> dict[str, Any]:
    path = directory / OPTIONS_FILE
    if not path.is_file():
        raise ValueError(f"{directory} has no {OPTIONS_FILE}; it was not written by LMPolicy.save_pretrained")
    return json.loads(path.read_text())


# -------------------------------------------------------------------------------------------------
# Batching
# -------------------------------------------------------------------------------------------------

_SEQUENCE_PAD = {"input_ids": None, "attention_mask": 0}
"""Per-token inputs and their padding value (None: the pad token); any other [1, L] input pads with 0."""


def _collate(rows: Sequence[dict[str, torch.Tensor]], responses: Sequence[list[int]], pad_id: int,
             left: bool) -> dict[str, torch.Tensor]:
    """Prompt rows (+ response ids) into one batch: per-token inputs padded on one side, the rest (pixels,
    image grids) concatenated in row order."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    sequence_keys = [k for k in keys if all(k in row and row[k].dim() == 2 and row[k].shape == row["input_ids"].shape
                                            for row in rows)]
    totals = [row["input_ids"].shape[1] + len(resp) for row, resp in zip(rows, responses, strict=True)]
    width = max(totals)
    batch: dict[str, torch.Tensor] = {}
    for key in sequence_keys:
        fill = pad_id if _SEQUENCE_PAD.get(key, 0) is None else _SEQUENCE_PAD.get(key, 0)
        padded = []
        for row, resp, total in zip(rows, responses, totals, strict=True):
            tail = {"input_ids": resp, "attention_mask": [1] * len(resp)}.get(key, [0] * len(resp))
            values = torch.cat([row[key][0], torch.tensor(tail, dtype=row[key].dtype)])
            pad = torch.full((width - total,), fill, dtype=row[key].dtype)
            padded.append(torch.cat([pad, values] if left else [values, pad]))
        batch[key] = torch.stack(padded)
    for key in keys:
        if key not in sequence_keys:  # pixels and image grids: only the rows that have an image
            batch[key] = torch.cat([row[key] for row in rows if key in row])
    return batch


def _pick(states: torch.Tensor, starts: Sequence[int], offsets: torch.Tensor) -> torch.Tensor:
    """``states[i, starts[i] + k]`` for every answer offset ``k`` (clamped to the row)."""
    begin = torch.tensor(list(starts), device=states.device)
    positions = (begin[:, None] + offsets[None, :]).clamp(max=states.shape[1] - 1)
    return states.gather(1, positions[..., None].expand(-1, -1, states.shape[-1]))


def _token_scores(states: torch.Tensor, targets: torch.Tensor, head: nn.Module | None, temperature: float,
                  entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per answer position, the log-prob of its target token and (``entropy``) the entropy of the whole
    next-token distribution, from hidden states through ``head`` (None: ``states`` are logits already).

    One row at a time and, under autograd, recomputed in the backward pass: a batch's
    ``[rows, answer, vocabulary]`` log-softmax, with its gradient, is the largest tensor of a PPO step
    (eight 97-token answers over SmolLM2's 49,152 tokens: 150 MB each copy)."""
    def row_scores(row_states: torch.Tensor, row_targets: torch.Tensor) -> torch.Tensor:
        logits = head(row_states) if head is not None else row_states
        log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
        picked = log_probs.gather(-1, row_targets[:, None])[:, 0]
        if not entropy:
            return picked[None]
        return torch.stack([picked, -(log_probs.exp() * log_probs).sum(-1)])

    rows = []
    for row_states, row_targets in zip(states, targets, strict=True):
        if torch.is_grad_enabled():
            rows.append(torch.utils.checkpoint.checkpoint(row_scores, row_states, row_targets, use_reentrant=False))
        else:
            rows.append(row_scores(row_states, row_targets))
    scores = torch.stack(rows, dim=1)  # [1 or 2, N, T]
    return scores[0], (scores[1] if entropy else None)


def _to(batch: Mapping[str, torch.Tensor], device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """On the model's device, pixels in the model's dtype (processors give float32)."""
    return {k: v.to(device, dtype=dtype) if v.is_floating_point() else v.to(device) for k, v in batch.items()}


def _until_stop(ids: list[int], stops: Sequence[int]) -> list[int]:
    """The generated ids before the first stop token (after it come only pads)."""
    for position, token in enumerate(ids):
        if token in stops:
            return ids[:position]
    return ids

"""Stand-ins for verl's rollout server in agent-loop tests: objects with verl's token-in/token-out ``generate``.

verl's agent loops call ``await server_manager.generate(request_id, prompt_ids=..., sampling_params=...)`` and get
a ``TokenOutput`` (token ids, log-probs). On a GPU that is vLLM or SGLang; here it is

* :class:`ScriptedTokenServer` — answers each call with a text chosen by a function of the decoded prompt
  (tokenized, log-prob -0.5 per token), recording every request;
* :class:`TinyModelServer` — a local transformers model (the session's tiny-qwen2) that samples on the
  prompt's ids and reports each sampled token's log-prob under ``softmax(logits / temperature)``; a test may
  make it answer a given text instead (teacher-forced, log-probs still the model's), to reach a state that
  a random tiny model would not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput

Respond = Callable[[str, int], str | None]
"""``respond(decoded_prompt, call_index)``: the answer's text, or None to let the model sample."""


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


class ScriptedTokenServer:
    """Answers with ``respond(prompt_text, call)`` tokenized and closed by the end-of-turn token."""

    def __init__(self, tokenizer: Any, respond: Callable[[str, int], str], *, log_probs: bool = True) -> None:
        self.tokenizer = tokenizer
        self.respond = respond
        self.log_probs = log_probs
        self.requests: list[Request] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        self.requests.append(Request(request_id, list(prompt_ids), dict(sampling_params), kwargs))
        text = self.respond(self.tokenizer.decode(prompt_ids), len(self.requests) - 1)
        ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids) if self.log_probs else None,
                           stop_reason="completed")


class TinyModelServer:
    """A local causal LM behind verl's ``generate``: samples ``max_tokens`` (or ``max_new_tokens``) at most,
    stops at the tokenizer's end-of-turn token, seeded so that a test run is repeatable."""

    def __init__(self, model_dir: Path, *, max_new_tokens: int = 8, seed: int = 0,
                 respond: Respond | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
        self.max_new_tokens = max_new_tokens
        self.respond = respond
        self.requests: list[Request] = []
        self._sampler = torch.Generator().manual_seed(seed)

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        self.requests.append(Request(request_id, list(prompt_ids), dict(sampling_params), kwargs))
        forced = self.respond(self.tokenizer.decode(prompt_ids), len(self.requests) - 1) if self.respond else None
        return await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params), forced)

    def _generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], forced: str | None) -> TokenOutput:
        temperature = float(sampling_params.get("temperature", 1.0)) or 1.0
        limit = int(sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens")
                    or self.max_new_tokens)
        eos = int(self.tokenizer.eos_token_id)
        prompt = torch.tensor([prompt_ids])
        with torch.no_grad():
            if forced is not None:
                ids = [*self.tokenizer(forced, add_special_tokens=False)["input_ids"], eos]
            else:
                seed = int(torch.randint(0, 2**62, (1,), generator=self._sampler))
                with torch.random.fork_rng():
                    torch.manual_seed(seed)
                    out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                                              temperature=temperature, top_k=0, max_new_tokens=limit,
                                              eos_token_id=eos, pad_token_id=eos)
                ids = out[0, len(prompt_ids):].tolist()
            full = torch.tensor([prompt_ids + ids])
            logits = self.model(full).logits[0, len(prompt_ids) - 1: -1].float() / temperature
            log_probs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
        stop = "completed" if ids and ids[-1] == eos else "length"
        return TokenOutput(token_ids=ids, log_probs=[float(p) for p in log_probs], stop_reason=stop)

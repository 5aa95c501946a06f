"""A verl rollout backend on plain Hugging Face transformers (``actor_rollout_ref.rollout.name=admire_hf``).

verl 0.9.1 rolls out with vLLM, SGLang or TRT-LLM, all GPU engines. This backend is what lets the same
``main_ppo`` run happen on a CPU (the tests' machine) and on a GPU without an engine. It is registered through
verl's own registries, in every process that imports verl (:mod:`admire.integrations.verl.plugin`):

* ``RolloutReplicaRegistry`` (the trainer's side) gets :class:`HFRolloutReplica`. In verl's hybrid mode one
  replica serves the actor ranks ``[world·r, world·(r+1))``; its ``launch_servers`` starts one
  :class:`HFRolloutServer` Ray actor holding its own copy of the model.
* ``_ROLLOUT_REGISTRY`` (the actor worker's side, keyed ``(name, "async")``) gets :class:`HFServerAdapter`: the
  object verl's ``ActorRolloutRefWorker.update_weights`` hands the FSDP actor's full weights to after every
  update. Every rank drains the generator (``full_tensor`` is a collective); the replica's leader stages the
  tensors, in buckets, on its server, then commits them with the new weight version (``global_steps``).

Why a separate server actor rather than generating inside the training process: verl's agent loops call
``server.generate.remote(...)`` on a Ray handle (token ids in, ``TokenOutput`` out) concurrently with the
trainer's own calls, exactly as they call vLLM's server; a model of its own keeps the training weights out of
the rollout's way, and weights cross only at verl's sync points.

What ``generate`` returns is what verl's engines return: the sampled ids (stopped at the model's end tokens or
at the token budget), their log-probabilities under ``softmax(logits / temperature)`` of the weights that
sampled them (the actor's own convention for ``old_log_probs``; greedy requests, ``temperature=0``, score the
raw logits), ``stop_reason`` and ``extra_fields["global_steps"]``, the weight version the trainer last sent
(verl's staleness metrics read it). Requests are served one at a time on a thread (one model, and a CPU has no
spare cores for two), so verl's control calls are answered while a request runs; a weight commit waits for the
running request to finish and applies every tensor and the version at once, so no answer mixes two versions.

Settings verl's engines read that mean nothing here (``gpu_memory_utilization``, ``enforce_eager``, sleep
mode …) are ignored; ``free_cache_engine`` is best false (there is no cache to free: :mod:`.cpu` sets it).
Text models only: a request with images is refused in one line (the vision path needs the model's processor,
which the CPU build of this project cannot load beside torchvision).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from admire.extras import require

require("verl", "torch", "ray", extra="verl", feature="the admire_hf rollout")

import ray  # noqa: E402
import torch  # noqa: E402
from verl.workers.rollout.base import BaseRollout  # noqa: E402
from verl.workers.rollout.replica import RolloutReplica, TokenOutput  # noqa: E402

ROLLOUT_NAME = "admire_hf"
"""``actor_rollout_ref.rollout.name`` of this backend."""
SERVER_PREFIX = "admire_hf_server"
BUCKET_BYTES = 64 << 20
"""Weights cross to the server in Ray calls of about this many bytes (verl's own default bucket is 512 MB)."""


def server_name(replica_rank: int, suffix: str = "") -> str:
    """The Ray actor name of replica ``replica_rank``'s server (the adapter finds it by this name)."""
    return f"{SERVER_PREFIX}{suffix}_{replica_rank}"


# ------------------------------------------------------------------------------------------ the server


class HFRolloutServer:
    """One model, token in and token out, with verl's server methods (a Ray actor; see the module docstring).

    Sampling is plain ``softmax(logits / temperature)`` with top-k/top-p, nothing else: the model's own
    generation config (a checkpoint's ``repetition_penalty``, ``min_p`` …) is replaced by a neutral one, because
    the log-probs returned, and the actor's ``old_log_probs``, are those of the plain softmax; sampling from a
    penalised distribution would make every update silently off-policy. A request asking for a repetition
    penalty other than 1 is refused for the same reason.
    """

    def __init__(self, model_path: str, *, device: str = "cpu", dtype: str = "float32",
                 trust_remote_code: bool = False, prompt_length: int = 4096, response_length: int = 512,
                 seed: int = 0, torch_threads: int | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if torch_threads:
            torch.set_num_threads(int(torch_threads))
        self.device = torch.device(device)
        wanted = getattr(torch, dtype) if self.device.type != "cpu" else torch.float32  # the CPU actor is fp32
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=wanted, attn_implementation="sdpa", trust_remote_code=trust_remote_code,
            local_files_only=True).to(self.device).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code,
                                                  local_files_only=True)
        self.stop_ids = stop_token_ids(self.model.generation_config, tokenizer)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0])
        self.model.generation_config = GenerationConfig(eos_token_id=self.stop_ids, pad_token_id=self.pad_id)
        self.prompt_length = int(prompt_length)
        self.response_length = int(response_length)
        self.global_steps: int | None = None
        self.requests = 0
        self._staged: list[tuple[str, torch.Tensor]] = []
        self._model_lock = threading.Lock()
        torch.manual_seed(int(seed))

    # ---- verl's token-in/token-out call --------------------------------------------------------------

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, **kwargs: Any) -> TokenOutput:
        """verl's server call (``LLMServerClient.generate``): the answer's ids, their log-probs when asked
        (``sampling_params["logprobs"]``, verl's ``rollout.calculate_log_probs``; asked unless said otherwise)
        and, in ``extra_fields``, the weight version that sampled them (``global_steps``). Images are refused:
        the vision path needs the model's processor, which the CPU build cannot load."""
        del request_id, mm_processor_kwargs, kwargs
        if image_data or video_data or audio_data:
            raise ValueError("the admire_hf rollout serves text models only: run a vision-language model with "
                             "actor_rollout_ref.rollout.name=vllm, or env.screenshots=false")
        penalty = float(sampling_params.get("repetition_penalty", 1.0) or 1.0)
        if penalty != 1.0:
            raise ValueError(f"the admire_hf rollout samples the plain softmax its log-probs describe; "
                             f"repetition_penalty={penalty} is not supported: set it to 1.0")
        return await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params))

    def _generate(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> TokenOutput:
        budget = token_budget(sampling_params, len(prompt_ids), self.prompt_length, self.response_length)
        temperature = float(sampling_params.get("temperature", 1.0) or 0.0)
        top_k = int(sampling_params.get("top_k", -1) or -1)
        top_p = float(sampling_params.get("top_p", 1.0) or 1.0)
        scored = bool(sampling_params.get("logprobs", True))
        prompt = torch.tensor([prompt_ids], device=self.device)
        options: dict[str, Any] = {"do_sample": temperature > 0, "max_new_tokens": budget,
                                   "output_logits": scored, "return_dict_in_generate": True}
        if temperature > 0:
            options |= {"temperature": temperature, "top_k": top_k if top_k > 0 else 0, "top_p": top_p}
        with self._model_lock, torch.inference_mode():
            out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt), **options)
            self.requests += 1
            version = self.global_steps
        ids = trim_after_stop(out.sequences[0, len(prompt_ids):].tolist(), self.stop_ids)
        log_probs = None
        if scored:
            logits = torch.stack(list(out.logits[: len(ids)]), dim=1)[0].float()
            log_probs = token_log_probs(logits, ids, temperature)
        stopped = bool(ids) and ids[-1] in self.stop_ids
        return TokenOutput(token_ids=ids, log_probs=log_probs, stop_reason="completed",
                           extra_fields={"global_steps": version, "finish_reason": "stop" if stopped else "length"})

    # ---- weights from the trainer: staged in buckets, then committed at once ------------------------

    async def stage_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        """Keep one bucket of the actor's tensors for the next :meth:`commit_weights` (checked now, applied
        then); returns how many are staged."""
        own = self._own_tensors()
        unknown = [name for name, _ in named_tensors if name not in own]
        if unknown:
            self._staged.clear()
            raise ValueError(f"the actor sent {len(unknown)} tensor(s) this model lacks (first: {unknown[0]!r}): "
                             "the rollout and the actor must load the same model")
        self._staged.extend(named_tensors)
        return len(self._staged)

    async def commit_weights(self, global_steps: int | None) -> int:
        """Copy every staged tensor into the model and take ``global_steps`` as its version, in one locked
        step: a request runs wholly before or wholly after it, so no answer mixes two weight versions or is
        labelled with the wrong one. Returns how many tensors were copied."""
        staged, self._staged = self._staged, []
        return await asyncio.to_thread(self._commit, staged, global_steps)

    def _commit(self, staged: list[tuple[str, torch.Tensor]], global_steps: int | None) -> int:
        own = self._own_tensors()
        with self._model_lock, torch.no_grad():
            for name, tensor in staged:
                own[name].copy_(tensor.to(own[name].device, own[name].dtype))
            self.global_steps = global_steps
        print(f"admire_hf: weights of step {global_steps} loaded ({len(staged)} tensors)", flush=True)
        return len(staged)

    def _own_tensors(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict(keep_vars=True)  # tied weights under each of their names

    async def state(self) -> dict[str, Any]:
        """What a test or a log wants to know: the weight version, the requests served, a weight checksum."""
        return await asyncio.to_thread(self._state)

    def _state(self) -> dict[str, Any]:
        with self._model_lock, torch.no_grad():
            checksum = float(sum(p.double().sum() for p in self.model.parameters()))
            return {"global_steps": self.global_steps, "requests": self.requests, "checksum": checksum}

    # ---- verl's control calls: nothing to free or pause on a plain model ----------------------------

    async def sleep(self) -> None: ...
    async def wake_up(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def resume_generation(self) -> None: ...

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        del reject_request

    async def start_profile(self, **kwargs: Any) -> None:
        del kwargs

    async def stop_profile(self) -> None: ...


def token_budget(sampling_params: dict[str, Any], prompt_tokens: int, prompt_length: int,
                 response_length: int) -> int:
    """New tokens for one request: the request's ``max_tokens``/``max_new_tokens``, else what vLLM's server
    allows (``response_length``, within the model length ``prompt_length + response_length``); at least 1."""
    asked = sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens")
    room = prompt_length + response_length - prompt_tokens
    budget = int(asked) if asked else min(response_length, room)
    return max(1, min(budget, max(room, 1)))


def stop_token_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """The ids that end an answer: the model's generation config's ``eos_token_id`` (one or several) and the
    tokenizer's end token, in that order, without repeats."""
    found: list[int] = []
    for value in (getattr(generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        for token in value if isinstance(value, list | tuple) else [value]:
            if token is not None and int(token) not in found:
                found.append(int(token))
    if not found:
        raise ValueError("the model has no end-of-sequence token (generation_config.eos_token_id or the "
                         "tokenizer's eos_token): the rollout could not tell where an answer ends")
    return found


def trim_after_stop(ids: list[int], stop_ids: list[int]) -> list[int]:
    """``ids`` up to and including the first stop token (``generate`` pads a finished row after it)."""
    for i, token in enumerate(ids):
        if token in stop_ids:
            return ids[: i + 1]
    return ids


def token_log_probs(logits: torch.Tensor, ids: list[int], temperature: float) -> list[float]:
    """log p(id_t) under ``softmax(logits_t / temperature)`` (raw logits when greedy), one per token."""
    if not ids:
        return []
    scaled = logits / temperature if temperature > 0 else logits
    chosen = torch.tensor(ids, device=logits.device)[:, None]
    return torch.log_softmax(scaled, dim=-1).gather(-1, chosen).squeeze(-1).tolist()


# ------------------------------------------------------------------------------------------ the replica


class HFRolloutReplica(RolloutReplica):
    """verl's replica for ``admire_hf``: one :class:`HFRolloutServer` actor per replica."""

    async def launch_servers(self) -> None:
        """One server on the node of the replica's first actor worker, seeing that worker's accelerator (as
        verl's vLLM replica places its server: no resource of its own, the device shared with the actor)."""
        if self.servers:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        from verl.plugin.platform import get_platform
        from verl.utils.device import get_resource_name

        platform = get_platform()
        accelerated = platform.device_name != "cpu"
        resource = get_resource_name()
        node, device = await self.workers[0].__ray_call__.remote(lambda _: (
            ray.get_runtime_context().get_node_id(),
            (ray.get_runtime_context().get_accelerator_ids().get(resource) or [None])[0]))
        env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        if accelerated and device is not None:
            env |= {var: "1" for var in platform.ray_noset_envvars()}
            env[platform.visible_devices_envvar()] = str(device)
        model_path = str(getattr(self.model_config, "local_path", None) or self.model_config.path)
        remote = ray.remote(HFRolloutServer).options(
            name=server_name(self.replica_rank, self.name_suffix), num_cpus=0, max_concurrency=self.max_concurrency,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            runtime_env={"env_vars": env})
        server = remote.remote(model_path, device=platform.device_name, dtype=str(self.config.dtype),
                               trust_remote_code=bool(getattr(self.model_config, "trust_remote_code", False)),
                               prompt_length=int(self.config.prompt_length),
                               response_length=int(self.config.response_length),
                               seed=self.replica_rank, torch_threads=1)
        await server.state.remote()  # the model is loaded before the first request
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{SERVER_PREFIX}{self.name_suffix}/{self.replica_rank}"


# ------------------------------------------------------------------------------------------ the adapter


class HFServerAdapter(BaseRollout):
    """What verl's actor worker holds as its ``rollout``: forwards the actor's weights to the replica's server.

    Every rank of the replica drains ``update_weights``' generator (each ``full_tensor`` is a collective the
    other ranks wait on); rank 0 of the replica sends. ``resume``/``release`` have nothing to do.
    """

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        rank = int(os.environ.get("RANK", "0"))
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        self.replica_rank, self.is_leader = rank // world, rank % world == 0
        self._server: Any = None

    @property
    def server(self) -> Any:
        """The replica's server, found by name when first needed: verl builds this adapter before the replica
        starts its server. The actor's own rollout is never a reward or teacher replica, so its name has no
        suffix."""
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], wire_format: str = "named_tensors",
                             **kwargs: Any) -> None:
        """verl's weight sync: stage the tensors bucket by bucket, then commit them with the step's version
        (``global_steps``). Refused: verl's delta format and unmerged LoRA adapters (full weights only)."""
        if wire_format != "named_tensors":
            raise ValueError(f"the admire_hf rollout takes full named tensors, not {wire_format!r}: leave "
                             "actor_rollout_ref.rollout.checkpoint_engine.backend=naive")
        if kwargs.get("peft_config") and not kwargs.get("base_sync_done", True):
            raise ValueError("the admire_hf rollout takes merged weights: set actor_rollout_ref.model.lora.merge=true")
        for bucket in buckets(weights, BUCKET_BYTES, keep=self.is_leader):
            await self.server.stage_weights.remote(bucket)
        if self.is_leader:
            await self.server.commit_weights.remote(kwargs.get("global_steps"))

    async def resume(self, tags: list[str]) -> None:
        del tags

    async def release(self) -> None: ...


def buckets(weights: Iterable[tuple[str, torch.Tensor]], limit: int, *, keep: bool = True
            ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """The named tensors as CPU copies in lists of about ``limit`` bytes; with ``keep=False`` the generator is
    drained (every rank must take part in its collectives) and nothing is yielded."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in weights:
        if not keep:
            continue
        copy = tensor.detach().to("cpu", copy=True)
        bucket.append((name, copy))
        size += copy.numel() * copy.element_size()
        if size >= limit:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket


def register() -> None:
    """Put ``admire_hf`` into verl's replica registry and its (name, mode) → adapter table (idempotent)."""
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFRolloutReplica)
    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{HFServerAdapter.__module__}.{HFServerAdapter.__qualname__}"

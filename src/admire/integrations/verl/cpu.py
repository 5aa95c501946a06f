"""verl on the CPU: a device platform for verl's platform registry, and the four places verl assumes a GPU.

verl 0.9.1 resolves its device through ``verl.plugin.platform`` (``VERL_PLATFORM=<name>`` picks a registered
platform, once per process) and ships CUDA, NPU and ROCm platforms only. ``trainer.device=cpu`` in this
project's config makes ``admire train`` start ``main_ppo`` with ``VERL_PLATFORM=admire_cpu`` (in the driver
and, through Ray's runtime environment, in every worker); the plugin (:mod:`.plugin`) then calls
:func:`install` on ``import verl``, before any verl module asks for the platform. What it does, and why each:

* registers :class:`PlatformCPU`: device ``cpu``, collectives on gloo, no allocator, streams, RNG per device or
  profiler; its device module is :data:`CPU_DEVICE` (``torch.cpu`` lacks the memory calls verl logs every step:
  they report the process's resident memory instead). Ray still schedules verl's workers on ``GPU`` bundles
  (verl's resource pool refuses a cluster without GPUs), so the trainer's ``ray.init`` is told the machine
  has as many GPUs as the config asks for: a scheduling token, no device behind it;
* registers verl's FSDP engines for device ``cpu`` (verl registers them for ``cuda`` and ``npu`` only);
* opens the process group on gloo alone: verl asks for ``cpu:gloo,<device>:<backend>``, which for the CPU
  device names ``cpu`` twice, and torch refuses a device given two backends;
* keeps FSDP's CPU offload of the reference model unpinned: verl offloads a forward-only model with
  ``pin_memory=True``, and pinning needs a CUDA build of torch.

Everything else a CPU run needs is configuration, composed by :func:`admire.integrations.verl.config.device_pairs`:
eager ``sdpa`` attention instead of flash-attention, no ``torch.compile``, fp32 parameters, FSDP2, and the
``admire_hf`` rollout (:mod:`.hf_rollout`).
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from admire.integrations.verl.config import PLATFORM_NAME


def _resident_bytes(*_args: Any, **_kwargs: Any) -> int:
    """The process's peak resident memory (what a CPU has for verl's "device memory" metrics)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _free_and_total(*_args: Any, **_kwargs: Any) -> tuple[int, int]:
    pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return pages * size, os.sysconf("SC_PHYS_PAGES") * size


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


CPU_DEVICE = SimpleNamespace(
    is_available=lambda: False, current_device=lambda: "cpu", device_count=lambda: 1, get_device_name=lambda *_: "CPU",
    set_device=_nothing, synchronize=_nothing, empty_cache=_nothing, reset_peak_memory_stats=_nothing,
    memory_allocated=_resident_bytes, memory_reserved=_resident_bytes, max_memory_allocated=_resident_bytes,
    max_memory_reserved=_resident_bytes, mem_get_info=_free_and_total,
    manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed,
    get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state,
    Stream=torch.cpu.Stream, stream=torch.cpu.stream, current_stream=torch.cpu.current_stream, Event=torch.cpu.Event,
)
"""What verl calls on ``get_torch_device()``, answered for a CPU."""


class PlatformCPU(PlatformBase):
    """verl's platform interface for a machine with no accelerator (see the module docstring)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> Any:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return False  # no device state to save in checkpoints, no device cache to empty

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> Any:
        return "cpu"  # a string: torch refuses device index 0 on a CPU build

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        del device_index

    def synchronize(self, device_index: int | None = None) -> None:
        del device_index

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        del settings

    def empty_cache(self) -> None: ...

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        del msg
        yield

    def profiler_start(self) -> None: ...

    def profiler_stop(self) -> None: ...

    def ray_resource_name(self) -> str:
        return "GPU"  # verl's resource pool counts GPU bundles; the trainer's ray.init advertises them

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


_installed = False


def install() -> None:
    """Register the platform and adjust verl's four GPU assumptions (idempotent; the module docstring)."""
    global _installed
    if _installed:
        return
    PlatformRegistry.register(PLATFORM_NAME)(PlatformCPU)

    import verl.workers.engine_workers as engine_workers
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.utils.distributed import initialize_global_process_group_ray
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    for engine in (transformer_impl.FSDPEngineWithLMHead, transformer_impl.FSDPEngineWithValueHead):
        model_type = "language_model" if engine is transformer_impl.FSDPEngineWithLMHead else "value_model"
        EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device="cpu")(engine)

    def gloo_process_group(timeout_second: int | None = None, backend: str | None = None) -> Any:
        return initialize_global_process_group_ray(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    def unpinned_offload(pin_memory: bool = True, **kwargs: Any) -> CPUOffloadPolicy:
        del pin_memory
        return CPUOffloadPolicy(pin_memory=False, **kwargs)

    engine_workers.initialize_global_process_group_ray = gloo_process_group
    transformer_impl.CPUOffloadPolicy = unpinned_offload
    _installed = True


def selected() -> bool:
    """This process runs verl on the CPU (``VERL_PLATFORM=admire_cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

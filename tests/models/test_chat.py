"""``end_of_turn_id``: an answer ends where the chat template closes an assistant turn, whatever the
tokenizer's ``eos_token`` says; on the real Qwen2.5 tokenizer of the tiny prepared model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from admire.models.chat import end_of_turn_id  # noqa: E402

IM_END, ENDOFTEXT = "<|im_end|>", "<|endoftext|>"


def tokenizer_of(directory: Path):
    return transformers.AutoTokenizer.from_pretrained(directory)


def test_the_turn_ends_with_im_end_on_a_chatml_template(tiny_qwen2_dir: Path) -> None:
    tokenizer = tokenizer_of(tiny_qwen2_dir)
    assert end_of_turn_id(tokenizer) == tokenizer.convert_tokens_to_ids(IM_END)


def test_a_wrong_eos_token_does_not_move_the_end_of_an_answer(tiny_qwen2_dir: Path) -> None:
    # A GGUF-converted tokenizer can name the wrong token as eos (SmolLM2's says <|im_start|>).
    tokenizer = tokenizer_of(tiny_qwen2_dir)
    tokenizer.eos_token = ENDOFTEXT
    assert tokenizer.eos_token_id != tokenizer.convert_tokens_to_ids(IM_END)
    assert end_of_turn_id(tokenizer) == tokenizer.convert_tokens_to_ids(IM_END)


def test_without_a_chat_template_the_eos_token_is_the_end(tiny_qwen2_dir: Path) -> None:
    tokenizer = tokenizer_of(tiny_qwen2_dir)
    tokenizer.chat_template = None
    tokenizer.eos_token = ENDOFTEXT
    assert end_of_turn_id(tokenizer) == tokenizer.convert_tokens_to_ids(ENDOFTEXT)


def test_a_template_that_ends_a_turn_with_plain_text_falls_back_to_the_eos_token(tiny_qwen2_dir: Path) -> None:
    tokenizer = tokenizer_of(tiny_qwen2_dir)
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n\n{% endfor %}"
    tokenizer.eos_token = ENDOFTEXT  # not the <|im_end|> a ChatML reading would give
    assert end_of_turn_id(tokenizer) == tokenizer.convert_tokens_to_ids(ENDOFTEXT)


def test_a_template_that_refuses_the_conversation_falls_back_to_the_eos_token(tiny_qwen2_dir: Path) -> None:
    tokenizer = tokenizer_of(tiny_qwen2_dir)
    tokenizer.chat_template = "{{ raise_exception('only one user turn') }}"
    tokenizer.eos_token = ENDOFTEXT
    assert end_of_turn_id(tokenizer) == tokenizer.convert_tokens_to_ids(ENDOFTEXT)


def test_the_lm_policy_ends_answers_at_the_turn_end_of_a_directory_whose_eos_is_wrong(
        tiny_qwen2_dir: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from admire.agent.lm_policy import LMPolicy

    directory = tmp_path / "wrong-eos"
    shutil.copytree(tiny_qwen2_dir, directory)
    settings = directory / "tokenizer_config.json"
    config = json.loads(settings.read_text())
    config["eos_token"] = ENDOFTEXT
    settings.write_text(json.dumps(config))
    torch.set_num_threads(1)
    policy = LMPolicy(path=str(directory), max_new_tokens=4)
    im_end = policy.tokenizer.convert_tokens_to_ids(IM_END)
    assert policy.tokenizer.eos_token == ENDOFTEXT
    assert policy.end_id == im_end and policy.stop_ids[0] == im_end
    assert policy._response_ids("Action: x")[-1] == im_end

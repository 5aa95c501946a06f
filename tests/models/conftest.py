"""The session's prepared tiny models (tests/support/models.py)."""

from tests.support.models import tiny_qwen2_5_vl_dir, tiny_qwen2_dir  # noqa: F401

"""docs/layout.md names every module and package of ``src/admire``: a module added without a line there fails
here, so the map a newcomer reads stays the tree they clone."""

from __future__ import annotations

import re

from tests.support.paths import REPO

LAYOUT = REPO / "docs" / "layout.md"


def layout_block() -> str:
    """The page's first fenced block: the tree, one line (or a shared line) per module."""
    page = LAYOUT.read_text(encoding="utf-8")
    start = page.index("```\nsrc/admire/")
    return page[start:page.index("```", start + 3)]


def test_the_layout_page_names_every_top_level_module_and_package() -> None:
    package = REPO / "src" / "admire"
    names = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    names |= {f"{p.name}/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    block = layout_block()
    listed = set(re.findall(r"\b([a-z_]+\.py)\b", block)) | set(re.findall(r"\b([a-z_]+/)", block))
    assert sorted(names - listed) == []


def test_the_readme_points_to_the_layout() -> None:
    assert "(docs/layout.md)" in (REPO / "README.md").read_text(encoding="utf-8")

"""The README's layout names every module and package of ``src/admire``: a module added without a line there
fails here, so the map a newcomer reads stays the tree they clone."""

from __future__ import annotations

import re

from tests.support.paths import REPO


def layout_section() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Layout")
    return readme[start:readme.index("```", readme.index("```", start) + 3)]


def test_the_readme_layout_names_every_top_level_module_and_package() -> None:
    package = REPO / "src" / "admire"
    names = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    names |= {f"{p.name}/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    section = layout_section()
    listed = set(re.findall(r"\b([a-z_]+\.py)\b", section)) | set(re.findall(r"\b([a-z_]+/)", section))
    assert sorted(names - listed) == []

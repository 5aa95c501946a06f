"""The documentation's links lead somewhere: every relative link of the README, CONTRIBUTING.md and
``docs/*.md`` names a file of the checkout, and a ``#anchor`` names a heading (by GitHub's slug rule) or an
``<a id=…>`` of the page it points to. The README stays a front page: at most ``README_MAX_LINES`` lines."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.paths import REPO

README = REPO / "README.md"
README_MAX_LINES = 150
PAGES = [README, REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_ANCHOR = re.compile(r"<a\s+(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a link or heading inside one is code, not markdown)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower-cased, punctuation but '-' and '_' dropped,
    spaces to '-'."""
    text = _LINK.sub(lambda m: m.group(1), heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a link may name on ``page``: heading slugs (repeats get -1, -2…) and ``<a id>``s."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose_lines(page.read_text(encoding="utf-8")):
        found.update(_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The link targets of ``page``'s prose (inline code removed first: `[x](y)` there is not a link)."""
    targets = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        line = _CODE_SPAN.sub(lambda m: "code", line)
        targets.extend(m.group(2) for m in _LINK.finditer(line))
    return targets


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file, or whose anchor in a markdown file, does not exist."""
    broken = []
    for target in links(page):
        if _SCHEME.match(target):
            continue  # a web address: not checked offline
        path, _, anchor = target.partition("#")
        resolved = (page.parent / unquote(path)).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and resolved.suffix == ".md" and unquote(anchor) not in anchors(resolved):
            broken.append(f"{target}: no heading or <a id> '{anchor}' in {resolved.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_reaches_an_existing_file_and_anchor(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_finds_a_missing_file_and_a_missing_anchor_and_ignores_code(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text('# Training on verl + Ray\n\n## A `make test` step: twice\n\n'
                                       '## A `make test` step: twice\n\n<a id="d4"></a>\n', encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "# Page", "",
        "[ok](other.md#training-on-verl--ray) [ok](other.md#a-make-test-step-twice-1) [ok](other.md#d4)",
        "[ok](#page) [web](https://example.org/x.md) ![image](other.md)",
        "[gone](missing.md) [no anchor](other.md#nope) [no anchor here](#nowhere)",
        "`[code](missing-in-code.md)`", "```", "[fenced](missing-in-fence.md)", "```",
    ]), encoding="utf-8")
    assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "other.md#nope", "#nowhere"]


def test_the_readme_is_a_front_page_of_at_most_150_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (f"README.md has {len(lines)} lines; move detail into docs/ "
                                            f"(at most {README_MAX_LINES})")

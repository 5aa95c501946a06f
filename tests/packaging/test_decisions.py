"""Code, YAML and tests cite a decision of docs/decisions.md by its anchor, or not at all: every cited anchor
exists, every decision is cited somewhere, and no issue number or experiment label stands in for one."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO as ROOT

CITED = re.compile(r"docs/decisions\.md#(d\d+)")
HISTORY = re.compile(r"\b(?:issue|Issue) \d+\b|\bfailure (?:mode )?\d\b|(?:issue|failure)_\d+")


def sources() -> list[Path]:
    return [p for folder in ("src", "tests", "scripts") for p in (ROOT / folder).rglob("*")
            if p.suffix in (".py", ".yaml", ".sh") and p.is_file()]


def test_every_cited_decision_exists_and_every_decision_is_cited() -> None:
    anchors = set(re.findall(r'<a id="(d\d+)"></a>', (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")))
    assert len(anchors) >= 10
    cited = {anchor: path for path in sources() for anchor in CITED.findall(path.read_text(encoding="utf-8"))}
    assert sorted(set(cited) - anchors) == []
    assert sorted(anchors - set(cited)) == []


def test_no_issue_number_or_experiment_label_in_code_or_tests() -> None:
    offenders = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in sources()
                 for match in HISTORY.finditer(path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_history_filter_sees_what_it_should() -> None:
    # The labels are built here, so this file holds none of the text it forbids elsewhere.
    issue, failure = "issue", "failure"
    labels = [f"{issue} 11", f"{failure} 6", f"{failure} mode 1", f"{issue.title()} 13", f"{failure}_3"]
    text = f"as {labels[0]} measured; {labels[1]}; {labels[2]}; {labels[3]}; def test_{labels[4]}_x"
    assert HISTORY.findall(text) == labels
    assert HISTORY.findall("an issue with 3 steps; a failure rate") == []

"""notebooks/visualize_step.ipynb runs top to bottom against a run (no Jupyter: its code cells are exec'd)."""

from __future__ import annotations

import json
import sys
import types

import pytest

from tests.support.paths import REPO
from tests.support.viz_helpers import make_run

NOTEBOOK = REPO / "notebooks" / "visualize_step.ipynb"


class _HTML:
    def __init__(self, data: str) -> None:
        self.data = data


@pytest.fixture
def displayed(monkeypatch):
    """A stand-in for IPython.display (not installed here) that records what the notebook displays."""
    shown: list[object] = []
    module = types.ModuleType("IPython.display")
    module.HTML = _HTML
    module.display = shown.append
    package = types.ModuleType("IPython")
    package.display = module
    monkeypatch.setitem(sys.modules, "IPython", package)
    monkeypatch.setitem(sys.modules, "IPython.display", module)
    return shown


def test_notebook_is_valid_nbformat_4():
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4
    assert all(cell["cell_type"] in ("markdown", "code") and isinstance(cell["source"], list)
               for cell in notebook["cells"])


def test_notebook_code_cells_run_in_order_and_show_a_step(tmp_path, displayed):
    run = make_run(tmp_path)
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cells = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert cells[0].startswith("RUN = ")
    namespace: dict[str, object] = {}
    for source in [f"RUN = {str(run.path)!r}", *cells[1:]]:
        exec(compile(source, str(NOTEBOOK), "exec"), namespace)
    assert namespace["row"].address == "train-0000-0"  # the longest success (ties: the first)
    (html,) = displayed
    assert 'viewBox="0 0 160 210"' in html.data and "data:image/png;base64," in html.data
    assert "hit milestone 1/2" in html.data and 'class="reward-bar"' in html.data

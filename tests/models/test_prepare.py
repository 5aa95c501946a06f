"""``admire models prepare`` refuses bad input in one line before writing, and writes a directory atomically.

These tests run a fake recipe (one small file as its "weights") so that they take milliseconds; the real
recipes are tested in test_tiny.py and test_smollm2.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from admire.cli import main
from admire.models import MANIFEST, MODELS, ModelRecipe
from admire.models.prepare import prepare, read_manifest

WEIGHTS = b"not really a tensor"


def fake_build(directory: Path, progress) -> None:
    progress(0, 1)
    (directory / "model.safetensors").write_bytes(WEIGHTS)
    (directory / "config.json").write_text("{}")
    progress(1, 1)


def failing_build(directory: Path, progress) -> None:
    (directory / "model.safetensors").write_bytes(b"half")
    raise RuntimeError("the build broke halfway")


def recipe(name: str, build: str = "tests.models.test_prepare:fake_build", requires=("json",)) -> ModelRecipe:
    return ModelRecipe(name=name, summary="a test recipe", source="pytest", requires=tuple(requires),
                       install="pip install 'admire[lm]'", build=build)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(MODELS.entries, "fake-model", recipe("fake-model"))
    return "fake-model"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["models", *args])
    return code, capsys.readouterr().err


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_prepare_writes_the_directory_and_its_record(fake: str, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    record = prepare(fake, tmp_path / "out", progress=lambda done, total: seen.append((done, total)))
    assert (tmp_path / "out" / "config.json").read_text() == "{}"
    assert read_manifest(tmp_path / "out") == record
    assert record["name"] == fake and record["source"]["package"] == "pytest"
    assert record["weights"] == {"model.safetensors": hashlib.sha256(WEIGHTS).hexdigest()}
    assert seen == [(0, 1), (1, 1)]
    assert leftovers(tmp_path) == []


def test_an_empty_existing_directory_is_filled(fake: str, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    prepare(fake, tmp_path / "out")
    assert (tmp_path / "out" / MANIFEST).is_file()


def test_unknown_name_lists_the_known_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = run_cli(capsys, "prepare", "qwen-9000", str(tmp_path / "out"))
    assert code == 2
    assert err.count("\n") == 1 and "unknown model 'qwen-9000'" in err
    assert all(name in err for name in ("tiny-qwen2", "tiny-qwen2.5-vl", "smollm2-135m"))
    assert not (tmp_path / "out").exists()


def test_a_non_empty_directory_is_refused_and_left_alone(fake: str, capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    code, err = run_cli(capsys, "prepare", fake, str(tmp_path / "out"))
    assert code == 2 and err.count("\n") == 1 and "--force" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine.txt"]


def test_force_replaces_a_directory_only_with_a_finished_build(fake: str, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    out = tmp_path / "out"
    prepare(fake, out)
    (out / "notes.txt").write_text("kept until a build replaces the directory")
    before = sorted(p.name for p in out.iterdir())
    monkeypatch.setitem(MODELS.entries, "broken", recipe("broken", build="tests.models.test_prepare:failing_build"))
    with pytest.raises(RuntimeError, match="halfway"):
        prepare("broken", out, force=True)
    assert sorted(p.name for p in out.iterdir()) == before  # the failed build changed nothing
    assert leftovers(tmp_path) == []  # and left no staging folder behind

    code, _ = run_cli(capsys, "prepare", fake, str(out), "--force")
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "config.json", "model.safetensors"]
    assert leftovers(tmp_path) == []


def test_force_never_empties_a_folder_admire_models_did_not_write(fake: str, capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "main.py").write_text("print('mine')")
    code, err = run_cli(capsys, "prepare", fake, str(source), "--force")
    assert code == 2 and err.count("\n") == 1 and "not a model directory admire models wrote" in err
    assert sorted(p.name for p in source.iterdir()) == ["main.py"] and leftovers(tmp_path) == []


def test_a_file_in_the_way_is_refused(fake: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "out").write_text("a file")
    code, err = run_cli(capsys, "prepare", fake, str(tmp_path / "out"), "--force")
    assert code == 2 and "not a directory" in err and err.count("\n") == 1
    assert (tmp_path / "out").read_text() == "a file"


def test_a_missing_package_is_one_line_naming_the_install(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setitem(MODELS.entries, "needs-absent",
                        recipe("needs-absent", requires=("json", "admire_no_such_package")))
    code, err = run_cli(capsys, "prepare", "needs-absent", str(tmp_path / "out"))
    assert code == 2
    assert err == ("admire models prepare: error: model 'needs-absent' needs admire_no_such_package: "
                   "pip install 'admire[lm]'\n")
    assert list(tmp_path.iterdir()) == []


def test_list_names_every_model_and_what_is_missing(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(MODELS.entries, "needs-absent", recipe("needs-absent", requires=("admire_no_such_package",)))
    assert main(["models", "list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert {"tiny-qwen2", "tiny-qwen2.5-vl", "smollm2-135m", "needs-absent"} <= set(rows)
    assert rows["needs-absent"]["ready"] is False and rows["needs-absent"]["missing"] == ["admire_no_such_package"]
    assert rows["tiny-qwen2.5-vl"]["kind"] == "vision-language"


def test_listing_the_models_imports_no_torch_or_transformers() -> None:
    import subprocess
    import sys

    code = ("import sys; from admire.cli import main; main(['models', 'list', '--json']); "
            "assert not {'torch', 'transformers'} & set(sys.modules), sorted(sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]

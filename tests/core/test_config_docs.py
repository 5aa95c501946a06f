"""The docs' table of configuration keys is generated from the typed schema: every field describes itself,
the table in docs/method.md is the generator's output, and every key a config can hold is a row."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from admire.config_docs import (
    BEGIN,
    DOCS_PAGE,
    END,
    REGENERATE,
    key_table,
    leaf_keys,
    main,
    replace_table,
    rows,
    shipped_values,
    table_in,
    type_text,
    undocumented,
    value_text,
)
from admire.config_schema import RewardSection, TrainerSection, known_keys
from admire.rewards import REWARD_MODES
from tests.support.paths import REPO


class _Inner(BaseModel):
    a: int = Field(1, description="documented")
    b: int = 2


class _Outer(BaseModel):
    inner: _Inner | None = None
    c: str = Field("x", description="  ")


def test_every_field_of_every_section_has_a_description() -> None:
    assert undocumented() == [], "add description= to these fields in src/admire/config_schema.py"


def test_a_field_without_a_description_is_found_at_any_depth() -> None:
    assert undocumented(_Outer) == ["inner", "inner.b", "c"]


def test_the_docs_table_is_the_generated_one() -> None:
    page = (REPO / DOCS_PAGE).read_text(encoding="utf-8")
    assert table_in(page) == key_table(), f"{DOCS_PAGE}'s key table is stale; regenerate it: {REGENERATE}"
    assert replace_table(page, key_table()) == page  # nothing but the table between the markers


def test_every_key_of_the_schema_is_a_row() -> None:
    keys = [row.key for row in rows()]
    assert len(keys) == len(set(keys))
    assert set(known_keys()) <= set(keys)
    assert set(leaf_keys()) == set(known_keys())


def test_every_key_of_the_shipped_yaml_is_a_row_with_the_shipped_value() -> None:
    by_key = {row.key: row for row in rows()}
    shipped = shipped_values()
    assert len(shipped) > 60
    # Keys of the model section that the schema does not name are the policy's own options.
    modelled = {k: v for k, v in shipped.items() if k in by_key or not k.startswith("actor_rollout_ref.model.")}
    assert sorted(set(modelled) - set(by_key)) == []
    assert {k: by_key[k].default for k, v in modelled.items() if by_key[k].default != f"`{value_text(v)}`"} == {}


def test_types_are_rendered_with_ranges_and_allowed_values() -> None:
    eval_episodes = TrainerSection.model_fields["eval_episodes"]
    assert type_text(eval_episodes.annotation, eval_episodes.metadata) == "int in [1, 100000]"
    mode = RewardSection.model_fields["mode"]  # a choice validator: its values, not just "str"
    assert all(f'"{m}"' in type_text(mode.annotation, mode.metadata) for m in REWARD_MODES)
    rendered = {row.key: row.type for row in rows()}
    assert rendered["env.max_envs"] == "int ≥ 1 or non-empty list of int ≥ 1"
    assert rendered["tracking.wandb"] == '"offline", "online" or null'
    assert rendered["env.ray"] == "section or null"


def test_values_render_as_yaml() -> None:
    assert [value_text(v) for v in (None, True, 0.5, 3, "auto", ["miniwob"], {"browser": 1.0}, [])] == [
        "null", "true", "0.5", "3", "auto", "[miniwob]", "{browser: 1.0}", "[]"]


def test_cells_cannot_break_the_table() -> None:
    class Tricky(BaseModel):
        x: int = Field(0, description="a | b, see <name>")

    line = key_table(Tricky).splitlines()[-1]
    assert line == "| `x` | int | `0` | a \\| b, see \\<name> |"


def test_replacing_keeps_the_prose_and_refuses_a_page_without_markers() -> None:
    page = f"intro\n\n{BEGIN}\nold table\n{END}\n\nafter\n"
    assert replace_table(page, "| new |\n") == f"intro\n\n{BEGIN}\n| new |\n{END}\n\nafter\n"
    with pytest.raises(ValueError, match="keys:begin"):
        replace_table("no markers here\n", "| new |\n")
    with pytest.raises(ValueError):
        replace_table(f"{END}\n{BEGIN}\n", "| new |\n")


def test_the_command_checks_and_rewrites_a_stale_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "keys.md"
    page.write_text(f"# Keys\n\n{BEGIN}\n| stale |\n{END}\n", encoding="utf-8")
    assert main(["--check", str(page)]) == 1
    assert f"python -m admire.config_docs --write {page}" in capsys.readouterr().err
    assert main(["--write", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == f"# Keys\n\n{BEGIN}\n{key_table()}{END}\n"
    assert main(["--check", str(page)]) == 0
    assert main(["--check", str(tmp_path / "missing.md")]) == 2

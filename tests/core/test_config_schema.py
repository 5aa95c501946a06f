"""The typed config schema: every shipped key covered, bad values refused in one line
naming the key and the fix, unknown keys refused with a close match, old run configs still valid, and
registries consulted without building anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from admire.agent.base import POLICIES
from admire.config import PACKAGED_CONFIGS, load_config, load_run_config
from admire.config_files import plain
from admire.config_migration import LEGACY_DEFAULTS
from admire.config_schema import (
    RESUMABLE_KEYS,
    ConfigError,
    check_resume_overrides,
    known_keys,
    validate_config,
)
from admire.rl.advantages import ADVANTAGE_ESTIMATORS
from tests.support.paths import REPO


def _flat(tree: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            keys += _flat(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def test_the_two_shipped_configs_are_one_and_every_key_is_in_the_schema() -> None:
    packaged = (PACKAGED_CONFIGS / "demo_miniwob.yaml").read_text(encoding="utf-8")
    assert (REPO / "configs" / "demo_miniwob.yaml").read_text(encoding="utf-8") == packaged
    shipped = _flat(yaml.safe_load(packaged))
    assert set(shipped) <= set(known_keys()), sorted(set(shipped) - set(known_keys()))
    validate_config(load_config())


BAD = [
    ("trainer.total_epochs=abc",
     r"^trainer\.total_epochs: must be a valid integer, got abc; e\.g\. trainer\.total_epochs=60$"),
    ("trainer.total_epochs=-1", r"^trainer\.total_epochs: must be greater than or equal to 0"),
    ("trainer.total_epochs=2.5", r"^trainer\.total_epochs: must be a valid integer"),
    ("trainer.total_epochs=true", r"^trainer\.total_epochs: must be a valid integer"),
    ("milestone_reward.threshold=2", r"^milestone_reward\.threshold: must be less than or equal to 1"),
    ("milestone_reward.threshold=-0.5", r"^milestone_reward\.threshold: must be greater than or equal to 0"),
    ("env.suite=nope", r"^env\.suite: unknown suite 'nope'; known suites:"),
    ("env.suite=miniwob/click-tset", r"^env\.suite: unknown MiniWoB task 'click-tset'; did you mean click-test"),
    ("env.suite=miniwob-dmeo", r"did you mean 'miniwob-demo'"),
    ("reward.mode=bogus", r"^reward\.mode: must be one of outcome, admire, judge"),
    ("env.max_envs=[0]", r"^env\.max_envs\[0\]: must be greater than or equal to 1"),
    ("env.max_envs=[]", r"^env\.max_envs: list should have at least 1 item"),
    ("algorithm.adv_estimator=bogus", r"^algorithm\.adv_estimator: unknown advantage estimator 'bogus'"),
    ("actor_rollout_ref.rollout.n=0", r"^actor_rollout_ref\.rollout\.n: must be greater than or equal to 1"),
    ("env.src=[nope]", r"^env\.src: unknown environment backend 'nope'"),
    ("actor_rollout_ref.model.name=nope", r"^actor_rollout_ref\.model\.name: unknown policy 'nope'"),
    ("milestone_reward.generator=nope", r"^milestone_reward\.generator: unknown milestone generator 'nope'"),
    ("env.executor=k8s", r"^env\.executor: must be one of local, ray"),
    ("env.ray.timeout_s=0", r"^env\.ray\.timeout_s: must be greater than 0"),
    ("env.miniwob.settle=later", r"^env\.miniwob\.settle: must be one of virtual, wall, off"),
    ("env.miniwob.settle_max_s=11.0", r"^env\.miniwob\.settle_max_s: must be less than or equal to 10"),
    ("env.miniwob.settle_quiet_s=-0.5", r"^env\.miniwob\.settle_quiet_s: must be greater than or equal to 0"),
    ("actor_rollout_ref.actor.lr=nan", r"^actor_rollout_ref\.actor\.lr: must be greater than 0"),
    ("actor_rollout_ref.actor.target_kl=0", r"^actor_rollout_ref\.actor\.target_kl: must be greater than 0"),
    ("trainer.keep_checkpoints=0", r"^trainer\.keep_checkpoints: must be greater than or equal to 1"),
    ("trainer.eval_episodes=0", r"^trainer\.eval_episodes: must be greater than or equal to 1"),
    ("trainer.threads=many", r"^trainer\.threads: must be 'auto', null or a whole number >= 1"),
    ("tracking.wandb=cloud", r"^tracking\.wandb: must be one of offline, online"),
    ("milestone_reward.update_rule=longer", r"^milestone_reward\.update_rule: must be one of common, shorter"),
    ("milestone_reward.enable=maybe", r"^milestone_reward\.enable: must be a valid boolean"),
    ("run.name=a/b", r"^run\.name: must be a plain folder name"),
    ("+milestone_reward.treshold=0.5",
     r"^milestone_reward\.treshold: unknown key; did you mean milestone_reward\.threshold\?$"),
    ("+nope.key=1", r"^nope\.key: unknown key;"),
]


@pytest.mark.parametrize(("override", "message"), BAD, ids=[o for o, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_key_and_the_fix(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        validate_config(load_config(overrides=[override]))
    text = str(info.value)
    assert "\n" not in text and "; " in text


def test_good_values_pass() -> None:
    for override in ("env.max_envs=[3]", "env.max_envs=3", "trainer.threads=2", "trainer.threads=null",
                     "milestone_reward.threshold=1", "actor_rollout_ref.actor.lr=1", "trainer.total_epochs=0",
                     "milestone_reward.contrast_margin=null", "env.suite=miniwob/click-test",
                     "+actor_rollout_ref.model.dropout=0.1"):  # a policy's own option
        validate_config(load_config(overrides=[override]))


def test_hydra_errors_are_one_line() -> None:
    for override, message in (("nope.key=1", r"^nope\.key: unknown key"),
                              ("milestone_reward.treshold=1", r"did you mean milestone_reward\.threshold\?"),
                              ("env.suite=a,b", r"^env\.suite: .*comma")):
        with pytest.raises(ValueError, match=message) as info:
            load_config(overrides=[override])
        assert "\n" not in str(info.value)


def test_the_group_size_must_fit_the_estimator(monkeypatch: pytest.MonkeyPatch) -> None:
    validate_config(load_config(overrides=["actor_rollout_ref.rollout.n=1"]))  # grpo_step pools steps
    with pytest.raises(ConfigError, match=r"grpo_traj compares the episodes of a group, so it needs n >= 2"):
        validate_config(load_config(overrides=["actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=grpo_traj"]))

    def never_called(*_args: Any, **_options: Any) -> Any:
        raise AssertionError("validation must not compute advantages")

    never_called.min_group_size = 3  # type: ignore[attr-defined]
    monkeypatch.setitem(ADVANTAGE_ESTIMATORS.entries, "mine", never_called)
    with pytest.raises(ConfigError, match=r"mine .* needs n >= 3, got 2"):
        validate_config(load_config(overrides=["actor_rollout_ref.rollout.n=2", "algorithm.adv_estimator=mine"]))
    validate_config(load_config(overrides=["actor_rollout_ref.rollout.n=3", "algorithm.adv_estimator=mine"]))


def test_registries_are_looked_up_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_policy(**_options: Any) -> Any:
        raise AssertionError("validation must not build a policy")

    monkeypatch.setitem(POLICIES.entries, "lazy", no_policy)
    validate_config(load_config(overrides=["actor_rollout_ref.model.name=lazy"]))


def test_an_old_run_config_without_the_later_keys_still_validates(tmp_path: Path) -> None:
    """A run written before the later keys (LEGACY_DEFAULTS, warm start, Ray, judge) resumes and evaluates."""
    old = plain(load_config())
    assert isinstance(old, dict)
    later = ["config_version", *LEGACY_DEFAULTS, "actor_rollout_ref.warm_start",
             "actor_rollout_ref.model.prior_strength", "env.ray", "reward.judge"]
    for dotted in later:
        *parents, leaf = dotted.split(".")
        node = old
        for name in parents:
            node = node[name]
        node.pop(leaf)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.warm_start: missing"):  # as written...
        validate_config(old)
    cfg = load_run_config(tmp_path)  # ...and with the legacy values filled in, it validates
    validate_config(cfg)
    assert cfg.actor_rollout_ref.warm_start.enable is False and cfg.env.executor == "local"


def test_a_missing_key_names_itself() -> None:
    cfg = plain(load_config())
    assert isinstance(cfg, dict)
    del cfg["trainer"]["total_epochs"]
    with pytest.raises(ConfigError, match=r"^trainer\.total_epochs: missing; add it, e\.g\. trainer\.total_epochs=60$"):
        validate_config(cfg)


def test_resume_overrides_are_limited_to_keys_that_may_change() -> None:
    assert check_resume_overrides(["trainer.total_epochs=80", "env.max_envs=[4]", "env.ray.address=auto",
                                   "tracking.wandb=offline", "+reward.judge.timeout=60"]) == [
        ("trainer.total_epochs", "80"), ("env.max_envs", "[4]"), ("env.ray.address", "auto"),
        ("tracking.wandb", "offline"), ("reward.judge.timeout", "60")]
    with pytest.raises(ConfigError, match=r"^reward\.mode: may not change when resuming.*trainer\.total_epochs"):
        check_resume_overrides(["reward.mode=outcome"])
    with pytest.raises(ConfigError, match=r"^foo\.bar: unknown key"):
        check_resume_overrides(["foo.bar=1"])
    with pytest.raises(ConfigError, match=r"not a key=value override"):
        check_resume_overrides(["trainer.total_epochs"])
    assert all(key in known_keys() or key.endswith(".*") for key in RESUMABLE_KEYS)


def test_the_miniwob_section_defaults_are_the_envs_and_the_shipped_yamls() -> None:
    from admire.config_schema import MiniWoBSection
    from admire.envs.miniwob_settle import DEFAULT_SETTLE, DEFAULT_SETTLE_MAX_S, DEFAULT_SETTLE_QUIET_S, SETTLE_MODES

    defaults = MiniWoBSection()
    assert (defaults.settle, defaults.settle_quiet_s, defaults.settle_max_s) == (
        DEFAULT_SETTLE, DEFAULT_SETTLE_QUIET_S, DEFAULT_SETTLE_MAX_S)
    for mode in SETTLE_MODES:
        assert MiniWoBSection(settle=mode).settle == mode
    for name in ("demo_miniwob.yaml", "verl_stepwise.yaml"):
        shipped = yaml.safe_load((PACKAGED_CONFIGS / name).read_text(encoding="utf-8"))["env"]["miniwob"]
        assert shipped == defaults.model_dump(), name


def test_a_plugin_that_cannot_be_loaded_is_reported_as_such_not_as_unknown() -> None:
    # An install without an extra made a known backend "unknown ... (did you mean 'miniwob'?)".
    from admire.envs.base import ENVS

    ENVS.declare("broken-backend", "admire_no_such_module.backend:Env", origin="test")
    try:
        with pytest.raises(ConfigError) as exc:
            validate_config(load_config(overrides=["env.src=[broken-backend]"]))
    finally:
        del ENVS["broken-backend"]
    message = str(exc.value)
    assert "cannot be loaded" in message and "admire_no_such_module" in message
    assert "unknown" not in message and "did you mean" not in message


def schema_defaults(model: type) -> dict[str, object]:
    """Every field of the schema that has a default, by dotted key (required fields have none)."""
    from pydantic import BaseModel

    found: dict[str, object] = {}
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        annotation = field.annotation
        if field.is_required():
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                found.update({f"{name}.{k}": v for k, v in schema_defaults(annotation).items()})
            continue
        value = field.get_default(call_default_factory=True)
        if isinstance(value, BaseModel):
            found.update({f"{name}.{k}": v for k, v in schema_defaults(type(value)).items()})
        else:
            found[name] = value
    return found


def shipped_values(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            values.update(shipped_values(value, f"{prefix}{key}."))
        else:
            values[f"{prefix}{key}"] = value
    return values


def test_every_default_of_the_schema_is_the_shipped_yamls() -> None:
    from admire.config_schema import TrainingConfig

    shipped = shipped_values(yaml.safe_load((PACKAGED_CONFIGS / "demo_miniwob.yaml").read_text(encoding="utf-8")))
    defaults = schema_defaults(TrainingConfig)
    written = sorted(set(defaults) & set(shipped))
    assert len(written) > 60
    assert {key: (defaults[key], shipped[key]) for key in written if defaults[key] != shipped[key]} == {}

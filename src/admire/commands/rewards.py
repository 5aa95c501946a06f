"""``admire rewards TRAJECTORIES.jsonl [--milestones MS.json] [--epoch N] [key=value ...]`` — score a batch.

What ADMIRE would pay for a set of episodes, without training: an epoch of a recorded run, hand-written
trajectories, the case of an issue. The file is scored exactly as the trainer scores one epoch's batch
(method.md §2, order within a batch): the successes distil milestones first, into a bank that lives in
memory only, then ``score_batch`` computes every step's ``RewardBreakdown`` with λ of ``--epoch``. With
``--milestones`` the lists of a milestone file are used as they are (static, the paper's Table 3
control) and nothing is distilled. Steps recorded without a grounded description get one from their
action and screen (``actions.describe``), as a rollout would have written it.

The settings are the embedded default config's ``reward``, ``milestone_reward``, ``process_reward`` and
``algorithm`` sections, read at run time, with ``key=value`` overrides as ``admire train`` takes them.

Everything a user can get wrong — the file, each line's schema, a key, a value, the milestone file — is
checked before the sentence encoder is loaded, and refused with one line that names the fix (exit 2).
Nothing is written to disk.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from admire.fileio import UnreadableFile, read_bounded

if TYPE_CHECKING:  # the method modules are imported inside run(), so `admire --help` stays instant
    from admire.embeddings import Encoder
    from admire.milestones.bank import MilestoneBank
    from admire.milestones.generator import MilestoneGenerator, UpdateRule
    from admire.milestones.matcher import Matcher
    from admire.rewards import RewardConfig, StepJudge
    from admire.types import Step, Trajectory

HELP = "score a file of trajectories as one training batch; print each step's reward breakdown as JSON lines"
PROG = "admire rewards"
USAGE = "admire rewards TRAJECTORIES.jsonl [--milestones MS.json] [--epoch N] [key=value ...]"
SECTIONS = ("reward", "milestone_reward", "process_reward", "algorithm")
"""The config sections that decide a batch's rewards; keys of other sections change nothing here."""
_OVERRIDE = re.compile(r"(\+{0,2})([A-Za-z_][\w-]*(?:\.[\w-]+)+)=(.*)", re.DOTALL)


class InputError(Exception):
    """Bad input; the message is one line that says what to fix."""


def load_encoder(name: str) -> Encoder:
    """The sentence encoder named by ``milestone_reward.encoder`` (a local path or an installed package).

    ``make_encoder`` checks the name at once and loads the model only on the first encode, so a bad name
    is refused with the rest of the input and a batch with nothing to match never loads a model.
    """
    from admire.embeddings import make_encoder

    return make_encoder(name)


encoder_factory: Callable[[str], Encoder] = load_encoder
"""How ``prepare`` builds the encoder; tests replace it with a fake so that no model is loaded."""


# --------------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trajectories", metavar="TRAJECTORIES.jsonl",
                        help="trajectories, one Trajectory JSON per line (e.g. runs/<name>/trajectories/"
                             "train_epoch_0000.jsonl)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="overrides of the reward, milestone_reward, process_reward and algorithm keys, "
                             "e.g. milestone_reward.matcher=sbert reward.mode=outcome")
    parser.add_argument("--milestones", metavar="MS.json",
                        help="use these milestone lists, frozen (static), instead of distilling them from the "
                             "file's successes: an `admire milestones export` file or {\"<key>\": [\"phrase\", ...]}")
    parser.add_argument("--epoch", type=_epoch, default=0, metavar="N",
                        help="the training epoch e of the milestone weight λ(e) = λ0·γ^e (default: 0)")
    _accept_overrides_anywhere(parser)


def _epoch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (the epoch e of λ(e)), got {text!r}")
    return value


def _accept_overrides_anywhere(parser: argparse.ArgumentParser) -> None:
    """Let ``key=value`` follow an option, and make argparse's own errors one line like all the others.

    argparse hands positionals out in one chunk, so in ``FILE --milestones MS key=value`` the override
    would be "unrecognized"; the natural order should work, so such leftovers are put back, in order, at
    the end of ``overrides`` (the last override of a key wins, as in Hydra). Any other leftover is an error.
    """
    parse_known_args = parser.parse_known_args

    def parse(args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
              ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = parse_known_args(args, namespace)
        stray = [arg for arg in extras if not _looks_like_override(arg)]
        if stray:
            parser.error(f"unrecognized arguments: {' '.join(stray)}")
        parsed.overrides = [*parsed.overrides, *extras]
        return parsed, []

    def error(message: str) -> None:
        print(f"{PROG}: {message} (usage: {USAGE})", file=sys.stderr)
        raise SystemExit(2)

    parser.parse_known_args = parse  # type: ignore[method-assign]
    parser.error = error  # type: ignore[method-assign,assignment]


def _looks_like_override(arg: str) -> bool:
    return "=" in arg and not arg.startswith("-")


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------

@dataclass
class Batch:
    """Everything checked and ready to score; building it loads no encoder."""

    trajectories: list[Trajectory]
    reward_cfg: RewardConfig
    bank: MilestoneBank
    generator: MilestoneGenerator | None
    update_rule: UpdateRule
    judge: StepJudge | None
    encoder: Encoder | None
    epoch: int


def run(args: argparse.Namespace) -> int:
    try:
        batch = prepare(args.trajectories, args.overrides, args.milestones, args.epoch)
        try:
            records = score(batch)
        finally:
            batch.bank.close()
    except InputError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    for record in records:
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return 0


def prepare(path: str | Path, overrides: Sequence[str], milestones: str | Path | None, epoch: int) -> Batch:
    """Read and check the settings, the whole trajectory file and the milestone file; load no model."""
    settings = load_settings(overrides)
    reward_cfg = reward_config(settings)
    trajectories = read_trajectories(Path(path))
    section = settings["milestone_reward"]
    bank = milestone_bank(section, milestones, reward_cfg)
    try:
        distils = reward_cfg.matches_milestones and bank.mode == "adaptive" and section["update_before_reward"]
        generator = build_generator(section, needed=bool(distils))
        judge = build_judge(settings["reward"]) if reward_cfg.mode == "judge" else None
        encoder = build_encoder(reward_cfg) if reward_cfg.matches_milestones else None
    except InputError:
        bank.close()
        raise
    if milestones is not None or bank.mode == "static":
        _note_unused_milestones(bank, trajectories, reward_cfg)
    rule = section.get("update_rule", "common")  # its value was checked by RewardConfig.from_mapping
    return Batch(trajectories, reward_cfg, bank, generator, rule, judge, encoder, epoch)


def score(batch: Batch) -> list[dict[str, Any]]:
    """One record per trajectory, in input order: milestones first, then every step's reward."""
    from admire.milestones.update import update_bank
    from admire.rewards import milestone_key_for, score_batch

    cfg = batch.reward_cfg
    usable = [t for t in batch.trajectories if not t.excluded]
    if batch.generator is not None:  # update before reward: the failed siblings of a success are scaffolded
        update_bank(batch.bank, usable, batch.generator, key=cfg.milestone_key, run=PROG, epoch=batch.epoch,
                    rule=batch.update_rule)
    used: dict[str, list[str]] = {}
    if cfg.matches_milestones:
        for trajectory in usable:
            stored = batch.bank.get(milestone_key_for(trajectory, cfg))
            used[trajectory.id] = list(stored.milestones) if stored is not None else []
    matcher = build_matcher(cfg, batch.encoder, next((m for m in used.values() if m), None))
    rewards = score_batch(batch.trajectories, batch.bank, matcher, cfg, batch.epoch, judge=batch.judge)
    records = []
    for trajectory, steps in zip(batch.trajectories, rewards, strict=True):
        record: dict[str, Any] = {"id": trajectory.id, "milestones": used.get(trajectory.id, []),
                                  "steps": [step.model_dump(mode="json") for step in steps]}
        if trajectory.excluded:
            record["excluded"] = True
        records.append(record)
    return records


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------

def load_settings(overrides: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The reward sections of the embedded default config with ``overrides`` applied, as plain dicts.

    Every override must name a key of those sections: a key the shipped config has, or one that
    ``RewardConfig`` reads. An unknown key is refused rather than added, because a misspelled key
    that Hydra's ``+key=`` appended would silently score with the default.
    """
    from omegaconf import OmegaConf

    from admire.config import DEFAULT_CONFIG, compose_config

    defaults = _sections(OmegaConf.to_container(compose_config(DEFAULT_CONFIG), resolve=True))
    keys = [_override_key(text) for text in overrides]
    hydra = [f"{key}={text.split('=', 1)[1]}" if _has_key(defaults, key) else f"+{key}={text.split('=', 1)[1]}"
             for key, text in zip(keys, overrides, strict=True)]
    for key in keys:
        if not _has_key(defaults, key) and key not in _reward_keys():
            raise InputError(_unknown_key(key, defaults))
    try:
        composed = compose_config(DEFAULT_CONFIG, hydra)
    except (ValueError, FileNotFoundError) as error:
        raise InputError(_one_line(str(error))) from None
    from omegaconf.errors import OmegaConfBaseException

    try:
        settings = _sections(OmegaConf.to_container(composed, resolve=True))
    except OmegaConfBaseException as error:  # an interpolation (${oc.env:...}) that does not resolve
        where = getattr(error, "full_key", None) or "an override"
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"{where}: {first}; write the value itself or set what the interpolation reads") from None
    for key in dict.fromkeys(keys):
        if key not in _reward_keys():
            _check_like_default(key, _get(settings, key), _get(defaults, key))
    return settings


def reward_config(settings: Mapping[str, Any]) -> RewardConfig:
    from admire.rewards import RewardConfig

    try:
        cfg = RewardConfig.from_mapping(settings)
    except (TypeError, ValueError) as error:
        raise InputError(_one_line(str(error))) from None
    estimator = settings["algorithm"].get("adv_estimator")
    if estimator is not None:
        from admire.rl.advantages import ADVANTAGE_ESTIMATORS

        try:
            ADVANTAGE_ESTIMATORS.lookup(str(estimator))
        except ValueError as error:
            raise InputError(f"algorithm.adv_estimator: {error}") from None
    return cfg


def _override_key(text: str) -> str:
    match = _OVERRIDE.fullmatch(text)
    if match is None:
        raise InputError(f"bad override {text!r}: write key=value with the key's section, "
                         "e.g. milestone_reward.matcher=sbert")
    key = match.group(2)
    section = key.split(".", 1)[0]
    if section not in SECTIONS:
        raise InputError(f"'{key}' does not change rewards: admire rewards takes only "
                         f"{', '.join(s + '.*' for s in SECTIONS)} keys")
    return key


def _reward_keys() -> set[str]:
    """Keys ``RewardConfig`` reads even where the shipped config does not list them (``reward.judge_weight``)."""
    from admire.rewards import RewardConfig

    return set(RewardConfig.config_keys())


def _unknown_key(key: str, defaults: Mapping[str, Any]) -> str:
    """Suggest the closest key of the same section (compared without the section, which always agrees)."""
    section, rest = key.split(".", 1)
    known = sorted(k.split(".", 1)[1] for k in set(_flat_keys(defaults)) | _reward_keys()
                   if k.startswith(section + "."))
    close = difflib.get_close_matches(rest, known, n=1, cutoff=0.75)
    if close:
        return f"unknown key '{key}': did you mean '{section}.{close[0]}'?"
    return f"unknown key '{key}'; the {section} keys are: {', '.join(known)}"


def _check_like_default(key: str, value: Any, default: Any) -> None:
    """A key ``RewardConfig`` does not read keeps the kind of its shipped value (true/false, number, text)."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise InputError(f"{key} must be true or false, got {value!r}")
    elif isinstance(default, int | float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"{key} must be a number, got {value!r}")
    elif isinstance(default, Mapping):
        if not isinstance(value, Mapping):
            raise InputError(f"{key} is a section: set one of its keys, e.g. {key}.{next(iter(default), 'name')}=...")
    elif isinstance(default, str) and not isinstance(value, str):
        raise InputError(f"{key} must be text, got {value!r}")


def _sections(container: Any) -> dict[str, dict[str, Any]]:
    return {section: dict(container.get(section) or {}) for section in SECTIONS}


def _has_key(tree: Mapping[str, Any], key: str) -> bool:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _get(tree: Mapping[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _flat_keys(tree: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for name, value in tree.items():
        yield f"{prefix}{name}"
        if isinstance(value, Mapping):
            yield from _flat_keys(value, f"{prefix}{name}.")


def _one_line(message: str) -> str:
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


# --------------------------------------------------------------------------------------------------
# The trajectory file
# --------------------------------------------------------------------------------------------------

def read_trajectories(path: Path) -> list[Trajectory]:
    """Every trajectory of a JSONL file, checked line by line, with grounded descriptions filled in."""
    text = _read_text(path, what="trajectory file",
                      fix="pass a JSONL file of trajectories (e.g. runs/<name>/trajectories/train_epoch_0000.jsonl)")
    trajectories: list[Trajectory] = []
    first_seen: dict[str, int] = {}
    # Only "\n" ends a line: JSON strings may hold U+2028 and other characters str.splitlines splits on.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        trajectory = _parse_line(path, number, line)
        if trajectory.id in first_seen:
            raise InputError(f"{path}, line {number}: trajectory id {trajectory.id!r} is already used on line "
                             f"{first_seen[trajectory.id]}; give every trajectory its own id")
        first_seen[trajectory.id] = number
        trajectories.append(with_grounded_descriptions(trajectory))
    if not trajectories:
        raise InputError(f"{path} holds no trajectories; write one Trajectory JSON per line "
                         "(Trajectory.to_json(), as runs/<name>/trajectories/*.jsonl hold them)")
    return trajectories


MAX_INPUT_BYTES = 1 << 30
"""A trajectory or milestone file read by ``admire rewards`` may be at most 1 GiB (a run's epoch is megabytes)."""


def _read_text(path: Path, what: str, fix: str) -> str:
    if not path.exists():
        raise InputError(f"no {what} at {path}; {fix}")
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a {what}; {fix}")
    try:
        return read_bounded(path, MAX_INPUT_BYTES, what).decode("utf-8")
    except UnreadableFile as error:
        raise InputError(f"{error}; {fix}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; {fix}") from None
    except OSError as error:
        raise InputError(f"cannot read {path} ({error.strerror or error}); {fix}") from None


def _parse_line(path: Path, number: int, line: str) -> Trajectory:
    from pydantic import ValidationError

    from admire.types import Trajectory

    try:
        return Trajectory.model_validate_json(line)
    except ValidationError as error:
        raise InputError(f"{path}, line {number}: {_schema_problem(error)}") from None


def _schema_problem(error: Any) -> str:
    """The first problem pydantic found, as field + what is wrong + how to write it."""
    problems = error.errors(include_url=False)
    first = problems[0]
    more = f" (and {len(problems) - 1} more problem(s) on this line)" if len(problems) > 1 else ""
    fix = "each line must be one Trajectory as Trajectory.to_json() writes it"
    if first["type"] == "json_invalid":
        return f"not JSON ({first['msg']}); {fix}"
    field = ".".join(str(part) for part in first["loc"])
    if not field:
        return f"expected a Trajectory object, got {_short(first.get('input'))}; {fix}"
    if first["type"] == "missing":
        return f"field '{field}' is missing{more}; {fix}"
    return f"field '{field}': {first['msg']}, got {_short(first.get('input'))}{more}; {fix}"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def with_grounded_descriptions(trajectory: Trajectory) -> Trajectory:
    """The trajectory with every executed step described from its action and screen where it was not."""
    steps = tuple(_described(step) for step in trajectory.steps)
    if steps == trajectory.steps:
        return trajectory
    return trajectory.model_copy(update={"steps": steps})


def _described(step: Step) -> Step:
    from admire.actions import describe

    # As a rollout writes it: only a valid, executed action has a grounded description.
    if step.grounded_description.strip() or step.action is None or not step.format_valid:
        return step
    return step.model_copy(update={"grounded_description": describe(step.action, step.observation)})


# --------------------------------------------------------------------------------------------------
# Milestones, generator, judge, matcher
# --------------------------------------------------------------------------------------------------

def milestone_bank(section: Mapping[str, Any], milestones: str | Path | None, cfg: RewardConfig) -> MilestoneBank:
    """An in-memory bank: empty and adaptive, or holding a milestone file's lists, frozen."""
    from admire.milestones.bank import MilestoneBank, MilestoneBankError

    source = milestones if milestones is not None else section.get("static_path")
    mode = "static" if milestones is not None else section.get("mode")
    try:
        bank = MilestoneBank(":memory:", mode=mode)  # type: ignore[arg-type]
    except ValueError as error:
        raise InputError(f"milestone_reward.mode: {error}") from None
    if mode == "static" and source is None and cfg.matches_milestones:
        bank.close()
        raise InputError("milestone_reward.mode=static needs milestone lists: pass --milestones MS.json "
                         "(or milestone_reward.static_path=MS.json)")
    if mode == "static" and source is not None:
        fix = "pass a file that `admire milestones export` wrote, or {\"<key>\": [\"phrase\", ...]}"
        _read_text(Path(source), what="milestone file", fix=fix)
        try:
            bank.import_json(source, freeze=True)
        except (ValueError, TypeError, OSError, MilestoneBankError) as error:
            bank.close()
            raise InputError(f"{_one_line(str(error))}; {fix}") from None
    return bank


def _note_unused_milestones(bank: MilestoneBank, trajectories: Sequence[Trajectory], cfg: RewardConfig) -> None:
    """Say so when no trajectory finds its key in the milestone file: usually a different milestone key."""
    from admire.rewards import milestone_key_for

    stored = set(bank.keys())
    wanted = {milestone_key_for(t, cfg) for t in trajectories if not t.excluded}
    if stored and wanted and not stored & wanted and cfg.matches_milestones:
        print(f"{PROG}: note: no trajectory's key is in the milestone file (milestone_reward.key="
              f"{cfg.milestone_key}; e.g. {sorted(wanted)[0]!r} is missing, the file has {sorted(stored)[0]!r}); "
              "no step earns a milestone reward", file=sys.stderr)


def build_generator(section: Mapping[str, Any], needed: bool) -> MilestoneGenerator | None:
    """Φ as the trainer builds it: ``milestone_reward.generator``, with the ``llm`` section for ``llm``.

    The name is checked always; the generator is built (an LLM client configured) only when this batch
    distils milestones, so static milestones or ``reward.mode=outcome`` never ask for an endpoint.
    """
    from admire.milestones.generator import GENERATORS, make_generator

    name = str(section.get("generator"))
    options = dict(section.get("llm") or {}) if name == "llm" else {}
    try:
        GENERATORS.lookup(name)
        return make_generator(name, **options) if needed else None
    except (TypeError, ValueError) as error:
        raise InputError(f"milestone_reward.generator={name}: {_one_line(str(error))}") from None


def build_judge(section: Mapping[str, Any]) -> StepJudge:
    """The LLM step judge of ``reward.mode=judge``, from ``reward.judge`` (an OpenAI-compatible endpoint)."""
    from admire.judge import LLMJudge, judge_endpoint

    try:
        endpoint = judge_endpoint(section.get("judge"))
    except ValueError as error:
        raise InputError(str(error)) from None
    try:
        return LLMJudge.from_config(endpoint)
    except (TypeError, ValueError) as error:
        raise InputError(f"reward.judge: {_one_line(str(error))}") from None


def build_encoder(cfg: RewardConfig) -> Encoder:
    try:
        return encoder_factory(cfg.encoder)
    except (ValueError, TypeError) as error:
        raise InputError(_one_line(str(error))) from None


def build_matcher(cfg: RewardConfig, encoder: Encoder | None, probe: Sequence[str] | None) -> Matcher | None:
    """The matcher, only when some trajectory has milestones to match (else no model is loaded at all).

    The encoder is made to embed ``probe`` (a milestone list the batch needs anyway) here, so that a
    model that cannot load is reported as such, in one line, rather than from inside the scoring.
    """
    if probe is None or encoder is None:
        return None
    from admire.rl.scoring import build_matcher as matcher_of

    matcher = matcher_of(cfg, encoder)
    try:
        matcher.embed(list(probe))
    except (RuntimeError, OSError, ImportError) as error:
        raise InputError(f"cannot load the sentence encoder {cfg.encoder!r} (milestone_reward.encoder): "
                         f"{_one_line(str(error))}") from None
    return matcher

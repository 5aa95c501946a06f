"""``admire rewards``: a file of trajectories scored as one training batch, through the real entry point.

Unit tests inject an exact-text encoder (equal texts embed alike, any two different texts are nearly
orthogonal), so a hit means "the same sentence after slotting" and no model is loaded; one test runs the
real MiniLM on the recorded login-user batch in tests/data (no browser).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

import admire.commands.rewards as rewards_command
from admire.actions import describe, validate_action
from admire.cli import main
from admire.milestones.bank import MilestoneBank, Provenance
from admire.rewards import RewardConfig
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement
from tests.support.paths import DATA

RECORDED = DATA / "login_user_batch.jsonl"

USERNAME, PASSWORD = "kanesha", "Xb9q"
GOAL = f'Enter the username "{USERNAME}" and the password "{PASSWORD}" into the text fields and press login.'
TASK = Task(name="miniwob/login-user", seed=17)

# The MiniWoB++ login-user form as the env reports it: labels, two inputs, the Login button.
USERNAME_INDEX, PASSWORD_INDEX, LOGIN_INDEX = 1, 3, 4


def login_screen(step: int, username: str = "", password: str = "") -> Observation:
    return Observation(goal=GOAL, step=step, ui_elements=(
        UIElement(text="Username", class_name="label", bbox=(2, 50, 62, 73), is_clickable=True),
        UIElement(text=username or None, hint_text="Username", class_name="input_text", resource_id="username",
                  bbox=(7, 135, 78, 99), is_clickable=True, is_editable=True),
        UIElement(text="Password", class_name="label", bbox=(2, 50, 114, 125), is_clickable=True),
        UIElement(text=password or None, hint_text="Password", class_name="input_password", resource_id="password",
                  bbox=(7, 115, 130, 151), is_clickable=True, is_editable=True),
        UIElement(text="Login", class_name="button", resource_id="subbtn", bbox=(2, 89, 166, 197),
                  is_clickable=True),
    ))


def episode(tid: str, actions: Sequence[dict[str, object]], *, outcome: float,
            termination: Termination, described: bool = True) -> Trajectory:
    """Play ``actions`` on the form, recording each step as a rollout would (``described=False``: as a
    recorder that kept no grounded descriptions)."""
    typed = {USERNAME_INDEX: "", PASSWORD_INDEX: ""}
    steps = []
    for index, raw in enumerate(actions):
        action = validate_action(raw)
        screen = login_screen(index, typed[USERNAME_INDEX], typed[PASSWORD_INDEX])
        steps.append(Step(index=index, observation=screen, raw_output=f"Action: {json.dumps(raw)}", action=action,
                          grounded_description=describe(action, screen) if described else "",
                          log_prob=-0.7, info={"termination": "failure"} if index == len(actions) - 1 else {}))
        if action.action_type == "input_text" and action.index in typed:
            typed[action.index] = action.text or ""
    return Trajectory(id=tid, task=TASK, goal=GOAL, steps=tuple(steps), outcome=outcome, termination=termination,
                      epoch=3, group=1)


def type_into(index: int, text: str) -> dict[str, object]:
    return {"action_type": "input_text", "index": index, "text": text}


CLICK_LOGIN = {"action_type": "click", "index": LOGIN_INDEX}


def success(tid: str = "ok-short", *, described: bool = True) -> Trajectory:
    return episode(tid, [type_into(USERNAME_INDEX, USERNAME), type_into(PASSWORD_INDEX, PASSWORD), CLICK_LOGIN],
                   outcome=1.0, termination=Termination.SUCCESS, described=described)


def detour_success(tid: str = "ok-long", *, described: bool = True) -> Trajectory:
    """A longer success: it clicks the username field before typing."""
    return episode(tid, [{"action_type": "click", "index": USERNAME_INDEX}, type_into(USERNAME_INDEX, USERNAME),
                         type_into(PASSWORD_INDEX, PASSWORD), CLICK_LOGIN],
                   outcome=1.0, termination=Termination.SUCCESS, described=described)


def no_password(tid: str = "fail-no-password", *, described: bool = True) -> Trajectory:
    """A near miss: the username typed, the password forgotten, Login clicked."""
    return episode(tid, [type_into(USERNAME_INDEX, USERNAME), CLICK_LOGIN], outcome=0.0,
                   termination=Termination.AGENT_STOP, described=described)


def swapped(tid: str = "fail-swapped") -> Trajectory:
    """Both values typed, each into the other's field (docs/decisions.md#d1)."""
    return episode(tid, [type_into(USERNAME_INDEX, PASSWORD), type_into(PASSWORD_INDEX, USERNAME), CLICK_LOGIN],
                   outcome=0.0, termination=Termination.AGENT_STOP)


def env_error(tid: str = "crashed") -> Trajectory:
    crashed = episode(tid, [type_into(USERNAME_INDEX, USERNAME)], outcome=0.0, termination=Termination.ENV_ERROR)
    return crashed.model_copy(update={"info": {"env_error": "EnvCrashed: the browser died"}})


def recorded_batch() -> list[Trajectory]:
    """The batch in tests/data/login_user_batch.jsonl: one group of a login-user instance.

    The long success was recorded without grounded descriptions, so the command must describe it.
    """
    return [success(), detour_success(described=False), no_password(), swapped(), env_error()]


def write_jsonl(path: Path, trajectories: Sequence[Trajectory]) -> Path:
    path.write_text("".join(t.to_json() + "\n" for t in trajectories), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# The fake encoder and running the command
# --------------------------------------------------------------------------------------------------

class ExactTextEncoder:
    """A pseudo-random unit vector per text (seeded by the text): cosine 1 for the same sentence, about
    0 ± 0.1 for any two different ones. Records every call."""

    dim = 128

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.names: list[str] = []  # the encoders the command asked the factory for

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(vector / np.linalg.norm(vector))
        return np.asarray(rows, dtype=np.float32)


@pytest.fixture
def encoder(monkeypatch: pytest.MonkeyPatch) -> Iterator[ExactTextEncoder]:
    """Injects the fake encoder in place of ``milestone_reward.encoder``'s model."""
    fake = ExactTextEncoder()

    def factory(name: str) -> ExactTextEncoder:
        fake.names.append(name)
        return fake

    monkeypatch.setattr(rewards_command, "encoder_factory", factory)
    yield fake


def run_rewards(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict], str]:
    """Run ``admire rewards`` through ``admire.cli.main``: (exit code, stdout records, stderr)."""
    try:
        code = main(["rewards", *argv])
    except SystemExit as exit_:  # argparse refuses before run()
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()] if code == 0 else []
    if code != 0:
        assert out == ""
    return code, records, err


def by_id(records: list[dict]) -> dict[str, dict]:
    return {record["id"]: record for record in records}


def shipped() -> RewardConfig:
    """The shipped reward settings, read the way the command reads them (never hard-coded here)."""
    return rewards_command.reward_config(rewards_command.load_settings([]))


# --------------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------------

def test_successes_distil_milestones_before_the_failure_is_scored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], encoder: ExactTextEncoder) -> None:
    path = write_jsonl(tmp_path / "batch.jsonl", [detour_success(), no_password(), success()])
    code, records, err = run_rewards(capsys, str(path))
    assert code == 0, err
    assert [r["id"] for r in records] == ["ok-long", "fail-no-password", "ok-short"]  # input order
    shortest = by_id(records)["ok-short"]
    milestones = shortest["milestones"]
    # The shortest success's three checkpoints, in order (slotted as the shipped key says).
    assert len(milestones) == 3
    assert ["Username" in milestones[0], "Password" in milestones[1], "Login" in milestones[2]] == [True] * 3
    assert all(r["milestones"] == milestones for r in records), "one key, one list for the whole group"

    failure = by_id(records)["fail-no-password"]["steps"]
    assert [(s["num_milestones"], s["hits"]) for s in failure] == [(3, 1), (3, 1)]
    first = failure[0]
    assert first["matched_index"] == 0 and first["matched_milestone"] == milestones[0]
    assert first["similarity"] == pytest.approx(1.0, abs=1e-5)
    # Scaffolded: k/K + ζ·r on the hit, so the near miss earns milestone reward although it failed.
    cfg = shipped()
    assert first["milestone"] == pytest.approx(1 / 3 + cfg.zeta * 1.0, abs=1e-5)
    assert first["milestone_weight"] == pytest.approx(cfg.milestone_weight)  # λ(0) = λ0
    for step in failure:
        assert step["outcome"] == 0.0
        dense = step["process"] if cfg.process_enable else step["milestone"]
        assert step["total"] == pytest.approx(step["outcome"] + step["format"] + step["milestone_weight"] * dense)

    # The successes are denoised: every one of their steps that reached a checkpoint earns r = 1.
    assert [s["milestone"] for s in shortest["steps"]] == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
    assert [s["matched_index"] for s in by_id(records)["ok-long"]["steps"]] == [None, 0, 1, 2]
    assert encoder.names == [cfg.encoder]


def test_epoch_sets_the_decayed_milestone_weight(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 encoder: ExactTextEncoder) -> None:
    path = write_jsonl(tmp_path / "batch.jsonl", [success(), no_password()])
    code, records, err = run_rewards(capsys, str(path), "--epoch", "4", "milestone_reward.decay=0.5")
    assert code == 0, err
    weight = shipped().milestone_weight * 0.5**4
    assert [s["milestone_weight"] for r in records for s in r["steps"]] == pytest.approx([weight] * 5)


def test_static_milestones_are_used_as_given_and_nothing_is_distilled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], encoder: ExactTextEncoder) -> None:
    static = ["typed \"<value>\" into the 'Username' field", "clicked the 'Login' button"]
    with MilestoneBank(tmp_path / "source.sqlite") as source:  # the format `admire milestones export` writes
        source.put("miniwob/login-user", static, Provenance("r", 0, None, "manual", 0.0))
        source.export_json(tmp_path / "ms.json")
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = write_jsonl(inputs / "batch.jsonl", [success(), no_password()])
    # The override comes after the option on purpose: any order works.
    code, records, err = run_rewards(capsys, str(path), "--milestones", str(tmp_path / "ms.json"),
                                     "milestone_reward.key=task")
    assert code == 0, err
    assert [r["milestones"] for r in records] == [static, static]  # not the success's own three steps
    failure = by_id(records)["fail-no-password"]["steps"]
    assert [(s["matched_index"], s["hits"], s["num_milestones"]) for s in failure] == [(0, 2, 2), (1, 2, 2)]
    assert sorted(p.name for p in inputs.iterdir()) == ["batch.jsonl"], "nothing is written beside the input"


def test_milestone_file_with_no_key_of_the_batch_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          encoder: ExactTextEncoder) -> None:
    (tmp_path / "ms.json").write_text(json.dumps({"miniwob/login-user": ["clicked the 'Login' button", "x y"]}))
    path = write_jsonl(tmp_path / "batch.jsonl", [success()])
    code, records, err = run_rewards(capsys, str(path), "--milestones", str(tmp_path / "ms.json"),
                                     "milestone_reward.key=instruction")
    assert code == 0
    assert records[0]["milestones"] == [] and records[0]["steps"][0]["num_milestones"] == 0
    assert err.startswith("admire rewards: note: no trajectory's key is in the milestone file")


def test_empty_grounded_descriptions_are_recomputed_from_action_and_screen(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], encoder: ExactTextEncoder) -> None:
    described = write_jsonl(tmp_path / "described.jsonl", [success(), no_password()])
    bare = write_jsonl(tmp_path / "bare.jsonl", [success(described=False), no_password(described=False)])
    assert all(not step.grounded_description for step in success(described=False).steps)
    code, with_descriptions, _ = run_rewards(capsys, str(described))
    assert code == 0
    code, recomputed, err = run_rewards(capsys, str(bare))
    assert code == 0, err
    assert recomputed == with_descriptions
    assert by_id(recomputed)["fail-no-password"]["steps"][0]["hits"] == 1


def test_a_step_whose_output_did_not_parse_stays_undescribed() -> None:
    step = success(described=False).steps[0].model_copy(update={"format_valid": False, "parse_error": "bad"})
    trajectory = success(described=False).model_copy(update={"steps": (step,)})
    assert rewards_command.with_grounded_descriptions(trajectory).steps[0].grounded_description == ""
    described = rewards_command.with_grounded_descriptions(success(described=False))
    assert [s.grounded_description for s in described.steps] == [s.grounded_description for s in success().steps]


def test_env_error_trajectories_are_listed_as_excluded(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       encoder: ExactTextEncoder) -> None:
    path = write_jsonl(tmp_path / "batch.jsonl", [env_error(), success(), no_password()])
    code, records, err = run_rewards(capsys, str(path))
    assert code == 0, err
    assert records[0] == {"id": "crashed", "milestones": [], "steps": [], "excluded": True}
    assert "excluded" not in records[1] and len(records[1]["steps"]) == 3


def test_outcome_mode_loads_no_encoder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       encoder: ExactTextEncoder) -> None:
    path = write_jsonl(tmp_path / "batch.jsonl", [success(), no_password()])
    code, records, err = run_rewards(capsys, str(path), "reward.mode=outcome")
    assert code == 0, err
    assert [r["milestones"] for r in records] == [[], []]
    assert [s["total"] for s in records[0]["steps"]] == [1.0, 1.0, 1.0]
    assert encoder.names == [] and encoder.calls == []


def test_a_batch_without_milestones_never_runs_the_encoder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           encoder: ExactTextEncoder) -> None:
    path = write_jsonl(tmp_path / "batch.jsonl", [no_password(), swapped()])  # no success: K = 0 everywhere
    code, records, err = run_rewards(capsys, str(path))
    assert code == 0, err
    assert all(s["num_milestones"] == 0 and s["milestone"] == 0.0 for r in records for s in r["steps"])
    assert encoder.calls == []


# --------------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing on stdout, no encoder
# --------------------------------------------------------------------------------------------------

def _line(tid: str = "t") -> str:
    return success(tid).to_json()


BAD_FILES: dict[str, tuple[str | None, str]] = {
    # name: (file content, or None for no file; what the one line must say)
    "missing": (None, "no trajectory file at"),
    "empty": ("\n\n", "holds no trajectories"),
    "not json": (_line("a") + "\n{\"id\": \"b\", \n", "line 2: not JSON"),
    "not an object": ("[1, 2]\n", "line 1: expected a Trajectory object"),
    "missing field": (json.dumps({k: v for k, v in json.loads(_line()).items() if k != "termination"}),
                      "line 1: field 'termination' is missing"),
    "wrong field": (_line("a") + "\n" + _line("b").replace('"action_type":"input_text"', '"action_type":"typo"'),
                    "line 2: field 'steps.0.action.action_type'"),
    "unknown field": (_line().replace('"goal":', '"colour":"red","goal":', 1), "line 1: field 'colour'"),
    "duplicate id": (_line("a") + "\n" + _line("b") + "\n" + _line("a") + "\n",
                     "line 3: trajectory id 'a' is already used on line 1"),
    "not utf-8": ("\udcff", "is not UTF-8 text"),
    "outcome NaN": (_line().replace('"outcome":1.0', '"outcome":NaN', 1), "line 1: field 'outcome'"),
    "outcome Infinity": (_line().replace('"outcome":1.0', '"outcome":Infinity', 1), "line 1: field 'outcome'"),
}


def test_a_fifo_or_a_device_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              encoder: ExactTextEncoder) -> None:
    # Read, a FIFO would block forever and /dev/zero would fill the memory.
    import os

    fifo = tmp_path / "batch.jsonl"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        code, _, err = run_rewards(capsys, str(path))
        assert_refused(code, err, "is not a regular file", encoder)


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_trajectory_file_is_one_line_and_exit_2(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     encoder: ExactTextEncoder) -> None:
    content, expected = BAD_FILES[case]
    path = tmp_path / "batch.jsonl"
    if content is not None:
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
    code, _, err = run_rewards(capsys, str(path))
    assert_refused(code, err, expected, encoder)


BAD_OPTIONS: dict[str, tuple[list[str], str]] = {
    "misspelled key": (["milestone_reward.treshold=0.8"], "did you mean 'milestone_reward.threshold'?"),
    "unknown key": (["milestone_reward.colour=red"], "unknown key 'milestone_reward.colour'; the milestone_reward "
                                                     "keys are:"),
    "appended unknown key": (["+reward.bonus=1"], "unknown key 'reward.bonus'"),
    "key outside the reward sections": (["trainer.total_epochs=5"], "'trainer.total_epochs' does not change rewards"),
    "not key=value": (["milestone_reward.threshold"], "bad override 'milestone_reward.threshold'"),
    "a whole section": (["milestone_reward=3"], "bad override 'milestone_reward=3'"),
    "bad number": (["milestone_reward.threshold=abc"], "milestone_reward.threshold must be a number"),
    "bad choice": (["reward.mode=sometimes"], "reward.mode must be one of"),
    "bad matcher": (["milestone_reward.matcher=fuzzy"], "milestone_reward.matcher must be one of"),
    "bad encoder": (["milestone_reward.encoder=/no/such/model"], "/no/such/model"),
    "bad bool": (["milestone_reward.update_before_reward=maybe"], "must be true or false"),
    "bad bank mode": (["milestone_reward.mode=sometimes"], "milestone_reward.mode"),
    "unresolved interpolation": (["milestone_reward.key=${oc.env:ADMIRE_TEST_UNSET_VARIABLE}"],
                                 "milestone_reward.key: KeyError raised while resolving interpolation"),
    "bad generator": (["milestone_reward.generator=oracle"], "unknown milestone generator 'oracle'"),
    "bad estimator": (["algorithm.adv_estimator=ppo2"], "unknown advantage estimator 'ppo2'"),
    "bad update rule": (["milestone_reward.update_rule=newest"], "milestone_reward.update_rule must be one of"),
    "static without lists": (["milestone_reward.mode=static"], "pass --milestones MS.json"),
    "llm without endpoint": (["milestone_reward.generator=llm"], "base_url"),
    "judge without endpoint": (["reward.mode=judge"], "reward.judge.base_url"),
    "negative epoch": (["--epoch", "-1"], "argument --epoch: must be an integer >= 0"),
    "epoch not a number": (["--epoch", "x"], "argument --epoch: must be an integer >= 0"),
    "unknown option": (["--bogus"], "unrecognized arguments: --bogus"),
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_a_bad_key_or_value_is_one_line_and_exit_2(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   encoder: ExactTextEncoder, monkeypatch: pytest.MonkeyPatch) -> None:
    argv, expected = BAD_OPTIONS[case]
    if case == "bad encoder":  # the real factory: it checks the name without loading a model
        monkeypatch.setattr(rewards_command, "encoder_factory", rewards_command.load_encoder)
    path = write_jsonl(tmp_path / "batch.jsonl", [success(), no_password()])
    code, _, err = run_rewards(capsys, str(path), *argv)
    assert_refused(code, err, expected, encoder)


BAD_MILESTONES: dict[str, tuple[str | None, str]] = {
    "missing": (None, "no milestone file at"),
    "not json": ("{'miniwob/login-user': [", "is not a JSON milestone file"),
    "not an object": ("[\"clicked Login\"]", "a milestone file is a JSON object"),
    "not a list": (json.dumps({"miniwob/login-user": "clicked Login"}), "must be a list of phrases"),
    "empty phrase": (json.dumps({"miniwob/login-user": ["clicked Login", " "]}), "phrase 1 must be a non-empty"),
    "bad export": (json.dumps({"format": "admire-milestones", "lists": {"k": {"phrases": []}}}),
                   "must be an object with 'milestones'"),
}


@pytest.mark.parametrize("case", list(BAD_MILESTONES))
def test_a_malformed_milestone_file_is_one_line_and_exit_2(case: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           encoder: ExactTextEncoder) -> None:
    content, expected = BAD_MILESTONES[case]
    milestones = tmp_path / "ms.json"
    if content is not None:
        milestones.write_text(content)
    path = write_jsonl(tmp_path / "batch.jsonl", [success()])
    code, _, err = run_rewards(capsys, str(path), "--milestones", str(milestones))
    assert_refused(code, err, expected, encoder)
    assert "admire milestones export" in err  # the fix: which file to pass


def test_a_bad_line_is_found_before_any_encoding(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 encoder: ExactTextEncoder) -> None:
    """The whole file is checked first: a bad last line stops the batch before the encoder is built."""
    path = tmp_path / "batch.jsonl"
    path.write_text(_line("a") + "\n" + _line("b") + "\nnot json\n")
    code, _, err = run_rewards(capsys, str(path))
    assert_refused(code, err, "line 3: not JSON", encoder)


def test_a_missing_file_argument_is_one_line(capsys: pytest.CaptureFixture[str], encoder: ExactTextEncoder) -> None:
    code, _, err = run_rewards(capsys)
    assert_refused(code, err, "the following arguments are required: TRAJECTORIES.jsonl", encoder)


def assert_refused(code: int, err: str, expected: str, encoder: ExactTextEncoder) -> None:
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("admire rewards: ") and expected in lines[0], lines[0]
    assert "Traceback" not in err
    assert encoder.names == [] and encoder.calls == []


# --------------------------------------------------------------------------------------------------
# The recorded batch, with the real MiniLM encoder
# --------------------------------------------------------------------------------------------------

def test_the_recorded_file_is_the_documented_batch() -> None:
    lines = RECORDED.read_text(encoding="utf-8").splitlines()
    assert [Trajectory.from_json(line) for line in lines] == recorded_batch()


def test_recorded_login_batch_with_the_real_encoder(capsys: pytest.CaptureFixture[str]) -> None:
    # Pinned to the setting under which swapped values must earn nothing: grounded matching, positional slots.
    code, records, err = run_rewards(capsys, str(RECORDED), "milestone_reward.matcher=grounded",
                                     "milestone_reward.key=skeleton")
    assert code == 0, err
    assert [r["id"] for r in records] == ["ok-short", "ok-long", "fail-no-password", "fail-swapped", "crashed"]
    found = by_id(records)
    assert found["crashed"] == {"id": "crashed", "milestones": [], "steps": [], "excluded": True}
    milestones = found["ok-short"]["milestones"]
    assert len(milestones) == 3 and all(r["milestones"] == milestones for r in records[:4])
    threshold = shipped().threshold

    # The long success had no grounded descriptions on file: they were recomputed, so it hits all three.
    assert [s["matched_index"] for s in found["ok-long"]["steps"]] == [None, 0, 1, 2]
    near_miss = found["fail-no-password"]["steps"]
    assert near_miss[0]["matched_index"] == 0 and near_miss[0]["similarity"] > threshold
    assert near_miss[0]["hits"] == 1 and near_miss[0]["milestone"] > 0.0
    # Values typed into the wrong fields reach no checkpoint and earn no milestone reward.
    assert all(s["matched_index"] is None and s["milestone"] == 0.0 for s in found["fail-swapped"]["steps"])
    totals = {r["id"]: sum(s["total"] for s in r["steps"]) for r in records[:4]}
    assert totals["fail-no-password"] > totals["fail-swapped"]
    assert all(math.isfinite(s["total"]) for r in records for s in r["steps"])

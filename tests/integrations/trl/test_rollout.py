"""ADMIRE's multi-turn GUI rollout for TRL (admire.integrations.trl.rollout).

On a fake form env with scripted answers and a stand-in trainer (no TRL trainer): what each row of the
output holds, the env mask of a multi-turn completion, format errors, crashes and exclusion. Then the must-show
on the real parts: TRL's ``GRPOTrainer`` takes steps on CPU with the tiny Qwen2 on miniwob-smoke in real
Chromium, rewarded by ``admire_reward``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from admire.actions import format_output, validate_action
from admire.agent.prompts import build_messages
from admire.integrations.trl import BatchScorer, admire_reward, make_rollout_func, task_dataset
from admire.integrations.trl.rollout import Generated, TurnRequest, parse_task_prompt, task_prompt
from admire.milestones.bank import MilestoneBank
from admire.milestones.generator import make_generator
from admire.rewards import RewardConfig
from admire.rl.scoring import build_matcher
from admire.types import Task, Termination
from tests.support.fakes import FormEnv, TrigramEncoder
from tests.support.models import tiny_qwen2_dir  # noqa: F401

TYPE = format_output(validate_action({"action_type": "input_text", "index": 0, "text": "ann"}), reason="type")
SUBMIT = format_output(validate_action({"action_type": "click", "index": 1}), reason="submit")
STOP = format_output(validate_action({"action_type": "status", "goal_status": "complete"}), reason="stop")


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen2_dir: Path) -> Any:  # noqa: F811 - the fixture imported above
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_qwen2_dir)


class Scripted:
    """Writes each episode's answers from a script (one list per episode, in row order; one env plays the
    rows one after another), and records what it was asked to continue."""

    def __init__(self, tokenizer: Any, scripts: Sequence[Sequence[str]]) -> None:
        self.tokenizer, self.scripts = tokenizer, scripts
        self.episode = -1
        self.requests: list[TurnRequest] = []
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def __call__(self, requests: Sequence[TurnRequest], trainer: Any) -> list[Generated]:
        out = []
        for request in requests:
            self.requests.append(request)
            self.episode += not request.history
            script = self.scripts[self.episode % len(self.scripts)]
            text = script[min(len(request.history), len(script) - 1)]
            ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.end]
            out.append(Generated(ids, [-0.25] * len(ids)))
        return out


def stand_in_trainer(tokenizer: Any, num_generations: int = 2) -> SimpleNamespace:
    """What the rollout reads of a ``GRPOTrainer`` when the answers are scripted."""
    return SimpleNamespace(processing_class=tokenizer, num_generations=num_generations,
                           state=SimpleNamespace(epoch=0.0),
                           eos_token_ids=[tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id])


def scoring(tmp_path: Path) -> BatchScorer:
    reward = RewardConfig(milestone_key="task")
    return BatchScorer(bank=MilestoneBank(tmp_path / "bank.sqlite"), reward=reward,
                       matcher=build_matcher(reward, TrigramEncoder()), generator=make_generator("heuristic"))


# --------------------------------------------------------------------------------------------------
# Tasks as prompts
# --------------------------------------------------------------------------------------------------

def test_a_prompt_names_a_task_by_name_and_seed_or_as_json() -> None:
    plain, special = Task(name="miniwob/click-test", seed=7), Task(name="fake/form", seed=2, params={"name": "bob"})
    assert task_prompt(plain) == "miniwob/click-test#7" and task_prompt(special).startswith("{")
    for task in (plain, special):
        assert parse_task_prompt(task_prompt(task)) == task
    assert parse_task_prompt([{"role": "user", "content": "miniwob/click-test"}]) == Task(name="miniwob/click-test")
    assert task_dataset([plain, special])["prompt"] == [task_prompt(plain), task_prompt(special)]
    for bad, message in (("click-test", "a task name is '<backend>/<task>'"),
                         ("miniwob/click-test#x", "the seed after '#' must be a whole number"),
                         (3, "names a task as a string")):
        with pytest.raises(ValueError, match=message):
            parse_task_prompt(bad)


# --------------------------------------------------------------------------------------------------
# The rollout on a fake env
# --------------------------------------------------------------------------------------------------

def test_each_row_is_one_episode_whose_screens_are_masked_between_the_models_answers(tokenizer, tmp_path) -> None:
    generate = Scripted(tokenizer, [[TYPE, SUBMIT]])
    rollout = make_rollout_func(FormEnv(), scoring(tmp_path), max_steps=4, generate=generate)
    prompts = ["fake/form#0", "fake/form#0", "fake/form#1", "fake/form#1"]  # as TRL repeats them
    out = rollout(prompts, stand_in_trainer(tokenizer))

    rows = len(prompts)
    for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "admire_return", "admire_step_rewards",
                "admire_success", "admire_excluded", "admire_trajectory"):
        assert len(out[key]) == rows, key
    trajectories = out["admire_trajectory"]
    assert [(t.task.seed, t.group) for t in trajectories] == [(0, 0), (0, 0), (1, 1), (1, 1)]
    assert out["admire_success"] == [True] * rows and out["admire_excluded"] == [False] * rows

    first, second = generate.requests[0], generate.requests[1]  # the first episode's two steps
    ids, mask, logprobs = out["completion_ids"][0], out["env_mask"][0], out["logprobs"][0]
    assert len(ids) == len(mask) == len(logprobs)
    answers = [trajectories[0].steps[i].info["admire_token_ids"] for i in range(2)]
    screen = ids[len(answers[0]):len(ids) - len(answers[1])]
    assert ids == answers[0] + screen + answers[1]
    assert mask == [1] * len(answers[0]) + [0] * len(screen) + [1] * len(answers[1])
    assert logprobs == [-0.25] * len(answers[0]) + [0.0] * len(screen) + [-0.25] * len(answers[1])
    # The prompt is the lm policy's first turn; the model continues exactly what TRL will score.
    observation = trajectories[0].steps[0].observation
    expected_prompt = tokenizer.apply_chat_template(build_messages(observation, ()), tokenize=False,
                                                    add_generation_prompt=True)
    assert tokenizer.decode(out["prompt_ids"][0]) == expected_prompt
    assert first.context == out["prompt_ids"][0]
    assert second.context == out["prompt_ids"][0] + ids[:len(ids) - len(answers[1])]
    # The masked tokens are the next screen as the lm policy's user turn for that step.
    user = build_messages(trajectories[0].steps[1].observation, trajectories[0].steps[:1])[1]["content"]
    assert tokenizer.decode(screen) == f"\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    assert 'holds "ann"' in user and 'Step 1: {"action_type": "input_text"' in user


def test_rewards_are_scored_after_the_bank_learnt_from_the_batch(tokenizer, tmp_path) -> None:
    generate = Scripted(tokenizer, [[TYPE, SUBMIT], [TYPE, STOP]])  # a success, then a failure, in one group
    scorer = scoring(tmp_path)
    out = make_rollout_func(FormEnv(), scorer, max_steps=4, generate=generate)(["fake/form#0"] * 2,
                                                                               stand_in_trainer(tokenizer))
    assert out["admire_success"] == [True, False] and scorer.bank.version == 1
    success, failure = out["admire_step_rewards"]
    assert out["admire_return"] == [pytest.approx(sum(success) / 2), pytest.approx(sum(failure) / 2)]
    assert failure[0] > 0  # scaffolded: the failure's typing hit the first milestone of its sibling's success
    metrics = out["admire_metrics"]
    assert metrics["milestones/updates"] == 1.0 and metrics["reward/milestone"] > 0 and metrics["train/success"] == 0.5
    assert admire_reward(["p"] * 2, ["c"] * 2, admire_return=out["admire_return"]) == out["admire_return"]


def test_a_malformed_answer_is_a_format_error_step_not_a_crash(tokenizer, tmp_path) -> None:
    generate = Scripted(tokenizer, [["Reason: no idea\nAction: click the thing"]])
    out = make_rollout_func(FormEnv(), scoring(tmp_path), max_steps=3, generate=generate)(
        ["fake/form#0"], stand_in_trainer(tokenizer, 1))
    [trajectory] = out["admire_trajectory"]
    assert trajectory.termination is Termination.MAX_STEPS and len(trajectory.steps) == 3
    assert not any(step.format_valid for step in trajectory.steps)
    assert out["admire_step_rewards"] == [[-0.5, -0.5, -0.5]] and out["admire_return"] == [-0.5]
    assert sum(out["env_mask"][0]) == sum(len(s.info["admire_token_ids"]) for s in trajectory.steps)


def test_a_crashed_episode_is_rerun_and_one_that_keeps_crashing_is_excluded_with_no_gradient(tokenizer,
                                                                                             tmp_path) -> None:
    env = FormEnv(crash_on_step=0, crash_times=1)
    generate = Scripted(tokenizer, [[TYPE, SUBMIT]])
    out = make_rollout_func(env, scoring(tmp_path / "a"), max_steps=4, generate=generate)(
        ["fake/form#0"], stand_in_trainer(tokenizer, 1))
    assert env.restarts == 1 and out["admire_excluded"] == [False] and out["admire_success"] == [True]

    env = FormEnv(crash_on_step=0, crash_times=3)  # the first row crashes on its run and both re-runs
    out = make_rollout_func(env, scoring(tmp_path / "b"), max_steps=4, max_reruns=2,
                            generate=Scripted(tokenizer, [[TYPE, SUBMIT]]))(["fake/form#0"] * 2,
                                                                             stand_in_trainer(tokenizer))
    assert env.restarts == 3 and out["admire_excluded"] == [True, False]
    assert out["admire_trajectory"][0].termination is Termination.ENV_ERROR
    assert out["admire_return"][0] is None and out["admire_step_rewards"][0] == []
    assert out["completion_ids"][0] and set(out["env_mask"][0]) == {0}  # tokens for TRL, none trained on
    assert out["admire_return"][1] is not None and 1 in out["env_mask"][1]
    assert admire_reward(["p"] * 2, ["c"] * 2, admire_return=out["admire_return"])[0] is None


def test_the_episodes_can_play_on_a_device_of_admire_serve(tokenizer, tmp_path) -> None:
    from admire.envs.remote import RemoteEnv
    from admire.server.app import create_app
    from tests.support.server_helpers import make_pool, running_server

    with make_pool(FormEnv, num_devices=1) as pool, running_server(create_app(pool)) as url:
        env = RemoteEnv(url)
        try:
            out = make_rollout_func(env, scoring(tmp_path), max_steps=4,
                                    generate=Scripted(tokenizer, [[TYPE, SUBMIT], [TYPE, STOP]]))(
                ["fake/form#0"] * 2, stand_in_trainer(tokenizer))
        finally:
            env.close()
    assert out["admire_success"] == [True, False] and out["admire_step_rewards"][1][0] > 0
    assert [len(t.steps) for t in out["admire_trajectory"]] == [2, 2]


def test_bad_settings_fail_before_any_episode(tmp_path) -> None:
    with pytest.raises(ValueError, match="fold must be one of mean, sum"):
        make_rollout_func(FormEnv(), scoring(tmp_path), max_steps=2, fold="median")
    with pytest.raises(ValueError, match="at least one environment"):
        make_rollout_func([], scoring(tmp_path), max_steps=2)


# --------------------------------------------------------------------------------------------------
# The must-show: GRPOTrainer steps on real MiniWoB++ with ADMIRE rewards
# --------------------------------------------------------------------------------------------------

@pytest.mark.browser
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")
def test_grpo_trainer_steps_on_real_miniwob_with_admire_rewards(miniwob_env, tiny_qwen2_dir, tokenizer,  # noqa: F811
                                                                 tmp_path) -> None:
    """Two GRPOTrainer steps of the tiny Qwen2 on miniwob-smoke in real Chromium.

    The tiny model's weights are random, so what it writes is a format error; the second episode of each
    group is the task's oracle answer written in the policy's format (as tests/rl/test_lm_training.py does),
    so each group holds a success and a failure and the advantages are not all zero. Everything else is the
    real path: TRL calls the rollout, the model samples the other answers, the page is stepped, ADMIRE scores
    the batch, TRL reads ``admire_reward`` and updates the weights.
    """
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from admire.actions import describe
    from admire.agent.sft import answer_text
    from admire.envs.oracles import get_oracle
    from admire.envs.suites import get_suite
    from admire.integrations.trl.rollout import generate_with_model

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir, dtype=torch.float32)
    initial = {name: value.detach().clone() for name, value in model.state_dict().items()}
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    episodes = {"count": 0}

    def model_or_oracle(requests: Sequence[TurnRequest], trainer: Any) -> list[Generated]:
        written = generate_with_model(requests, trainer)
        for i, request in enumerate(requests):
            episodes["count"] += not request.history
            if episodes["count"] % 2 == 0:  # the second episode of a group: the oracle's answer
                task = parse_task_prompt(episodes["task"])
                history = [s.action for s in request.history if s.action is not None]
                action = get_oracle(task.name)(request.observation, miniwob_env.ground_truth(), history)
                ids = [*tokenizer(answer_text(action, describe(action, request.observation)),
                                  add_special_tokens=False)["input_ids"], end]
                written[i] = Generated(ids, [0.0] * len(ids))
        return written

    rollout = make_rollout_func(miniwob_env, scoring(tmp_path), max_steps=2, max_new_tokens=8,
                                generate=model_or_oracle)
    batches: list[dict[str, Any]] = []

    def recorded(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        episodes["task"] = prompts[0]
        batches.append(rollout(prompts, trainer))
        return batches[-1]

    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True, report_to=[], max_steps=2,
                      per_device_train_batch_size=2, num_generations=2, max_completion_length=8, logging_steps=1,
                      save_strategy="no", learning_rate=1e-2, bf16=False, gradient_checkpointing=False,
                      dataloader_num_workers=0, seed=0)
    dataset = task_dataset(get_suite("miniwob-smoke").train_tasks(2, seed=0))
    trainer = GRPOTrainer(model=model, reward_funcs=admire_reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=recorded)
    trainer.train()

    assert trainer.state.global_step == 2 and len(batches) == 2
    logged = [entry for entry in trainer.state.log_history if "rewards/admire_reward/mean" in entry]
    assert len(logged) == 2
    for entry, batch in zip(logged, batches, strict=True):
        assert batch["admire_success"] == [False, True]  # the model's format errors, then the oracle's click
        returns = batch["admire_return"]
        assert entry["rewards/admire_reward/mean"] == pytest.approx(sum(returns) / len(returns), abs=1e-5)
        assert entry["reward/outcome"] == pytest.approx(batch["admire_metrics"]["reward/outcome"])
        failed = batch["admire_trajectory"][0]
        assert len(failed.steps) == 2 and not failed.steps[0].format_valid
        assert 0 in batch["env_mask"][0] and batch["env_mask"][0][-1] == 1  # two answers, a screen between
    changed = [name for name, value in trainer.model.state_dict().items() if not torch.equal(value, initial[name])]
    assert changed, "GRPO left every weight as it was"

    # The log-probs the rollout reports are the initial model's own for the completion TRL scored.
    first = batches[0]
    model.load_state_dict(initial)
    prompt, completion = first["prompt_ids"][0], first["completion_ids"][0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1]
    expected = torch.log_softmax(logits / args.temperature, dim=-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
    mask = torch.tensor(first["env_mask"][0]).bool()
    assert torch.allclose(torch.tensor(first["logprobs"][0])[mask], expected[mask], atol=1e-4)

"""The language-model path on the real parts. The tiny Qwen2.5-VL (real Qwen vocabulary) reads a real MiniWoB++
screen with its screenshot, its answers are parsed and stepped on the page, ADMIRE scores the group, one
per-token PPO update moves the LoRA adapter with real gradients, and a checkpoint restores it exactly.

The tiny model's weights are random, so what it samples is a format error; the group's other answers are
the right click written in the policy's answer format and scored by the same model (an off-policy sample
whose old log-probs are the model's own, as PPO needs). The group then holds a success and format errors,
so the advantages differ and the update has something to learn.

The tiny text Qwen2 goes through the fast (cached) rollout on a two-step task (type, then Submit): its own
samples carry the trained weights' log-probs, the oracle's answers fill the milestone bank, a trajectory that
stops after the first step is paid for the milestone it reached, two updates make the right answer more
likely, and the checkpointed adapter acts as the trained one does.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from admire.actions import describe, validate_action
from admire.agent.base import Decision, PolicyOutput, trainable_parameters
from admire.agent.sft import answer_text
from admire.config import load_config
from admire.milestones.bank import MilestoneBank
from admire.milestones.generator import make_generator
from admire.milestones.update import update_bank
from admire.rewards import RewardConfig, score_batch
from admire.rl.ppo import PPOConfig, ppo_update
from admire.rl.rollout import RolloutStats, collect, group_requests
from admire.rl.samples import build_samples
from admire.rl.scoring import build_matcher
from admire.runs import RunDir
from admire.train_state import checkpoint_state, restore
from admire.types import Observation, Step, Task
from tests.support.models import tiny_qwen2_5_vl_dir, tiny_qwen2_dir  # noqa: F401

pytestmark = [pytest.mark.browser,
              pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")]

TASK = Task(name="miniwob/click-button", seed=11)
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}


class RightClick:
    """Answers click-button correctly in the policy's format; its log-probs are the language model's."""

    def __init__(self, lm) -> None:
        self.lm = lm

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        outputs = []
        for observation, history in zip(observations, histories, strict=True):
            wanted = re.search(r'"([^"]+)"', observation.goal)
            assert wanted is not None, observation.goal
            index = next(i for i, e in enumerate(observation.ui_elements)
                         if e.class_name == "button" and (e.text or "").strip() == wanted.group(1))
            action = validate_action({"action_type": "click", "index": index})
            text = answer_text(action, describe(action, observation))
            with torch.no_grad():
                log_probs, mask = self.lm.token_log_probs([Decision(observation, tuple(history), text)])
            tokens = log_probs[0][mask[0] > 0].tolist()
            outputs.append(PolicyOutput(text=text, action=action, log_prob=sum(tokens),
                                        info={"token_log_probs": tokens, "num_tokens": len(tokens)}))
        return outputs


def test_the_lm_policy_acts_on_a_real_page_is_scored_and_trained_per_token_and_resumes(
    miniwob_env, tiny_qwen2_5_vl_dir, tmp_path: Path,  # noqa: F811 - the fixture imported above
) -> None:
    from admire.agent.lm_policy import LMPolicy

    torch.set_num_threads(1)
    torch.manual_seed(0)
    miniwob_env.screenshots = True
    policy = LMPolicy(path=str(tiny_qwen2_5_vl_dir), max_new_tokens=24, lora=LORA, seed=0)

    # 1. Sampled answers of the model itself (format errors: random weights), and right answers, one group.
    sampled = collect(group_requests([TASK], 2), [miniwob_env], policy, max_steps=1, stats=RolloutStats(),
                      keep_screenshots=True)
    right = collect(group_requests([TASK], 2), [miniwob_env], RightClick(policy), max_steps=1,
                    stats=RolloutStats(), keep_screenshots=True)
    assert all(s.screenshot is not None for t in sampled for s in [t.steps[0].observation])
    assert [t.success for t in right] == [True, True] and not any(t.success for t in sampled)
    group = [*sampled, *right]  # one group: the same task, seed and group index
    for trajectory in group:
        step = trajectory.steps[0]
        assert len(step.info["token_log_probs"]) == step.info["num_tokens"] > 0

    # 2. ADMIRE rewards: the successes go to the bank before the group is scored (a one-step success gives
    #    no list: a heuristic list needs two steps), the format errors pay the format penalty.
    cfg = load_config(overrides=["actor_rollout_ref.model.name=lm"])
    reward_cfg = RewardConfig.from_mapping(cfg)
    bank = MilestoneBank(tmp_path / "bank.sqlite")
    update_bank(bank, group, make_generator("heuristic"), key=str(cfg.milestone_reward.key))
    rewards = score_batch(group, bank, build_matcher(reward_cfg), reward_cfg, epoch=0)
    assert rewards[2][0].outcome == 1.0 and rewards[0][0].format < 0 and rewards[2][0].total > rewards[0][0].total
    batch = build_samples(group, rewards, "grpo_step")
    assert len(batch.samples) == 4 and all(s.old_token_log_probs for s in batch.samples)

    # 3. One per-token PPO update with real gradients, on the LoRA adapter only.
    right_text = Decision(group[2].steps[0].observation, (), group[2].steps[0].raw_output)
    with torch.no_grad():
        before = float(policy.log_prob([right_text])[0])
    frozen = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    optimizer = torch.optim.Adam(trainable_parameters(policy), lr=1e-2)
    stats = ppo_update(policy, optimizer, batch.samples, PPOConfig(epochs=1, minibatch_size=4), random.Random(0))
    assert stats["grad_norm"] > 0 and stats["steps_skipped"] == 0
    with torch.no_grad():
        after = float(policy.log_prob([right_text])[0])
    assert after > before  # the right answer (positive advantage) became more likely
    assert all(torch.equal(p, frozen[n]) for n, p in policy.named_parameters() if not p.requires_grad)

    # 4. The trainer's checkpoint (safetensors + JSON) restores the adapter exactly in a fresh policy.
    run = RunDir(tmp_path / "run").create()
    from admire.train_state import TrainState

    run.save_checkpoint(checkpoint_state(policy, optimizer, bank, random.Random(0), TrainState(epoch=1), {}), 0)
    fresh = LMPolicy(path=str(tiny_qwen2_5_vl_dir), max_new_tokens=24, lora=LORA, seed=0)
    fresh_optimizer = torch.optim.Adam(trainable_parameters(fresh), lr=1e-2)
    checkpoint = run.load_checkpoint()
    assert checkpoint is not None
    restore(checkpoint, fresh, fresh_optimizer, bank, random.Random(0))
    with torch.no_grad():
        assert float(fresh.log_prob([right_text])[0]) == pytest.approx(after, abs=1e-5)
    bank.close()


# --------------------------------------------------------------------------------------------------
# A text model through the fast (cached) rollout, on a two-step task, with milestones hit
# --------------------------------------------------------------------------------------------------

TWO_STEPS = "miniwob/enter-text"  # type the word, then press Submit


class Scripted:
    """Answers with the task's oracle in the policy's format, scored by the language model; with
    ``give_up_after`` it gives up (a failure) once that many steps were taken."""

    def __init__(self, lm, env, give_up_after: int | None = None) -> None:
        self.lm, self.env, self.give_up_after = lm, env, give_up_after

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        from admire.envs.oracles import get_oracle, give_up

        outputs = []
        for observation, history in zip(observations, histories, strict=True):
            if self.give_up_after is not None and len(history) >= self.give_up_after:
                action = validate_action(give_up())
            else:
                actions = tuple(s.action for s in history if s.action is not None)
                action = validate_action(get_oracle(TWO_STEPS)(observation, self.env.ground_truth(), actions))
            text = answer_text(action, describe(action, observation))
            with torch.no_grad():
                log_probs, mask = self.lm.token_log_probs([Decision(observation, tuple(history), text)])
            tokens = log_probs[0][mask[0] > 0].tolist()
            outputs.append(PolicyOutput(text=text, action=action, log_prob=sum(tokens),
                                        info={"token_log_probs": tokens, "num_tokens": len(tokens)}))
        return outputs


def test_a_text_model_trains_through_the_cached_rollout_on_a_two_step_task_with_milestones_hit(
    miniwob_env, tiny_qwen2_dir, tmp_path: Path,  # noqa: F811 - the fixture imported below
) -> None:
    from admire.agent.lm_policy import LMPolicy

    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=24, lora=LORA, seed=0)
    assert policy.rollout == "cached"  # the default for a text model
    cfg = load_config(overrides=["actor_rollout_ref.model.name=lm"])
    reward_cfg = RewardConfig.from_mapping(cfg)
    bank = MilestoneBank(tmp_path / "bank.sqlite")
    matcher = build_matcher(reward_cfg)
    optimizer = torch.optim.Adam(trainable_parameters(policy), lr=1e-2)
    right_answers: list[Decision] = []
    likelihoods: list[float] = []

    for update, seed in enumerate((21, 22)):
        task = Task(name=TWO_STEPS, seed=seed)
        # The model's own samples, through the fast path: their log-probs are the trained weights' own.
        sampled = collect(group_requests([task], 2), [miniwob_env], policy, max_steps=2, stats=RolloutStats())
        for trajectory in sampled:
            for position, step in enumerate(trajectory.steps):
                decision = Decision(step.observation, tuple(trajectory.steps[:position]), step.raw_output)
                with torch.no_grad():
                    plain, mask = policy.token_log_probs([decision])
                assert step.info["token_log_probs"] == pytest.approx(plain[0][mask[0] > 0].tolist(), abs=1e-4)
        right = collect(group_requests([task], 2), [miniwob_env], Scripted(policy, miniwob_env), max_steps=4,
                        stats=RolloutStats())
        assert [t.success for t in right] == [True, True] and [len(t.steps) for t in right] == [2, 2]
        group = [*sampled, *right]
        if update == 1:  # a trajectory that types the word, then gives up: it reaches the first milestone only
            group += collect(group_requests([task], 1), [miniwob_env], Scripted(policy, miniwob_env, 1),
                             max_steps=4, stats=RolloutStats())
        update_bank(bank, group, make_generator("heuristic"), key=str(cfg.milestone_reward.key))
        rewards = score_batch(group, bank, matcher, reward_cfg, epoch=update)
        assert rewards[2][-1].outcome == 1.0 and rewards[2][0].num_milestones == 2
        assert [r.matched_index for r in rewards[2]] == [0, 1] and rewards[2][0].hits == 2  # both, in order
        if update == 1:
            half = rewards[-1]
            assert group[-1].success is False and half[0].matched_index == 0 and half[0].hits == 1
            assert half[0].milestone > 0
            assert rewards[-1][0].total > rewards[0][0].total  # scaffolded above a format error
        batch = build_samples(group, rewards, "grpo_step")
        assert all(s.old_token_log_probs for s in batch.samples)
        right_answers.append(Decision(right[0].steps[0].observation, (), right[0].steps[0].raw_output))
        with torch.no_grad():
            likelihoods.append(float(policy.log_prob(right_answers[:1])[0]))
        stats = ppo_update(policy, optimizer, batch.samples, PPOConfig(epochs=1, minibatch_size=8),
                           random.Random(update))
        assert stats["grad_norm"] > 0 and stats["steps_skipped"] == 0

    with torch.no_grad():
        after = float(policy.log_prob(right_answers[:1])[0])
    assert after > likelihoods[0]  # two updates made the first right answer more likely

    run = RunDir(tmp_path / "run").create()
    from admire.train_state import TrainState

    run.save_checkpoint(checkpoint_state(policy, optimizer, bank, random.Random(0), TrainState(epoch=2), {}), 1)
    fresh = LMPolicy(path=str(tiny_qwen2_dir), max_new_tokens=24, lora=LORA, seed=0)
    checkpoint = run.load_checkpoint()
    assert checkpoint is not None
    restore(checkpoint, fresh, torch.optim.Adam(trainable_parameters(fresh), lr=1e-2), bank, random.Random(0))
    with torch.no_grad():
        assert float(fresh.log_prob(right_answers[:1])[0]) == pytest.approx(after, abs=1e-5)
    assert fresh.act([right_answers[0].observation], [()], greedy=True)[0].text == \
        policy.act([right_answers[0].observation], [()], greedy=True)[0].text  # the restored adapter acts alike
    bank.close()

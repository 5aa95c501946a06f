"""The ``admire_gui`` agent loop, built exactly as verl's agent-loop worker builds it (``hydra.utils.instantiate``
of its registry entry, inside a running event loop), against a stand-in for verl's token-in/token-out server.

On fakes: one sample per step with the stepwise contract, the same step records as the CPU rollout, format
errors as steps, crashes re-run and then excluded, envs leased one episode at a time and stepped off the event
loop. For real (``browser``): an episode of MiniWoB++'s click-test through ``admire serve``, the model served by
a stand-in backed by the session's tiny-qwen2.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import hydra
import numpy as np
import pytest
import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset

from admire.actions import format_output, validate_action
from admire.agent.prompts import build_messages
from admire.envs.base import ENVS
from admire.integrations.verl import agent_loop as gui
from admire.integrations.verl.dataset import task_row
from admire.rl.rollout import collect, group_requests
from admire.types import Observation, Screenshot, Task, Termination, Trajectory
from tests.support.fakes import ScriptedPolicy, SeededFormEnv
from tests.support.models import tiny_qwen2_dir  # noqa: F401 - the session's prepared tiny model
from tests.support.token_server import ScriptedTokenServer, TinyModelServer

FORM = Task(name="fake-form/login", seed=0, params={"name": "ann"})
TYPE_ANN = format_output(validate_action({"action_type": "input_text", "index": 0, "text": "ann"}), reason="type it")
CLICK_SUBMIT = format_output(validate_action({"action_type": "click", "index": 1}), reason="submit")
FAKE_ENV = {"src": ["fake-form"], "max_envs": [1], "max_steps": 4, "screenshots": False, "suite": "miniwob-smoke"}


@pytest.fixture(autouse=True)
def fresh_pools() -> Iterator[None]:
    """Each test builds its envs from its own registered backend: no pooled env outlives the test."""
    gui.close_env_pools()
    yield
    gui.close_env_pools()


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen2_dir):  # noqa: F811 - the fixture imported above
    return AutoTokenizer.from_pretrained(tiny_qwen2_dir, local_files_only=True)


def use_backend(monkeypatch: pytest.MonkeyPatch, **env_options: Any) -> list[SeededFormEnv]:
    """Register ``fake-form`` as a backend whose envs take ``env_options``; the list fills as envs are built."""
    built: list[SeededFormEnv] = []

    def factory(**options: Any) -> SeededFormEnv:
        env = ThreadRecordingEnv(**env_options, **options)
        built.append(env)
        return env

    monkeypatch.setitem(ENVS.entries, "fake-form", factory)
    return built


class ThreadRecordingEnv(SeededFormEnv):
    """A form env that notes the thread of every reset and step."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.threads: list[str] = []

    def reset(self, task: Task) -> Observation:
        self.threads.append(threading.current_thread().name)
        return super().reset(task)

    def step(self, action):
        self.threads.append(threading.current_thread().name)
        return super().step(action)


def verl_config(env: dict[str, Any], response_length: int = 64, **admire: Any) -> DictConfig:
    """The parts of verl's trainer config an agent loop reads, with the ADMIRE config under ``admire``."""
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4096,
                                                               "response_length": response_length}},
                             "data": {"apply_chat_template_kwargs": {}},
                             "admire": {"env": env, **admire}})


def build_loop(config: DictConfig, server: Any, tokenizer: Any) -> gui.AdmireGuiAgentLoop:
    """As ``AgentLoopWorker._run_agent_loop`` does (verl 0.9.1, agent_loop.py): call inside the event loop."""
    gui.register()
    return hydra.utils.instantiate(config=_agent_loop_registry["admire_gui"], trainer_config=DictConfigWrap(config),
                                   server_manager=server, tokenizer=tokenizer, processor=None, hf_model_type="qwen2",
                                   dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
                                   tools=ToolListWrap([]))


def row(task: Task = FORM, uid: str = "group-0", session_id: int = 0, index: int = 0) -> dict[str, Any]:
    """A dataset row as the worker passes it to ``run``: the row's columns plus verl's ``uid``/``session_id``."""
    return {**task_row(task, "train", index), "index": index, "uid": uid, "session_id": session_id}


def play(config: DictConfig, server: Any, tokenizer: Any, *rows: dict[str, Any]) -> list[list[Any]]:
    """Run one agent loop per row concurrently on one event loop; each run's outputs."""
    async def main() -> list[list[Any]]:
        loops = [build_loop(config, server, tokenizer) for _ in rows]
        return list(await asyncio.gather(*(loop.run({"temperature": 1.0}, **r) for loop, r in zip(loops, rows,
                                                                                                  strict=True))))
    return asyncio.run(main())


def solver(prompt: str, _call: int) -> str:
    """Types the name on the first screen, then submits (read off the prompt, so episodes may interleave)."""
    return TYPE_ANN if "none yet (this is the first step)" in prompt else CLICK_SUBMIT


def trajectory_of(outputs: list[Any]) -> Trajectory:
    return Trajectory.from_json(outputs[-1].extra_fields["admire_trajectory"])


def expected_prompt(tokenizer: Any, trajectory: Trajectory, i: int) -> str:
    """What the ``lm`` policy would read at step ``i``: its messages, rendered by the chat template."""
    messages = build_messages(trajectory.steps[i].observation, trajectory.steps[:i])
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# ------------------------------------------------------------------------------------------------- fakes


def test_registration_is_an_importable_target_and_idempotent() -> None:
    gui.register()
    gui.register()
    assert _agent_loop_registry["admire_gui"] == {"_target_": "admire.integrations.verl.agent_loop.AdmireGuiAgentLoop"}


def test_an_episode_is_one_sample_per_step_with_the_stepwise_contract(monkeypatch, tokenizer) -> None:
    use_backend(monkeypatch)
    server = ScriptedTokenServer(tokenizer, solver)
    (outputs,) = play(verl_config(FAKE_ENV), server, tokenizer, row(uid="g7", session_id=1, index=3))

    trajectory = trajectory_of(outputs)
    assert trajectory.termination is Termination.SUCCESS and trajectory.outcome == 1.0
    assert (trajectory.task, trajectory.group, trajectory.info["replica"], trajectory.info["uid"]) == (FORM, 3, 1, "g7")
    assert len(outputs) == len(trajectory.steps) == 2
    for i, (output, text) in enumerate(zip(outputs, [TYPE_ANN, CLICK_SUBMIT], strict=True)):
        assert tokenizer.decode(output.prompt_ids) == expected_prompt(tokenizer, trajectory, i)
        assert output.prompt_ids == server.requests[i].prompt_ids
        assert output.response_ids == [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        assert output.response_mask == [1] * len(output.response_ids)
        assert output.response_logprobs == [-0.5] * len(output.response_ids)
        assert output.reward_score == 1.0  # the outcome, for verl's validation score
        assert output.extra_fields == {
            "uid": "g7", "admire_traj_id": trajectory.id, "admire_step": i, "admire_num_steps": 2,
            "admire_excluded": False, "admire_trajectory": outputs[-1].extra_fields["admire_trajectory"] if i == 1
            else None, "reward_extra_info": {}, "global_steps": 0, "min_global_steps": 0, "max_global_steps": 0}
        step = trajectory.steps[i]
        assert step.raw_output == text and step.format_valid
        assert step.log_prob == pytest.approx(-0.5 * len(output.response_ids))
        assert step.info["token_log_probs"] == output.response_logprobs
    assert len({r.request_id for r in server.requests}) == 1  # one request id per episode
    sample = outputs[-1].as_dict()  # what verl's worker stores: the reward slot is the last response token
    assert sample["rm_scores"].tolist() == [0.0] * (len(outputs[-1].response_ids) - 1) + [1.0]


def test_verls_v1_worker_stores_each_step_as_its_own_sample_with_the_contract_fields(monkeypatch, tokenizer) -> None:
    """The outputs through verl's own post-processing (``AgentLoopWorkerTQ._agent_loop_postprocess``, text-only,
    no reward workers), with TransferQueue's put replaced by a recorder."""
    use_backend(monkeypatch)
    (outputs,) = play(verl_config(FAKE_ENV), ScriptedTokenServer(tokenizer, solver), tokenizer, row(uid="g1"))
    stored = verl_postprocess(monkeypatch, outputs, uid="g1", session_id=2, global_steps=5)

    assert stored["keys"] == ["g1_2_0", "g1_2_1"] and stored["partition_id"] == "train"
    fields = stored["fields"]
    assert fields["extra_fields"][1]["admire_trajectory"] == outputs[1].extra_fields["admire_trajectory"]
    assert [f["admire_step"] for f in fields["extra_fields"]] == [0, 1]
    assert all(f["reward_extra_info"] == {} for f in fields["extra_fields"])
    for i, output in enumerate(outputs):
        n = len(output.response_ids)
        assert fields["responses"][i].tolist() == output.response_ids
        assert fields["rm_scores"][i].tolist() == [0.0] * (n - 1) + [1.0]  # the outcome, on every step
        assert fields["rollout_log_probs"][i].tolist() == [-0.5] * n


def test_steps_are_recorded_as_the_cpu_rollout_records_them(monkeypatch, tokenizer) -> None:
    use_backend(monkeypatch)
    (outputs,) = play(verl_config(FAKE_ENV), ScriptedTokenServer(tokenizer, solver), tokenizer, row())
    from_verl = trajectory_of(outputs)
    (from_cpu,) = collect(group_requests([FORM], 1), [SeededFormEnv(max_steps=4)], ScriptedPolicy([TYPE_ANN,
                                                                                                   CLICK_SUBMIT]),
                          max_steps=4)
    fields = ("index", "observation", "raw_output", "action", "parse_error", "format_valid", "reason",
              "model_description", "grounded_description", "screen_changed")
    assert [s.model_dump(include=set(fields)) for s in from_verl.steps] == \
        [s.model_dump(include=set(fields)) for s in from_cpu.steps]
    assert from_verl.steps[0].grounded_description  # a description of what the typing did, as the CPU path writes
    assert (from_verl.goal, from_verl.termination, from_verl.outcome) == \
        (from_cpu.goal, from_cpu.termination, from_cpu.outcome)
    assert from_verl.info["raw_reward"] == from_cpu.info["raw_reward"]


def test_output_that_does_not_parse_is_a_format_error_step_and_the_env_is_not_stepped(monkeypatch, tokenizer) -> None:
    built = use_backend(monkeypatch)
    env = {**FAKE_ENV, "max_steps": 2}
    (outputs,) = play(verl_config(env), ScriptedTokenServer(tokenizer, lambda *_: "I will click it!!"), tokenizer,
                      row())
    trajectory = trajectory_of(outputs)
    assert trajectory.termination is Termination.MAX_STEPS and len(outputs) == 2
    assert all(not s.format_valid and s.action is None and s.parse_error for s in trajectory.steps)
    assert "format error" in tokenizer.decode(outputs[1].prompt_ids)  # the history tells the model
    assert built[0].resets == 1 and built[0]._steps == 0


def test_the_history_window_is_the_lm_policys_key_in_the_admire_config(monkeypatch, tokenizer) -> None:
    use_backend(monkeypatch)
    config = verl_config({**FAKE_ENV, "max_steps": 2}, actor_rollout_ref={"model": {"history_window": 0}})
    (outputs,) = play(config, ScriptedTokenServer(tokenizer, lambda *_: "no action"), tokenizer, row())
    assert "Previous steps: 1 (not shown)" in tokenizer.decode(outputs[1].prompt_ids)


def test_without_log_probs_from_the_server_the_samples_and_steps_carry_none(monkeypatch, tokenizer) -> None:
    use_backend(monkeypatch)
    server = ScriptedTokenServer(tokenizer, solver, log_probs=False)
    (outputs,) = play(verl_config(FAKE_ENV), server, tokenizer, row())
    assert [o.response_logprobs for o in outputs] == [None, None]
    assert [s.log_prob for s in trajectory_of(outputs).steps] == [None, None]


def test_a_crashed_episode_is_restarted_and_run_again(monkeypatch, tokenizer) -> None:
    built = use_backend(monkeypatch, crash_on_step=1, crash_times=1)  # the submit of the first try crashes
    server = ScriptedTokenServer(tokenizer, solver)
    (outputs,) = play(verl_config(FAKE_ENV), server, tokenizer, row())
    trajectory = trajectory_of(outputs)
    assert trajectory.termination is Termination.SUCCESS and trajectory.info["reruns"] == 1
    assert built[0].restarts == 1 and built[0].resets == 2
    assert len(server.requests) == 4 and len(outputs) == 2  # only the run that finished becomes samples
    assert not any(o.extra_fields["admire_excluded"] for o in outputs)


@pytest.mark.parametrize("max_reruns", [None, 0])
def test_an_episode_that_keeps_crashing_is_one_excluded_sample_without_trainable_tokens(
        monkeypatch, tokenizer, max_reruns) -> None:
    built = use_backend(monkeypatch, crash_on_step=0, crash_times=99)
    extra = {} if max_reruns is None else {"max_reruns": max_reruns}
    (outputs,) = play(verl_config(FAKE_ENV, **extra), ScriptedTokenServer(tokenizer, solver), tokenizer, row())
    attempts = (gui.DEFAULT_MAX_RERUNS if max_reruns is None else max_reruns) + 1
    assert built[0].resets == built[0].restarts == attempts
    (output,) = outputs
    trajectory = trajectory_of(outputs)
    assert trajectory.termination is Termination.ENV_ERROR and trajectory.excluded
    assert "the fake browser died" in trajectory.info["env_error"]
    assert output.response_mask == [0] and output.reward_score == 0.0
    assert {k: output.extra_fields[k] for k in ("admire_step", "admire_num_steps", "admire_excluded")} == \
        {"admire_step": 0, "admire_num_steps": 1, "admire_excluded": True}
    assert output.extra_fields["admire_traj_id"] == trajectory.id


def test_episodes_share_the_pool_one_at_a_time_and_envs_run_off_the_event_loop(monkeypatch, tokenizer) -> None:
    built = use_backend(monkeypatch)
    server = ScriptedTokenServer(tokenizer, solver)
    results = play(verl_config(FAKE_ENV), server, tokenizer, row(session_id=0), row(session_id=1))
    assert [trajectory_of(o).termination for o in results] == [Termination.SUCCESS] * 2
    assert len(built) == 1 and built[0].resets == 2  # env.max_envs=[1]: the second episode waited for the env
    assert {name.rsplit("_", 1)[0] for name in built[0].threads} == {"admire-env"}
    ids = [o[0].extra_fields["admire_traj_id"] for o in results]
    assert len(set(ids)) == 2


def test_a_config_without_the_admire_env_section_is_one_line_naming_the_fix(tokenizer) -> None:
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 64, "response_length": 8}},
                               "data": {}})

    async def main() -> None:
        build_loop(config, None, tokenizer)

    with pytest.raises(InstantiationException) as caught:  # hydra wraps what the constructor raised
        asyncio.run(main())
    assert isinstance(caught.value.__cause__, ValueError)
    assert re.fullmatch(r"the admire_gui agent loop needs the ADMIRE config under 'admire' in verl's config .*; "
                        r"start it with admire train trainer.backend=verl", str(caught.value.__cause__))


def test_a_row_that_names_no_task_is_refused(monkeypatch, tokenizer) -> None:
    use_backend(monkeypatch)
    bad = {"uid": "g", "session_id": 0, "raw_prompt": [{"role": "user", "content": "hi"}]}
    with pytest.raises(ValueError, match=r"admire_task=.*write_task_dataset"):
        play(verl_config(FAKE_ENV), ScriptedTokenServer(tokenizer, solver), tokenizer, bad)


# ----------------------------------------------------------------------------------- real, through the server


class ServedObservations:
    """Every observation a ``RemoteEnv`` received from the server, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from admire.envs.remote import RemoteEnv

        self.seen: list[Observation] = []
        reset, step = RemoteEnv.reset, RemoteEnv.step

        def recording_reset(env: RemoteEnv, task: Task) -> Observation:
            self.seen.append(reset(env, task))
            return self.seen[-1]

        def recording_step(env: RemoteEnv, action: Any) -> Any:
            result = step(env, action)
            self.seen.append(result.observation)
            return result

        monkeypatch.setattr(RemoteEnv, "reset", recording_reset)
        monkeypatch.setattr(RemoteEnv, "step", recording_step)


def admire_serve(*args: str) -> tuple[subprocess.Popen, str]:
    """``admire serve`` as a user starts it, on a free port, up and answering (as tests/envs/test_server_client.py)."""
    from admire.envs.remote import RemoteEnv
    from admire.server.background import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "admire.cli", "serve", "--port", str(port), *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    with RemoteEnv(url) as probe:
        while not probe.healthy():
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise AssertionError(f"admire serve did not come up: {server.communicate()[0].decode()[-2000:]}")
            time.sleep(0.2)
    return server, url


def click_the_button(prompt: str, call: int) -> str | None:
    """The first answer is the tiny model's own; the second clicks the button the prompt lists."""
    if call == 0:
        return None
    index = re.search(r"^(\d+): button ", prompt, re.MULTILINE)
    assert index, prompt
    return format_output(validate_action({"action_type": "click", "index": int(index.group(1))}), reason="the button")


@pytest.mark.browser
def test_an_episode_of_real_miniwob_through_admire_serve_with_a_tiny_model_behind_the_server(
        monkeypatch, tiny_qwen2_dir) -> None:  # noqa: F811 - the fixture imported above
    served = ServedObservations(monkeypatch)
    model = TinyModelServer(tiny_qwen2_dir, max_new_tokens=8, seed=0, respond=click_the_button)
    server, url = admire_serve("--num-devices", "1")
    try:
        env = {"src": [f"remote:{url}"], "max_envs": [1], "max_steps": 3, "screenshots": False,
               "suite": "miniwob-smoke"}
        task = Task(name="miniwob/click-test", seed=11)
        (outputs,) = play(verl_config(env, response_length=32), model, model.tokenizer, row(task, uid="u1"))
    finally:
        gui.close_env_pools()
        server.terminate()
        log = server.communicate(timeout=60)[0].decode(errors="replace")
    assert server.returncode == 0, log

    trajectory = trajectory_of(outputs)
    assert [s.format_valid for s in trajectory.steps] == [False, True]  # the tiny model's words, then the click
    assert trajectory.termination is Termination.SUCCESS and trajectory.outcome == 1.0
    assert trajectory.steps[1].grounded_description and "button" in trajectory.steps[1].grounded_description.lower()
    # The server sent two screens: the reset's and the click's result. The format error never reached it, so
    # both steps were taken on the first screen.
    assert len(served.seen) == 2 and [s.observation for s in trajectory.steps] == [served.seen[0]] * 2
    assert len(outputs) == 2
    for i, output in enumerate(outputs):  # each prompt is the screen the server sent, as the lm policy reads it
        assert model.tokenizer.decode(output.prompt_ids) == expected_prompt(model.tokenizer, trajectory, i)
        assert 'button "Click Me!"' in model.tokenizer.decode(output.prompt_ids)
        assert len(output.response_logprobs) == len(output.response_ids) == len(output.response_mask)
        assert all(math.isfinite(p) and p <= 0.0 for p in output.response_logprobs)
        assert output.extra_fields["admire_step"] == i and output.extra_fields["uid"] == "u1"
    assert 1 <= len(outputs[0].response_ids) <= 8  # sampled by the model within max_new_tokens
    text = outputs[-1].extra_fields["admire_trajectory"]
    assert Trajectory.from_json(text) == trajectory and Trajectory.from_json(text).to_json() == text
    assert json.loads(text)["task"] == {"name": "miniwob/click-test", "seed": 11, "max_steps": None, "params": {}}


# ------------------------------------------------------------------------------ what verl reads of every sample


class VersionedTokenServer(ScriptedTokenServer):
    """A scripted server that reports the weight version of each answer, as verl's servers do."""

    def __init__(self, tokenizer: Any, respond: Any, versions: list[int]) -> None:
        super().__init__(tokenizer, respond)
        self.versions = versions

    async def generate(self, request_id: str, **kwargs: Any):
        output = await super().generate(request_id, **kwargs)
        output.extra_fields["global_steps"] = self.versions[min(len(self.requests) - 1, len(self.versions) - 1)]
        return output


def test_every_sample_carries_the_weight_versions_its_episode_was_sampled_with(monkeypatch, tokenizer) -> None:
    """verl tags each stored sample with min/max_global_steps and reads them as ints in ``_compute_metrics``."""
    use_backend(monkeypatch)
    server = VersionedTokenServer(tokenizer, solver, versions=[3, 4])
    (outputs,) = play(verl_config(FAKE_ENV), server, tokenizer, {**row(), "global_steps": 5})
    assert [(o.extra_fields["min_global_steps"], o.extra_fields["max_global_steps"]) for o in outputs] == [(3, 4)] * 2
    assert np.array([o.extra_fields["min_global_steps"] for o in outputs], dtype=int).tolist() == [3, 3]
    assert trajectory_of(outputs).info["weight_versions"] == [3, 4]


def test_without_versions_from_the_server_a_sample_has_the_rollout_steps_weights(monkeypatch, tokenizer) -> None:
    use_backend(monkeypatch)
    (outputs,) = play(verl_config(FAKE_ENV), ScriptedTokenServer(tokenizer, solver), tokenizer,
                      {**row(), "global_steps": 5})
    assert {(o.extra_fields["min_global_steps"], o.extra_fields["max_global_steps"]) for o in outputs} == {(4, 4)}
    assert trajectory_of(outputs).info["weight_versions"] == []  # what the server reported: nothing


def verl_postprocess(monkeypatch: pytest.MonkeyPatch, outputs: list[Any], **kwargs: Any) -> dict[str, Any]:
    """``outputs`` through verl's ``AgentLoopWorkerTQ._agent_loop_postprocess``; what it would put into TQ."""
    from verl.trainer.ppo.v1 import agent_loop_tq

    stored: dict[str, Any] = {}

    async def put(*, keys, fields, tags, partition_id):
        stored.update(keys=keys, fields=fields, tags=tags, partition_id=partition_id)

    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_batch_put", put)
    worker_class = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__
    worker = object.__new__(worker_class)
    worker.reward_loop_worker_handles, worker.distillation_enabled, worker.processor = None, False, None
    asyncio.run(worker_class._agent_loop_postprocess(worker, outputs, False, **kwargs))
    return stored


def test_a_batch_with_an_excluded_episode_keeps_every_field_verl_reads(monkeypatch, tokenizer) -> None:
    """A group of one finished and one crashed episode, each through verl's post-processing, then stacked as
    TransferQueue returns a batch: every row has ``rollout_log_probs`` (TQ keeps a field only if all rows have
    it, and verl's debug metrics index it), and every tag's weight versions read as ints."""
    from verl.utils.debug.metrics import calculate_debug_metrics

    config = verl_config(FAKE_ENV, max_reruns=0)
    config.actor_rollout_ref.rollout.calculate_log_probs = True
    use_backend(monkeypatch)
    (done,) = play(config, VersionedTokenServer(tokenizer, solver, versions=[7]), tokenizer, row(uid="g"))
    gui.close_env_pools()
    use_backend(monkeypatch, crash_on_step=0, crash_times=99)
    (crashed,) = play(config, VersionedTokenServer(tokenizer, solver, versions=[7]), tokenizer,
                      {**row(uid="g"), "global_steps": 8})  # it crashed before asking: step 8's weights, 7
    assert trajectory_of(crashed).excluded and crashed[0].response_logprobs == [0.0]

    columns: dict[str, list[torch.Tensor]] = {"responses": [], "response_mask": [], "rollout_log_probs": []}
    tags = []
    for session, outputs in enumerate((done, crashed)):
        stored = verl_postprocess(monkeypatch, outputs, uid="g", session_id=session, global_steps=8)
        for name, column in columns.items():
            assert name in stored["fields"].keys()  # noqa: SIM118 - TQ keeps a field only if every row has it
            column.extend(stored["fields"][name].unbind())
        tags += stored["tags"]
    assert np.array([t["min_global_steps"] for t in tags], dtype=int).tolist() == [7, 7, 7]
    assert np.array([t["max_global_steps"] for t in tags], dtype=int).tolist() == [7, 7, 7]
    padded = {name: torch.nn.utils.rnn.pad_sequence(column, batch_first=True) for name, column in columns.items()}
    from verl import DataProto

    data = DataProto.from_dict(tensors={**padded, "old_log_probs": padded["rollout_log_probs"]})
    metrics = calculate_debug_metrics(data)
    assert math.isfinite(metrics["training/rollout_probs_diff_max"])


def test_an_excluded_placeholder_has_a_text_prompt_and_no_image(monkeypatch, tokenizer) -> None:
    """Even when its crashed attempt had turns: their prompts may hold a vision model's image tokens."""
    use_backend(monkeypatch, crash_on_step=1, crash_times=99)
    (outputs,) = play(verl_config(FAKE_ENV, max_reruns=0), ScriptedTokenServer(tokenizer, solver), tokenizer, row())
    (placeholder,) = outputs
    assert placeholder.multi_modal_data == {} and placeholder.response_mask == [0]
    assert "the env crashed (excluded episode)" in tokenizer.decode(placeholder.prompt_ids)


class ScreenshotEnv(ThreadRecordingEnv):
    """A form env whose every screen has a (fake) PNG screenshot, distinct per step."""

    def reset(self, task: Task) -> Observation:
        return self._shot(super().reset(task))

    def step(self, action):
        result = super().step(action)
        return dataclasses.replace(result, observation=self._shot(result.observation))

    def _shot(self, observation: Observation) -> Observation:
        png = b"\x89PNG fake screen " + str(len(self.threads)).encode()
        return observation.model_copy(update={"screenshot": Screenshot.from_png(png, 1, 1)})


def test_screenshots_cross_ray_as_hashes_and_their_bytes_go_to_the_run_folder(monkeypatch, tokenizer,
                                                                               tmp_path) -> None:
    monkeypatch.setitem(ENVS.entries, "fake-form", lambda **options: ScreenshotEnv(**options))
    env = {**FAKE_ENV, "screenshots": True}
    (outputs,) = play(verl_config(env, run_dir=str(tmp_path)), ScriptedTokenServer(tokenizer, solver), tokenizer,
                      row())
    text = outputs[-1].extra_fields["admire_trajectory"]
    shots = [s.observation.screenshot for s in Trajectory.from_json(text).steps]
    assert shots and all(s is not None and s.png is None for s in shots)
    assert all((tmp_path / "trajectories" / "screenshots" / f"{s.ref}.png").read_bytes().startswith(b"\x89PNG")
               for s in shots)
    assert "fake screen" not in text and len(text) < 20_000

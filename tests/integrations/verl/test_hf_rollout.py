"""The ``admire_hf`` rollout: its server on the session's tiny-qwen2 (called as verl's server manager calls it),
its registration in verl's two rollout registries, and its adapter's weight sync. The whole path inside a real
``main_ppo`` run is ``test_cpu_smoke.py``'s."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from admire.integrations.verl import hf_rollout
from admire.integrations.verl.hf_rollout import (
    HFRolloutReplica,
    HFRolloutServer,
    HFServerAdapter,
    buckets,
    stop_token_ids,
    token_budget,
    token_log_probs,
    trim_after_stop,
)
from tests.support.models import tiny_qwen2_dir  # noqa: F401 - the session's prepared tiny model


@pytest.fixture(scope="module")
def server(tiny_qwen2_dir) -> HFRolloutServer:  # noqa: F811
    return HFRolloutServer(str(tiny_qwen2_dir), prompt_length=64, response_length=12, seed=0)


PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


def test_generate_answers_token_ids_with_the_log_probs_of_the_weights_that_sampled_them(
        server, tiny_qwen2_dir) -> None:  # noqa: F811
    out = asyncio.run(server.generate(prompt_ids=PROMPT, sampling_params={"temperature": 0.7, "logprobs": True},
                                      request_id="r"))
    assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir, local_files_only=True).eval()
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT + out.token_ids])).logits[0, len(PROMPT) - 1:-1] / 0.7
    plain = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(out.log_probs), plain, atol=1e-4)
    assert out.stop_reason == "completed" and out.extra_fields["finish_reason"] in ("stop", "length")


def test_greedy_requests_are_repeatable_and_report_the_weight_version(server) -> None:
    asyncio.run(server.commit_weights(4))  # nothing staged: only the version
    first, second = (asyncio.run(server.generate(prompt_ids=PROMPT, sampling_params={"temperature": 0},
                                                 request_id=str(i))) for i in range(2))
    assert first.token_ids == second.token_ids and first.extra_fields["global_steps"] == 4


def test_the_token_budget_is_the_requests_or_what_is_left_of_the_model_length() -> None:
    assert token_budget({"max_tokens": 5}, 10, 64, 12) == 5
    assert token_budget({}, 10, 64, 12) == 12
    assert token_budget({}, 70, 64, 12) == 6  # the model length is prompt + response length
    assert token_budget({"max_new_tokens": 50}, 70, 64, 12) == 6
    assert token_budget({}, 90, 64, 12) == 1


def test_an_answer_ends_at_its_first_stop_token() -> None:
    assert trim_after_stop([5, 6, 2, 2, 2], [2]) == [5, 6, 2]
    assert trim_after_stop([5, 6], [2]) == [5, 6]


def test_stop_tokens_come_from_the_generation_config_then_the_tokenizer() -> None:
    from types import SimpleNamespace as Namespace

    assert stop_token_ids(Namespace(eos_token_id=[7, 9]), Namespace(eos_token_id=9)) == [7, 9]
    assert stop_token_ids(Namespace(eos_token_id=None), Namespace(eos_token_id=4)) == [4]
    with pytest.raises(ValueError, match="no end-of-sequence token"):
        stop_token_ids(Namespace(eos_token_id=None), Namespace(eos_token_id=None))


def test_log_probs_of_a_greedy_answer_use_the_raw_logits() -> None:
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    assert token_log_probs(logits, [0, 1], 0.0) == pytest.approx(torch.log_softmax(logits, -1)[[0, 1], [0, 1]].tolist())
    assert token_log_probs(logits, [0, 1], 2.0) == pytest.approx(
        torch.log_softmax(logits / 2, -1)[[0, 1], [0, 1]].tolist())


def test_weights_from_the_actor_replace_the_servers_at_commit_and_unknown_names_are_refused(
        tiny_qwen2_dir) -> None:  # noqa: F811
    server = HFRolloutServer(str(tiny_qwen2_dir), prompt_length=64, response_length=4)
    before = asyncio.run(server.state())["checksum"]
    trained = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir, local_files_only=True)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)
    sent = list(trained.state_dict().items())
    half = len(sent) // 2
    asyncio.run(server.stage_weights(sent[:half]))
    assert asyncio.run(server.stage_weights(sent[half:])) == len(sent)
    staged = asyncio.run(server.state())
    assert staged["checksum"] == pytest.approx(before) and staged["global_steps"] is None  # nothing applied yet
    assert asyncio.run(server.commit_weights(6)) == len(sent)
    after = asyncio.run(server.state())
    assert after["checksum"] == pytest.approx(float(sum(p.double().sum() for p in trained.parameters())), rel=1e-6)
    assert after["global_steps"] == 6
    with pytest.raises(ValueError, match="this model lacks"):
        asyncio.run(server.stage_weights([("lm_head.bias", torch.zeros(3))]))


def test_the_models_own_sampling_settings_are_not_applied(tiny_qwen2_dir, tmp_path) -> None:  # noqa: F811
    """A checkpoint's generation config (repetition_penalty, as Qwen2.5 Instruct ships) would draw tokens from
    another distribution than the plain softmax the returned log-probs, and the actor, describe."""
    import json
    import shutil

    model = tmp_path / "penalised"
    shutil.copytree(tiny_qwen2_dir, model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "repetition_penalty": 5.0, "top_k": 1}))
    server = HFRolloutServer(str(model), prompt_length=64, response_length=12)
    out = asyncio.run(server.generate(prompt_ids=PROMPT, sampling_params={"temperature": 0}, request_id="r"))
    plain = AutoModelForCausalLM.from_pretrained(model, local_files_only=True).eval()
    with torch.no_grad():
        logits = plain(torch.tensor([PROMPT + out.token_ids])).logits[0, len(PROMPT) - 1:-1]
    assert out.token_ids == logits.argmax(-1).tolist()  # greedy on the raw logits, every token
    with pytest.raises(ValueError, match=r"repetition_penalty=1\.1 is not supported"):
        asyncio.run(server.generate(prompt_ids=PROMPT, sampling_params={"repetition_penalty": 1.1}, request_id="r"))


def test_no_log_probs_when_verl_does_not_ask_for_them(server) -> None:
    out = asyncio.run(server.generate(prompt_ids=PROMPT, sampling_params={"temperature": 1.0, "logprobs": False},
                                      request_id="r"))
    assert out.token_ids and out.log_probs is None


def test_images_are_refused_in_one_line(server) -> None:
    with pytest.raises(ValueError, match="text models only"):
        asyncio.run(server.generate(prompt_ids=PROMPT, sampling_params={}, request_id="r", image_data=[object()]))


def test_buckets_copy_to_the_cpu_in_size_limited_lists_and_a_non_leader_only_drains() -> None:
    tensors = [(f"w{i}", torch.ones(256)) for i in range(5)]  # 1 KiB each
    drained: list[str] = []

    def weights():
        for name, tensor in tensors:
            drained.append(name)
            yield name, tensor

    lists = list(buckets(weights(), 2048))
    assert [[n for n, _ in b] for b in lists] == [["w0", "w1"], ["w2", "w3"], ["w4"]]
    assert lists[0][0][1] is not tensors[0][1]
    drained.clear()
    assert list(buckets(weights(), 2048, keep=False)) == [] and drained == [n for n, _ in tensors]


def test_registered_in_both_of_verls_rollout_registries() -> None:
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    hf_rollout.register()
    assert get_rollout_replica_class(hf_rollout.ROLLOUT_NAME) is HFRolloutReplica
    assert get_rollout_class(hf_rollout.ROLLOUT_NAME, "async") is HFServerAdapter


def test_the_adapter_sends_from_the_replicas_first_rank_only_and_every_rank_drains(monkeypatch) -> None:
    """With a replica of two ranks (tensor parallel 2), ranks 0 and 2 lead replicas 0 and 1; ranks 1 and 3
    send nothing but still read every tensor (each is a collective the other ranks wait on)."""
    from types import SimpleNamespace

    class Remote:
        def __init__(self, log: list[Any], name: str) -> None:
            self.log, self.name = log, name

        def remote(self, *args: Any) -> Any:
            self.log.append((self.name, args))
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future

    class Server:
        def __init__(self) -> None:
            self.log: list[Any] = []
            self.stage_weights = Remote(self.log, "stage_weights")
            self.commit_weights = Remote(self.log, "commit_weights")

    config = SimpleNamespace(tensor_model_parallel_size=2, data_parallel_size=1, pipeline_model_parallel_size=1)
    for rank, replica, leads in (("0", 0, True), ("1", 0, False), ("2", 1, True), ("3", 1, False)):
        monkeypatch.setenv("RANK", rank)
        adapter = HFServerAdapter(config=config, model_config=SimpleNamespace(), device_mesh=None)
        assert (adapter.replica_rank, adapter.is_leader) == (replica, leads)
        adapter._server = Server()
        read: list[str] = []

        def weights(read: list[str] = read):
            for name in ("a", "b"):
                read.append(name)
                yield name, torch.ones(2)

        asyncio.run(adapter.update_weights(weights(), global_steps=3))
        assert read == ["a", "b"]
        calls = [(name, args[0] if name == "commit_weights" else [n for n, _ in args[0]])
                 for name, args in adapter._server.log]
        assert calls == ([("stage_weights", ["a", "b"]), ("commit_weights", 3)] if leads else [])

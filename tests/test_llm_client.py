"""The OpenAI-compatible chat client, against a real local HTTP server (tests/openai_stub.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from admire.milestones.llm import ChatClient, LLMError, chat_completions_url, make_chat_client, parse_json_answer
from tests.openai_stub import OpenAIStub, Reply, completion, dropped, error, hang, raw

MESSAGES = [{"role": "user", "content": "Say hi"}]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def client_for(stub: OpenAIStub, **options: object) -> ChatClient:
    settings: dict = {"timeout": 5.0, "max_retries": 2, "backoff": 0.01, **options}
    return ChatClient(stub.url, "stub-model", **settings)


def test_good_answer_returns_first_choice_content_and_sends_openai_body(stub: OpenAIStub) -> None:
    stub.script(completion("hi there"))
    assert client_for(stub, temperature=0.2).chat(MESSAGES) == "hi there"
    [request] = stub.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {"model": "stub-model", "messages": MESSAGES, "temperature": 0.2}


def test_extra_params_go_into_the_body_and_override_defaults(stub: OpenAIStub) -> None:
    stub.script(completion("ok"))
    client_for(stub).chat(MESSAGES, max_tokens=64, temperature=0.7)
    body = stub.requests[0].body
    assert body["max_tokens"] == 64
    assert body["temperature"] == 0.7


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/chat/completions"])
def test_base_url_with_or_without_v1_reaches_the_chat_route(stub: OpenAIStub, suffix: str) -> None:
    stub.script(completion("ok"))
    client = ChatClient(stub.root_url + suffix, "stub-model", max_retries=0)
    assert client.chat(MESSAGES) == "ok"
    assert [r.path for r in stub.requests] == ["/v1/chat/completions"]


def test_chat_completions_url_rule() -> None:
    assert chat_completions_url("http://h:8000") == "http://h:8000/v1/chat/completions"
    assert chat_completions_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"
    assert chat_completions_url("https://api.x.com/openai/v1") == "https://api.x.com/openai/v1/chat/completions"
    with pytest.raises(ValueError, match="http"):
        chat_completions_url("localhost:8000")
    with pytest.raises(ValueError, match="base_url"):
        chat_completions_url("")


def test_server_error_then_success_is_retried(stub: OpenAIStub) -> None:
    stub.script(error(500, "overloaded"), completion("second time lucky"))
    assert client_for(stub).chat(MESSAGES) == "second time lucky"
    assert len(stub.requests) == 2
    assert stub.requests[0].body == stub.requests[1].body


def test_rate_limit_then_success_is_retried(stub: OpenAIStub) -> None:
    stub.script(error(429, "slow down"), completion("ok"))
    assert client_for(stub).chat(MESSAGES) == "ok"
    assert len(stub.requests) == 2


def test_dropped_connection_then_success_is_retried(stub: OpenAIStub) -> None:
    stub.script(dropped(), completion("ok"))
    assert client_for(stub).chat(MESSAGES) == "ok"
    assert len(stub.requests) == 2


def test_persistent_server_error_raises_after_max_retries(stub: OpenAIStub) -> None:
    stub.default = error(500, "model crashed")
    with pytest.raises(LLMError, match=r"HTTP 500.*model crashed") as caught:
        client_for(stub, max_retries=3).chat(MESSAGES)
    assert len(stub.requests) == 4  # one try and three retries
    assert caught.value.status == 500
    assert caught.value.attempts == 4
    assert "attempt 4 of 4" in str(caught.value)


def test_retries_wait_with_exponential_backoff(stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr("admire.milestones.llm.time.sleep", waits.append)
    stub.script(error(500), error(502), error(503), completion("ok"))
    assert client_for(stub, max_retries=3, backoff=0.5).chat(MESSAGES) == "ok"
    assert waits == [0.5, 1.0, 2.0]


def test_client_error_is_not_retried(stub: OpenAIStub) -> None:
    stub.script(error(400, "context length exceeded"), completion("never sent"))
    with pytest.raises(LLMError, match=r"HTTP 400.*context length exceeded") as caught:
        client_for(stub, max_retries=3).chat(MESSAGES)
    assert len(stub.requests) == 1
    assert stub.pending() == 1
    assert caught.value.status == 400


def test_timeout_raises_llm_error_after_retries(stub: OpenAIStub) -> None:
    stub.script(hang(2.0), hang(2.0))
    with pytest.raises(LLMError, match="timeout") as caught:
        client_for(stub, timeout=0.3, max_retries=1).chat(MESSAGES)
    assert len(stub.requests) == 2
    assert caught.value.status is None


def test_timeout_then_success_is_retried(stub: OpenAIStub) -> None:
    stub.script(hang(2.0), completion("ok"))
    assert client_for(stub, timeout=0.3, max_retries=1).chat(MESSAGES) == "ok"
    assert len(stub.requests) == 2


def test_api_key_from_the_environment_is_sent_as_bearer(stub: OpenAIStub, monkeypatch) -> None:
    monkeypatch.setenv("ADMIRE_TEST_LLM_KEY", "sk-test-123")
    stub.script(completion("ok"))
    client_for(stub, api_key_env="ADMIRE_TEST_LLM_KEY").chat(MESSAGES)
    assert stub.requests[0].headers["authorization"] == "Bearer sk-test-123"
    assert "sk-test-123" not in repr(client_for(stub, api_key_env="ADMIRE_TEST_LLM_KEY"))


def test_no_authorization_header_without_a_key(stub: OpenAIStub, monkeypatch) -> None:
    monkeypatch.delenv("ADMIRE_TEST_LLM_KEY", raising=False)
    stub.script(completion("ok"))
    client_for(stub, api_key_env="ADMIRE_TEST_LLM_KEY").chat(MESSAGES)
    assert "authorization" not in stub.requests[0].headers


def test_non_json_body_is_a_malformed_response(stub: OpenAIStub) -> None:
    stub.script(raw("<html>Bad Gateway from proxy</html>"))
    with pytest.raises(LLMError, match=r"not JSON.*Bad Gateway from proxy"):
        client_for(stub).chat(MESSAGES)
    assert len(stub.requests) == 1


@pytest.mark.parametrize(
    ("reply", "what"),
    [
        (Reply(body=b'{"no": "choices"}'), "no 'choices'"),
        (Reply(body=b'{"choices": []}'), "no 'choices'"),
        (completion(None), "content is not a string"),
        (Reply(body=b"[1, 2]"), "not a JSON object"),
    ],
)
def test_json_without_content_is_a_malformed_response(stub: OpenAIStub, reply: Reply, what: str) -> None:
    stub.script(reply)
    with pytest.raises(LLMError, match=what):
        client_for(stub).chat(MESSAGES)


def test_unreachable_server_raises_after_retries() -> None:
    server = OpenAIStub().start()
    url = server.url
    server.stop()
    with pytest.raises(LLMError, match="cannot connect") as caught:
        ChatClient(url, "m", max_retries=1, backoff=0.01, timeout=1.0).chat(MESSAGES)
    assert caught.value.attempts == 2


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="model"):
        ChatClient("http://localhost:8000", " ")
    with pytest.raises(ValueError, match="timeout"):
        ChatClient("http://localhost:8000", "m", timeout=0)
    with pytest.raises(ValueError, match="max_retries"):
        ChatClient("http://localhost:8000", "m", max_retries=-1)


# --------------------------------------------------------------------------------------------------
# make_chat_client
# --------------------------------------------------------------------------------------------------

def test_make_chat_client_reads_the_config_keys(stub: OpenAIStub) -> None:
    client = make_chat_client({"base_url": stub.url, "model": "served", "api_key_env": "K", "timeout": "2.5",
                               "max_retries": 1, "generator": "llm"})
    assert (client.model, client.api_key_env, client.timeout, client.max_retries) == ("served", "K", 2.5, 1)
    stub.script(completion("ok"))
    assert client.chat(MESSAGES) == "ok"


@pytest.mark.parametrize(("cfg", "missing"), [({"model": "m"}, "'base_url'"),
                                              ({"base_url": "http://h:1"}, "'model'"),
                                              ({}, "'base_url' and 'model'")])
def test_make_chat_client_names_missing_keys(cfg: dict, missing: str) -> None:
    with pytest.raises(ValueError, match=f"missing {missing}"):
        make_chat_client(cfg)


def test_make_chat_client_names_a_badly_typed_key() -> None:
    with pytest.raises(ValueError, match="'timeout' must be a float"):
        make_chat_client({"base_url": "http://h:1", "model": "m", "timeout": "soon"})


# --------------------------------------------------------------------------------------------------
# parse_json_answer
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text",
    [
        '{"milestones": ["a", "b"]}',
        '```json\n{"milestones": ["a", "b"]}\n```',
        'Sure! Here is the answer:\n{"milestones": ["a", "b"]}\nHope this helps.',
        '<think>maybe {"milestones": ["x"]}?</think>\n```\n{"milestones": ["a", "b"]}\n```',
        'For example {"other": 1}; the answer is {"milestones": ["a", "b"]}',
    ],
)
def test_parse_json_answer_finds_the_object_among_chatter(text: str) -> None:
    assert parse_json_answer(text, key="milestones") == {"milestones": ["a", "b"]}


def test_parse_json_answer_without_key_takes_the_first_object() -> None:
    assert parse_json_answer('one {"a": 1} two {"b": 2}') == {"a": 1}


@pytest.mark.parametrize("text", ["no json here", '{"milestones": [', '{"other": 1}'])
def test_parse_json_answer_says_what_it_found(text: str) -> None:
    with pytest.raises(ValueError, match="no a JSON object with 'milestones' in the answer"):
        parse_json_answer(text, key="milestones")

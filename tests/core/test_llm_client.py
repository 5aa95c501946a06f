"""The OpenAI-compatible chat client, against a real local HTTP server (tests/support/openai_stub.py).

Every test runs on both transports: the ``openai`` package (installed in the dev environment) and the
standard-library fallback, which a test gets by making ``import openai`` fail as it does without the
``llm`` extra.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from email.utils import formatdate

import pytest

from admire.llm import (
    ChatClient,
    LLMError,
    chat_completions_url,
    make_chat_client,
    parse_json_answer,
)
from admire.retrying import retry_after_seconds
from tests.support.openai_stub import OpenAIStub, Reply, completion, dropped, error, hang, raw

MESSAGES = [{"role": "user", "content": "Say hi"}]


@pytest.fixture(params=["openai", "urllib"], autouse=True)
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The transport every client of the test uses; ``urllib`` hides the ``openai`` package."""
    if request.param == "openai":
        pytest.importorskip("openai")
    else:
        monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` raises ImportError
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return request.param


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sleeps the client asks for between tries, recorded instead of slept."""
    asked: list[float] = []
    monkeypatch.setattr("admire.llm.time.sleep", asked.append)
    return asked


def with_headers(reply: Reply, **headers: str) -> Reply:
    return Reply(status=reply.status, body=reply.body, headers=(*reply.headers, *headers.items()))


def client_for(stub: OpenAIStub, **options: object) -> ChatClient:
    settings: dict = {"timeout": 5.0, "max_retries": 2, "backoff": 0.01, **options}
    return ChatClient(stub.url, "stub-model", **settings)


def test_the_transport_is_the_openai_package_when_installed_else_the_stdlib(stub: OpenAIStub, transport: str) -> None:
    client = client_for(stub)
    assert client.transport == transport
    assert f"transport={transport!r}" in repr(client)


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


def test_retries_wait_with_exponential_backoff(stub: OpenAIStub, waits: list[float]) -> None:
    stub.script(error(500), error(502), error(503), completion("ok"))
    assert client_for(stub, max_retries=3, backoff=0.5, jitter=0).chat(MESSAGES) == "ok"
    assert waits == [0.5, 1.0, 2.0]


def test_backoff_jitter_stays_within_its_bounds_and_varies(stub: OpenAIStub, waits: list[float]) -> None:
    stub.default = error(503)
    client = client_for(stub, max_retries=6, backoff=0.5, jitter=0.5)
    client._random = random.Random(7)
    with pytest.raises(LLMError):
        client.chat(MESSAGES)
    assert len(waits) == 6
    for retry, wait in enumerate(waits, start=1):
        base = 0.5 * 2 ** (retry - 1)
        assert 0.5 * base <= wait <= 1.5 * base
    assert len({round(w / (0.5 * 2 ** i), 6) for i, w in enumerate(waits)}) > 1  # not one fixed factor


def test_backoff_never_exceeds_max_wait(stub: OpenAIStub, waits: list[float]) -> None:
    stub.default = error(500)
    with pytest.raises(LLMError):
        client_for(stub, max_retries=5, backoff=1.0, jitter=0, max_wait=3.0).chat(MESSAGES)
    assert waits == [1.0, 2.0, 3.0, 3.0, 3.0]


def test_retry_after_in_seconds_is_waited_out_instead_of_the_backoff(stub: OpenAIStub, waits: list[float]) -> None:
    stub.script(with_headers(error(429, "slow down"), **{"Retry-After": "7"}),
                with_headers(error(503, "busy"), **{"Retry-After": "0.25"}), error(500), completion("ok"))
    assert client_for(stub, max_retries=3, backoff=0.5, jitter=0).chat(MESSAGES) == "ok"
    assert waits == [7.0, 0.25, 2.0]  # the third retry had no Retry-After: the backoff of retry 3


def test_retry_after_as_an_http_date_is_waited_out(stub: OpenAIStub, waits: list[float]) -> None:
    import time

    stub.script(with_headers(error(429), **{"Retry-After": formatdate(time.time() + 30, usegmt=True)}),
                completion("ok"))
    assert client_for(stub, max_retries=1).chat(MESSAGES) == "ok"
    [wait] = waits
    assert 27.0 <= wait <= 30.0  # the date has one-second resolution


def test_a_retry_after_longer_than_max_wait_ends_the_request(stub: OpenAIStub, waits: list[float]) -> None:
    stub.script(with_headers(error(429, "quota"), **{"Retry-After": "3600"}), completion("never sent"))
    with pytest.raises(LLMError, match=r"asked to wait 3600 s \(Retry-After\), more than max_wait=60 s") as caught:
        client_for(stub, max_retries=3, max_wait=60).chat(MESSAGES)
    assert waits == []
    assert caught.value.status == 429
    assert len(stub.requests) == 1


@pytest.mark.parametrize(("header", "seconds"), [("5", 5.0), (" 1.5 ", 1.5), ("-3", 0.0),
                                                 ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
                                                 ("soon", None), ("", None), (None, None), ("nan", None)])
def test_retry_after_seconds_reads_both_forms(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header) == seconds


def test_retry_after_seconds_counts_from_now_for_a_date() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds(formatdate(now + 12, usegmt=True), now=now) == pytest.approx(12.0)


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
    with pytest.raises(ValueError, match="jitter"):
        ChatClient("http://localhost:8000", "m", jitter=1.5)
    with pytest.raises(ValueError, match="OPENAI_BASE_URL"):
        ChatClient(None, "m")


def test_openai_base_url_is_the_endpoint_when_the_config_names_none(stub: OpenAIStub, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
    stub.script(completion("from the environment"), completion("again"))
    assert ChatClient(None, "m", max_retries=0).chat(MESSAGES) == "from the environment"
    assert make_chat_client({"model": "m", "base_url": None}).chat(MESSAGES) == "again"
    assert [r.path for r in stub.requests] == ["/v1/chat/completions"] * 2


def test_a_configured_base_url_wins_over_openai_base_url(stub: OpenAIStub, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    stub.script(completion("ok"))
    assert client_for(stub).chat(MESSAGES) == "ok"


def test_the_api_key_defaults_to_openai_api_key(stub: OpenAIStub, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default")
    stub.script(completion("ok"))
    make_chat_client({"base_url": stub.url, "model": "m", "api_key_env": None}).chat(MESSAGES)
    assert stub.requests[0].headers["authorization"] == "Bearer sk-default"


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

"""The OpenAI-compatible chat client (vLLM, SGLang, hosted APIs) of the LLM judge and the LLM milestone generator.

Two transports behind one ``ChatClient``: the ``openai`` package when it is installed (the ``llm`` extra,
``pip install 'admire[llm]'``), and the standard library's ``urllib`` when it is not, so the core install
needs no HTTP dependency. Either way the client does its own retrying (the ``openai`` package's is turned
off), so both behave alike and are tested alike: timeouts, dropped connections, 408, 409, 425, 429 and
5xx are retried; a ``Retry-After`` header (seconds or an HTTP date) is waited out as the server asked,
and without one the wait is an exponential backoff with random jitter, so that many clients refused
together do not come back together. Every failure is one ``LLMError`` whose message says what happened
(status and body, timeout, unreadable response), so callers can log it and fall back instead of crashing
a training run; the answer itself is read strictly from the raw body by the same code on both transports.

Where the endpoint is, when the config leaves ``base_url`` unset: ``OPENAI_BASE_URL``, as the ``openai``
package reads it. The API key is read at each request from the environment variable ``api_key_env``
(``OPENAI_API_KEY`` by default), so it never sits in a config file or a repr.

Endpoint rule for ``base_url`` (documented once here, used everywhere):

* ``http://host:8000`` — a bare server root (no path) — gets ``/v1`` appended;
* any other path is used as given: ``http://host:8000/v1``, ``https://api.example.com/openai/v1``;
* ``/chat/completions`` is then appended, unless ``base_url`` already ends with it.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import random
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from admire.retrying import backoff_seconds, retry_after_seconds

logger = logging.getLogger("admire.llm")

CHAT_PATH = "/chat/completions"
BASE_URL_ENV = "OPENAI_BASE_URL"
"""The environment variable that names the endpoint when the config does not (the ``openai`` package's)."""
BODY_EXCERPT_CHARS = 300
RETRYABLE_STATUS = frozenset({408, 409, 425, 429})  # plus every 5xx


class LLMError(RuntimeError):
    """A chat request that gave no usable answer. ``status`` is the last HTTP status, if any."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


def chat_completions_url(base_url: str) -> str:
    """The ``…/chat/completions`` URL for ``base_url`` (rule in the module docstring)."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValueError("base_url must be a URL such as http://localhost:8000/v1")
    base = base_url.strip().rstrip("/")
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) URL such as http://localhost:8000/v1; got {base_url!r}")
    if base.endswith(CHAT_PATH):
        return base
    if not parts.path:
        base += "/v1"
    return base + CHAT_PATH


def default_base_url(base_url: str | None) -> str | None:
    """``base_url``, or ``OPENAI_BASE_URL`` from the environment when it is unset (None or blank)."""
    if base_url is not None and str(base_url).strip():
        return str(base_url)
    return os.environ.get(BASE_URL_ENV, "").strip() or None


def _openai_module() -> Any:
    """The ``openai`` package, or None when it is not installed (then the stdlib transport is used)."""
    try:
        import openai
    except ImportError:
        return None
    return openai


class ChatClient:
    """One model behind one OpenAI-compatible endpoint.

    ``max_retries`` counts retries, so a request is tried at most ``max_retries + 1`` times. Before retry
    ``n`` (1-based) the client waits what the answer's ``Retry-After`` asks for or, without one,
    ``backoff * 2 ** (n - 1)`` seconds times a random factor in ``[1 - jitter, 1 + jitter]``; no wait
    exceeds ``max_wait`` seconds, and a ``Retry-After`` longer than that ends the request at once (a
    training run is better served by its fallback than by a stall). Any other 4xx means the request
    itself is wrong and is raised at once. ``base_url`` None takes ``OPENAI_BASE_URL``.
    """

    def __init__(
        self,
        base_url: str | None,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        temperature: float = 0.0,
        jitter: float = 0.5,
        max_wait: float = 60.0,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must name the served model, e.g. 'gpt-4o' or the path vLLM serves")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff < 0:
            raise ValueError(f"backoff must be >= 0 seconds, got {backoff}")
        if not 0 <= jitter <= 1:
            raise ValueError(f"jitter is a fraction of the backoff in [0, 1], got {jitter}")
        if max_wait < 0:
            raise ValueError(f"max_wait must be >= 0 seconds, got {max_wait}")
        resolved = default_base_url(base_url)
        if resolved is None:
            raise ValueError(f"no endpoint: set base_url (e.g. http://localhost:8000/v1) or {BASE_URL_ENV}")
        self.url = chat_completions_url(resolved)
        self.base_url = resolved
        self.model = model.strip()
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.temperature = float(temperature)
        self.jitter = float(jitter)
        self.max_wait = float(max_wait)
        self._openai = _openai_module()
        self.transport = "openai" if self._openai is not None else "urllib"
        self._sdk_clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._random = random.Random()

    def __repr__(self) -> str:
        return f"ChatClient(url={self.url!r}, model={self.model!r}, transport={self.transport!r})"

    def chat(self, messages: list[dict[str, str]], **params: Any) -> str:
        """The content of the first choice. ``params`` (``max_tokens``, …) go into the request body."""
        body = {"model": self.model, "messages": messages, "temperature": self.temperature, **params}
        attempts = self.max_retries + 1
        attempt = 1
        while True:
            try:
                status, raw = self._post_sdk(body) if self._openai is not None else self._post_urllib(body)
            except _Transient as exc:
                if attempt >= attempts:
                    raise LLMError(f"{exc} (POST {self.url}, attempt {attempt} of {attempts})",
                                   status=exc.status, attempts=attempt) from None
                delay = self.retry_delay(attempt, exc.retry_after)
                if delay is None:
                    raise LLMError(f"{exc}; the server asked to wait {exc.retry_after:g} s (Retry-After), more "
                                   f"than max_wait={self.max_wait:g} s (POST {self.url}, attempt {attempt} of "
                                   f"{attempts})", status=exc.status, attempts=attempt) from None
                logger.debug("chat request to %s failed (%s); retry %d in %.2f s", self.url, exc, attempt, delay)
                time.sleep(delay)
                attempt += 1
                continue
            return _first_choice_content(raw, self.url, status, attempt)

    def retry_delay(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait before retry ``attempt`` (1-based): the server's ``Retry-After`` when it sent
        one (None when that is longer than ``max_wait``), else the jittered exponential backoff."""
        if retry_after is not None:
            return retry_after if retry_after <= self.max_wait else None
        return backoff_seconds(attempt - 1, base=self.backoff, cap=self.max_wait,
                               jitter=(1 - self.jitter, 1 + self.jitter), rng=self._random)

    def _api_key(self) -> str:
        return os.environ.get(self.api_key_env or "", "")

    # -- the stdlib transport ------------------------------------------------------------------

    def _post_urllib(self, body: dict[str, Any]) -> tuple[int, bytes]:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            raise self._refused(exc.code, _read_quietly(exc), exc.headers.get("Retry-After")) from None
        except TimeoutError:
            raise _Transient(f"no answer within the {self.timeout:g} s timeout") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise _Transient(f"no answer within the {self.timeout:g} s timeout") from None
            raise _Transient(f"cannot connect: {exc.reason}") from None
        except (http.client.HTTPException, OSError) as exc:
            raise _Transient(f"connection failed: {type(exc).__name__}: {exc}") from None

    # -- the openai transport ------------------------------------------------------------------

    def _sdk_client(self, key: str) -> Any:
        """One ``openai.OpenAI`` per API key (the key is re-read at each request), its retries off."""
        with self._lock:
            client = self._sdk_clients.get(key)
            if client is None:
                self._sdk_clients.clear()
                client = self._openai.OpenAI(base_url=self.url[: -len(CHAT_PATH)], api_key=key or "unused",
                                             timeout=self.timeout, max_retries=0)
                self._sdk_clients[key] = client
            return client

    def _post_sdk(self, body: dict[str, Any]) -> tuple[int, bytes]:
        openai = self._openai
        key = self._api_key()
        # Without a key no Authorization header is sent, as on the stdlib path (a local vLLM needs none).
        headers = {} if key else {"Authorization": openai.Omit()}
        extra = {k: v for k, v in body.items() if k not in ("model", "messages")}
        try:
            response = self._sdk_client(key).chat.completions.with_raw_response.create(
                model=body["model"], messages=body["messages"], extra_body=extra, extra_headers=headers)
            return response.status_code, response.http_response.content
        except openai.APIStatusError as exc:
            raise self._refused(exc.status_code, exc.response.content,
                                exc.response.headers.get("Retry-After")) from None
        except openai.APITimeoutError:
            raise _Transient(f"no answer within the {self.timeout:g} s timeout") from None
        except openai.APIConnectionError as exc:
            raise _Transient(f"cannot connect: {exc.__cause__ or exc}") from None

    def _refused(self, status: int, body: bytes, retry_after: str | None) -> Exception:
        """The error for an HTTP error answer: retried (5xx and ``RETRYABLE_STATUS``) or not."""
        text = _excerpt(body)
        if status >= 500 or status in RETRYABLE_STATUS:
            return _Transient(f"HTTP {status}: {text}", status, retry_after_seconds(retry_after))
        return LLMError(f"HTTP {status} from POST {self.url} (not retried: the request was refused): {text}",
                        status=status)


class _Transient(Exception):
    """A failure worth retrying; becomes an ``LLMError`` when the retries run out."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def _read_quietly(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):
        return b""


def _excerpt(raw: bytes | str, limit: int = BODY_EXCERPT_CHARS) -> str:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    text = " ".join(text.split())
    if not text:
        return "(empty body)"
    return text if len(text) <= limit else text[:limit] + "…"


def _first_choice_content(raw: bytes, url: str, status: int, attempts: int) -> str:
    def malformed(what: str) -> LLMError:
        return LLMError(f"malformed response from POST {url} (HTTP {status}): {what}: {_excerpt(raw)}",
                        status=status, attempts=attempts)

    try:
        payload = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise malformed("the body is not JSON") from None
    if not isinstance(payload, dict):
        raise malformed("the body is not a JSON object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        raise malformed("no 'choices'")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise malformed("choices[0].message.content is not a string")
    return content


def missing_endpoint_keys(cfg: Mapping[str, Any]) -> list[str]:
    """The keys an endpoint section lacks: ``base_url`` (unless ``OPENAI_BASE_URL`` is set) and ``model``."""
    missing = [] if default_base_url(cfg.get("base_url")) else ["base_url"]
    return missing + ([] if cfg.get("model") else ["model"])


def make_chat_client(cfg: Mapping[str, Any]) -> ChatClient:
    """A client from a config section: ``base_url`` (or ``OPENAI_BASE_URL``) and ``model`` (required),
    ``api_key_env`` (default ``OPENAI_API_KEY``), ``timeout``, ``max_retries``, ``backoff``, ``temperature``,
    ``jitter``, ``max_wait`` (optional). Other keys are ignored so the section can also carry its owner's
    settings."""
    missing = missing_endpoint_keys(cfg)
    if missing:
        raise ValueError(
            f"the LLM config is missing {' and '.join(repr(k) for k in missing)}: set base_url to an "
            f"OpenAI-compatible endpoint (e.g. http://localhost:8000/v1 for a local vLLM server, or {BASE_URL_ENV}) "
            "and model to the model it serves, or use the offline 'heuristic' generator")
    options: dict[str, Any] = {}
    for key, kind in (("api_key_env", str), ("timeout", float), ("max_retries", int), ("backoff", float),
                      ("temperature", float), ("jitter", float), ("max_wait", float)):
        value = cfg.get(key)
        if value is None:
            continue
        try:
            options[key] = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"LLM config key {key!r} must be a {kind.__name__}, got {value!r}") from None
    return ChatClient(cfg.get("base_url"), str(cfg["model"]), **options)


# --------------------------------------------------------------------------------------------------
# Reading answers
# --------------------------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_json_answer(text: str, key: str | None = None) -> Any:
    """The JSON value in a model's answer, tolerating code fences, ``<think>`` blocks and chatter.

    Tried in order: the whole answer; each fenced block; each ``{…}`` object in the text, first one
    first. With ``key``, only an object holding that key counts, so an example object quoted in the
    chatter is skipped. Raises ``ValueError`` saying what was found when nothing fits.
    """
    if not isinstance(text, str):
        raise ValueError(f"the answer is not text but {type(text).__name__}")
    cleaned = _THINK.sub("", text).strip()

    def fits(value: Any) -> bool:
        return key is None or (isinstance(value, dict) and key in value)

    candidates = [cleaned, *(block.strip() for block in _FENCE.findall(cleaned))]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if fits(value):
            return value
    decoder = json.JSONDecoder()
    position = cleaned.find("{")
    while position >= 0:
        try:
            value, end = decoder.raw_decode(cleaned, position)
        except ValueError:
            position = cleaned.find("{", position + 1)
            continue
        if fits(value):
            return value
        position = cleaned.find("{", end)
    wanted = f"a JSON object with {key!r}" if key else "a JSON value"
    raise ValueError(f"no {wanted} in the answer: {_excerpt(cleaned, 200)}")


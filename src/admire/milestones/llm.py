"""A small client for OpenAI-compatible chat endpoints (vLLM, SGLang, hosted APIs).

The milestone generator and the step judge are the only callers. It uses ``urllib`` from the standard
library so that the pure method layer (``milestones/``) needs no HTTP dependency, and it is strict about
what comes back: every failure is one ``LLMError`` whose message says what happened (status and body,
timeout, unreadable response), so callers can log it and fall back instead of crashing a training run.

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
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger("admire.milestones")

CHAT_PATH = "/chat/completions"
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


class ChatClient:
    """One model behind one OpenAI-compatible endpoint.

    ``max_retries`` counts retries, so a request is tried at most ``max_retries + 1`` times; the wait
    before retry ``n`` (1-based) is ``backoff * 2 ** (n - 1)`` seconds. Timeouts, dropped connections,
    429, 408 and 5xx are retried because they are what a busy or restarting server answers; any other
    4xx means the request itself is wrong and is raised at once. The API key is read from the
    environment variable ``api_key_env`` at each request, so it never sits in a config file or a repr.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        temperature: float = 0.0,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must name the served model, e.g. 'gpt-4o' or the path vLLM serves")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff < 0:
            raise ValueError(f"backoff must be >= 0 seconds, got {backoff}")
        self.url = chat_completions_url(base_url)
        self.base_url = base_url
        self.model = model.strip()
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.temperature = float(temperature)

    def __repr__(self) -> str:
        return f"ChatClient(url={self.url!r}, model={self.model!r})"

    def chat(self, messages: list[dict[str, str]], **params: Any) -> str:
        """The content of the first choice. ``params`` (``max_tokens``, …) go into the request body."""
        body = {"model": self.model, "messages": messages, "temperature": self.temperature, **params}
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        attempts = self.max_retries + 1
        attempt = 1
        while True:
            try:
                status, raw = self._post(data)
            except _Transient as exc:
                if attempt >= attempts:
                    raise LLMError(f"{exc} (POST {self.url}, attempt {attempt} of {attempts})",
                                   status=exc.status, attempts=attempt) from None
                delay = self.backoff * 2 ** (attempt - 1)
                logger.debug("chat request to %s failed (%s); retry %d in %.2f s", self.url, exc, attempt, delay)
                time.sleep(delay)
                attempt += 1
                continue
            return _first_choice_content(raw, self.url, status, attempt)

    def _post(self, data: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env or "", "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, _excerpt(_read_quietly(exc))
            if status >= 500 or status in RETRYABLE_STATUS:
                raise _Transient(f"HTTP {status}: {text}", status) from None
            raise LLMError(f"HTTP {status} from POST {self.url} (not retried: the request was refused): "
                           f"{text}", status=status) from None
        except TimeoutError:
            raise _Transient(f"no answer within the {self.timeout:g} s timeout") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise _Transient(f"no answer within the {self.timeout:g} s timeout") from None
            raise _Transient(f"cannot connect: {exc.reason}") from None
        except (http.client.HTTPException, OSError) as exc:
            raise _Transient(f"connection failed: {type(exc).__name__}: {exc}") from None


class _Transient(Exception):
    """A failure worth retrying; becomes an ``LLMError`` when the retries run out."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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


def make_chat_client(cfg: Mapping[str, Any]) -> ChatClient:
    """A client from a config section: ``base_url`` and ``model`` (required), ``api_key_env``,
    ``timeout``, ``max_retries``, ``backoff``, ``temperature`` (optional). Other keys are ignored so the
    section can also carry its owner's settings."""
    missing = [key for key in ("base_url", "model") if not cfg.get(key)]
    if missing:
        raise ValueError(
            f"the LLM config is missing {' and '.join(repr(k) for k in missing)}: set base_url to an "
            "OpenAI-compatible endpoint (e.g. http://localhost:8000/v1 for a local vLLM server) and model "
            "to the model it serves, or use the offline 'heuristic' generator")
    options: dict[str, Any] = {}
    for key, kind in (("api_key_env", str), ("timeout", float), ("max_retries", int), ("backoff", float),
                      ("temperature", float)):
        value = cfg.get(key)
        if value is None:
            continue
        try:
            options[key] = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"LLM config key {key!r} must be a {kind.__name__}, got {value!r}") from None
    return ChatClient(str(cfg["base_url"]), str(cfg["model"]), **options)


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


"""Property-based fuzzing of the API from its own OpenAPI document (schemathesis): whatever a client
sends, the server answers with a documented status and never a 5xx.

The devices are fakes that never crash, so the deliberate 503s (``env_crashed``, ``no_capacity``) can
only mean a bug here; routes with a session id get a live session, so generated actions reach a
device instead of stopping at "unknown session".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from admire.server.app import create_app
from admire.server.errors import UnknownSession
from tests.support.server_helpers import form_task, make_pool

POOL = make_pool(num_devices=2, max_devices=64, lease_ttl_s=3600)
APP = create_app(POOL, max_request_bytes=64 * 1024)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE])
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module", autouse=True)
def _close_pool() -> Iterator[None]:
    yield
    POOL.close()


@schema.parametrize()
@hypothesis.settings(max_examples=25, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
def test_no_input_makes_the_server_fail(case) -> None:
    session_id = None
    if "session_id" in (case.path_parameters or {}):
        session_id = POOL.create_session(form_task()).session_id
        case.path_parameters["session_id"] = session_id
    try:
        case.call_and_validate(checks=CHECKS)
    finally:
        if session_id is not None:
            with contextlib.suppress(UnknownSession):  # the case may have closed it itself
                POOL.close_session(session_id)
    assert POOL.stats().counters.get("env_errors", 0) == 0

"""``/metrics`` on prometheus_client: histograms whose buckets add up across servers, one registry per
app (two apps in one process never share or collide), and text a Prometheus parser reads back."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from admire.server import metrics
from admire.server.app import create_app
from admire.server.stats import LATENCY_BUCKETS_S, LatencyHistogram
from tests.support.server_helpers import form_task, make_pool

TYPE_ANN = {"action_type": "input_text", "index": 0, "text": "ann"}
SUBMIT = {"action_type": "click", "index": 1}
CLIENT = {"X-Admire-Client": "client-metrics-01"}


def scrape(client: TestClient) -> dict[str, dict[tuple, float]]:
    """metric family -> {(sample name, labels): value}, as a Prometheus server would read it."""
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {}
    for family in text_string_to_metric_families(response.text):
        families[family.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
    return families


def play(client: TestClient, episodes: int) -> None:
    for seed in range(episodes):
        created = client.post("/sessions", json={"task": "fake/form", "seed": seed, "params": {"name": "ann"}})
        assert created.status_code == 201, created.text
        for seq, action in enumerate((TYPE_ANN, SUBMIT)):
            step = client.post(f"/sessions/{created.json()['session_id']}/step", json={"action": action, "seq": seq})
            assert step.status_code == 200, step.text


def test_the_histogram_counts_each_observation_in_its_bucket() -> None:
    histogram = LatencyHistogram()
    for seconds in (0.004, 0.005, 0.3, 1e6):
        histogram.add(seconds)
    snapshot = histogram.snapshot()
    buckets = dict(snapshot.buckets)
    assert buckets[0.005] == 2 and buckets[0.25] == 2 and buckets[0.5] == 3 and buckets[math.inf] == 4
    assert snapshot.count == 4 and snapshot.sum == pytest.approx(0.309 + 1e6)
    with pytest.raises(ValueError, match="end with inf"):
        LatencyHistogram(bounds=(0.1, 1.0))


def test_each_app_has_its_own_registry_and_histograms_merge_across_servers() -> None:
    with make_pool(num_devices=1) as first, make_pool(num_devices=1) as second:
        a, b = (TestClient(create_app(pool), headers=CLIENT) for pool in (first, second))
        play(a, 2)
        play(b, 1)
        scraped = [scrape(a), scrape(b)]
    assert [s["admire_steps"][("admire_steps_total", ())] for s in scraped] == [4.0, 2.0]  # nothing shared
    assert [s["admire_episodes"][("admire_episodes_total", (("outcome", "success"),))] for s in scraped] == [2, 1]
    assert not any(name.startswith("admire_") for name in REGISTRY._names_to_collectors)  # the global stays clean

    merged: dict[str, float] = {}
    for s in scraped:
        for (sample, labels), value in s["admire_step_latency_seconds"].items():
            if sample.endswith("_bucket"):
                merged[dict(labels)["le"]] = merged.get(dict(labels)["le"], 0.0) + value
    assert len(merged) == len(LATENCY_BUCKETS_S) and merged["+Inf"] == 6.0  # one bucket set: they add up
    assert list(merged.values()) == sorted(merged.values())  # still cumulative after the merge
    for s in scraped:
        assert s["admire_reset_latency_seconds"][("admire_reset_latency_seconds_count", ())] >= 1
        assert ("admire_queue_wait_seconds_sum", ()) in s["admire_queue_wait_seconds"]
        assert s["admire_devices"][("admire_devices", (("state", "idle"),))] == 1.0


def test_every_metric_is_documented_in_docs_server_md() -> None:
    with make_pool(num_devices=1) as pool:
        pool.create_session(form_task())
        families = list(text_string_to_metric_families(metrics.render(pool.stats())))
    with open("docs/server.md", encoding="utf-8") as handle:
        docs = handle.read()
    assert len(families) == len(metrics.COUNTERS) + len(metrics.HISTOGRAMS) + 5
    for family in families:
        shown = family.name + "_total" if family.type == "counter" else family.name  # the parser drops _total
        assert f"`{shown}`" in docs, f"{shown} is missing from docs/server.md"

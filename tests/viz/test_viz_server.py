"""The served viewer: every page answers, filters work, text is escaped, nothing outside the run is served."""

from __future__ import annotations

import os
from html import escape

import pytest
from fastapi.testclient import TestClient

from admire.viz.server import create_app
from tests.support.viz_helpers import EVIL, LOGIN_V1, make_run


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "runs")


@pytest.fixture
def client(run):
    return TestClient(create_app(run.path))


def test_run_page_has_curves_as_inline_svg_and_the_task_table(client):
    page = client.get("/")
    assert page.status_code == 200
    assert page.text.count('<svg class="chart"') == 3
    assert "miniwob/login-user" in page.text and "<script src" not in page.text
    assert "Content-Security-Policy" in page.headers


def test_trajectory_list_filters_by_query(client):
    everything = client.get("/trajectories").text
    assert everything.count('<tr class="traj"') == 11
    failures = client.get("/trajectories", params={"outcome": "failure", "kind": "train", "epoch": "1"}).text
    assert failures.count('<tr class="traj"') == 2
    assert 'data-address="train-0001-1"' in failures and 'data-address="train-0001-0"' not in failures


def test_bad_filters_are_a_400_page_that_names_the_problem(client):
    page = client.get("/trajectories", params={"epoch": "soon"})
    assert page.status_code == 400 and "epoch must be a whole number" in page.text
    assert client.get("/trajectories", params={"page": "-3"}).status_code == 400


def test_trajectory_page_shows_outcome_steps_overlay_milestones_and_rewards(client, run):
    page = client.get("/trajectory/train-0000-0").text
    assert 'class="badge ok">success' in page and "term-success" in page
    assert page.count('<section class="step"') == 2
    assert 'id="train-0000-0-s0"' in page and 'href="#train-0000-0-s1"' in page
    assert page.count('<svg class="overlay"') == 2 and '<circle class="click" cx="50" cy="130"' in page
    assert "hit milestone 1/2" in page and "δ = 0.75" in page and "0.900" in page
    assert page.count('<svg class="reward-bar"') == 2
    assert 'href="/trajectory/train-0000-1"' in page  # next trajectory
    ref = run.read_trajectories("train", 0)[0].steps[0].observation.screenshot.ref
    assert f'src="/screenshots/{ref}.png"' in page


def test_a_missed_step_says_which_milestone_it_was_compared_with(client):
    page = client.get("/trajectory/train-0000-1").text
    assert f"to the next milestone “{escape(LOGIN_V1[1])}”" in page


def test_unknown_trajectory_is_404(client):
    assert client.get("/trajectory/train-0099-0").status_code == 404
    assert client.get("/trajectory/%3Cscript%3E").status_code == 404


def test_model_output_goals_and_milestones_are_escaped(client):
    pages = [client.get("/trajectory/train-0000-2").text, client.get("/trajectories").text,
             client.get("/milestones").text, client.get("/milestones/key", params={"key": "miniwob/click-test"}).text]
    for page in pages:
        assert EVIL not in page and "<script>window.pwned" not in page and "<img src=x" not in page
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in pages[0]


def test_milestone_pages_show_versions_with_provenance_and_hit_rates(client):
    index = client.get("/milestones").text
    assert "/milestones/key?key=miniwob%2Flogin-user" in index
    page = client.get("/milestones/key", params={"key": "miniwob/login-user"}).text
    assert page.count('<tr class="version"') == 2
    assert 'href="/trajectory/train-0000-0"' in page and "heuristic" in page
    assert 'title="50% of 2 trajectories">50%' in page and 'title="100% of 2 trajectories">100%' in page
    assert client.get("/milestones/key", params={"key": "nope"}).status_code == 404
    assert client.get("/milestones/key").status_code == 404


def test_screenshots_are_served_by_content_hash(client, run):
    ref = run.read_trajectories("train", 0)[0].steps[0].observation.screenshot.ref
    image = client.get(f"/screenshots/{ref}.png")
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert image.content == run.screenshot_path(ref).read_bytes()
    assert client.get(f"/screenshots/sha256-{'f' * 32}.png").status_code == 404


@pytest.mark.parametrize("path", [
    "/screenshots/../config.yaml", "/screenshots/..%2f..%2fconfig.yaml", "/screenshots/%2e%2e/%2e%2e/config.yaml",
    "/screenshots/%2e%2e%2f%2e%2e%2fsummary.json", "/screenshots//etc/passwd", "/screenshots/%2Fetc%2Fpasswd",
    "/screenshots/sha256-../../summary.json", "/screenshots/..%5c..%5csummary.json",
])
def test_paths_outside_the_screenshots_are_refused(client, path):
    response = client.get(path)
    assert response.status_code in (403, 404)
    assert b"bank_version" not in response.content and b"root:" not in response.content


def test_a_symlink_out_of_the_run_is_refused(client, run, tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"secret bytes")
    ref = "sha256-" + "a" * 32
    os.symlink(secret, run.screenshot_path(ref))
    response = client.get(f"/screenshots/{ref}.png")
    assert response.status_code == 403 and b"secret" not in response.content


def test_lists_and_trajectory_pages_never_read_screenshot_bytes(client, run):
    for png in run.screenshots.glob("*.png"):
        png.unlink()
    assert client.get("/trajectories").status_code == 200
    page = client.get("/trajectory/train-0001-0")
    assert page.status_code == 200 and page.text.count("<img ") == 2


def test_the_served_viewer_answers_only_its_own_host_names(run, monkeypatch) -> None:
    # No login: a page that rebinds its domain to 127.0.0.1 must get nothing (DNS rebinding).
    import uvicorn

    from admire.viz import server

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.append(app))
    server.serve(run.path, host="127.0.0.1", port=1)
    client = TestClient(served[0], base_url="http://127.0.0.1:1")
    assert client.get("/").status_code == 200
    assert client.get("/", headers={"host": "localhost:8765"}).status_code == 200
    refused = client.get("/", headers={"host": "attacker.example"})
    assert refused.status_code == 400 and "bad_host" in refused.text


def test_damaged_trajectory_files_leave_every_page_answering(run) -> None:
    # One malformed line (or a directory named like a trajectory file) used to make every page a 500.
    first = sorted(run.trajectories.glob("train_epoch_*.jsonl"))[0]
    with first.open("ab") as handle:
        handle.write(b'{"task": {"name": "x", "seed": 1e400}, "id": "a", "termination": "x", "steps": [1]}\n')
        handle.write(b"\xff\x00 binary\n")
        handle.write(b'{"task": {"name": "miniwob/x"}, "id": "b", "termination": "success", "steps": [{"a": 1}]}\n')
    (run.trajectories / "train_epoch_0099.jsonl").mkdir()
    client = TestClient(create_app(run.path), raise_server_exceptions=False)
    for url in ("/", "/trajectories", "/milestones"):
        assert client.get(url).status_code == 200, url
    rows = client.app.state.data.rows()
    assert [r.id for r in rows if r.id in ("a", "b")] == ["b"]  # the unreadable lines are left out
    damaged = next(r for r in rows if r.id == "b")
    page = client.get(f"/trajectory/{damaged.address}")
    assert page.status_code == 422 and "not a readable trajectory" in page.text

    from admire.viz.data import RunData
    from admire.viz.export import export_html

    data = RunData(run.path)
    assert "not a readable trajectory" in export_html(data, rows=data.rows())


def test_a_malformed_rewards_file_leaves_every_page_answering(run) -> None:
    run.rewards_file("train", 0).write_bytes(b'junk\n{"id": 1}\n[]\n\xff\xfe\n{"id": "x", "rewards": "no"}\n')
    client = TestClient(create_app(run.path), raise_server_exceptions=False)
    for url in ("/", "/trajectories", "/milestones", "/trajectory/train-0000-0", "/trajectory/train-0001-0",
                "/milestones/key?key=miniwob/login-user"):
        assert client.get(url).status_code == 200, url


def test_a_screenshot_of_impossible_size_is_shown_as_unreadable(run) -> None:
    path = run.trajectory_file("train", 2)
    path.write_text(path.read_text(encoding="utf-8").replace('"width":160', f'"width":{10**400}', 1),
                    encoding="utf-8")
    client = TestClient(create_app(run.path), raise_server_exceptions=False)
    page = client.get("/trajectory/train-0002-0")
    assert page.status_code == 200 and "screenshot unreadable" in page.text
    assert page.text.count('<svg class="overlay"') == 1  # the other step still has its overlay


@pytest.mark.timeout(30)
def test_a_fifo_named_like_a_trajectory_file_is_left_out_without_blocking(run) -> None:
    os.mkfifo(run.trajectory_file("train", 7))
    (run.trajectories / "train_epoch_0008.jsonl").symlink_to("/dev/zero")
    client = TestClient(create_app(run.path), raise_server_exceptions=False)
    for url in ("/", "/trajectories", "/milestones"):
        assert client.get(url).status_code == 200, url
    assert {row.epoch for row in client.app.state.data.rows()} == {0, 1, 2, 3}

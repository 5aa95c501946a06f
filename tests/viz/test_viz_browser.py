"""The viewer in real headless Chromium, on a real run: trained with screenshots, scored as the trainer scores.

One session fixture trains a tiny real run (MiniWoB++ smoke suite, two epochs, screenshots on), then
``admire viz``'s scoring writes every step's reward breakdown with the real sentence encoder. The
pages are served by the real app (uvicorn on a free local port) and driven with Selenium.
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time

import pytest

from admire.cli import main
from admire.commands.viz import score_run
from admire.viz.data import RunData, TrajectoryFilter
from admire.viz.export import default_selection, write_export

pytestmark = pytest.mark.browser

TRAIN = ["env.suite=miniwob-smoke", "trainer.total_epochs=2", "trainer.tasks_per_epoch=2",
         "actor_rollout_ref.rollout.n=2", "trainer.eval_every=1", "trainer.eval_episodes=1", "env.max_envs=[1]",
         "env.screenshots=true", "tracking.tensorboard=false", "tracking.swanlab=null"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("viz-runs")
    assert main(["train", "--quiet", f"run.dir={root}", "run.name=real", *TRAIN]) == 0
    data = RunData(root / "real")
    score_run(data)
    return data


@pytest.fixture(scope="module")
def server(real_run):
    import uvicorn

    from admire.viz.server import create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app_server = uvicorn.Server(uvicorn.Config(create_app(real_run), host="127.0.0.1", port=port,
                                               log_level="warning"))
    thread = threading.Thread(target=app_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not app_server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    app_server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    yield driver
    driver.quit()


def _with_screenshots(data: RunData):
    for row in data.rows(TrajectoryFilter(kind="train")):
        trajectory = data.trajectory(row)
        if len(trajectory.steps) >= 2 and all(s.observation.screenshot for s in trajectory.steps):
            return row, trajectory
    for row in data.rows(TrajectoryFilter(kind="train")):
        trajectory = data.trajectory(row)
        if trajectory.steps and trajectory.steps[0].observation.screenshot:
            return row, trajectory
    pytest.fail("the real run kept no screenshots")


def test_rescored_rewards_reproduce_the_trainers_logged_means(real_run):
    """The re-scoring is the trainer's scoring: its per-epoch means equal what the trainer logged."""
    logged = {int(r["step"]): r for r in real_run.metrics}
    for epoch in real_run.epochs("train"):
        steps = [b for rewards in real_run.rewards("train", epoch).values() for b in rewards]
        assert statistics.mean(b.total for b in steps) == pytest.approx(logged[epoch]["reward/total"], abs=1e-6)
        assert statistics.mean(b.milestone for b in steps) == pytest.approx(logged[epoch]["reward/milestone"],
                                                                            abs=1e-6)
    assert real_run.unscored_files() == []


def test_run_page_draws_the_learning_curves(browser, server):
    browser.get(server + "/")
    charts = browser.find_elements("css selector", "svg.chart")
    assert len(charts) == 3 and all(c.size["width"] > 100 for c in charts)
    assert browser.find_elements("css selector", "svg.chart polyline.series")
    assert browser.find_elements("css selector", "table.tasks tbody tr")


def test_trajectory_list_filters(browser, server, real_run):
    browser.get(server + "/trajectories?outcome=success")
    rows = browser.find_elements("css selector", "tr.traj")
    assert len(rows) == len(real_run.rows(TrajectoryFilter(outcome="success"))) > 0
    assert all("success" in r.text for r in rows)


def test_screenshot_loads_with_the_action_drawn_at_its_coordinates(browser, server, real_run):
    row, trajectory = _with_screenshots(real_run)
    browser.get(f"{server}/trajectory/{row.address}")
    step = trajectory.steps[0]
    card = browser.find_element("id", f"{row.address}-s0")
    img = card.find_element("css selector", "figure.shot img")
    browser.execute_script("arguments[0].scrollIntoView()", img)
    deadline = time.monotonic() + 10
    while not browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img):
        assert time.monotonic() < deadline, "the screenshot did not load"
        time.sleep(0.05)
    assert browser.execute_script("return arguments[0].naturalWidth", img) == step.observation.screenshot.width
    from admire.viz.overlay import step_overlay

    expected = step_overlay(step)
    if expected.point is not None:
        circle = card.find_element("css selector", "svg.overlay circle.click")
        assert float(circle.get_attribute("cx")) == pytest.approx(expected.point[0])
        assert float(circle.get_attribute("cy")) == pytest.approx(expected.point[1])
        # and on screen: the circle's centre sits on the same fraction of the displayed image
        box = browser.execute_script(
            "const c = arguments[0].getBoundingClientRect(), i = arguments[1].getBoundingClientRect();"
            "return [(c.left + c.width / 2 - i.left) / i.width, (c.top + c.height / 2 - i.top) / i.height];",
            circle, img)
        assert box[0] == pytest.approx(expected.point[0] / expected.width, abs=0.02)
        assert box[1] == pytest.approx(expected.point[1] / expected.height, abs=0.02)
    if expected.box is not None:
        assert card.find_elements("css selector", "svg.overlay rect.target")
    assert card.find_elements("css selector", "svg.reward-bar")


def test_next_step_link_and_keyboard_move_between_steps(browser, server, real_run):
    row, trajectory = _with_screenshots(real_run)
    if len(trajectory.steps) < 2:
        pytest.skip("the tiny real run had no trajectory of two steps")
    browser.get(f"{server}/trajectory/{row.address}")
    browser.find_element("id", f"{row.address}-s0").find_element("css selector", "a.next-step").click()
    second = browser.find_element("id", f"{row.address}-s1")
    assert browser.execute_script("return location.hash") == f"#{row.address}-s1"
    assert "active" in second.get_attribute("class")
    top = browser.execute_script("return arguments[0].getBoundingClientRect().top", second)
    assert 0 <= top < 200  # scrolled to the top of the window (below the sticky bar)
    from selenium.webdriver.common.keys import Keys

    browser.find_element("tag name", "body").send_keys(Keys.ARROW_LEFT)
    assert browser.execute_script("return location.hash") == f"#{row.address}-s0"


def test_milestone_page_lists_versions_and_hit_rates(browser, server, real_run):
    key = next(iter(real_run.milestone_history()))
    from urllib.parse import quote

    browser.get(f"{server}/milestones/key?key={quote(key, safe='')}")
    assert browser.find_elements("css selector", "ol.current li")
    assert browser.find_elements("css selector", "tr.version")
    assert browser.find_elements("css selector", "table.hits td.rate") or "No scored" in browser.page_source


def test_a_path_outside_the_run_is_refused(browser, server, real_run):
    for path in ("/screenshots/..%2fconfig.yaml", "/screenshots/%2e%2e/summary.json",
                 "/screenshots/%2Fetc%2Fpasswd"):
        browser.get(server + path)
        assert "bank_version" not in browser.page_source and "root:" not in browser.page_source
        assert "not found" in browser.page_source.lower() or "forbidden" in browser.page_source.lower()


def test_export_opens_offline_with_images_decoded(browser, real_run, tmp_path):
    shown = [r for r in default_selection(real_run)
             if any(s.observation.screenshot for s in real_run.trajectory(r).steps)]
    assert shown, "the export's default selection (last training epoch, evaluations) has no screenshots"
    row = shown[0]
    path = write_export(real_run, tmp_path / "report.html")
    browser.get_log("performance")  # drop what earlier pages logged
    browser.get(path.resolve().as_uri() + f"#t-{row.address}")
    page = browser.find_element("id", f"t-{row.address}")
    assert page.is_displayed()
    assert not browser.find_element("id", "run").is_displayed()  # one page at a time
    images = page.find_elements("css selector", "figure.shot img")
    assert images
    for image in images:  # screenshots load lazily: bring each into view, as a reader scrolling would
        browser.execute_script("arguments[0].scrollIntoView()", image)
        deadline = time.monotonic() + 30  # generous: a loaded 2-core CI machine decodes slowly
        while not browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", image):
            assert time.monotonic() < deadline, "an exported screenshot did not decode"
            time.sleep(0.05)
    requested = [json.loads(entry["message"])["message"] for entry in browser.get_log("performance")]
    urls = [m["params"]["request"]["url"] for m in requested if m["method"] == "Network.requestWillBeSent"]
    assert urls and all(u.startswith(("file://", "data:")) for u in urls), urls

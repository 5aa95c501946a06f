"""Synthetic runs for the viewer's unit tests: real types, written through ``RunDir`` and ``MilestoneBank``.

Real PNGs (Pillow), a real SQLite bank with provenance, trajectories as the trainer writes them, and
reward breakdowns in the file the viewer reads. Nothing here trains: the real-run tests train for real.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from PIL import Image

from admire.milestones.bank import MilestoneBank, Provenance
from admire.runs import RunDir
from admire.types import (
    Action,
    Observation,
    RewardBreakdown,
    Screenshot,
    Step,
    Task,
    Termination,
    Trajectory,
    UIElement,
)

WIDTH, HEIGHT = 160, 210
RUN_NAME = "synthetic"
EVIL = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


def png(colour: tuple[int, int, int], width: int = WIDTH, height: int = HEIGHT) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def elements() -> tuple[UIElement, ...]:
    return (
        UIElement(text="Username", class_name="input_text", is_editable=True, bbox=(10.0, 110.0, 60.0, 80.0)),
        UIElement(text="Login", class_name="button", is_clickable=True, bbox=(20.0, 80.0, 120.0, 140.0)),
    )


def step(index: int, action: Action, colour: tuple[int, int, int], description: str, reason: str = "",
         raw_output: str | None = None, format_valid: bool = True) -> Step:
    observation = Observation(goal="Log in as ann.", ui_elements=elements(), step=index,
                              screenshot=Screenshot.from_png(png(colour), WIDTH, HEIGHT))
    return Step(index=index, observation=observation, raw_output=raw_output or f"Action: {action.to_json()}",
                action=action if format_valid else None, format_valid=format_valid, reason=reason or None,
                grounded_description=description if format_valid else "",
                parse_error=None if format_valid else "output did not parse into an action")


def login_trajectory(epoch: int, group: int, success: bool, tag: str, goal: str = "Log in as ann.") -> Trajectory:
    shade = (epoch * 40) % 255
    steps = (
        step(0, Action(action_type="input_text", index=0, text="ann"), (shade, 200, 200),
             "typed \"ann\" into the 'Username' field", reason="The goal names ann."),
        step(1, Action(action_type="click", index=1), (200, shade, 200), "clicked the 'Login' button",
             reason="Submit the form."),
    )
    return Trajectory(id=f"{tag}-e{epoch}-g{group}", task=Task(name="miniwob/login-user", seed=100 + group), goal=goal,
                      steps=steps, outcome=1.0 if success else 0.0,
                      termination=Termination.SUCCESS if success else Termination.MAX_STEPS, epoch=epoch, group=group)


def click_trajectory(epoch: int, group: int, success: bool, tag: str) -> Trajectory:
    steps = (step(0, Action(action_type="click", x=50.0, y=130.0), (90, 90, 250), "clicked the 'Login' button",
                  reason=EVIL, raw_output=f"Reason: {EVIL}\nAction: {{\"action_type\": \"click\"}}"),)
    return Trajectory(id=f"{tag}-e{epoch}-g{group}", task=Task(name="miniwob/click-test", seed=7), goal=f"Click {EVIL}",
                      steps=steps, outcome=1.0 if success else 0.0,
                      termination=Termination.SUCCESS if success else Termination.AGENT_STOP, epoch=epoch, group=group)


def breakdowns(trajectory: Trajectory, milestones: tuple[str, ...], hit_steps: dict[int, int]) -> list[RewardBreakdown]:
    """Breakdowns as the trainer fills them: ``hit_steps`` maps step index → milestone index hit there."""
    k = len(hit_steps)
    result = []
    for t in range(len(trajectory.steps)):
        hit = hit_steps.get(t)
        result.append(RewardBreakdown(
            outcome=trajectory.outcome, total=trajectory.outcome + (0.3 if hit is not None else 0.0),
            milestone=1.0 if hit is not None else 0.0, milestone_weight=0.3,
            matched_milestone=milestones[hit] if hit is not None and milestones else None,
            matched_index=hit, similarity=0.9 if hit is not None else 0.4,
            hits=k, num_milestones=len(milestones)))
    return result


LOGIN_V1 = ("typed \"ann\" into the 'Username' field", "clicked the 'Login' button")
LOGIN_V2 = ("clicked the 'Login' button",)


def make_run(root: Path, name: str = RUN_NAME, epochs: int = 3, evil: bool = True) -> RunDir:
    """A run of ``epochs`` training epochs (login-user ×2, click-test ×1 each) and two evaluations.

    Bank: login-user gets LOGIN_V1 at epoch 0 and LOGIN_V2 at epoch 2 (task keys). In every epoch the first
    login trajectory succeeds and hits every milestone of the list in force; the second fails and hits
    only the first phrase of the list.
    """
    run = RunDir(root / name).create()
    run.config.write_text(
        f"run: {{name: {name}}}\nenv: {{suite: miniwob-demo}}\nreward: {{mode: admire, format_weight: 0.5}}\n"
        f"trainer: {{total_epochs: {epochs}}}\n"
        "milestone_reward: {threshold: 0.75, key: task, update_before_reward: true}\n", encoding="utf-8")
    with MilestoneBank(run.bank) as bank:
        bank.put("miniwob/login-user", LOGIN_V1, Provenance(name, 0, "lg-e0-g0", "heuristic", time.time()))
        if epochs > 2:
            bank.put("miniwob/login-user", LOGIN_V2, Provenance(name, 2, "lg-e2-g0", "heuristic", time.time()))
        if evil:
            bank.put("miniwob/click-test", (EVIL,), Provenance(name, 0, "ck-e0-g2", "heuristic", time.time()))
    metrics = []
    for epoch in range(epochs):
        phrases = LOGIN_V2 if epoch >= 2 else LOGIN_V1
        good, bad = login_trajectory(epoch, 0, True, "lg"), login_trajectory(epoch, 1, False, "lg")
        click = click_trajectory(epoch, 2, epoch % 2 == 0, "ck")
        run.write_trajectories("train", epoch, [good, bad, click])
        good_hits = {1: 0} if phrases == LOGIN_V2 else {0: 0, 1: 1}
        rewards = {good.id: breakdowns(good, phrases, good_hits), bad.id: breakdowns(bad, phrases, {0: 0}),
                   click.id: breakdowns(click, (EVIL,) if evil else (), {})}
        run.write_rewards("train", epoch, rewards, source="test")
        metrics.append({"step": epoch, "train/success": 2 / 3 if epoch % 2 == 0 else 1 / 3,
                        "reward/total": 0.5 + epoch / 10, "reward/outcome": 0.5, "reward/milestone": 0.2,
                        "reward/format": 0.0, "milestones/coverage": 0.5, "milestones/hit_rate": 0.75})
        if epoch % 2 == 1:
            metrics[-1]["eval/success"] = 0.5
    for index in (0, epochs):
        run.write_trajectories("eval", index, [login_trajectory(max(index - 1, 0), 0, index > 0, f"ev{index}")])
    run.metrics.write_text("".join(json.dumps(m) + "\n" for m in metrics), encoding="utf-8")
    run.write_summary({"run": name, "suite": "miniwob-demo", "reward_mode": "admire", "epochs": epochs,
                       "env_steps": 42, "wall_s": 12.5, "bank_version": 3})
    return run

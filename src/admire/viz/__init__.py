"""The trajectory viewer and milestone inspector: read a run, explain every reward, serve or export it.

``RunData`` reads a run lazily; ``step_overlay``/``overlay_svg`` draw an action on its screenshot;
``render`` builds the pages (used by the web app in ``server`` and the one-file ``export``). Nothing here
imports torch, the sentence encoder or the browser.
"""

from admire.viz.data import RunData, TrajectoryFilter, lists_in_force
from admire.viz.index import TrajectoryRow
from admire.viz.overlay import StepOverlay, overlay_svg, step_overlay
from admire.viz.render import expected_milestone, milestone_note, reward_bar, screenshot_figure, step_card

__all__ = [
    "RunData",
    "StepOverlay",
    "TrajectoryFilter",
    "TrajectoryRow",
    "expected_milestone",
    "lists_in_force",
    "milestone_note",
    "overlay_svg",
    "reward_bar",
    "screenshot_figure",
    "step_card",
    "step_overlay",
]

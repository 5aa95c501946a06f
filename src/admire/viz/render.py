"""HTML of the viewer's pages, as plain functions returning strings.

Every piece of text that came from a run (goals, model output, milestones, task names) goes through
``esc``: model outputs are untrusted and a viewer must not run what an agent wrote. Pages link to each
other through a ``Links`` object, so the same functions build the served pages (URLs) and the static
export (anchors in one file). No script, style sheet, font or image is ever loaded from elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Protocol
from urllib.parse import urlencode

from admire.milestones.bank import MilestoneList
from admire.types import RewardBreakdown, Step, Trajectory
from admire.viz.assets import CSS, SCRIPT
from admire.viz.charts import line_chart
from admire.viz.data import OUTCOMES, TERMINATIONS, MilestoneHitTable, RunData, TaskSuccess, TrajectoryFilter
from admire.viz.index import TrajectoryRow
from admire.viz.overlay import overlay_svg, plausible_size, step_overlay

CONTENT_SECURITY_POLICY = ("default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; "
                           "script-src 'unsafe-inline'; base-uri 'none'; form-action 'self'")
"""Nothing but this page, its own images and inline code: an injected tag could load nothing anyway."""


def esc(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


# --------------------------------------------------------------------------------------------------
# Links: URLs when served, anchors when exported
# --------------------------------------------------------------------------------------------------

class Links(Protocol):
    def run(self) -> str: ...
    def trajectories(self, where: TrajectoryFilter, page: int = 0) -> str: ...
    def trajectory(self, row: TrajectoryRow) -> str: ...
    def milestones(self) -> str: ...
    def milestone(self, key: str) -> str: ...
    def screenshot(self, ref: str) -> str | None: ...


def step_id(row: TrajectoryRow, index: int) -> str:
    return f"{row.address}-s{index}"


def page_id_for_key(key: str) -> str:
    """An anchor for a milestone key (keys hold spaces, slashes, quotes): hex of its UTF-8 bytes."""
    return "m-" + key.encode("utf-8").hex()


class ServerLinks:
    def run(self) -> str:
        return "/"

    def trajectories(self, where: TrajectoryFilter, page: int = 0) -> str:
        query = where.as_query()
        if page:
            query["page"] = str(page)
        return "/trajectories" + ("?" + urlencode(query) if query else "")

    def trajectory(self, row: TrajectoryRow) -> str:
        return f"/trajectory/{row.address}"

    def milestones(self) -> str:
        return "/milestones"

    def milestone(self, key: str) -> str:
        return "/milestones/key?" + urlencode({"key": key})

    def screenshot(self, ref: str) -> str | None:
        return f"/screenshots/{ref}.png"


@dataclass
class AnchorLinks:
    """Links inside one exported file; trajectories and keys left out of the export link to nothing."""

    data: RunData
    included: set[str]
    keys: set[str]

    def run(self) -> str:
        return "#run"

    def trajectories(self, where: TrajectoryFilter, page: int = 0) -> str:
        return "#trajectories"

    def trajectory(self, row: TrajectoryRow) -> str:
        return f"#t-{row.address}" if row.address in self.included else "#trajectories"

    def milestones(self) -> str:
        return "#milestones"

    def milestone(self, key: str) -> str:
        return f"#{page_id_for_key(key)}" if key in self.keys else "#milestones"

    def screenshot(self, ref: str) -> str | None:
        return self.data.screenshot_data_uri(ref)


# --------------------------------------------------------------------------------------------------
# Page frame
# --------------------------------------------------------------------------------------------------

def document(title: str, body: str, links: Links, run_name: str, exported: bool = False) -> str:
    nav = (f'<nav class="top"><strong>{esc(run_name)}</strong>'
           f'<a href="{esc(links.run())}">Run</a>'
           f'<a href="{esc(links.trajectories(TrajectoryFilter()))}">Trajectories</a>'
           f'<a href="{esc(links.milestones())}">Milestones</a>'
           '<span class="keys">keys: ← / → (or k / j) step</span></nav>')
    flag = ' data-exported="1"' if exported else ""
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head>"
            f"<body{flag}>{nav}<main>{body}</main>"
            f"<script>{SCRIPT}</script></body></html>\n")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:+.{digits}f}"


def outcome_badge(success: bool) -> str:
    return '<span class="badge ok">success</span>' if success else '<span class="badge bad">failure</span>'


def termination_badge(termination: str) -> str:
    return f'<span class="badge term term-{esc(termination)}">{esc(termination)}</span>'


# --------------------------------------------------------------------------------------------------
# Run page
# --------------------------------------------------------------------------------------------------

def run_section(data: RunData, links: Links) -> str:
    summary = data.summary or {}
    facts = [("suite", summary.get("suite") or (data.config.get("env") or {}).get("suite")),
             ("reward mode", summary.get("reward_mode") or (data.config.get("reward") or {}).get("mode")),
             ("epochs", summary.get("epochs") or (data.config.get("trainer") or {}).get("total_epochs")),
             ("env steps", summary.get("env_steps")), ("wall time", _seconds(summary.get("wall_s"))),
             ("bank version", summary.get("bank_version")), ("δ (milestone threshold)", data.threshold),
             ("milestone key", data.key_kind), ("trajectories", len(data.rows()))]
    facts_html = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v if v is not None else '—')}</dd>" for k, v in facts)
    curves = data.curves()
    charts = "".join(f'<div class="chart-box">{line_chart(title, series, _range(title))}</div>'
                     for title, series in curves.items())
    unscored = data.unscored_files()
    note = ""
    if unscored:
        note = (f'<p class="note">{len(unscored)} trajectory file(s) have no reward breakdowns yet; '
                "`admire viz` scores them when it starts (unless --no-score).</p>")
    return (f"<h1>Run {esc(data.name)}</h1><dl class=\"facts\">{facts_html}</dl>{note}"
            f'<h2>Learning curves</h2><div class="charts">{charts}</div>'
            f"<h2>Success per task</h2>{task_table(data.task_table(), links)}")


def _range(title: str) -> tuple[float, float] | None:
    return (0.0, 1.0) if title in ("success rate", "milestones") else None


def _seconds(value: object) -> str | None:
    return f"{value:.0f} s" if isinstance(value, int | float) else None


def task_table(rows: Sequence[TaskSuccess], links: Links) -> str:
    body = "".join(
        f'<tr><td><a href="{esc(links.trajectories(TrajectoryFilter(task=r.task)))}">{esc(r.task)}</a></td>'
        f"<td class=num>{r.train_episodes}</td><td class=num>{_pct(r.train_success)}</td>"
        f"<td class=num>{_pct(r.last_train_success)}</td><td class=num>{_pct(r.eval_first)}</td>"
        f"<td class=num>{_pct(r.eval_last)}</td></tr>"
        for r in rows)
    return ('<table class="tasks"><thead><tr><th>task</th><th>train episodes</th><th>train success</th>'
            "<th>last epoch</th><th>held-out before</th><th>held-out last</th></tr></thead>"
            f"<tbody>{body}</tbody></table>")


# --------------------------------------------------------------------------------------------------
# Trajectory list
# --------------------------------------------------------------------------------------------------

PAGE_SIZE = 100


def filter_form(data: RunData, where: TrajectoryFilter) -> str:
    def select(name: str, values: Sequence[object], current: object) -> str:
        options = ['<option value="">all</option>'] + [
            f'<option value="{esc(v)}"{" selected" if str(v) == str(current) else ""}>{esc(v)}</option>'
            for v in values]
        return f'<label>{esc(name)} <select name="{esc(name)}">{"".join(options)}</select></label>'

    return ('<form class="filters" method="get" action="/trajectories">'
            + select("kind", data.kinds(), where.kind) + select("task", data.tasks(), where.task)
            + select("outcome", OUTCOMES, where.outcome) + select("epoch", data.epochs(where.kind), where.epoch)
            + select("termination", TERMINATIONS, where.termination)
            + '<button type="submit">filter</button></form>')


def trajectory_table(data: RunData, rows: Sequence[TrajectoryRow], links: Links) -> str:
    lines = []
    for row in rows:
        rewards = data.rewards_for(row)
        ret = sum(b.total for b in rewards) if rewards else None
        hits = f"{rewards[-1].hits}/{rewards[-1].num_milestones}" if rewards and rewards[-1].num_milestones else "—"
        lines.append(
            f'<tr class="traj" data-address="{esc(row.address)}"><td><a href="{esc(links.trajectory(row))}">'
            f"{esc(row.kind)} {row.epoch} #{row.position}</a></td><td>{esc(row.task)}</td>"
            f'<td class="goal">{esc(row.goal)}</td><td>{outcome_badge(row.success)}</td>'
            f"<td>{termination_badge(row.termination)}</td><td class=num>{row.num_steps}</td>"
            f"<td class=num>{row.invalid_steps}</td><td class=num>{hits}</td><td class=num>{_num(ret)}</td></tr>")
    return ('<table class="trajectories"><thead><tr><th>trajectory</th><th>task</th><th>goal</th><th>outcome</th>'
            "<th>termination</th><th>steps</th><th>invalid</th><th>milestones</th><th>return</th></tr></thead>"
            f"<tbody>{''.join(lines)}</tbody></table>")


def trajectory_list_section(data: RunData, where: TrajectoryFilter, links: Links, page: int = 0,
                            form: bool = True, rows: Sequence[TrajectoryRow] | None = None) -> str:
    rows = list(data.rows(where) if rows is None else rows)
    pages = max(1, -(-len(rows) // PAGE_SIZE))
    page = min(max(page, 0), pages - 1)
    shown = rows[page * PAGE_SIZE:(page + 1) * PAGE_SIZE]
    pager = ""
    if pages > 1:
        prev = f'<a href="{esc(links.trajectories(where, page - 1))}">← previous</a>' if page > 0 else ""
        nxt = f'<a href="{esc(links.trajectories(where, page + 1))}">next →</a>' if page + 1 < pages else ""
        pager = f'<p class="pager">{prev} page {page + 1} of {pages} {nxt}</p>'
    successes = sum(row.success for row in rows)
    return (f"<h1>Trajectories</h1>{filter_form(data, where) if form else ''}"
            f'<p class="count">{len(rows)} trajectories, {successes} successes</p>{pager}'
            f"{trajectory_table(data, shown, links)}{pager}")


# --------------------------------------------------------------------------------------------------
# Trajectory page
# --------------------------------------------------------------------------------------------------

def trajectory_section(
    data: RunData, row: TrajectoryRow, links: Links, trajectory: Trajectory | None = None,
    neighbours: tuple[TrajectoryRow | None, TrajectoryRow | None] = (None, None),
) -> str:
    trajectory = trajectory or data.trajectory(row)
    rewards = data.rewards_for(row)
    milestones = data.list_for(row)
    key = data.milestone_key(row)
    prev, nxt = neighbours
    nav = ('<p class="traj-nav">'
           + (f'<a class="prev-traj" href="{esc(links.trajectory(prev))}">← previous trajectory</a>' if prev else "")
           + f'<a href="{esc(links.trajectories(TrajectoryFilter(kind=row.kind, epoch=row.epoch)))}">list</a>'
           + (f'<a class="next-traj" href="{esc(links.trajectory(nxt))}">next trajectory →</a>' if nxt else "")
           + "</p>")
    ret = sum(b.total for b in rewards) if rewards else None
    facts = [("task", esc(trajectory.task.name)), ("seed", esc(trajectory.task.seed)),
             ("run part", f"{esc(row.kind)} epoch {row.epoch}, group {trajectory.group}"),
             ("id", f"<code>{esc(trajectory.id)}</code>"), ("steps", str(len(trajectory.steps))),
             ("return", _num(ret)),
             ("milestones", f'<a href="{esc(links.milestone(key))}">{esc(_list_summary(milestones, rewards))}</a>')]
    head = (f'<div class="traj-head"><h1>{outcome_badge(row.success)} {termination_badge(row.termination)} '
            f'{esc(trajectory.task.name)}</h1><p class="goal-text">{esc(trajectory.goal)}</p>'
            f'<dl class="facts">{"".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)}</dl>{nav}</div>')
    if rewards is None:
        head += ('<p class="note">No reward breakdowns for this trajectory: its file was not scored '
                 "(`admire viz` scores runs when it starts, unless --no-score), or it ended in an env error.</p>")
    phrases = milestones.milestones if milestones else ()
    cards = [step_card(data, row, trajectory, i, links, rewards[i] if rewards else None,
                       expected_milestone(rewards, i, phrases)) for i in range(len(trajectory.steps))]
    return head + "".join(cards)


def expected_milestone(rewards: Sequence[RewardBreakdown] | None, index: int, phrases: Sequence[str]) -> str | None:
    """The phrase the ordered pointer compared step ``index`` with: the one after the last hit so far.

    Known only when the list in force has as many phrases as the breakdown's K (the list it was scored with).
    """
    if not rewards or not phrases or rewards[index].num_milestones != len(phrases):
        return None
    reached = sum(1 for reward in rewards[:index] if reward.matched_milestone is not None)
    return phrases[reached] if reached < len(phrases) else None


def _list_summary(milestones: MilestoneList | None, rewards: Sequence[RewardBreakdown] | None) -> str:
    if rewards and rewards[-1].num_milestones:
        return f"{rewards[-1].hits} of {rewards[-1].num_milestones} hit"
    if milestones is None:
        return "no milestones yet for this key"
    return f"{len(milestones.milestones)} milestones (version {milestones.version})"


def step_card(
    data: RunData, row: TrajectoryRow, trajectory: Trajectory, index: int, links: Links,
    reward: RewardBreakdown | None, expected: str | None = None,
) -> str:
    step = trajectory.steps[index]
    n = len(trajectory.steps)
    prev = (f'<a class="prev-step" href="#{step_id(row, index - 1)}">← step {index}</a>' if index > 0
            else '<span class="prev-step disabled">← </span>')
    nxt = (f'<a class="next-step" href="#{step_id(row, index + 1)}">step {index + 2} →</a>' if index + 1 < n
           else '<span class="next-step disabled"> →</span>')
    action = json.dumps(step.action.as_dict(), ensure_ascii=False) if step.action is not None else None
    details = [f'<p class="grounded"><b>did</b> {esc(step.grounded_description or "—")}</p>']
    if step.reason:
        details.append(f'<p class="reason"><b>reason</b> {esc(step.reason)}</p>')
    if step.model_description:
        details.append(f'<p class="model-desc"><b>model says</b> {esc(step.model_description)}</p>')
    if action is not None:
        details.append(f'<pre class="action">{esc(action)}</pre>')
    if step.parse_error:
        details.append(f'<p class="parse-error"><b>format error</b> {esc(step.parse_error)}</p>'
                       f'<pre class="raw">{esc(step.raw_output)}</pre>')
    details.append(milestone_note(reward, data.threshold, expected))
    if reward is not None:
        details.append(reward_bar(reward))
    return (f'<section class="step" id="{esc(step_id(row, index))}" data-step="{index}">'
            f'<div class="step-head"><h3>step {index + 1} of {n}</h3>{prev}{nxt}</div>'
            f'<div class="step-body">{screenshot_figure(step, links)}<div class="details">{"".join(details)}</div>'
            "</div></section>")


def screenshot_figure(step: Step, links: Links) -> str:
    shot = step.observation.screenshot
    if shot is None:
        return '<div class="shot missing">no screenshot (run trained with env.screenshots=false)</div>'
    if not plausible_size(shot.width, shot.height):  # a damaged line: as unreadable as a missing file
        return '<div class="shot missing">screenshot unreadable (its recorded size is no screen size)</div>'
    overlay = step_overlay(step)
    src = links.screenshot(shot.ref)
    img = (f'<img src="{esc(src)}" width="{shot.width}" height="{shot.height}" alt="screen before step '
           f'{step.index + 1}" data-ref="{esc(shot.ref)}" loading="lazy">' if src else
           '<div class="missing">screenshot file missing</div>')
    svg = overlay_svg(overlay) if overlay is not None else ""
    return (f'<figure class="shot" style="max-width:{max(shot.width, 240)}px;aspect-ratio:{shot.width}/{shot.height}">'
            f"{img}{svg}</figure>")


def milestone_note(reward: RewardBreakdown | None, threshold: float | None, expected: str | None = None) -> str:
    """Which milestone this step reached, or which one it was compared with and how close it came."""
    delta = f"δ = {threshold:g}" if threshold is not None else "δ unknown"
    if reward is None:
        return '<p class="milestone none">milestone: not scored</p>'
    if reward.num_milestones == 0:
        return '<p class="milestone none">milestone: this key had no milestones yet (K = 0)</p>'
    if reward.matched_milestone is not None:
        number = (reward.matched_index or 0) + 1
        return (f'<p class="milestone hit"><b>hit milestone {number}/{reward.num_milestones}</b> '
                f'“{esc(reward.matched_milestone)}” — similarity {reward.similarity or 0:.3f} &gt; {esc(delta)}</p>')
    if reward.similarity is None:
        return '<p class="milestone none">milestone: not compared (every milestone already reached)</p>'
    against = f" to the next milestone “{esc(expected)}”" if expected else " to the next milestone"
    return (f'<p class="milestone miss"><b>no milestone</b> — similarity{against} {reward.similarity:.3f} '
            f"≤ {esc(delta)}</p>")


def reward_bar(reward: RewardBreakdown) -> str:
    """The step's reward as signed bars around zero, with the exact numbers beside them."""
    dense = reward.total - reward.outcome - reward.format
    parts = [("outcome", reward.outcome), ("format", reward.format), ("λ·dense", dense), ("total", reward.total)]
    scale = max(1.0, *(abs(v) for _, v in parts))
    width, row_h, label_w = 220, 14, 58
    half = (width - label_w) / 2
    zero = label_w + half
    bars = []
    for i, (name, value) in enumerate(parts):
        y = i * row_h
        length = abs(value) / scale * half
        x = zero if value >= 0 else zero - length
        colour = "#2f9e44" if value >= 0 else "#e03131"
        bars.append(f'<text x="0" y="{y + 10}" font-size="10">{esc(name)}</text>'
                    f'<rect class="bar bar-{name.replace("·", "-")}" x="{x:.1f}" y="{y + 2}" width="{length:.1f}" '
                    f'height="{row_h - 4}" fill="{colour}"><title>{esc(name)} {value:+.4f}</title></rect>')
    svg = (f'<svg class="reward-bar" viewBox="0 0 {width} {row_h * len(parts)}" width="{width}" '
           f'height="{row_h * len(parts)}" xmlns="http://www.w3.org/2000/svg">'
           f'<line x1="{zero}" x2="{zero}" y1="0" y2="{row_h * len(parts)}" stroke="#868e96"/>{"".join(bars)}</svg>')
    numbers = (f"outcome {reward.outcome:+.3f} · format {reward.format:+.3f} · milestone R<sub>mil</sub> "
               f"{reward.milestone:+.3f} · process {reward.process:+.3f} · judge {reward.judge:+.3f} · "
               f"λ {reward.milestone_weight:.4f} · <b>total {reward.total:+.4f}</b>")
    return f'<div class="reward">{svg}<p class="reward-numbers">{numbers}</p></div>'


# --------------------------------------------------------------------------------------------------
# Milestones
# --------------------------------------------------------------------------------------------------

def milestones_index_section(data: RunData, links: Links) -> str:
    history = data.milestone_history()
    if not history:
        return "<h1>Milestones</h1><p>The bank of this run has no milestone lists yet.</p>"
    by_task: dict[str, list[str]] = {}
    for key in history:
        by_task.setdefault(key.split("::", 1)[0], []).append(key)
    blocks = []
    for task, keys in sorted(by_task.items()):
        rows = "".join(
            f'<tr><td><a href="{esc(links.milestone(key))}">{esc(key.split("::", 1)[-1])}</a></td>'
            f"<td class=num>{len(history[key])}</td><td class=num>{len(history[key][-1].milestones)}</td>"
            f"<td class=num>{history[key][-1].provenance.epoch}</td>"
            f"<td>{esc(' → '.join(history[key][-1].milestones))}</td></tr>"
            for key in sorted(keys))
        blocks.append(f"<h2>{esc(task)}</h2><table class=\"keys\"><thead><tr><th>key</th><th>versions</th>"
                      f"<th>milestones</th><th>last written (epoch)</th><th>current list</th></tr></thead>"
                      f"<tbody>{rows}</tbody></table>")
    intro = f"<h1>Milestones</h1><p>{len(history)} keys (milestone_reward.key = {esc(data.key_kind)}).</p>"
    return intro + "".join(blocks)


def milestone_section(data: RunData, key: str, links: Links) -> str:
    history = data.milestone_history().get(key)
    if history is None:
        raise KeyError(f"no milestone list for key {key!r}")
    current = history[-1]
    by_id = {row.id: row for row in data.rows()}
    current_html = "".join(f"<li>{esc(p)}</li>" for p in current.milestones)
    versions = []
    for version in reversed(history):
        source = by_id.get(version.provenance.trajectory_id or "")
        trajectory = (f'<a href="{esc(links.trajectory(source))}">{esc(version.provenance.trajectory_id)}</a>'
                      if source else esc(version.provenance.trajectory_id or "—"))
        versions.append(
            f'<tr class="version"><td class=num>{version.version}</td><td class=num>{version.provenance.epoch}</td>'
            f"<td>{trajectory}</td><td>{esc(version.provenance.generator)}</td><td>{esc(version.provenance.run)}</td>"
            f"<td>{'frozen' if version.frozen else ''}</td>"
            f"<td><ol>{''.join(f'<li>{esc(p)}</li>' for p in version.milestones)}</ol></td></tr>")
    return (f"<h1>Milestones of {esc(key)}</h1>"
            f"<h2>Current list (version {current.version})</h2><ol class=\"current\">{current_html}</ol>"
            f"<h2>Hit rate per milestone over training</h2>{hit_table(data.hit_table(key))}"
            "<h2>Every version</h2><table class=\"versions\"><thead><tr><th>version</th><th>epoch</th>"
            "<th>from trajectory</th><th>generator</th><th>run</th><th></th><th>milestones</th></tr></thead>"
            f"<tbody>{''.join(versions)}</tbody></table>")


def hit_table(table: MilestoneHitTable) -> str:
    if not table.epochs:
        return "<p>No scored training trajectories of this key.</p>"
    head = "".join(f"<th>{e}</th>" for e in table.epochs)
    rows = []
    for row in table.rows:
        cells = []
        for epoch in table.epochs:
            rate = row.rates.get(epoch)
            if rate is None:
                cells.append('<td class="rate off" title="not in the list then">·</td>')
            else:
                cells.append(f'<td class="rate" style="--rate:{rate:.3f}" title="{rate:.0%} of '
                             f'{table.trajectories[epoch]} trajectories">{rate:.0%}</td>')
        mark = "" if row.current else ' <span class="badge">earlier</span>'
        rows.append(f'<tr><td class="phrase">{esc(row.phrase)}{mark}</td><td class=num>{_pct(row.overall)}</td>'
                    f"{''.join(cells)}</tr>")
    counts = "".join(f"<td class=num>{table.trajectories[e]}</td>" for e in table.epochs)
    return (f'<div class="scroll"><table class="hits"><thead><tr><th>milestone</th><th>overall</th>{head}</tr>'
            f"</thead><tbody>{''.join(rows)}<tr class=\"counts\"><td>scored trajectories</td><td></td>{counts}</tr>"
            "</tbody></table></div><p class=\"note\">epochs are columns; · = the phrase was not in the list that "
            "scored that epoch.</p>")


def error_section(status: int, message: str, links: Links) -> str:
    return (f'<h1>{status}</h1><p class="error">{esc(message)}</p>'
            f'<p><a href="{esc(links.run())}">back to the run</a></p>')

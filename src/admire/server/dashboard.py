"""The env server's dashboard at ``/ui``: a card per device (state, task, last screen, restarts,
failures) and the recent episodes with their outcome, refreshed every few seconds.

It reads only the :class:`~admire.server.views.PoolView` protocol, so it never touches a lock a
stepping device needs, and it is tested against a fake pool as well as the real one.

The page must work on a machine with no internet: Gradio's analytics are off, no share link is made,
and the theme uses the fonts Gradio ships plus the system's (``GoogleFont`` would make the browser
fetch from Google). Everything shown comes from clients (task names) or devices (screenshots), so
all text is escaped and only real PNG bytes are embedded.
"""

from __future__ import annotations

import base64
import html
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from admire.server.views import DeviceView, EpisodeView, PoolView

if TYPE_CHECKING:  # gradio and fastapi are imported when a dashboard is built (the [server] extra)
    import gradio
    from fastapi import FastAPI

DEFAULT_PATH = "/ui"
REFRESH_S = 2.0
EPISODE_ROWS = 50
EPISODE_COLUMNS = ["session", "device", "task", "seed", "steps", "outcome", "started", "duration"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

STATE_COLOURS = {
    "starting": "#6b7280", "idle": "#16a34a", "leased": "#2563eb", "stepping": "#7c3aed",
    "restarting": "#d97706", "quarantined": "#dc2626", "stopped": "#374151",
}

CARDS_CSS = """
.admire-summary { margin: 0 0 8px 0; font-size: 0.95em; }
.admire-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 10px; }
.admire-card { border: 1px solid #d1d5db; border-radius: 8px; padding: 8px; background: #fff; color: #111827; }
.admire-card header { display: flex; justify-content: space-between; align-items: center; margin-bottom: 6px; }
.admire-state { color: #fff; border-radius: 10px; padding: 1px 8px; font-size: 0.8em; }
.admire-shot { width: 100%; height: auto; border: 1px solid #e5e7eb; image-rendering: auto; }
.admire-noshot { height: 80px; display: flex; align-items: center; justify-content: center; color: #6b7280;
                 border: 1px dashed #d1d5db; font-size: 0.85em; }
.admire-card dl { display: grid; grid-template-columns: auto 1fr; gap: 2px 8px; margin: 6px 0 0 0;
                  font-size: 0.85em; }
.admire-card dt { color: #6b7280; }
.admire-card dd { margin: 0; overflow-wrap: anywhere; }
.admire-error { color: #dc2626; }
"""


def build_dashboard(pool: PoolView, *, refresh_s: float = REFRESH_S, episode_rows: int = EPISODE_ROWS,
                    clock: Callable[[], float] = time.time) -> gradio.Blocks:
    """The dashboard as a Gradio app over ``pool``; mount it with :func:`mount_dashboard`."""
    if refresh_s <= 0:
        raise ValueError(f"refresh_s must be > 0 seconds, got {refresh_s}")
    if episode_rows < 1:
        raise ValueError(f"episode_rows must be >= 1, got {episode_rows}")
    gr = _gradio()

    def render() -> tuple[str, list[list[Any]]]:
        return snapshot(pool, episode_rows, clock)

    with gr.Blocks(title="ADMIRE env server", analytics_enabled=False) as blocks:
        with gr.Row(equal_height=True):
            gr.Markdown("### ADMIRE env server: devices")
            refresh = gr.Button("Refresh", size="sm", scale=0, elem_id="admire-refresh")
        devices = gr.HTML(elem_id="admire-devices", css_template=CARDS_CSS, js_on_load=None)
        gr.Markdown("### Recent episodes")
        episodes = gr.Dataframe(headers=EPISODE_COLUMNS, value=[], interactive=False, wrap=True,
                                elem_id="admire-episodes", max_height=600)
        timer = gr.Timer(refresh_s)
        events = {"fn": render, "outputs": [devices, episodes], "show_progress": "hidden", "queue": False,
                  "api_visibility": "private"}
        blocks.load(**events)
        timer.tick(**events)
        refresh.click(**events)
    return blocks


def mount_dashboard(app: FastAPI, pool: PoolView, path: str = DEFAULT_PATH, *,
                    auth: tuple[str, str] | Callable[[str, str], bool] | None = None, **options: Any) -> FastAPI:
    """Serve the dashboard of ``pool`` under ``path`` of ``app`` (``options`` go to :func:`build_dashboard`).

    ``auth`` puts Gradio's login page in front of it, e.g. ``("admire", token)`` when the server is
    reachable beyond localhost: the page shows every device's screen.
    """
    gr = _gradio()
    blocks = build_dashboard(pool, **options)
    return gr.mount_gradio_app(app, blocks, path=path, theme=offline_theme(), footer_links=[], run_history=False,
                               ssr_mode=False, mcp_server=False, pwa=False, show_error=True, auth=auth)


def offline_theme() -> Any:
    """Gradio's default look with fonts that need no download: the ones Gradio ships, then the system's."""
    gr = _gradio()
    return gr.themes.Default(
        font=(gr.themes.LocalFont("Source Sans Pro"), "ui-sans-serif", "system-ui", "sans-serif"),
        font_mono=(gr.themes.LocalFont("IBM Plex Mono"), "ui-monospace", "monospace"),
    )


# --------------------------------------------------------------------------------------------------
# What is shown (plain functions on the views, so they are testable without a browser)
# --------------------------------------------------------------------------------------------------


def snapshot(pool: PoolView, episode_rows: int, clock: Callable[[], float] = time.time) -> tuple[str, list[list[Any]]]:
    """The device cards (HTML) and episode rows; a pool that fails to answer shows its error instead."""
    try:
        devices = pool.devices()
        episodes = pool.recent_episodes(episode_rows)
    except Exception as exc:  # noqa: BLE001 - the page must stay up whatever the pool does
        message = html.escape(f"{type(exc).__name__}: {exc}")
        return f'<p class="admire-error">The pool did not answer: {message}</p>', []
    now = clock()
    return device_cards(devices, now), episode_table(episodes, now)


def device_cards(devices: Sequence[DeviceView], now: float) -> str:
    counts: dict[str, int] = {}
    for device in devices:
        counts[device.state] = counts.get(device.state, 0) + 1
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no devices yet"
    cards = "".join(_card(device, now) for device in sorted(devices, key=lambda d: d.id))
    return (f'<div class="admire-summary">{len(devices)} device(s): {html.escape(summary)}</div>'
            f'<div class="admire-grid">{cards}</div>')


def episode_table(episodes: Sequence[EpisodeView], now: float) -> list[list[Any]]:
    rows = []
    for episode in sorted(episodes, key=lambda e: e.started_at, reverse=True):
        end = episode.finished_at if episode.finished_at is not None else now
        rows.append([episode.session_id, episode.device_id, episode.task, episode.seed, episode.steps,
                     episode.outcome, time.strftime("%H:%M:%S", time.localtime(episode.started_at)),
                     _duration(max(0.0, end - episode.started_at))])
    return rows


def _card(device: DeviceView, now: float) -> str:
    colour = STATE_COLOURS.get(device.state, "#6b7280")
    state = html.escape(device.state)
    since = f"{state} for {_duration(max(0.0, now - device.last_change))}" if device.last_change else state
    task = html.escape(device.task) if device.task else "—"
    shot = device.last_screenshot
    if shot and shot.startswith(PNG_SIGNATURE):
        image = (f'<img class="admire-shot" alt="last screen of device {device.id}" '
                 f'src="data:image/png;base64,{base64.b64encode(shot).decode("ascii")}">')
    else:
        image = '<div class="admire-noshot">no screenshot yet</div>'
    return (
        f'<div class="admire-card" data-device="{device.id}" data-state="{state}">'
        f'<header><b>device {device.id}</b>'
        f'<span class="admire-state" style="background:{colour}" title="{since}">{state}</span></header>'
        f"{image}"
        f"<dl><dt>task</dt><dd class=\"admire-task\">{task}</dd>"
        f"<dt>restarts</dt><dd class=\"admire-restarts\">{device.restarts}</dd>"
        f"<dt>failures</dt><dd class=\"admire-failures\">{device.failures}</dd></dl>"
        f"</div>"
    )


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"


def _gradio() -> Any:
    """Import gradio with its analytics off: this server may sit on a machine with no internet."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        import gradio
    except ImportError as exc:  # pragma: no cover - gradio is in the [server] extra
        raise ImportError("the dashboard needs Gradio: pip install 'admire[server]'") from exc
    return gradio

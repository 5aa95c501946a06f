"""The viewer as a local web app (FastAPI): pages rendered on request, screenshots served lazily.

Only ``GET`` routes, only files of the run: a screenshot is looked up by its content hash and refused
when the name or the resolved file lies outside ``trajectories/screenshots``. Bad query parameters are
a 400 page that says what was wrong; a missing trajectory or key is a 404; nothing a client sends
crashes the server.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from admire.errors import first_line
from admire.viz import render
from admire.viz.data import RunData, ScreenshotNotFound, ScreenshotRefused, TrajectoryFilter

logger = logging.getLogger("admire.viz")
SECURITY_HEADERS = {
    "Content-Security-Policy": render.CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def create_app(run: RunData | str | Path, allowed_hosts: Collection[str] | None = None) -> FastAPI:
    """The viewer's app; with ``allowed_hosts`` it answers only requests whose Host header names one of them
    (``serve`` passes the loopback names and the address it binds): the viewer has no login, and a web page
    that rebinds its own domain to 127.0.0.1 (DNS rebinding) would otherwise read the run."""
    data = run if isinstance(run, RunData) else RunData(run)
    links = render.ServerLinks()
    app = FastAPI(title=f"admire viz — {data.name}", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.data = data
    if allowed_hosts is not None:
        from admire.server.app import HostCheck

        app.add_middleware(HostCheck, allowed=allowed_hosts)

    def page(title: str, body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(render.document(title, body, links, data.name), status_code=status,
                            headers=SECURITY_HEADERS)

    def error(status: int, message: str) -> HTMLResponse:
        return page(f"{status}", render.error_section(status, message, links), status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> HTMLResponse:
        logger.exception("viewer error on %s", request.url.path)
        return error(500, f"the viewer failed on this page: {type(exc).__name__}: {exc}")

    @app.get("/", response_class=HTMLResponse)
    def run_page() -> HTMLResponse:
        return page(f"{data.name} — run", render.run_section(data, links))

    @app.get("/trajectories", response_class=HTMLResponse)
    def trajectory_list(request: Request) -> HTMLResponse:
        query = dict(request.query_params)
        try:
            where = TrajectoryFilter.from_query(query)
            page_number = _page_number(query.get("page"))
        except ValueError as exc:
            return error(400, str(exc))
        return page(f"{data.name} — trajectories", render.trajectory_list_section(data, where, links, page_number))

    @app.get("/trajectory/{address}", response_class=HTMLResponse)
    def trajectory_page(address: str) -> HTMLResponse:
        try:
            row = data.row(address)
        except KeyError as exc:
            return error(404, str(exc.args[0]))
        neighbours = data.neighbours(data.rows(), row)
        try:
            body = render.trajectory_section(data, row, links, neighbours=neighbours)
        except ValueError as exc:  # a line the index could read but that is no trajectory (hand-edited, damaged)
            detail = first_line(exc)
            return error(422, f"{row.address} (line {row.position + 1} of {row.kind}_epoch_{row.epoch:04d}.jsonl) is "
                              f"not a readable trajectory: {detail}")
        return page(f"{row.task} {row.address}", body)

    @app.get("/milestones", response_class=HTMLResponse)
    def milestones_page() -> HTMLResponse:
        return page(f"{data.name} — milestones", render.milestones_index_section(data, links))

    @app.get("/milestones/key", response_class=HTMLResponse)
    def milestone_page(key: str = "") -> HTMLResponse:
        try:
            body = render.milestone_section(data, key, links)
        except KeyError as exc:
            return error(404, str(exc.args[0]))
        return page(f"milestones — {key}", body)

    @app.get("/screenshots/{name:path}")
    def screenshot(name: str) -> Response:
        ref = name[:-4] if name.endswith(".png") else name
        try:
            path = data.screenshot_file(ref)
        except ScreenshotRefused:
            return Response("forbidden", status_code=403, media_type="text/plain")
        except ScreenshotNotFound:
            return Response("not found", status_code=404, media_type="text/plain")
        # Content-addressed: the bytes behind a ref never change.
        return FileResponse(path, media_type="image/png",
                            headers={"Cache-Control": "public, max-age=31536000, immutable", **SECURITY_HEADERS})

    return app


def _page_number(raw: str | None) -> int:
    if raw is None or raw == "":
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"page must be a whole number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"page must be >= 0, got {value}")
    return value


def serve(run: RunData | str | Path, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run the viewer until interrupted (uvicorn, one process)."""
    import uvicorn

    from admire.server.app import LOOPBACK_HOSTS
    from admire.server.slow_clients import request_deadline_protocol

    allowed = LOOPBACK_HOSTS | {host.strip("[]").lower()}
    uvicorn.run(create_app(run, allowed_hosts=allowed), host=host, port=port, log_level="warning",
                http=request_deadline_protocol())

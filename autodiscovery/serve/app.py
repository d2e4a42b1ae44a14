"""The web application of `serve`: a few GET routes over a read-only store, pages rendered with the
report's templates and charts, and one small JSON route a run's page polls to update itself.

Every response passes through one place (`Pages.respond`): secrets redacted, a Content-Security-Policy
that lets run only the page's own script (a nonce), no caching, no framing."""

from __future__ import annotations

import secrets as random_tokens
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from pygments.formatters import HtmlFormatter
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from autodiscovery.review import exports, report
from autodiscovery.review import html as report_html
from autodiscovery.review.report import NotFound
from autodiscovery.roles import ShowingProfiles, declared
from autodiscovery.serve import views
from autodiscovery.serve.secrets import Redactor
from autodiscovery.serve.source import duration, highlight
from autodiscovery.store import EvalKind, EvalStatus, RunStatus, Store, StoreError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
"""The Host names a server on a loopback address answers to."""
KEPT_STATES = 8
"""How many runs' states (data and charts) are kept drawn."""
HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Cache-Control": "no-store"}
CSP = ("default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
"""Inline styles are allowed (the charts' SVG carries them); scripts only with the page's nonce."""


class Pages:
    """The routes' work: each reads the store, renders a template, and responds through `respond`."""

    def __init__(self, store: Store, poll_s: float) -> None:
        self.store, self.poll_s = store, poll_s
        self.redact = Redactor(store.url)
        self.env = report_html.environment()
        self.env.filters["duration"] = duration
        self.env.globals |= {"database": shown_name(store), "highlight_css": HtmlFormatter().get_style_defs(".highlight"),
                             "statuses": [s.value for s in RunStatus]}
        self.drawings: OrderedDict[tuple, tuple] = OrderedDict()
        """The latest states of runs drawn, by (run, token)."""
        self.lock = threading.Lock()

    # ---- responses ------------------------------------------------------------------------------------
    def respond(self, body: str, code: int = 200, nonce: str = "", media_type: str = "text/html") -> Response:
        body = body.replace(self.store.where, shown_name(self.store))  # an error's message names the file too
        response = Response(self.redact(body), status_code=code, media_type=media_type)
        response.headers.update(HEADERS | {"Content-Security-Policy": CSP.format(nonce=nonce or "none")})
        return response

    def page(self, template: str, code: int = 200, **context: Any) -> Response:
        nonce = random_tokens.token_urlsafe(16)
        body = self.env.get_template(template).render(nonce=nonce, href=href, url=url, **context)
        return self.respond(body, code, nonce)

    def error(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, BadRequest):
            return self.page("error.html.j2", 400, title="Bad request", message=str(exc))
        if isinstance(exc, NotFound):
            return self.page("error.html.j2", 404, title="Not found", message=str(exc))
        if isinstance(exc, HTTPException):
            return self.page("error.html.j2", exc.status_code, title=exc.detail, message=exc.detail)
        if isinstance(exc, StoreError):  # the database went away or stayed locked: say so, try again later
            return self.page("error.html.j2", 503, title="Database unavailable", message=str(exc))
        return self.page("error.html.j2", 500, title="Internal error",
                         message=f"{type(exc).__name__}: this page could not be made (see the server's output)")

    # ---- pages ----------------------------------------------------------------------------------------
    def runs(self, request: Request) -> Response:
        q = request.query_params
        campaign, status = q.get("campaign") or None, q.get("status") or None
        if campaign is not None and len(campaign) > MAX_QUERY:
            raise BadRequest(f"campaign: at most {MAX_QUERY} characters")
        if status is not None and status not in {s.value for s in RunStatus}:
            raise BadRequest(f"status: one of {', '.join(s.value for s in RunStatus)}")
        data = views.runs_page(self.store, campaign, status, _int(q.get("page"), 1))
        return self.page("runs.html.j2", data=data, campaign=campaign, status=status)

    def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        page = _int(request.query_params.get("page"), 1)
        state = views.token(self.store, run_id)
        polling: dict[str, Any] = {"token": state, "poll_ms": int(self.poll_s * 1000),
                   "live_url": url(f"/runs/{run_id}/live", page=page)}
        if views.header(self.store, run_id)["is_suite"]:
            return self.page("suite.html.j2", **self._suite_context(run_id), **polling)
        return self.page("run.html.j2", **self._run_context(run_id, page, state), **polling)

    def _suite_context(self, run_id: int) -> dict[str, Any]:
        dispatch = exports.dispatch(self.store, run_id)
        return {"head": views.header(self.store, run_id), "live": views.live(self.store, run_id), "dispatch": dispatch,
                "columns": [c for c in declared(dispatch["harness"]).columns if "suite" in c.views]}

    def _run_context(self, run_id: int, page: int, state: str) -> dict[str, Any]:
        data, harness, charts, others = self._drawn(run_id, state)
        return {"data": data, "run": data["run"], "charts": charts, "others": others, "objective": harness.objective,
                "head": views.header(self.store, run_id), "live": views.live(self.store, run_id),
                "cands": views.candidates_page(self.store, run_id, page), "harness": harness}

    def _drawn(self, run_id: int, state: str) -> tuple:
        """The report's data and charts of a run in one state: drawn once for every page and poll that
        asks for that state (drawing is what takes time)."""
        key = (run_id, state)
        with self.lock:
            if key in self.drawings:
                return self.drawings[key]
        data = report_html.collect(self.store, run_id)
        data["candidates"] = [{k: v for k, v in c.items() if k != "source"} for c in data["candidates"]]
        harness = report.harness_class(self.store, run_id)
        drawn = (data, harness, *report_html.charts(data, harness))
        with self.lock:
            self.drawings[key] = drawn
            while len(self.drawings) > KEPT_STATES:
                self.drawings.popitem(last=False)
        return drawn

    def live(self, request: Request) -> Response:
        """{"token", "running", "fragments": {element id: its new HTML}}: empty fragments while nothing
        changed since the token the page holds (`since`)."""
        run_id = request.path_params["run_id"]
        page = _int(request.query_params.get("page"), 1)
        state = views.token(self.store, run_id)
        running = state.startswith(f"{RunStatus.running.value}-")
        if request.query_params.get("since") == state:
            return self._json({"token": state, "running": running, "fragments": {}})
        return self._json({"token": state, "running": running, "fragments": self._fragments(run_id, page, state)})

    def _fragments(self, run_id: int, page: int, state: str) -> dict[str, str]:
        """The parts of a run's page that change as it goes, drawn by the same templates and chart code."""
        if views.header(self.store, run_id)["is_suite"]:
            context = self._suite_context(run_id)
            return {"live": self._block("suite.html.j2", "live", context),
                    "dispatch": self._block("suite.html.j2", "dispatch", context)}
        context = self._run_context(run_id, page, state)
        parts = {"chart-progress": "progress", "lineage-part": "lineage", "harness-part": "harness",
                 "kept-steps": "steps"}
        return {"live": self._block("run.html.j2", "live", context),
                **{key: self._block("run_sections.html.j2", block, context) for key, block in parts.items()},
                "candidates": self._block("run.html.j2", "candidates", context)}

    def _block(self, template: str, block: str, context: dict) -> str:
        t = self.env.get_template(template)
        return "".join(t.blocks[block](t.new_context({"href": href, "url": url, **context}))).strip()

    def _json(self, data: dict) -> Response:
        return self.respond(bytes(JSONResponse(data).body).decode(), media_type="application/json")

    def candidate(self, request: Request) -> Response:
        run_id, seq = request.path_params["run_id"], request.path_params["seq"]
        data = views.candidate(self.store, run_id, seq)
        harness = report.harness_class(self.store, run_id)
        labels = {c.key: c for c in declared(harness).columns}
        profiles = {i: section for i, e in enumerate(data["evaluations"])
                    if isinstance(harness, ShowingProfiles)
                    and e["kind"] == EvalKind.profile and e["status"] == EvalStatus.ok
                    and "profile" in (e["metrics"] or {})
                    and (section := harness.profile_section(f"{run_id}/{seq}", e["metrics"]["profile"]))}
        return self.page("candidate.html.j2", c=data, run_id=run_id, head=views.header(self.store, run_id),
                         objective=harness.objective, labels=labels, source=highlight(data["source"]),
                         profiles=profiles)

    def tree(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        data = views.tree_page(self.store, run_id, _int(request.query_params.get("page"), 1))
        return self.page("tree.html.j2", data=data, run_id=run_id, head=views.header(self.store, run_id))


class HostCheck:
    """Answers 400 to a request whose Host is not one of `hosts` (port aside, IPv6 in brackets): a page
    of another site that rebinds its name to 127.0.0.1 cannot read this server."""

    def __init__(self, app: Any, hosts: tuple[str, ...]) -> None:
        self.app, self.hosts = app, set(hosts)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if _name(dict(scope["headers"]).get(b"host", b"").decode("latin-1")).lower() not in self.hosts:
                await Response("Invalid host header", status_code=400, media_type="text/plain")(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _name(host: str) -> str:
    """A Host header's name: without its port, an IPv6 address without its brackets."""
    if host.startswith("["):
        return host[1:host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def href(run_id: int, seq: int | None = None) -> str:
    """The page of a run, or of one of its candidates."""
    return f"/runs/{run_id}" if seq is None else f"/runs/{run_id}/candidates/{seq}"


def url(path: str, **query: Any) -> str:
    """A path with its query (the parameters that are not None)."""
    given = {k: v for k, v in query.items() if v is not None}
    return f"{path}?{urlencode(given)}" if given else path


def shown_name(store: Store) -> str:
    """The database as its pages name it: a file by its name alone (no page shows where the server's
    files are), any other by its URL without the password."""
    where = store.where
    return Path(where).name if store.engine.dialect.name == "sqlite" and where != store.shown else where


MAX_QUERY = 200
"""The longest filter a query may give (a campaign's name is far shorter)."""
MAX_ID = 2**63 - 1
"""The largest id the database holds: a path's number past it names nothing."""


class BadRequest(Exception):
    """A client's query that names nothing the pages take: a 400, in one line."""


def _int(text: str | None, default: int) -> int:
    """A page number: `default` where the text is none or not a number, at most MAX_ID."""
    try:
        return min(max(int(text), 1), MAX_ID) if text is not None and len(text) < 20 else default
    except ValueError:
        return default


def _bounded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """A route taking ids from its path: one past what the database holds is not found (a 404), never an
    overflow in the database's driver."""
    def route(request: Request) -> Response:
        for name, value in request.path_params.items():
            if isinstance(value, int) and value > MAX_ID:
                raise NotFound(f"no {name.removesuffix('_id')} {value}")
        return handler(request)
    return route


def create_app(store: Store, poll_s: float = 2.0, hosts: tuple[str, ...] | None = LOOPBACK) -> Starlette:
    """The application over a read-only store. `hosts`: the Host names it answers (its loopback names by
    default, so a page elsewhere cannot reach it through a name it rebinds to 127.0.0.1); None: any."""
    if not store.read_only:
        raise ValueError("serve needs a read-only store: Store(url, read_only=True)")
    pages = Pages(store, poll_s)
    routes = [
        Route("/", pages.runs),
        Route("/runs/{run_id:int}", _bounded(pages.run)),
        Route("/runs/{run_id:int}/live", _bounded(pages.live)),
        Route("/runs/{run_id:int}/tree", _bounded(pages.tree)),
        Route("/runs/{run_id:int}/candidates/{seq:int}", _bounded(pages.candidate)),
    ]
    middleware = [Middleware(HostCheck, hosts=hosts)] if hosts else []
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={Exception: pages.error, HTTPException: pages.error, NotFound: pages.error})

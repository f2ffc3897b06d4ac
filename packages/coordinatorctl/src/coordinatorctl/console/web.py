"""The operator console's web application (docs/console.md): server-rendered pages over the
service API, served on loopback only.

Every page is one or two API calls made by this process with the operator's token (the
browser never holds it); the answers are read through the generated models (remote/models.py)
and rendered by Jinja2 with autoescaping. Nothing of a run but its ids, closed words, timing
and the declared output of a finished run reaches a page: never an input, a product response,
a command, a reason or the token (ARCHITECTURE rule 4, contract 06 §12).

Guards, on every request: the Host header must be `127.0.0.1:<port>` (no DNS rebinding); every
answer carries a strict CSP, `nosniff`, `no-referrer` and `no-store`. A POST must also carry
an Origin of `http://127.0.0.1:<port>`, the per-process CSRF token in its form's action URL and
a declared form length of at most 4,096 bytes: all checked before any byte of its body is read.
Below the app, the listener applies the connection guard (`CONSOLE_LIMITS`: head size, head and
body timeouts, connection caps; `coordinator_core.shell.runtime.guard`).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, urlencode

from jinja2 import Environment, select_autoescape
from markupsafe import Markup
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator_core.errors import Diagnostic
from coordinator_core.shell.runtime.guard import (
    CONNECTIONS_EXHAUSTED,
    HEADERS_TOO_LARGE,
    PEER_CONNECTIONS_EXHAUSTED,
    ConnectionLimits,
)
from coordinatorctl.remote.checks import (
    check_date_time,
    check_reason,
    check_step_id,
    check_text_argument,
    parse_run_id,
)
from coordinatorctl.remote.exchange import Failure, RemoteAnswer
from coordinatorctl.remote.models import (
    AttemptPage,
    Doctor,
    HoldState,
    Problem,
    ReasonRequest,
    ReconcileResult,
    ReleaseAdmissionHoldRequest,
    RetentionRequest,
    RetentionResult,
    RunInspection,
    RunList,
    RunStatus,
    WorkflowInfo,
    answer_of,
    request_body,
)
from coordinatorctl.remote.request import ApiRequest

__all__ = ["CONSOLE_LIMITS", "CSP", "Api", "ConsoleSettings", "console_refusals", "create_app"]

CSP: Final = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
    "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
)
STATUSES: Final = (
    "running", "attention", "cancel-requested", "finished", "failed", "cancelled",
    "cancelled-after-effect", "expired",
)  # fmt: skip
TERMINAL: Final = frozenset({"finished", "cancelled", "cancelled-after-effect", "expired"})
RUN_ACTIONS: Final = ("cancel", "retry-same", "reconcile")
HOLD_ACTIONS: Final = ("restore-hold", "release-restore-hold", "release-admission-hold")
PAGE_SIZE: Final = 50
ATTEMPTS_PAGE_SIZE: Final = 50  # a step's attempts per page (`/runs/{run}/steps/{step}/attempts`)
MAX_FORM_BYTES: Final = 4096
Form = dict[str, str]
FAILURE_TEXT: Final = {
    "unreachable": "The service cannot be reached.",
    "tls": "The service's TLS certificate is not trusted on this machine (see SSL_CERT_FILE).",
    "timeout": "The service did not answer in time.",
    "oversize": "The service's answer was too large.",
    "invalid": "The service's answer was not a valid answer.",
    "redirect": "The service answered with a redirect, which is never followed.",
}

# One API call under the client policy of 09 §4 (remote.exchange in production).
CONSOLE_LIMITS: Final = ConnectionLimits(
    head_max_bytes=16_384,
    head_timeout_seconds=10.0,
    body_timeout_seconds=10.0,
    max_connections=64,
    close_linger_seconds=2.0,
    connections_per_peer=64,  # every peer of a loopback listener is this machine
    heads_per_peer=16,
)
"""The console listener's connection guard (docs/console.md): a browser's request head is far
below 16 KiB, a form body at most `MAX_FORM_BYTES`, one operator opens a handful of
connections."""

_REFUSAL_TEXT: Final = {
    HEADERS_TOO_LARGE: (431, b"The request headers are too large."),
    CONNECTIONS_EXHAUSTED: (503, b"The console holds too many connections; try again."),
    PEER_CONNECTIONS_EXHAUSTED: (503, b"The console holds too many connections; try again."),
}


def console_refusals() -> dict[str, tuple[int, bytes]]:
    """The guard's refusals as the console answers them: one plain sentence, the console's
    security headers, `Connection: close`."""
    answers: dict[str, tuple[int, bytes]] = {}
    for code, (status, text) in _REFUSAL_TEXT.items():
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            *SECURITY_HEADERS,
            (b"content-length", str(len(text)).encode("ascii")),
            (b"connection", b"close"),
        ]
        if status == 503:
            headers.append((b"retry-after", b"1"))
        lines = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
        answers[code] = (status, lines + b"\r\n" + text)
    return answers


Api = Callable[[ApiRequest], RemoteAnswer | Failure]
_Model = TypeVar("_Model", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """What the application needs: the loopback port it is served on (for the Host and Origin
    checks), the checked project's explain result (for graphs) and the CSRF token."""

    port: int
    explained: Mapping[str, Any] | None = None
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True, slots=True)
class Answer:
    """One API answer as a page sees it: the typed body, or the problem, or the failure."""

    value: Any = None
    problem: Problem | None = None
    failure: str | None = None
    status: int = 0

    @property
    def ok(self) -> bool:
        return self.value is not None


class _Guard:
    """Host check and security headers on every answer (pure ASGI: no buffering)."""

    def __init__(self, app: ASGIApp, settings: ConsoleSettings) -> None:
        self.app = app
        self.host = f"127.0.0.1:{settings.port}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() not in {header for header, _ in SECURITY_HEADERS}
                ]
                message["headers"] = [*headers, *SECURITY_HEADERS]
            await send(message)

        hosts = [value for name, value in scope.get("headers", []) if name == b"host"]
        if hosts != [self.host]:
            refused = PlainTextResponse(
                "This console answers only at its loopback address.", status_code=421
            )
            await refused(scope, receive, secured)
            return
        await self.app(scope, receive, secured)


def _templates() -> Environment:
    root = files("coordinatorctl.console").joinpath("templates")

    def load(name: str) -> str:
        return root.joinpath(name).read_text(encoding="utf-8")

    from jinja2 import FunctionLoader

    environment = Environment(
        loader=FunctionLoader(load),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["when"] = _when
    environment.filters["until"] = _until
    environment.filters["word"] = _word
    return environment


def _when(value: Any) -> str:
    """An instant as RFC 3339 UTC with milliseconds; an empty value as an en dash."""
    if value is None:
        return "–"
    text: str = value.isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def _until(value: Any) -> Markup:
    """An instant with its live countdown (console.js fills the span); a dash when empty."""
    if value is None:
        return Markup("–")
    when = _when(value)
    return Markup('{} <span class="countdown" data-until="{}"></span>').format(when, when)


def _since(text: str) -> datetime | None:
    """The `since` filter: an RFC 3339 instant with an offset, or a date (UTC midnight)."""
    try:
        if len(text) == 10:
            return datetime.fromisoformat(text).replace(tzinfo=UTC)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _word(value: Any) -> str:
    """A closed word (an enum member or a generated id model) as its text; None as a dash."""
    if value is None:
        return "–"
    if hasattr(value, "root"):
        return str(value.root)
    if hasattr(value, "value"):
        return str(value.value)
    return str(value)


def attention_reason(run: RunStatus) -> str | None:
    """Why a run needs an operator, in the console's words, or None."""
    if run.restore_review:
        return "restore review"
    if run.status.value != "attention":
        return None
    if run.failure_code is not None and run.failure_code.value == "receipt-expired":
        return "receipt expired"
    if run.uncertain:
        return "uncertain effect"
    return "operator needed"


_TAG: Final = re.compile(r"[0-9a-f]{16}")
FOLLOW_WAIT_SECONDS: Final = 20
"""The `wait` of the run page's follow: the service's maximum (06 §5.3)."""


def _refresh(auto: str | None) -> int | None:
    """`?auto=N`: refresh every N seconds (2–300), else None."""
    return int(auto) if auto is not None and auto.isdigit() and 2 <= int(auto) <= 300 else None


def create_app(api: Api, settings: ConsoleSettings) -> ASGIApp:
    """The console: its routes behind the guard."""
    templates = _templates()
    css = files("coordinatorctl.console").joinpath("static", "console.css").read_bytes()
    script = files("coordinatorctl.console").joinpath("static", "console.js").read_bytes()

    async def call(request: ApiRequest, model: type[_Model]) -> Answer:
        answer = await run_in_threadpool(api, request)
        if not isinstance(answer, RemoteAnswer):
            return Answer(failure=FAILURE_TEXT.get(answer, FAILURE_TEXT["invalid"]))
        if 200 <= answer.status < 300:
            typed = answer_of(model, answer.body)
            if typed is None:
                return Answer(failure=FAILURE_TEXT["invalid"], status=answer.status)
            return Answer(value=typed, status=answer.status)
        problem = answer_of(Problem, answer.body)
        if problem is None:
            return Answer(failure=FAILURE_TEXT["invalid"], status=answer.status)
        return Answer(problem=problem, status=answer.status)

    async def doctor() -> Answer:
        return await call(ApiRequest("GET", "/v1/doctor"), Doctor)

    def page(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("auto", None)
        context.setdefault("follow", None)
        text = templates.get_template(name).render(csrf=settings.csrf, **context)
        return HTMLResponse(text, status_code=status_code)

    def graph_image(path: Any) -> str | None:
        """The SVG of the project's graph (with a run path) as a data: URI, or None."""
        if settings.explained is None:
            return None
        from coordinatorctl import graphs

        drawn = graphs.produce(settings.explained, "svg", output=None, path=path)
        if not isinstance(drawn, str):
            return None
        encoded = base64.b64encode(drawn.encode()).decode("ascii")
        return "data:image/svg+xml;base64," + encoded

    async def runs(request: Request) -> Response:
        params = request.query_params
        status = params.get("status") or None
        workflow = params.get("workflow") or None
        cursor = params.get("cursor") or None
        since_text = params.get("since") or None
        auto = params.get("auto")
        refresh = _refresh(auto)
        problems: list[str] = []
        since = None if since_text is None else _since(since_text)
        if since_text is not None and since is None:
            problems.append(
                "The admitted-since filter is not a date (YYYY-MM-DD) or an RFC 3339 instant."
            )
        if status is not None and status not in STATUSES:
            problems.append("The status filter is not a run status.")
            status = None
        for name, given in (("workflow", workflow), ("cursor", cursor)):
            if given is not None and (check_text_argument(name, given) or len(given) > 512):
                problems.append(f"The {name} filter is not valid text.")
        if problems:
            return page("runs.html", 400, problems=problems, filters={}, statuses=STATUSES)
        query = [("limit", str(PAGE_SIZE))]
        for key, given in (("cursor", cursor), ("status", status), ("workflow", workflow)):
            if given is not None:
                query.append((key, given))
        listed = await call(ApiRequest("GET", "/v1/runs", query=tuple(query)), RunList)
        checked = await doctor()
        entries: list[tuple[RunStatus, str | None]] = []
        next_link = None
        if listed.ok:
            found: RunList = listed.value
            # The service lists newest first: a page that reaches past `since` is the last.
            shown = [run for run in found.runs if since is None or run.admitted_at >= since]
            entries = [(run, attention_reason(run)) for run in shown]
            entries.sort(key=lambda entry: entry[1] is None)  # attention first, order kept
            if found.next_cursor is not None and len(shown) == len(found.runs):
                kept = {"status": status, "workflow": workflow, "since": since_text, "auto": auto}
                kept_query = {k: v for k, v in kept.items() if v}
                next_link = "/?" + urlencode({**kept_query, "cursor": found.next_cursor})
        filters = {"status": status or "", "workflow": workflow or "", "since": since_text or ""}
        return page(
            "runs.html",
            listed=listed,
            entries=entries,
            doctor=checked.value if checked.ok else None,
            operator=checked.ok,
            filters=filters,
            statuses=STATUSES,
            next_link=next_link,
            first_page=cursor is not None,
            auto=refresh,
            refresh_link="/?" + urlencode({k: v for k, v in filters.items() if v}),
        )

    def run_id_of(request: Request) -> str | None:
        found = parse_run_id(request.path_params["run"])
        return None if not isinstance(found, str) else found

    async def inspection_page(
        run_id: str,
        *,
        result: Answer | None = None,
        action: str | None = None,
        auto: int | None = None,
    ) -> Response:
        inspected = await call(ApiRequest("GET", f"/v1/runs/{run_id}/inspect"), RunInspection)
        checked = await doctor()
        graph = None
        graph_note = None
        if inspected.ok and settings.explained is not None:
            from coordinatorctl.remote.drawing import run_path

            path = run_path(inspected.value, dict(settings.explained))
            if isinstance(path, Diagnostic):
                graph_note = "The project given with --project is not this run's definition."
            else:
                graph = graph_image(path)
        output = None
        if inspected.ok and inspected.value.run.output is not None:
            output = json.dumps(inspected.value.run.output, indent=2, ensure_ascii=False)
        return page(
            "run.html",
            200 if inspected.ok or inspected.problem is None else inspected.status,
            run_id=run_id,
            inspected=inspected,
            operator=checked.ok,
            graph=graph,
            graph_note=graph_note,
            output=output,
            terminal=TERMINAL,
            result=result,
            action=action,
            auto=auto,
            follow=f"/runs/{run_id}/changes" if auto else None,
        )

    async def run_changes(request: Request) -> Response:
        """The run page's live follow (console.js): one waiting status read of the service
        (06 §5.3) naming the tag the page last saw (`?seen=`, else a plain read); answers the
        run's tag now as `{"tag": …}`, or 204 when there is none to give (a failed read, a
        service without the waiting read): the page then refreshes on its timer."""
        run_id = run_id_of(request)
        if run_id is None:
            return PlainTextResponse("No such run.", status_code=404)
        seen = request.query_params.get("seen")
        query: tuple[tuple[str, str], ...] = ()
        if seen is not None and _TAG.fullmatch(seen):
            query = (("wait", str(FOLLOW_WAIT_SECONDS)), ("seen", seen))
        read = ApiRequest("GET", f"/v1/runs/{run_id}", query=query)
        answer = await run_in_threadpool(api, read)
        if not isinstance(answer, RemoteAnswer) or answer.status != 200 or answer.tag is None:
            return Response(status_code=204)
        return Response(json.dumps({"tag": answer.tag}), media_type="application/json")

    async def attempts_page(request: Request) -> Response:
        """One page of a step's attempts, newest first; the next page by the service's cursor."""
        run_id = run_id_of(request)
        step = request.path_params["step"]
        if run_id is None or check_step_id(step) is not None:
            return page("message.html", 404, title="Not found", text="No such run or step.")
        cursor = request.query_params.get("cursor") or None
        if cursor is not None and (check_text_argument("cursor", cursor) or len(cursor) > 512):
            return page(
                "message.html", 400, title="Bad cursor", text="The cursor is not valid text."
            )
        query = [("limit", str(ATTEMPTS_PAGE_SIZE))]
        if cursor is not None:
            query.append(("cursor", cursor))
        listed = await call(
            ApiRequest("GET", f"/v1/runs/{run_id}/steps/{step}/attempts", query=tuple(query)),
            AttemptPage,
        )
        next_link = None
        if listed.ok and listed.value.next_cursor is not None:
            next_link = f"/runs/{run_id}/steps/{step}/attempts?" + urlencode(
                {"cursor": listed.value.next_cursor}
            )
        return page(
            "attempts.html",
            200 if listed.ok or listed.problem is None else listed.status,
            run_id=run_id,
            step=step,
            listed=listed,
            next_link=next_link,
            later_page=cursor is not None,
        )

    async def run_page(request: Request) -> Response:
        run_id = run_id_of(request)
        if run_id is None:
            return page("message.html", 404, title="No such run", text="That is not a run id.")
        auto = _refresh(request.query_params.get("auto"))
        return await inspection_page(run_id, auto=auto)

    def form_refusal(request: Request) -> str | None:
        """The guards of a POST that need no byte of its body: its Origin (or, under
        `Referrer-Policy: no-referrer`, where a browser sends `Origin: null` for a form of the
        page itself, its `Sec-Fetch-Site: same-origin`), the CSRF token in the form's action,
        its media type and a declared length within the bound (no chunked body)."""
        origin = request.headers.get("origin")
        same_site = request.headers.get("sec-fetch-site") == "same-origin"
        if not (origin == settings.origin or (origin == "null" and same_site)):
            return "The request did not come from this console's own page."
        given = request.query_params.get("csrf")
        if not isinstance(given, str) or not secrets.compare_digest(given, settings.csrf):
            return "The form is stale or not this console's: reload the page and try again."
        if request.headers.get("content-type", "").split(";")[0].strip() != (
            "application/x-www-form-urlencoded"
        ):
            return "The request is not a form of this console."
        length = request.headers.get("content-length", "")
        if "transfer-encoding" in request.headers or not length.isdigit():
            return "The form has no declared length."
        if int(length) > MAX_FORM_BYTES:
            return "The form is too large."
        return None

    def refusal(text: str | None) -> Response:
        """A refused form: its body may still be on its way, unread; the connection closes
        after the answer, so none of it is taken in."""
        answer = page("message.html", 403, title="Refused", text=text)
        answer.headers["connection"] = "close"
        return answer

    async def read_form(request: Request) -> tuple[Form | None, str | None]:
        refused = form_refusal(request)
        if refused is not None:
            return None, refused  # nothing of the body was read
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return None, "The form is too large."
        try:
            pairs = parse_qsl(body.decode("utf-8"), max_num_fields=8, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            return None, "The form is not valid."
        return dict(pairs), None

    def reason_of(form: Form) -> tuple[str, str | None]:
        reason = form.get("reason")
        text = reason if isinstance(reason, str) else ""
        if check_reason(text) is not None:
            return text, "Give a reason: 1–256 bytes of text without control characters."
        if form.get("confirm") != "yes":
            return text, "Tick “I confirm” to go ahead."
        return text, None

    async def run_action(request: Request) -> Response:
        run_id = run_id_of(request)
        action = request.path_params["action"]
        if run_id is None or action not in RUN_ACTIONS:
            return page("message.html", 404, title="Not found", text="No such action.")
        form, refused = await read_form(request)
        if refused is not None or form is None:
            return refusal(refused)
        reason, missing = reason_of(form)
        if missing is not None:
            return page(
                "confirm.html",
                400,
                run_id=run_id,
                action=action,
                problem=missing,
                target=f"/runs/{run_id}/{action}",
            )
        body = request_body(ReasonRequest, reason=reason)
        if not isinstance(body, dict):
            return page("message.html", 400, title="Refused", text="The reason is not valid.")
        model: type[BaseModel] = ReconcileResult if action == "reconcile" else RunStatus
        result = await call(ApiRequest("POST", f"/v1/runs/{run_id}/{action}", body=body), model)
        return await inspection_page(run_id, result=result, action=action)

    async def confirm(request: Request) -> Response:
        run_id = run_id_of(request)
        action = request.path_params["action"]
        if run_id is None or action not in RUN_ACTIONS:
            return page("message.html", 404, title="Not found", text="No such action.")
        return page(
            "confirm.html", run_id=run_id, action=action, problem=None,
            target=f"/runs/{run_id}/{action}",
        )  # fmt: skip

    async def holds(request: Request) -> Response:
        checked = await doctor()
        if not checked.ok:
            return page("holds.html", 403 if checked.problem else 502, checked=checked)
        return page("holds.html", checked=checked, result=None, action=None)

    async def hold_action(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in HOLD_ACTIONS:
            return page("message.html", 404, title="Not found", text="No such action.")
        form, refused = await read_form(request)
        if refused is not None or form is None:
            return refusal(refused)
        reason, missing = reason_of(form)
        checked = await doctor()
        if missing is not None:
            return page("holds.html", 400, checked=checked, problem=missing, action=action)
        if action == "release-admission-hold":
            body = request_body(
                ReleaseAdmissionHoldRequest,
                reason=reason,
                admission_history_complete=form.get("admissionHistoryComplete") == "yes",
                prior_deployment_fenced=form.get("priorDeploymentFenced") == "yes",
            )
        else:
            body = request_body(ReasonRequest, reason=reason)
        if not isinstance(body, dict):
            return page("message.html", 400, title="Refused", text="The form is not valid.")
        result = await call(ApiRequest("POST", f"/v1/{action}", body=body), HoldState)
        checked = await doctor()
        return page("holds.html", checked=checked, result=result, action=action)

    async def retention(request: Request) -> Response:
        form, refused = await read_form(request)
        if refused is not None or form is None:
            return refusal(refused)
        checked = await doctor()
        before = form.get("before", "")
        limit = form.get("limit", "")
        missing = None
        if check_date_time(before) is not None:
            missing = "Give “before” as an RFC 3339 instant, e.g. 2026-11-01T00:00:00Z."
        elif not (limit.isdigit() and 1 <= int(limit) <= 100):
            missing = "Give a limit of 1–100 runs."
        elif form.get("confirm") != "yes":
            missing = "Tick “I confirm” to go ahead."
        if missing is not None:
            return page("holds.html", 400, checked=checked, problem=missing, action="retention")
        body = request_body(RetentionRequest, before=before, limit=int(limit))
        if not isinstance(body, dict):
            return page("message.html", 400, title="Refused", text="The form is not valid.")
        sent = {**body, "before": before}  # the caller's RFC 3339 text, as `retain` sends it
        result = await call(ApiRequest("POST", "/v1/retention", body=sent), RetentionResult)
        checked = await doctor()
        return page("holds.html", checked=checked, result=result, action="retention")

    async def workflow(request: Request) -> Response:
        info = await call(ApiRequest("GET", "/v1/workflow"), WorkflowInfo)
        checked = await doctor()
        graph = None
        graph_note = None
        if info.ok and settings.explained is not None:
            if settings.explained.get("definitionDigest") == info.value.definition_digest:
                graph = graph_image(None)
            else:
                graph_note = "The project given with --project is not the active definition."
        return page(
            "workflow.html", info=info, operator=checked.ok, graph=graph, graph_note=graph_note
        )

    async def stylesheet(request: Request) -> Response:
        return Response(css, media_type="text/css")

    async def javascript(request: Request) -> Response:
        return Response(script, media_type="text/javascript")

    async def not_found(request: Request, exc: Exception) -> Response:
        return page("message.html", 404, title="Not found", text="No such page.")

    async def no_method(request: Request, exc: Exception) -> Response:
        return PlainTextResponse("Method not allowed.", status_code=405)

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    app = Starlette(
        routes=[
            Route("/", runs),
            Route("/runs/{run}", run_page),
            Route("/runs/{run}/changes", run_changes, methods=["GET"]),
            Route("/runs/{run}/steps/{step}/attempts", attempts_page, methods=["GET"]),
            Route("/runs/{run}/{action}", confirm, methods=["GET"]),
            Route("/runs/{run}/{action}", run_action, methods=["POST"]),
            Route("/holds", holds),
            Route("/holds/retention", retention, methods=["POST"]),
            Route("/holds/{action}", hold_action, methods=["POST"]),
            Route("/workflow", workflow),
            Route("/console.css", stylesheet),
            Route("/console.js", javascript),
            Route("/favicon.ico", favicon),
        ],
        exception_handlers={404: not_found, 405: no_method},
    )
    return _Guard(app, settings)

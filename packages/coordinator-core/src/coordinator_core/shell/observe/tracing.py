"""OpenTelemetry spans (issue 12 item 6; beyond contract 06 §14), exported only when configured.

Four kinds of span, each named by a fixed word:

* one per API request, named by the route's operationId (`startRun`, `getRun`, …), a child of
  the caller's W3C `traceparent` when the request carries a valid one (the caller's
  `tracestate` is never taken: its vendor entries are the caller's to fill, and they would be
  copied into every span exported from the request);
* `coordinator.tick`: one per worker tick that claimed a record of a run (from the claim to
  the last record the tick carried the run through; an idle tick makes none);
* `coordinator.product-call`: one per product call an adapter makes (dispatch, preparation,
  observation, receipt lookup), with the operation id and the closed outcome word;
* `coordinator.store.transaction`: one per store transaction inside a request or a tick, with
  the store kind and the fixed purpose name of the transaction (a transaction outside both,
  such as the loops' idle claim polls, the sweeps or the periodic store check, makes none, so
  an idle service exports nothing).

Attributes are only the names of `ATTRIBUTES`, and their values only words of the contract's
closed vocabularies (operation ids, step ids and types, status, outcome and failure words,
catalogue codes, HTTP methods, route templates and statuses) and the run id: never an input
value, a product response, a token, a key, a reason or a header's value. A span's status is
ERROR without a description; an exception is never recorded (its message may hold a value).

Tracing is off unless `configure` finds the standard environment variables naming an exporter
(`OTEL_TRACES_EXPORTER=otlp`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
and the `tracing` extra (opentelemetry-sdk and the OTLP/HTTP exporter) is installed. While it
is off nothing of opentelemetry is imported, and every helper here answers a shared no-op
context after one test of a module global: the cost per run is a few attribute look-ups.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "ATTRIBUTES",
    "PRODUCT_CALL",
    "STORE_TRANSACTION",
    "TICK",
    "ProductCall",
    "annotate",
    "configure",
    "enabled",
    "http_status",
    "install",
    "now_ns",
    "product_call",
    "request",
    "responded",
    "store_transaction",
    "tick",
    "traceparent_of_current",
    "uninstall",
    "wanted",
]

logger = logging.getLogger("coordinator.tracing")

TICK: Final = "coordinator.tick"
PRODUCT_CALL: Final = "coordinator.product-call"
STORE_TRANSACTION: Final = "coordinator.store.transaction"

ATTRIBUTES: Final = frozenset(
    {
        "coordinator.run.id",
        "coordinator.run.status",
        "coordinator.workflow",
        "coordinator.step.id",
        "coordinator.step.type",
        "coordinator.operation",
        "coordinator.call",
        "coordinator.outcome",
        "coordinator.failure.code",
        "coordinator.admission.outcome",
        "coordinator.problem.code",
        "coordinator.store.kind",
        "coordinator.store.purpose",
        "coordinator.store.mode",
        "coordinator.tick.records",
        "http.request.method",
        "http.route",
        "http.response.status_code",
        "error.type",
    }
)
"""Every attribute name a span of this module may carry (a test pins the exported ones)."""

_EXPORTER_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_NULL: Final = contextlib.nullcontext(None)


class _State:
    """The process's tracer: None while tracing is off (the usual case)."""

    tracer: Tracer | None = None
    provider: TracerProvider | None = None


_STATE: Final = _State()


def enabled() -> bool:
    return _STATE.tracer is not None


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for exported spans: an exporter is named (`otlp`) or an
    OTLP endpoint is set, and the SDK is not disabled. The OpenTelemetry default exporter
    (`otlp` when unset) is not taken: nothing is exported unless configured."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return exporter != "" or any(environ.get(name, "").strip() for name in _EXPORTER_VARIABLES)


def configure(environ: Mapping[str, str], *, process: str) -> Callable[[], None] | None:
    """Switch tracing on for this process when `environ` asks for it (`wanted`): an SDK
    tracer provider (sampler, resource and OTLP exporter settings from the standard
    variables; `service.name` `coordinator` unless `OTEL_SERVICE_NAME` says otherwise) with a
    batching OTLP/HTTP exporter. Answers the shutdown that flushes what is pending (call it at
    stop), or None when tracing stays off. An exporter other than `otlp` over HTTP, or an
    install without the `tracing` extra, leaves it off with one warning line."""
    if not wanted(environ):
        return None
    exporter = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if exporter != "otlp" or protocol != "http/protobuf":
        logger.warning(
            "tracing stays off: only OTEL_TRACES_EXPORTER=otlp over http/protobuf is supported",
            extra={"code": "coordinator.service.tracing-unavailable"},
        )
        return None
    try:
        # The SDK and the exporter are imported only here, when tracing is configured: a
        # process without it never loads them (tests/unit/shell/observe/test_tracing.py).
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
    except ImportError:
        logger.warning(
            "tracing stays off: install coordinator-core[tracing] to export spans",
            extra={"code": "coordinator.service.tracing-unavailable"},
        )
        return None
    name = environ.get("OTEL_SERVICE_NAME", "").strip() or "coordinator"
    provider = SdkProvider(
        resource=Resource.create({"service.name": name, "coordinator.process": process})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    install(provider)

    def shutdown() -> None:
        uninstall()
        provider.shutdown()

    return shutdown


def install(provider: TracerProvider) -> None:
    """Make spans with `provider`'s tracer (`configure`; tests hand an SDK provider with an
    in-memory exporter)."""
    # The API is imported only once a provider is handed over (see the module).
    from opentelemetry import trace  # noqa: PLC0415

    _STATE.provider = provider
    _STATE.tracer = trace.get_tracer("coordinator", tracer_provider=provider)


def uninstall() -> None:
    """Back to no spans (tests; the shutdown of `configure`)."""
    _STATE.tracer = None
    _STATE.provider = None


# -- spans ------------------------------------------------------------------------------------


def _checked(attributes: Mapping[str, str | int]) -> dict[str, str | int]:
    unknown = set(attributes) - ATTRIBUTES
    if unknown:
        raise ValueError(f"span attributes outside the allowed set: {sorted(unknown)}")
    return dict(attributes)


@contextlib.contextmanager
def _span(
    tracer: Tracer,
    name: str,
    attributes: Mapping[str, str | int],
    *,
    kind: str = "internal",
    parent: Any = None,
    start_time: int | None = None,
) -> Iterator[Span]:
    from opentelemetry import trace  # noqa: PLC0415  (only reached with tracing on)

    span = tracer.start_span(
        name,
        context=parent,
        kind=getattr(trace.SpanKind, kind.upper()),
        attributes=_checked(attributes),
        start_time=start_time,
    )
    # Neither an exception event nor a status description: an exception's message may hold a
    # value (ARCHITECTURE rule 4); `_failed` records its code or class only.
    with trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as error:
            _failed(current, error)
            raise


def _failed(span: Span, error: BaseException) -> None:
    """ERROR without a description; the error's type is its catalogue code when it has one,
    else its class name (never its message)."""
    from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

    code = getattr(error, "code", None)
    span.set_attribute(
        "error.type",
        code if isinstance(code, str) and code.startswith("coordinator.") else type(error).__name__,
    )
    span.set_status(Status(StatusCode.ERROR))


def _current_recording() -> Span | None:
    from opentelemetry import trace  # noqa: PLC0415

    span = trace.get_current_span()
    return span if span.get_span_context().is_valid else None


def annotate(attributes: Mapping[str, str | int]) -> None:
    """Add attributes to the current span (nothing while tracing is off or outside a span)."""
    if _STATE.tracer is None:
        return
    span = _current_recording()
    if span is not None:
        span.set_attributes(_checked(attributes))


def request(
    operation_id: str, method: str, route: str, traceparent: str | None
) -> AbstractContextManager[Any]:
    """An API request's span (SERVER), a child of the caller's span when `traceparent` is a
    valid W3C header (without the caller's `tracestate`); `responded` sets the status."""
    tracer = _STATE.tracer
    if tracer is None:
        return _NULL
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    carrier = {"traceparent": traceparent} if traceparent else {}
    parent = TraceContextTextMapPropagator().extract(carrier) if carrier else None
    return _span(
        tracer,
        operation_id,
        {"http.request.method": method, "http.route": route},
        kind="server",
        parent=parent,
    )


def responded(span: Any, status: int) -> None:
    """The request span's HTTP status (a 5xx marks it ERROR)."""
    if span is None:
        return
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

        span.set_status(Status(StatusCode.ERROR))


def tick(
    started_ns: int,
    claim: tuple[int, int, str] | None,
    attributes: Mapping[str, str | int],
) -> AbstractContextManager[Any]:
    """A tick's span from `started_ns` (time.time_ns()), with its claim transaction as a child
    (`claim`: start, end and store kind; it committed before the run was known), or none for
    a run its admission claimed for the loop (07 §7.7 item 6)."""
    tracer = _STATE.tracer
    if tracer is None:
        return _NULL
    return _tick(tracer, started_ns, claim, attributes)


@contextlib.contextmanager
def _tick(
    tracer: Tracer,
    started_ns: int,
    claim: tuple[int, int, str] | None,
    attributes: Mapping[str, str | int],
) -> Iterator[Span]:
    with _span(tracer, TICK, attributes, start_time=started_ns) as span:
        if claim is not None:
            began, ended, kind = claim
            child = tracer.start_span(
                STORE_TRANSACTION,
                attributes=_store_attributes(kind, "claim-due-step", read_only=False),
                start_time=began,
            )
            child.end(end_time=ended)
        yield span


def now_ns() -> int:
    return time.time_ns()


def _store_attributes(kind: str, purpose: str, *, read_only: bool) -> dict[str, str | int]:
    return {
        "coordinator.store.kind": kind,
        "coordinator.store.purpose": purpose,
        "coordinator.store.mode": "read" if read_only else "write",
    }


def store_transaction(kind: str, purpose: str, *, read_only: bool) -> AbstractContextManager[Any]:
    """A store transaction's span, only inside a request's or a tick's span."""
    tracer = _STATE.tracer
    if tracer is None or _current_recording() is None:
        return _NULL
    return _span(tracer, STORE_TRANSACTION, _store_attributes(kind, purpose, read_only=read_only))


class ProductCall:
    """The open product-call span: the `traceparent` a product is sent, and the outcome."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    @property
    def traceparent(self) -> str | None:
        context = self._span.get_span_context()
        if not context.is_valid:
            return None
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"

    def outcome(self, word: str, code: str | None = None) -> None:
        self._span.set_attribute("coordinator.outcome", word)
        if code is not None:
            self._span.set_attribute("coordinator.failure.code", code)


def product_call(call: str, operation: str, step: str) -> AbstractContextManager[Any]:
    """A product call's span (CLIENT); yields a `ProductCall`, or None while tracing is off."""
    tracer = _STATE.tracer
    if tracer is None:
        return _NULL
    return _product_call(tracer, call, operation, step)


@contextlib.contextmanager
def _product_call(tracer: Tracer, call: str, operation: str, step: str) -> Iterator[ProductCall]:
    attributes = {"coordinator.call": call, "coordinator.operation": operation}
    attributes["coordinator.step.id"] = step
    with _span(tracer, PRODUCT_CALL, attributes, kind="client") as span:
        yield ProductCall(span)


def http_status(status: int) -> None:
    """The status of a product's answer, on the current product-call span."""
    if _STATE.tracer is not None:
        annotate({"http.response.status_code": status})


def traceparent_of_current() -> str | None:
    """The `traceparent` of the current span (None while tracing is off or outside a span)."""
    if _STATE.tracer is None:
        return None
    span = _current_recording()
    return None if span is None else ProductCall(span).traceparent

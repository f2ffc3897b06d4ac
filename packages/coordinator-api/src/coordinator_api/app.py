"""The Connexion application: `create_app(settings, service=…, journal=…)`.

Layers, outermost first (each named where it is defined):

0. `SelfDescription` — `GET /openapi.json` and the API explorer at `/docs` (06 §14), answered
   before anything else: no token, no audit.
1. `EdgeMiddleware` — 404/405 from the documented paths, body capture (≤ 65,536 bytes), media
   type classification, `Cache-Control: no-store` and security headers on every response.
2. Connexion's server-error and exception layers, both rendering through `_problem_reply`, so
   every refusal is problem+json with a `code` and never echoes the request.
3. Connexion routing (operationId `startRun` → `coordinator_api.handlers.runs.start_run`
   through the table `coordinator_api.handlers.OPERATIONS`), each handler wrapped once for the
   app (`_KeptOperation`) where Connexion would wrap it again for every request.
4. Connexion security with `_BearerSchemes`: access tokens (06 §2) including the route's policy
   action (`x-policy-action`, `x-operator-only`), and the Casework completion secret (06 §9).
5. Connexion parameter validation of query parameters only (strict on routes that take query
   parameters); path and header parameters, media types and bodies are checked by the handlers
   in the order of 06 §1 item 6 (Connexion's body validators are switched off and the edge hands
   it a neutral media type).
6. Response validation against the 3.0.3 rendering when `ApiSettings.validate_responses` is
   set (the API tests; not the service), then the handlers, which return complete Starlette
   responses with an explicit Content-Type (P1).

The documents are loaded once from the generated files (`coordinator_api.spec.locate_openapi`).
The app serves, routes 404/405 and reads its operations (`x-policy-action`, …) from the bundled
3.1 document; Connexion alone reads the 3.0.3 rendering, handed to it as a dict, because it
refuses OpenAPI 3.1 (STACK.md §2). Request bodies are validated by their generated models
(`coordinator_api.bodies`), not by Connexion's Draft 4 rendering.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import connexion  # type: ignore[import-untyped]
from connexion import context as connexion_context
from connexion.apps.asynchronous import AsyncApi, AsyncOperation  # type: ignore[import-untyped]
from connexion.datastructures import MediaTypeDict  # type: ignore[import-untyped]
from connexion.decorators import StarletteDecorator  # type: ignore[import-untyped]
from connexion.decorators import parameter as connexion_parameters
from connexion.decorators.parameter import (  # type: ignore[import-untyped]
    CONTEXT_NAME,
    AsyncParameterDecorator,
    pythonic,
    unwrap_decorators,
)
from connexion.exceptions import (  # type: ignore[import-untyped]
    BadRequestProblem,
    ExtraParameterProblem,
    ProblemException,
)
from connexion.lifecycle import ConnexionResponse  # type: ignore[import-untyped]
from connexion.middleware.context import ContextMiddleware  # type: ignore[import-untyped]
from connexion.middleware.exceptions import ExceptionMiddleware  # type: ignore[import-untyped]
from connexion.middleware.lifespan import LifespanMiddleware  # type: ignore[import-untyped]
from connexion.middleware.request_validation import (  # type: ignore[import-untyped]
    RequestValidationMiddleware,
)
from connexion.middleware.response_validation import (  # type: ignore[import-untyped]
    ResponseValidationMiddleware,
)
from connexion.middleware.routing import RoutingMiddleware  # type: ignore[import-untyped]
from connexion.middleware.security import SecurityMiddleware  # type: ignore[import-untyped]
from connexion.middleware.server_error import (  # type: ignore[import-untyped]
    ServerErrorMiddleware,
)
from connexion.resolver import Resolver  # type: ignore[import-untyped]
from connexion.utils import is_null, is_nullable  # type: ignore[import-untyped]
from connexion.validators.json import (  # type: ignore[import-untyped]
    JSONResponseBodyValidator,
    TextResponseBodyValidator,
)
from connexion.validators.parameter import (  # type: ignore[import-untyped]
    Draft4Validator,
    ParameterValidator,
    ValidationError,
    draft4_format_checker,
)
from starlette.exceptions import HTTPException

from coordinator_api.access import AccessVerifier, bearer_token, match_secret
from coordinator_api.app_state import AppState
from coordinator_api.edge import CONTEXT_KEY, EdgeMiddleware, context_of
from coordinator_api.explorer import SelfDescription, explorer_assets, render_document
from coordinator_api.handlers import OPERATIONS, handler_of
from coordinator_api.problems import (
    INTERNAL_ERROR,
    ApiProblem,
    problem_body,
    problem_headers,
    status_of,
)
from coordinator_api.settings import ApiSettings
from coordinator_api.spec import (
    OperationInfo,
    RouteTable,
    load_yaml,
    locate_openapi,
    operation_table,
)
from coordinator_api.waits import StatusWaits
from coordinator_api.wire import encode
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.shell.observe import tracing
from coordinator_core.shell.service import AuditJournal, BlockReason, RunService, ServiceRefusal

__all__ = ["AppState", "create_app"]

logger = logging.getLogger("coordinator_api")


# ---------------------------------------------------------------------------------------------
# Security (Connexion `security_map`)


def _operation_of(request: Any) -> OperationInfo:
    # Routing reports the operationId it resolved (`getRun`).
    operation_id = str(request.scope["extensions"]["connexion_routing"]["operation_id"])
    info = context_of(request).state.operations[operation_id]
    assert isinstance(info, OperationInfo)
    return info


def _operation_of_scope(scope: Any) -> OperationInfo:
    operation_id = str(scope["extensions"]["connexion_routing"]["operation_id"])
    context = scope["extensions"]["connexion_context"][CONTEXT_KEY]
    info = context.state.operations[operation_id]
    assert isinstance(info, OperationInfo)
    return info


async def _access_token(request: Any) -> dict[str, Any]:
    """06 §1 item 6 steps (1) and (2): the token, then the route's action for some workflow."""
    state = context_of(request).state
    info = _operation_of(request)
    caller = await state.access.authenticate(request.headers.get("authorization"))
    if (
        info.action is None
        or not caller.may(info.action)
        or (info.operator_only and not caller.operator)
    ):
        raise ApiProblem("coordinator.access.denied")
    return {"sub": caller.subject, "caller": caller}


async def _completion_secret(request: Any) -> dict[str, Any]:
    """06 §9: the bearer secret names the Casework connection that sent the event."""
    state = context_of(request).state
    token = bearer_token(request.headers.get("authorization"))
    connection = match_secret(token, state.settings.completion_tokens)
    if connection is None:
        raise ApiProblem("coordinator.completion.unauthenticated")
    return {"connection": connection}


class _BearerSchemes:
    """Connexion security handler for `type: http, scheme: bearer`; the two bearer schemes of
    the document differ by `bearerFormat` (`JWT` access tokens, `opaque` completion secrets)."""

    def get_fn(
        self, security_scheme: Mapping[str, Any], required_scopes: object
    ) -> Callable[[Any], Awaitable[dict[str, Any]]]:
        if security_scheme.get("bearerFormat") == "JWT":
            return _access_token
        return _completion_secret


# ---------------------------------------------------------------------------------------------
# Parameter validation (Connexion `validator_map`)


class _CompiledParameterValidator(ParameterValidator):  # type: ignore[misc]
    """Connexion's parameter checks (its validator class and format checker), each parameter's
    schema compiled once for the life of the app: Connexion copies the parameter and compiles
    a Draft 4 validator for every value of every request, and makes this validator anew for
    every request. The parameters are the operation's own and live as long as the app; the
    class keeps each with its compiled validator, so that an identity is never reused for
    another."""

    _compiled: ClassVar[dict[int, tuple[Any, Any]]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for parameters in self.parameters.values():
            for parameter in parameters:
                if id(parameter) not in self._compiled:
                    own = copy.deepcopy(parameter)
                    self._compiled[id(parameter)] = (
                        parameter,
                        Draft4Validator(
                            own.get("schema", own), format_checker=draft4_format_checker
                        ),
                    )

    def validate_parameter(
        self, parameter_type: str, value: Any, param: dict[str, Any], param_name: Any = None
    ) -> str | None:
        kept = self._compiled.get(id(param))
        compiled = None if kept is None or kept[0] is not param else kept[1]
        if value is None or compiled is None or (is_nullable(param) and is_null(value)):
            problem: str | None = ParameterValidator.validate_parameter(
                parameter_type, value, param, param_name
            )
            return problem
        try:
            compiled.validate(value)
        except ValidationError as exception:
            return str(exception)
        return None


class _QueryParameterValidator:
    """Connexion's parameter validator restricted to query parameters.

    A malformed run id must answer 404 like an absent run, malformed event headers
    `coordinator.event.headers-invalid` after the trigger check, a missing `Idempotency-Key`
    `coordinator.command.start-key-invalid` after the body: the handlers check those.
    Strictness (an unknown query parameter is `400 coordinator.request.invalid`) applies to
    the routes that take query parameters (`GET /v1/runs`); the others ignore a query string,
    so that `/health` answers whenever the process serves HTTP and no route answers a status
    its operation does not document.
    """

    def __init__(
        self,
        parameters: list[dict[str, Any]],
        uri_parser: Any,
        strict_validation: bool = False,
        security_query_params: list[str] | None = None,
    ) -> None:
        query = [parameter for parameter in parameters if parameter.get("in") == "query"]
        self._inner = _CompiledParameterValidator(
            query,
            uri_parser=uri_parser,
            strict_validation=strict_validation and bool(query),
            security_query_params=security_query_params,
        )

    def validate(self, scope: Any) -> None:
        try:
            self._inner.validate(scope)
        except ExtraParameterProblem:
            raise  # an unknown parameter: `coordinator.request.invalid`
        except BadRequestProblem:
            # A documented parameter out of its bounds: the operation's own code when it names
            # one (`x-query-invalid`), never the value.
            code = _operation_of_scope(scope).query_invalid_code
            if code is None:
                raise
            raise ApiProblem(code) from None


class _ResponseBodyValidator(JSONResponseBodyValidator):  # type: ignore[misc]
    """Connexion's JSON response validator, with the compiled schema kept per response schema:
    Connexion compiles a Draft 4 validator for every response it checks, which cost more
    than the check. The schema objects are the operation's own and live as long as the app;
    the cache keeps each with its validator, so an identity is never reused for another."""

    _compiled: ClassVar[dict[int, tuple[Any, Any]]] = {}

    @property
    def validator(self) -> Any:
        schema = self._schema
        known = self._compiled.get(id(schema))
        if known is None or known[0] is not schema:
            known = (schema, super().validator)
            self._compiled[id(schema)] = known
        return known[1]


# ---------------------------------------------------------------------------------------------
# Errors


_STATUS_CODES: Mapping[int, str] = {
    400: "coordinator.request.invalid",
    403: "coordinator.access.denied",
    404: "coordinator.request.not-found",
    405: "coordinator.request.method-not-allowed",
    413: "coordinator.request.too-large",
    415: "coordinator.request.content-type-invalid",
}


@dataclass(frozen=True, slots=True)
class _Refusal:
    """What a problem answer is made of: the code, its block reason, extra headers, and the
    fixed sentences of a refusal class and the violations that replace or extend the code's."""

    code: str
    reason: BlockReason | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    detail: str | None = None
    hint: str | None = None
    violations: tuple[Violation, ...] = ()


def _problem_of(request: Any, error: BaseException) -> _Refusal:
    if isinstance(error, ApiProblem):
        return _Refusal(
            error.code, error.reason, error.headers, error.detail, error.hint, error.violations
        )
    if isinstance(error, ServiceRefusal):
        if status_of(error.code) == 500:
            logger.error("the service refused with a code outside 06 §3.1")
        return _Refusal(error.code, error.reason, violations=error.violations)
    if isinstance(error, UnicodeDecodeError):
        return _Refusal("coordinator.request.invalid")
    status = getattr(error, "status_code", None) or getattr(error, "status", None)
    if status == 401:
        try:
            return _Refusal(_operation_of(request).unauthenticated_code)
        except (KeyError, TypeError, AssertionError):
            return _Refusal("coordinator.access.unauthenticated")
    if isinstance(status, int) and status in _STATUS_CODES:
        return _Refusal(_STATUS_CODES[status])
    logger.error("unexpected failure: %s", type(error).__name__)
    logger.debug("unexpected failure", exc_info=error)
    return _Refusal(INTERNAL_ERROR)


def _problem_reply(request: Any, error: Exception) -> Any:
    """Connexion error handler: the problem+json response for any exception."""
    refusal = _problem_of(request, error)
    tracing.annotate({"coordinator.problem.code": refusal.code})  # the request's span, when on
    body = problem_body(
        refusal.code,
        refusal.reason,
        detail=refusal.detail,
        hint=refusal.hint,
        violations=refusal.violations,
    )
    headers = problem_headers(body.code, refusal.headers)
    content_type = headers.pop("Content-Type")
    return ConnexionResponse(
        status_code=body.status,
        mimetype=content_type,
        content_type=content_type,
        body=encode(body),
        headers=headers,
    )


# ---------------------------------------------------------------------------------------------
# Operations decorated once


@functools.cache
def _pythonic(name: str) -> str:
    """Connexion's `pythonic_params` spelling of a parameter name (three regular expressions
    and an inflection each time), worked out once per name."""
    return str(pythonic(name))


class _KeptParameterDecorator(AsyncParameterDecorator):  # type: ignore[misc]
    """Connexion's parameter decorator, with each name's spelling worked out once, and for a
    handler that takes no body (every handler here: each reads the body the edge captured,
    `coordinator_api.bodies`) its arguments read as Connexion reads them — the path's, the
    query's with their defaults, and the security layer's (`token_info`) and the edge's
    (`coordinator`) from the request's context — without the body and the form files that
    Connexion would also read and resolve a schema for at every request, only to drop them.
    A handler that takes a body or `**kwargs` gets Connexion's own wrapper."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if options.get("pythonic_params"):
            self.sanitize_fn = _pythonic

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        inspected = connexion_parameters.inspect_function_arguments(unwrap_decorators(function))
        arguments, has_kwargs = inspected
        if has_kwargs or "body" in arguments:
            return cast(Callable[..., Any], super().__call__(function))
        sanitize = self.sanitize_fn
        named = frozenset(arguments)

        @functools.wraps(function)
        async def wrapper(request: Any) -> Any:
            found = connexion_parameters._get_path_arguments(
                request.path_params, operation=connexion_context.operation, sanitize=sanitize
            )
            found.update(
                connexion_parameters._get_query_arguments(
                    request.query_params,
                    operation=connexion_context.operation,
                    arguments=arguments,
                    has_kwargs=False,
                    sanitize=sanitize,
                )
            )
            kwargs = {sanitize(name): value for name, value in found.items()}
            for name, value in connexion_context.context.items():
                if name in named:
                    kwargs[name] = value
            if CONTEXT_NAME in named:
                kwargs[CONTEXT_NAME] = connexion_context.context
            return await function(**kwargs)

        return wrapper


class _OnceDecorator(StarletteDecorator):  # type: ignore[misc]
    """Connexion's decorator of one operation's handler, with what does not change between
    requests made once: the handler's parameter and response wrappers (their signature
    inspection included) and the operation's URI parser. Connexion makes each of them again
    for every request (`ASGIDecorator.__call__`); the request and its arguments are still
    read per request exactly as Connexion reads them."""

    @property
    def _parameter_decorator_cls(self) -> type[AsyncParameterDecorator]:
        return _KeptParameterDecorator

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        decorated = self.decorate(function)
        parser: Any = None

        @functools.wraps(function)
        async def wrapper(*_arguments: Any, **_options: Any) -> Any:
            nonlocal parser
            if parser is None:  # the operation is known once a request of it is routed
                parser = self.uri_parser
            request = self.framework.get_request(
                uri_parser=parser,
                scope=connexion_context.scope,
                receive=connexion_context.receive,
            )
            return await decorated(request)

        return wrapper


class _KeptOperation(AsyncOperation):  # type: ignore[misc]
    @functools.cached_property
    def fn(self) -> Callable[..., Any]:
        return _OnceDecorator(pythonic_params=self.pythonic_params, jsonifier=self.jsonifier)(
            self._fn
        )


class _KeptApi(AsyncApi):  # type: ignore[misc]
    def make_operation(self, operation: Any) -> _KeptOperation:
        kept: _KeptOperation = _KeptOperation.from_operation(
            operation, pythonic_params=self.pythonic_params, jsonifier=self.jsonifier
        )
        return kept


# ---------------------------------------------------------------------------------------------
# The app


def _check_settings(settings: ApiSettings) -> None:
    triggers = set(settings.workflow.triggers)
    if set(settings.event_triggers) != triggers:
        raise ValueError("event_triggers must name exactly the workflow's triggers")
    for policy in settings.authentication.policies:
        if policy.client_id not in settings.authentication.allowed_clients:
            raise ValueError("every policy must name an allowed client")


def create_app(settings: ApiSettings, *, service: RunService, journal: AuditJournal) -> Any:
    """The ASGI application (a `connexion.AsyncApp`) serving contract 06.

    Serve it with uvicorn (`uvicorn.run(app, host=…, port=…)`, or an `--factory` import
    string). Its lifespan loads the access key set, and a failure stops the start; when no
    lifespan runs (an in-process test client), the key set is loaded at the first request.
    """
    _check_settings(settings)
    files = locate_openapi(settings.openapi_dir)
    bundled_document = load_yaml(files.bundled)
    connexion_document = load_yaml(files.connexion)
    # 06 §14: `/openapi.json` answers the 3.1 document the app routes by; its operations are the
    # ones Connexion routes (the 3.0.3 rendering of the same spec).
    served_document = render_document(bundled_document)
    assets = explorer_assets()
    operations = operation_table(bundled_document)
    if set(operations) != set(OPERATIONS) or set(operation_table(connexion_document)) != set(
        OPERATIONS
    ):
        raise ValueError(
            "the operationIds of the OpenAPI documents and coordinator_api.handlers.OPERATIONS "
            "differ; run `nox -s generate` after changing spec/"
        )
    state = AppState(
        settings=settings,
        service=service,
        journal=journal,
        access=AccessVerifier(
            settings.authentication,
            clock=lambda: settings.clock().timestamp(),
            transport=settings.jwks_transport,
            caller_jwks=settings.caller_jwks,
        ),
        operations=operations,
        routes=RouteTable.from_document(bundled_document),
        waits=StatusWaits(service, limit=settings.status_waiters),
    )

    @asynccontextmanager
    async def lifespan(_app: object) -> AsyncIterator[None]:
        await state.access.start()
        yield

    app = connexion.AsyncApp(
        __name__,
        lifespan=lifespan,
        middlewares=[
            functools.partial(SelfDescription, document=served_document, assets=assets),
            functools.partial(EdgeMiddleware, state=state),
            functools.partial(ServerErrorMiddleware, handler=_problem_reply),
            ExceptionMiddleware,
            RoutingMiddleware,
            SecurityMiddleware,
            RequestValidationMiddleware,
            *([ResponseValidationMiddleware] if settings.validate_responses else []),
            LifespanMiddleware,
            ContextMiddleware,
        ],
    )
    # Each operation's handler decorated once, not for every request (`_OnceDecorator`).
    app._middleware_app.api_cls = _KeptApi
    # The document is handed over as a dict: Connexion would otherwise re-read the file and
    # render it through Jinja2 before parsing it with the pure-Python YAML loader.
    app.add_api(
        copy.deepcopy(connexion_document),
        resolver=Resolver(function_resolver=handler_of),
        pythonic_params=True,
        strict_validation=True,
        validate_responses=settings.validate_responses,
        validator_map={
            "parameter": _QueryParameterValidator,
            "body": {},
            "response": MediaTypeDict(
                {"*/*json": _ResponseBodyValidator, "text/plain": TextResponseBodyValidator}
            ),
        },
        security_map={"bearer": _BearerSchemes},
    )
    for kind in (Exception, HTTPException, ProblemException, UnicodeDecodeError):
        app.add_error_handler(kind, _problem_reply)
    return app
